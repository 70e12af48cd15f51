package generation

import (
	"errors"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
)

// TestDecisionFromOtherGeneration holds the lookups' contract: a decision
// made with another generation's policy gets nothing from this one, even
// when its rule index is in range (same rule count, other order). On
// ee87e5f the index alone was checked and b.example got a.example's
// credential rewrites.
func TestDecisionFromOtherGeneration(t *testing.T) {
	a := config.Rule{
		Host: "a.example", Action: config.ActionAllow,
		HeaderRewrites:        []config.HeaderRewrite{{Name: "X-A", Value: "secret-for-a"}},
		ResponseHeaderTimeout: 3 * time.Second,
		MaxRequestBodyBytes:   10,
		AllowPrivateAddresses: true,
	}
	b := config.Rule{Host: "b.example", Action: config.ActionAllow}
	compileRules := func(rules ...config.Rule) *Generation {
		t.Helper()
		g, err := Compile(&config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: rules}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1, g2 := compileRules(a, b), compileRules(b, a)
	for _, host := range []string{"a.example", "b.example"} {
		d := decide(t, g1, host)
		if set := g2.Rewrites(d); set != nil {
			t.Errorf("%s: another generation's decision got rewrites %v", host, set.Names())
		}
		if tm := g2.ResponseHeaderTimeout(d); tm != 0 {
			t.Errorf("%s: another generation's decision got response header timeout %v", host, tm)
		}
		if l := g2.Limits(d); l != nil {
			t.Errorf("%s: another generation's decision got limits %+v", host, l)
		}
		if o := g2.AddrOpts(d); o.AllowPrivate {
			t.Errorf("%s: another generation's decision got address guard exceptions %+v", host, o)
		}
		// Its own generation still answers.
		if host == "a.example" && g1.Rewrites(d) == nil {
			t.Errorf("%s: its own generation lost its rewrites", host)
		}
	}
}

// TestPrepareSwap: Prepare changes nothing in force; Swap publishes the
// prepared generation itself (no second compile: the same pointer) and
// numbers it; a generation cannot be published twice.
func TestPrepareSwap(t *testing.T) {
	cfg := func(host string) *config.Config {
		return &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: host, Action: config.ActionAllow}}}}
	}
	cur, err := New(cfg("one.example"))
	if err != nil {
		t.Fatal(err)
	}
	first := cur.Load()
	g, err := cur.Prepare(cfg("two.example"))
	if err != nil {
		t.Fatal(err)
	}
	if cur.Load() != first || g.Seq != 0 {
		t.Fatalf("Prepare published: in force seq %d, prepared seq %d", cur.Load().Seq, g.Seq)
	}
	if err := cur.Swap(g); err != nil {
		t.Fatal(err)
	}
	if cur.Load() != g || g.Seq != 2 {
		t.Fatalf("after Swap: in force %p seq %d, want the prepared %p with seq 2", cur.Load(), cur.Load().Seq, g)
	}
	if !cur.Load().Policy.AllowsHost("two.example") {
		t.Error("the swapped generation does not allow its host")
	}
	for name, bad := range map[string]*Generation{"again": g, "first": first, "nil": nil, "empty": {}} {
		if err := cur.Swap(bad); err == nil {
			t.Errorf("Swap(%s) accepted", name)
		} else if name == "again" && !errors.Is(err, ErrAlreadySwapped) {
			t.Errorf("Swap(again) = %v, want ErrAlreadySwapped", err)
		}
	}
	if cur.Load() != g {
		t.Error("a refused Swap changed the generation in force")
	}
	if _, err := cur.Prepare(&config.Config{Policy: config.Policy{DefaultAction: "maybe"}}); err == nil {
		t.Error("Prepare accepted a policy that does not compile")
	}
}
