package generation

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

// cfgWith returns a config with one allow rule for a.example injecting
// header (static value), plus a deny rule, and the given SNI flag.
func cfgWith(header string, enforceSNI bool) *config.Config {
	return &config.Config{
		Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
			{Host: "a.example", Index: 0, Action: config.ActionAllow, HeaderRewrites: []config.HeaderRewrite{{Name: header, Value: "v"}}},
			{Host: "b.example", Index: 1, Action: config.ActionAllow},
			{Host: "c.example", Index: 2, Action: config.ActionDeny},
		}},
		Interception: config.Interception{EnforceSNIHostMatch: enforceSNI},
	}
}

func decide(t *testing.T, g *Generation, authority string) policy.Decision {
	t.Helper()
	hp, err := hostport.Parse(authority)
	if err != nil {
		t.Fatal(err)
	}
	return g.Policy.Decide(policy.Target{Host: hp})
}

func TestNewAndRewrites(t *testing.T) {
	cur, err := New(cfgWith("X-A", true))
	if err != nil {
		t.Fatal(err)
	}
	g := cur.Load()
	if g.Seq != 1 || !g.Interception.EnforceSNIHostMatch {
		t.Errorf("first generation = Seq %d, %+v; want Seq 1, EnforceSNIHostMatch", g.Seq, g.Interception)
	}
	tests := []struct {
		authority string
		want      []string // header names, nil = no set
	}{
		{"a.example", []string{"X-A"}},
		{"a.example:8443", nil}, // denied on this port: no rewrites
		{"b.example", nil},      // rule without rewrites
		{"c.example", nil},      // deny rule
		{"d.example", nil},      // default deny
	}
	for _, tt := range tests {
		set := g.Rewrites(decide(t, g, tt.authority))
		var got []string
		if set != nil {
			got = set.Names()
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Rewrites(%s) names = %v, want %v", tt.authority, got, tt.want)
		}
	}
	// A decision of another policy whose rule index is out of range.
	other, err := Compile(&config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
		{Host: "x.example", Action: config.ActionAllow}, {Host: "y.example", Action: config.ActionAllow},
		{Host: "z.example", Action: config.ActionAllow}, {Host: "w.example", Action: config.ActionAllow},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if set := g.Rewrites(decide(t, other, "w.example")); set != nil {
		t.Errorf("Rewrites(decision with rule index 3) = %v, want nil", set.Names())
	}
}

func TestStoreSwapsAndKeepsLastGood(t *testing.T) {
	cur, err := New(cfgWith("X-A", true))
	if err != nil {
		t.Fatal(err)
	}
	first := cur.Load()

	g, err := cur.Store(cfgWith("X-B", false))
	if err != nil {
		t.Fatal(err)
	}
	if g != cur.Load() || g.Seq != 2 || g.Interception.EnforceSNIHostMatch {
		t.Errorf("after Store: Load() = %p (Seq %d, %+v), want the stored %p with Seq 2 and the new flag", cur.Load(), cur.Load().Seq, cur.Load().Interception, g)
	}
	if names := g.Rewrites(decide(t, g, "a.example")).Names(); !slices.Equal(names, []string{"X-B"}) {
		t.Errorf("new generation rewrites = %v, want [X-B]", names)
	}
	// The generation a request took before the swap is unchanged.
	if names := first.Rewrites(decide(t, first, "a.example")).Names(); !slices.Equal(names, []string{"X-A"}) || !first.Interception.EnforceSNIHostMatch {
		t.Errorf("old generation changed: rewrites %v, %+v", names, first.Interception)
	}

	bad := []struct {
		name    string
		cfg     *config.Config
		wantErr string
	}{
		{"nil config", nil, "no configuration"},
		{"bad policy", &config.Config{Policy: config.Policy{DefaultAction: "maybe"}}, "compiling egress policy"},
		{"bad rewrite", func() *config.Config {
			c := cfgWith("X-C", true)
			c.Policy.Rules[1].HeaderRewrites = []config.HeaderRewrite{{Name: "Connection", Value: "close"}}
			return c
		}(), "egress_policy.rules[1] (b.example)"},
	}
	for _, tt := range bad {
		if g, err := cur.Store(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Store() = %v, %v, want error containing %q", tt.name, g, err, tt.wantErr)
		}
		if cur.Load().Seq != 2 {
			t.Errorf("%s: a failed Store changed the generation in force (Seq %d)", tt.name, cur.Load().Seq)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// TestConcurrentLoadStore runs readers against a writer that alternates two
// configurations: every generation a reader loads is internally consistent
// (its rewrites and its flag come from the same configuration) and Seq
// never goes back. Run with -race.
func TestConcurrentLoadStore(t *testing.T) {
	cfgA, cfgB := cfgWith("X-A", true), cfgWith("X-B", false)
	cur, err := New(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	const stores = 200
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				g := cur.Load()
				if g.Seq < last {
					t.Errorf("Seq went back from %d to %d", last, g.Seq)
					return
				}
				last = g.Seq
				want := "X-B"
				if g.Interception.EnforceSNIHostMatch {
					want = "X-A"
				}
				hp, _ := hostport.Parse("a.example")
				if names := g.Rewrites(g.Policy.Decide(policy.Target{Host: hp})).Names(); !slices.Equal(names, []string{want}) {
					t.Errorf("generation %d mixes configurations: rewrites %v with %+v", g.Seq, names, g.Interception)
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range stores {
				c := cfgA
				if (i+w)%2 == 1 {
					c = cfgB
				}
				if _, err := cur.Store(c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	if got := cur.Load().Seq; got != 1+2*stores {
		t.Errorf("final Seq = %d, want %d", got, 1+2*stores)
	}
}

// TestRemovalsAndResponseHeaderTimeout: a rule's remove_headers reach the
// set Rewrites returns (also for a rule that only removes), and its
// response_header_timeout_ms is returned for its Allow decisions only.
func TestRemovalsAndResponseHeaderTimeout(t *testing.T) {
	cfg := &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
		{Host: "llm.example", Index: 0, Action: config.ActionAllow, ResponseHeaderTimeout: 20 * time.Minute,
			HeaderRewrites: []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"}},
			RemoveHeaders:  []string{"x-api-key", "Api-Key"}},
		{Host: "strip.example", Index: 1, Action: config.ActionAllow, RemoveHeaders: []string{"Authorization"}},
		{Host: "plain.example", Index: 2, Action: config.ActionAllow},
		{Host: "slow-deny.example", Index: 3, Action: config.ActionDeny, ResponseHeaderTimeout: time.Hour},
	}}}
	g, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		authority   string
		wantRemoved []string // nil = no set
		wantTimeout time.Duration
	}{
		{"llm.example", []string{"X-Api-Key", "Api-Key"}, 20 * time.Minute},
		{"llm.example:8443", nil, 0}, // denied on this port
		{"strip.example", []string{"Authorization"}, 0},
		{"plain.example", nil, 0},
		{"slow-deny.example", nil, 0},
		{"other.example", nil, 0}, // default deny
	}
	for _, tt := range tests {
		d := decide(t, g, tt.authority)
		set := g.Rewrites(d)
		if got := set.Removed(); !slices.Equal(got, tt.wantRemoved) {
			t.Errorf("Rewrites(%s).Removed() = %v, want %v", tt.authority, got, tt.wantRemoved)
		}
		if got := g.ResponseHeaderTimeout(d); got != tt.wantTimeout {
			t.Errorf("ResponseHeaderTimeout(%s) = %v, want %v", tt.authority, got, tt.wantTimeout)
		}
	}
	// A decision of a larger policy (rule index out of range here).
	big := &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny}}
	for i := range 6 {
		big.Policy.Rules = append(big.Policy.Rules, config.Rule{Host: fmt.Sprintf("r%d.example", i), Index: i, Action: config.ActionAllow, ResponseHeaderTimeout: time.Second})
	}
	other, err := Compile(big)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.ResponseHeaderTimeout(decide(t, other, "r5.example")); got != 0 {
		t.Errorf("ResponseHeaderTimeout(decision with rule index 5) = %v, want 0", got)
	}
	// A removal the rewrite layer refuses fails the whole generation.
	bad := &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
		{Host: "a.example", Action: config.ActionAllow, RemoveHeaders: []string{"Connection"}},
	}}}
	if _, err := Compile(bad); err == nil || !strings.Contains(err.Error(), "egress_policy.rules[0] (a.example): remove_headers[0]") {
		t.Errorf("Compile(remove_headers: [Connection]) error = %v", err)
	}
}

