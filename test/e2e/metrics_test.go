package e2e

import (
	"net/netip"
	"strconv"
	"testing"
)

// A Prometheus outside the Pod (here: root in the "net" namespace) scrapes
// BotBox's admin port on the Pod's IPv4 and IPv6 addresses when
// metrics_listen_addr is 0.0.0.0 (issue 14 §5), with every egress rule
// installed: the answers leave from BotBox's UID, which the filter and the
// port-squat rules let through. The exec probe on 127.0.0.1 keeps passing.
// With the default (127.0.0.1) nothing answers on the Pod's addresses.
func TestMetricsScrapedOnPodIP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra string
		scrapable   bool
	}{
		{"default loopback", "", false},
		{"0.0.0.0", "metrics_listen_addr: \"0.0.0.0\"\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := apiKeyPod(t, podConfig{ipv6: true, extraConfig: tc.extra})
			for _, ip := range []netip.Addr{p.podIP4, p.podIP6} {
				url := "http://" + netip.AddrPortFrom(ip, 9090).String() + "/metrics"
				out, errOut, code := p.run(t, p.netNS, uidRoot, nil, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
				got := code == 0 && out == "200"
				if got != tc.scrapable {
					t.Errorf("scrape %s from outside the pod: exit %d, status %q, %s; want scrapable=%v", url, code, out, errOut, tc.scrapable)
				}
			}
			if out, errOut, code := p.probe(t); code != 0 {
				t.Errorf("botbox probe on 127.0.0.1 failed (exit %s): %s%s", strconv.Itoa(code), out, errOut)
			}
		})
	}
}
