package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

// peerConn is an upstream connection that reports peer as its remote
// address, so that the address guard judges a private or metadata address
// while the bytes still go to the loopback test origin.
type peerConn struct {
	net.Conn
	peer net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

// guardOpts returns envOpts with the real address guard check, the one
// package server installs.
func guardOpts(o envOpts) envOpts {
	o.guard = upstream.CheckAddress
	return o
}

// assertGuardRefused checks a refusal by the address guard: 403
// "destination address not allowed", reason address_guard in the header
// and the decision line (with the class in its error), counted under
// status_code address_guard for hostLabel, and the origin saw nothing.
func (e *testEnv) assertGuardRefused(resp *http.Response, body, hostLabel, class string) {
	e.t.Helper()
	if resp.StatusCode != http.StatusForbidden || body != bodyAddrDenied {
		e.t.Fatalf("got %d %q, want 403 %q", resp.StatusCode, body, bodyAddrDenied)
	}
	if got := resp.Header.Get(HeaderReason); got != telemetry.ReasonAddressGuard {
		e.t.Errorf("%s = %q, want %q", HeaderReason, got, telemetry.ReasonAddressGuard)
	}
	e.assertOriginUntouched()
	line := e.waitDecisions(1)[0]
	if line["reason"] != telemetry.ReasonAddressGuard || !strings.Contains(fmt.Sprint(line["error"]), class+" address refused by address_guard") {
		e.t.Errorf("decision line = %v, want reason %s and an error naming %s", line, telemetry.ReasonAddressGuard, class)
	}
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues(hostLabel, telemetry.ReasonAddressGuard)); got != 1 {
		e.t.Errorf("upstream_errors{%s,%s} = %v, want 1", hostLabel, telemetry.ReasonAddressGuard, got)
	}
}

// TestAddressGuardRefusesByDefault: with the default configuration the
// loopback origin is refused for an allowed name, under default_action:
// allow, for a WebSocket upgrade, and inside a CONNECT tunnel (the
// interception pipeline); the origin sees nothing.
func TestAddressGuardRefusesByDefault(t *testing.T) {
	t.Run("rule", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{}))
		resp, body := e.get("bare.example.test", "/", nil)
		e.assertGuardRefused(resp, body, "bare.example.test", "loopback")
	})
	t.Run("default allow", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{defaultAction: "allow"}))
		resp, body := e.get("metadata.example.test", "/latest/meta-data/", nil)
		e.assertGuardRefused(resp, body, telemetry.HostDefaultAllow, "loopback")
	})
	t.Run("websocket", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{}))
		resp, body := e.raw("GET /ws HTTP/1.1\r\nHost: bare.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		e.assertGuardRefused(resp, body, "bare.example.test", "loopback")
	})
	t.Run("CONNECT", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{connectTLS: true}))
		resp, err := e.curlClient(false).Get("https://bare.example.test/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		e.assertGuardRefused(resp, string(b), "bare.example.test", "loopback")
	})
	t.Run("report mode", func(t *testing.T) {
		// Report mode forwards what the policy denies, never past the
		// address guard.
		e := newEnv(t, guardOpts(envOpts{}))
		cfg, err := config.Parse([]byte(fmt.Sprintf("secrets_dir: %s\negress_policy:\n  mode: report\n  rules: []\n", e.secretDir)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.handler.gen.Store(cfg); err != nil {
			t.Fatal(err)
		}
		resp, body := e.get("unlisted.example.test", "/", nil)
		e.assertGuardRefused(resp, body, telemetry.HostReport, "loopback")
	})
	t.Run("metadata peer", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{peer: netip.MustParseAddrPort("169.254.169.254:443")}))
		resp, body := e.get("bare.example.test", "/", nil)
		e.assertGuardRefused(resp, body, "bare.example.test", "metadata")
	})
}

// TestAddressGuardOptIns: each opt-in opens what it names and nothing
// more: allowed_cidrs, enabled: false, a rule's allow_private_addresses
// (a private peer, never a metadata one), and a reload that drops the
// opt-in refuses again even though a connection to the origin is pooled.
func TestAddressGuardOptIns(t *testing.T) {
	ok := func(t *testing.T, e *testEnv) {
		t.Helper()
		resp, body := e.get("bare.example.test", "/", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %q, want 200", resp.StatusCode, body)
		}
	}
	t.Run("allowed_cidrs", func(t *testing.T) {
		ok(t, newEnv(t, guardOpts(envOpts{extraConfig: "address_guard:\n  allowed_cidrs: [127.0.0.0/8, \"::1\"]"})))
	})
	t.Run("disabled", func(t *testing.T) {
		ok(t, newEnv(t, guardOpts(envOpts{extraConfig: "address_guard:\n  enabled: false"})))
	})
	t.Run("allow_private_addresses opens private", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{peer: netip.MustParseAddrPort("10.20.30.40:443")}))
		e.withBareRule("      allow_private_addresses: true\n")
		ok(t, e)
	})
	t.Run("allow_private_addresses keeps loopback", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{}))
		e.withBareRule("      allow_private_addresses: true\n")
		resp, body := e.get("bare.example.test", "/", nil)
		e.assertGuardRefused(resp, body, "bare.example.test", "loopback")
	})
	t.Run("allow_private_addresses keeps metadata", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{peer: netip.MustParseAddrPort("100.100.100.200:443")}))
		e.withBareRule("      allow_private_addresses: true\n")
		resp, body := e.get("bare.example.test", "/", nil)
		e.assertGuardRefused(resp, body, "bare.example.test", "metadata")
	})
	t.Run("no opt-in refuses private", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{peer: netip.MustParseAddrPort("10.20.30.40:443")}))
		resp, body := e.get("bare.example.test", "/", nil)
		e.assertGuardRefused(resp, body, "bare.example.test", "private")
	})
	t.Run("reload drops the opt-in of a pooled connection", func(t *testing.T) {
		e := newEnv(t, guardOpts(envOpts{peer: netip.MustParseAddrPort("10.20.30.40:443")}))
		e.withBareRule("      allow_private_addresses: true\n")
		ok(t, e)
		ok(t, e) // the connection is pooled and reused
		before := e.hits.Load()
		e.withBareRule("")
		resp, body := e.get("bare.example.test", "/", nil)
		if resp.StatusCode != http.StatusForbidden || body != bodyAddrDenied {
			t.Fatalf("after the reload: got %d %q, want 403 %q (the pooled connection was reused)", resp.StatusCode, body, bodyAddrDenied)
		}
		if n := e.hits.Load(); n != before {
			t.Errorf("origin received %d requests after the reload, want 0", n-before)
		}
	})
}
