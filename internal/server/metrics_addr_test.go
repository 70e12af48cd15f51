package server

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/config"
)

// TestMetricsListenAddrBinds: which addresses the admin port asks to bind
// for each metrics_listen_addr. 127.0.0.1 is always covered (by the address
// itself, by the wildcard, or by a second listener on the same port), so
// the exec probes on http://127.0.0.1:PORT/healthz keep working.
func TestMetricsListenAddrBinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string // "" = a Config not made by Parse
		want []string
	}{
		{"", []string{"127.0.0.1:19090"}},
		{"127.0.0.1", []string{"127.0.0.1:19090"}},
		{"0.0.0.0", []string{"0.0.0.0:19090"}},
		{"::", []string{"[::]:19090"}},
		{"127.0.0.2", []string{"127.0.0.2:19090", "127.0.0.1:19090"}},
		{"10.1.2.3", []string{"10.1.2.3:19090", "127.0.0.1:19090"}},
		{"::1", []string{"[::1]:19090", "127.0.0.1:19090"}},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			cfg := &config.Config{MetricsPort: 19090}
			if tc.addr != "" {
				cfg.MetricsListenAddr = netip.MustParseAddr(tc.addr)
			}
			var asked []string
			var lns []net.Listener
			s := &Server{cfg: cfg, opts: Options{Listen: func(network, addr string) (net.Listener, error) {
				asked = append(asked, addr)
				// Bind nothing real at the asked address (10.1.2.3 is not
				// ours); a loopback listener stands in for it.
				ln, err := net.Listen(network, "127.0.0.1:0")
				if err != nil {
					return nil, err
				}
				lns = append(lns, ln)
				return askedListener{ln, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}, nil
			}}}
			got, err := s.bindMetrics()
			if err != nil {
				t.Fatal(err)
			}
			for _, ln := range lns {
				_ = ln.Close()
			}
			if !slices.Equal(asked, tc.want) || len(got) != len(tc.want) {
				t.Errorf("bound %v (%d listeners), want %v", asked, len(got), tc.want)
			}
		})
	}
}

// askedListener reports the address it was asked for.
type askedListener struct {
	net.Listener
	addr net.Addr
}

func (l askedListener) Addr() net.Addr { return l.addr }

// TestMetricsListenAddr: with metrics_listen_addr on another address than
// 127.0.0.1 (127.0.0.2 stands for a Pod IP), both listeners serve the admin
// handler, /healthz answers with a valid probe signature on each (so
// `botbox probe` on loopback passes), and /metrics is served for scraping.
func TestMetricsListenAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr         string
		wantLoopback bool
	}{
		{"127.0.0.2", true},
		{"0.0.0.0", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			h := start(t, harnessOpts{writeSecret: true, extraYAML: "metrics_listen_addr: " + tc.addr + "\n"})
			main := h.addrs.Metrics.(*net.TCPAddr)
			// Go reports a wildcard listener as "::".
			if got := main.AddrPort().Addr().Unmap(); got != netip.MustParseAddr(tc.addr) && !(got.IsUnspecified() && tc.addr == "0.0.0.0") {
				t.Fatalf("metrics bound on %s, want %s", got, tc.addr)
			}
			targets := []string{h.addrs.Metrics.String()}
			if tc.wantLoopback {
				if h.addrs.MetricsLoopback == nil {
					t.Fatal("no loopback listener for probes")
				}
				lo := h.addrs.MetricsLoopback.(*net.TCPAddr)
				if !lo.IP.Equal(net.IPv4(127, 0, 0, 1)) {
					t.Fatalf("probe listener on %s, want 127.0.0.1", lo)
				}
				targets = append(targets, lo.String())
			} else {
				if h.addrs.MetricsLoopback != nil {
					t.Fatalf("extra listener %s although %s covers loopback", h.addrs.MetricsLoopback, tc.addr)
				}
				// The wildcard covers 127.0.0.1 at the same port.
				targets = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(main.Port))}
			}
			h.waitHealth(http.StatusOK)
			key, err := admin.ReadProbeKey(h.probeKeyFile)
			if err != nil {
				t.Fatal(err)
			}
			const nonce = "0123456789abcdef0123456789abcdef"
			for _, target := range targets {
				req, _ := http.NewRequest(http.MethodGet, "http://"+target+"/healthz", nil)
				req.Header.Set(admin.ProbeNonceHeader, nonce)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", target, err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !admin.VerifyProbe(key, nonce, "/healthz", resp.StatusCode, resp.Header.Get(admin.ProbeAuthHeader)) {
					t.Errorf("%s/healthz: %d, signature valid=false; want a signed 200", target, resp.StatusCode)
				}
				resp, err = http.Get("http://" + target + "/metrics")
				if err != nil {
					t.Fatalf("%s: %v", target, err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "botbox_config_last_reload_success") {
					t.Errorf("%s/metrics: %d without BotBox's metrics", target, resp.StatusCode)
				}
			}
		})
	}
}