// TestAddrOpts: the address guard exceptions follow the rule that allowed
// the request (allow_private_addresses; an IP or CIDR host names its
// address), none for a deny rule, a default allow or another generation's
// decision; AddrGuard and AddrGuardOff follow address_guard, and a reload
// replaces them.
func TestAddrOpts(t *testing.T) {
	cfg := &config.Config{
		Policy: config.Policy{DefaultAction: config.ActionAllow, Rules: []config.Rule{
			{Host: "svc.example", Index: 0, Action: config.ActionAllow, AllowPrivateAddresses: true},
			{Host: "plain.example", Index: 1, Action: config.ActionAllow},
			{Host: "10.1.2.3", Index: 2, Action: config.ActionAllow},
			{Host: "fd00:1::/64", Index: 3, Action: config.ActionAllow, AllowedPorts: []uint16{443}},
			{Host: "10.9.0.0/16", Index: 4, Action: config.ActionDeny},
		}},
		AddressGuard: config.AddressGuard{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}
	cur, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := cur.Load()
	tests := []struct {
		authority string
		want      addrguard.Opts
	}{
		{"svc.example", addrguard.Opts{AllowPrivate: true}},
		{"plain.example", addrguard.Opts{}},
		{"10.1.2.3", addrguard.Opts{Rule: netip.MustParsePrefix("10.1.2.3/32")}},
		{"[fd00:1::5]", addrguard.Opts{Rule: netip.MustParsePrefix("fd00:1::/64")}},
		{"10.9.1.1", addrguard.Opts{}},         // deny rule
		{"other.example", addrguard.Opts{}},    // default allow
		{"svc.example:8443", addrguard.Opts{}}, // denied port
	}
	for _, tt := range tests {
		if got := g.AddrOpts(decide(t, g, tt.authority)); got != tt.want {
			t.Errorf("AddrOpts(%s) = %+v, want %+v", tt.authority, got, tt.want)
		}
	}
	for _, tt := range []struct {
		name string
		want addrguard.Opts
	}{
		{"svc.example", addrguard.Opts{AllowPrivate: true}}, // any port: the DNS guard's question
		{"SVC.example.", addrguard.Opts{AllowPrivate: true}},
		{"plain.example", addrguard.Opts{}},
		{"10.1.2.3", addrguard.Opts{Rule: netip.MustParsePrefix("10.1.2.3/32")}},
		{"10.9.1.1", addrguard.Opts{}}, // deny rule
		{"other.example", addrguard.Opts{}},
		{"bad..name", addrguard.Opts{}},
	} {
		if got := g.NameAddrOpts(tt.name); got != tt.want {
			t.Errorf("NameAddrOpts(%s) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if g.AddrGuardOff {
		t.Error("AddrGuardOff in a config that did not disable the guard")
	}
	if _, refused := g.AddrGuard.Refused(netip.MustParseAddr("127.0.0.1"), addrguard.Opts{}); refused {
		t.Error("AddrGuard refuses an allowed_cidrs address")
	}

	off := *cfg
	off.AddressGuard = config.AddressGuard{Disabled: true}
	off.Policy.Rules = cfg.Policy.Rules[1:2]
	next, err := cur.Store(&off)
	if err != nil {
		t.Fatal(err)
	}
	if !next.AddrGuardOff {
		t.Error("reload to enabled: false: AddrGuardOff = false")
	}
	if _, refused := next.AddrGuard.Refused(netip.MustParseAddr("127.0.0.1"), addrguard.Opts{}); !refused {
		t.Error("the reloaded guard kept the old allowed_cidrs")
	}
	// A decision of the first generation (rule index 3) is out of range in
	// the second (one rule).
	if got := next.AddrOpts(decide(t, g, "[fd00:1::5]")); got != (addrguard.Opts{}) {
		t.Errorf("AddrOpts of another generation's decision = %+v, want none", got)
	}
}
