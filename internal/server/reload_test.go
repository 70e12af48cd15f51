package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// writeConfig publishes yaml at h.cfgPath the way the kubelet updates a
// ConfigMap volume: a new timestamped directory, a "..data_tmp" symlink
// to it renamed over "..data", and config.yaml a symlink through ..data.
func (h *harness) writeConfig(yaml string) {
	h.t.Helper()
	dir := filepath.Dir(h.cfgPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(yaml), 0o644); err != nil {
		h.t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		h.t.Fatal(err)
	}
	if _, err := os.Lstat(h.cfgPath); err != nil {
		if err := os.Symlink(filepath.Join("..data", "config.yaml"), h.cfgPath); err != nil {
			h.t.Fatal(err)
		}
	}
}

const otherAllowed = "    - host: other.example.test\n      action: allow\n"

// withOther returns h.yaml with the other.example.test rule replaced.
func (h *harness) withOther(rule string) string {
	h.t.Helper()
	if !strings.Contains(h.yaml, otherAllowed) {
		h.t.Fatal("harness config changed: other.example.test rule not found")
	}
	return strings.Replace(h.yaml, otherAllowed, rule, 1)
}

func (h *harness) status(host string) int {
	h.t.Helper()
	resp, err := h.proxyGet(host, "/")
	if err != nil {
		h.t.Fatalf("GET %s: %v", host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func reloads(h *harness, result string) float64 {
	return testutil.ToFloat64(h.srv.sm.ConfigReloads.WithLabelValues(result))
}

func TestReloadValidChangesDecision(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	if got := h.status("other.example.test"); got != http.StatusOK {
		t.Fatalf("before reload: %d, want 200", got)
	}
	h.writeConfig(h.withOther("    - host: other.example.test\n      action: deny\n"))
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := h.status("other.example.test"); got != http.StatusForbidden {
		t.Errorf("after reload: %d, want 403", got)
	}
	// >= 1: the directory watcher may reload the new file before the
	// SIGHUP does.
	if got := reloads(h, telemetry.ReloadSuccess); got < 1 {
		t.Errorf("reloads{success} = %v, want >= 1", got)
	}
	if got := testutil.ToFloat64(h.srv.sm.ConfigLastReloadSuccess); got != 1 {
		t.Errorf("last_reload_success = %v, want 1", got)
	}
	if !strings.Contains(h.logs.String(), `"message":"configuration reloaded"`) || !strings.Contains(h.logs.String(), `"generation":2`) {
		t.Errorf("no reload line naming generation 2:\n%s", h.logs.String())
	}
}

func TestReloadInvalidKeepsLastGood(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	bad := h.withOther("    - host: other.example.test\n      action: maybe\n")
	h.writeConfig(bad)
	err := h.srv.Reload(TriggerSIGHUP)
	if err == nil {
		t.Fatal("Reload of an invalid file succeeded")
	}
	if got := h.status("other.example.test"); got != http.StatusOK {
		t.Errorf("after failed reload: %d, want 200 (last good config)", got)
	}
	if got := reloads(h, telemetry.ReloadFailure); got < 1 {
		t.Errorf("reloads{failure} = %v, want >= 1", got)
	}
	if got := testutil.ToFloat64(h.srv.sm.ConfigLastReloadSuccess); got != 0 {
		t.Errorf("last_reload_success = %v, want 0", got)
	}
	var found bool
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, "configuration reload failed") && strings.Contains(line, "egress_policy.rules[1].action") {
			found = true
		}
	}
	if !found {
		t.Errorf("no ERROR line naming egress_policy.rules[1].action:\n%s", h.logs.String())
	}
	// A missing file fails the same way.
	if err := os.Remove(h.cfgPath); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Reload(TriggerSIGHUP); err == nil || !strings.Contains(err.Error(), "config file not found") {
		t.Errorf("Reload of a missing file: %v", err)
	}
	if got := h.status("other.example.test"); got != http.StatusOK {
		t.Errorf("after missing file: %d, want 200", got)
	}
	// A good file again: the gauge comes back.
	h.writeConfig(h.yaml)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(h.srv.sm.ConfigLastReloadSuccess); got != 1 {
		t.Errorf("last_reload_success after a good reload = %v, want 1", got)
	}
}

func TestReloadReportsRestartKeys(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	next := h.withOther("    - host: other.example.test\n      action: deny\n")
	next = strings.Replace(next, "listen_port: 18080", "listen_port: 18081", 1)
	next = strings.Replace(next, "max_connections: 64", "max_connections: 65", 1)
	h.writeConfig(next)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.logs.String(), `"keys":"listen_port,max_connections,max_concurrent_requests"`) || !strings.Contains(h.logs.String(), "require a restart") {
		t.Errorf("no requires-restart WARN naming the changed keys:\n%s", h.logs.String())
	}
	// The policy changed; the listener is still the one bound at start.
	if got := h.status("other.example.test"); got != http.StatusForbidden {
		t.Errorf("policy after reload: %d, want 403", got)
	}
	if h.srv.cfg.MaxConnections != 64 {
		t.Errorf("max_connections in force = %d, want the old 64", h.srv.cfg.MaxConnections)
	}
}

// TestRestartKeysCoverConfig changes every leaf field of Config in turn:
// a field a reload applies (the policy, log_level, enforce_sni_host_match)
// must report no restart key; every other field must report one, so a new
// baked field cannot silently be ignored at reload.
func TestRestartKeysCoverConfig(t *testing.T) {
	// Credentials are not applied at reload but refused when changed
	// (TestReloadRefusesChangedCredentials), so no restart key either.
	live := map[string]bool{"Policy": true, "Warnings": true, "LogLevel": true, "Interception.EnforceSNIHostMatch": true, "AddressGuard": true, "Credentials": true}
	base, err := config.Parse([]byte("egress_policy:\n  rules:\n    - host: a.example\n      action: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, typ reflect.Type, index []int)
	walk = func(prefix string, typ reflect.Type, index []int) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := prefix + f.Name
			idx := append(append([]int{}, index...), i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[netip.Addr]() && !live[name] {
				walk(name+".", f.Type, idx)
				continue
			}
			next := *base
			v := reflect.ValueOf(&next).Elem().FieldByIndex(idx)
			switch v.Kind() {
			case reflect.Bool:
				v.SetBool(!v.Bool())
			case reflect.Int, reflect.Int64:
				v.SetInt(v.Int() + 1)
			case reflect.Uint16:
				v.SetUint(v.Uint() + 1)
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Struct:
				if f.Type != reflect.TypeFor[netip.Addr]() {
					// egress_policy: compared by the generation tests.
					continue
				}
				v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.1")))
			case reflect.Slice:
				if f.Type != reflect.TypeFor[[]netip.AddrPort]() {
					if live[name] {
						continue
					}
					t.Errorf("%s: slice type %s not handled by the test", name, f.Type)
					continue
				}
				v.Set(reflect.ValueOf([]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")}))
			default:
				if !live[name] {
					t.Errorf("%s: kind %s not handled by the test", name, v.Kind())
				}
				continue
			}
			keys := changedRestartKeys(base, &next)
			if live[name] && len(keys) != 0 {
				t.Errorf("%s is applied at reload but reports %v", name, keys)
			}
			if !live[name] && len(keys) == 0 {
				t.Errorf("%s changed but no restart key reports it (add it to restartKeys)", name)
			}
		}
	}
	walk("", reflect.TypeFor[config.Config](), nil)
}

func TestReloadNewSecretRefMovesReadiness(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.waitHealth(http.StatusOK)
	h.writeConfig(h.withOther("    - host: other.example.test\n      action: allow\n      header_rewrites:\n        - name: X-Other\n          value: \"{value}\"\n          secret_ref: other-key\n"))
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	h.waitHealth(http.StatusServiceUnavailable)
	if err := os.WriteFile(filepath.Join(h.secretDir, "other-key"), []byte("v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitHealth(http.StatusOK)
}

func TestReloadFollowsConfigMapSwap(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.writeConfig(h.withOther("    - host: other.example.test\n      action: deny\n"))
	eventually.Eventually(t, 10*time.Second, func() bool {
		return h.status("other.example.test") == http.StatusForbidden
	}, "the watcher reloads the swapped ConfigMap")
	if got := reloads(h, telemetry.ReloadSuccess); got != 1 {
		t.Errorf("reloads{success} = %v, want 1 (resync of an unchanged file does not count)", got)
	}
}

// TestHotReloadUnderLoad: 8 clients through the plain listener while 20
// reloads alternate valid and invalid files. Valid files alternate between
// policy A (api allowed with the credential, other denied) and B (api
// denied, other allowed without rewrites). Whatever the timing: no
// request fails other than by a 403 of a policy; a 200 from api always
// carried the credential (only A allows it, and A injects), and a 200
// from other never did. A request that started and ended inside one
// settled phase must get exactly that phase's decision. Half the clients
// use the plain listener, half the interception listener (HTTP/1.1 and
// HTTP/2).
func TestHotReloadUnderLoad(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true, interception: "  enforce_sni_host_match: true\n"})
	apiRule := "    - host: api.example.test\n      action: allow\n      header_rewrites:\n        - name: Authorization\n          value: \"Bearer {value}\"\n          secret_ref: api-key\n"
	if !strings.Contains(h.yaml, apiRule) {
		t.Fatal("harness config changed: api rule not found")
	}
	polA := strings.Replace(h.withOther("    - host: other.example.test\n      action: deny\n"), apiRule, apiRule, 1)
	// B keeps api-key referenced (a deny rule's rewrites still count) so
	// that readiness does not move.
	polB := strings.Replace(h.withOther(otherAllowed), apiRule, strings.Replace(apiRule, "action: allow", "action: deny", 1), 1)
	invalid := h.withOther("    - host: other.example.test\n      action: sometimes\n")

	type state struct{ apiOK, otherOK bool }
	var (
		mu     sync.Mutex
		states = map[int64]state{0: {apiOK: true, otherOK: true}} // phase/2 -> policy
		phase  atomic.Int64                                       // odd while a reload runs
		done   atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		errs   = make(chan string, 64)
	)
	report := func(format string, args ...any) {
		select {
		case errs <- fmt.Sprintf(format, args...):
		default:
		}
	}
	plain := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := "api.example.test"
			if i%2 == 1 {
				host = "other.example.test"
			}
			do := func() (*http.Response, error) {
				req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
				req.Host = host
				return plain.Do(req)
			}
			if i >= 4 {
				ic := h.interceptClient(host, i >= 6)
				do = func() (*http.Response, error) { return ic.Get("https://" + host + "/") }
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				before := phase.Load()
				resp, err := do()
				if err != nil {
					report("%s: %v", host, err)
					return
				}
				var got struct {
					Authorization bool `json:"authorization"`
				}
				if resp.StatusCode == http.StatusOK {
					if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
						report("%s: decoding: %v", host, err)
					}
				}
				resp.Body.Close()
				after := phase.Load()
				switch {
				case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusForbidden:
					report("%s: status %d", host, resp.StatusCode)
				case resp.StatusCode == http.StatusOK && host == "api.example.test" && !got.Authorization:
					report("api allowed without the credential")
				case resp.StatusCode == http.StatusOK && host == "other.example.test" && got.Authorization:
					report("credential sent to other.example.test")
				}
				if before == after && before%2 == 0 {
					mu.Lock()
					st := states[before/2]
					mu.Unlock()
					want := http.StatusForbidden
					if (host == "api.example.test" && st.apiOK) || (host == "other.example.test" && st.otherOK) {
						want = http.StatusOK
					}
					if resp.StatusCode != want {
						report("%s in settled phase %d: %d, want %d", host, before, resp.StatusCode, want)
					}
				}
				done.Add(1)
			}
		}()
	}
	current := state{apiOK: true, otherOK: true}
	for i := range 20 {
		// Let traffic flow in this phase before the next reload.
		for target := done.Load() + 16; done.Load() < target && len(errs) == 0; {
			time.Sleep(time.Millisecond)
		}
		file, next := invalid, current
		if i%2 == 0 {
			if (i/2)%2 == 0 {
				file, next = polA, state{apiOK: true, otherOK: false}
			} else {
				file, next = polB, state{apiOK: false, otherOK: true}
			}
		}
		phase.Add(1)
		h.writeConfig(file)
		err := h.srv.Reload(TriggerSIGHUP)
		if (err == nil) != (file != invalid) {
			t.Errorf("reload %d: err = %v", i, err)
		}
		current = next
		mu.Lock()
		states[(phase.Load()+1)/2] = current
		mu.Unlock()
		phase.Add(1)
	}
	for target := done.Load() + 16; done.Load() < target && len(errs) == 0; {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// The directory watcher may also reload a file before its SIGHUP
	// does (then both count): at least one count per reload.
	if got := reloads(h, telemetry.ReloadSuccess); got < 10 {
		t.Errorf("reloads{success} = %v, want >= 10", got)
	}
	if got := reloads(h, telemetry.ReloadFailure); got < 10 {
		t.Errorf("reloads{failure} = %v, want >= 10", got)
	}
}

// TestReloadAppliesLogLevel: log_level is applied at reload.
func TestReloadAppliesLogLevel(t *testing.T) {
	lv := new(slog.LevelVar)
	h := start(t, harnessOpts{writeSecret: true, configFile: true, logLevel: lv})
	h.writeConfig("log_level: error\n" + h.yaml)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if lv.Level() != slog.LevelError {
		t.Errorf("level after reload = %v, want ERROR", lv.Level())
	}
}

// TestHealthzSaysReportMode: /healthz keeps its 200 and says report mode is
// on while the generation in force is in report mode; a reload to report
// and back to enforce changes the body each time (issue 11 point 5).
func TestHealthzSaysReportMode(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.waitHealth(http.StatusOK)
	if code, b := h.health(); code != http.StatusOK || b != "ok" {
		t.Fatalf("enforce: /healthz = %d %q, want 200 \"ok\"", code, b)
	}
	h.reloadWith("", "  mode: report\n")
	if code, b := h.health(); code != http.StatusOK || b != "ok ("+noteReportMode+")" {
		t.Errorf("report: /healthz = %d %q, want 200 %q", code, b, "ok ("+noteReportMode+")")
	}
	h.writeConfig(h.yaml)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if code, b := h.health(); code != http.StatusOK || b != "ok" {
		t.Errorf("back to enforce: /healthz = %d %q, want 200 \"ok\"", code, b)
	}
}
