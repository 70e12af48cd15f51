package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// Addresses the address-guard tests add to the net namespace: the cloud
// metadata address, a "public" address (a documentation range, which the
// guard does not refuse) and the DNS responder's address.
var (
	metadataIP = netip.MustParseAddr("169.254.169.254")
	publicIP   = netip.MustParseAddr("192.0.2.10")
	dnsIP      = netip.MustParseAddr("192.0.2.53")
)

const (
	bodyGuard  = "destination address not allowed"
	hostRebind = "rebind.e2e.test"
)

// guardOff turns the address guard off (the reference's behaviour), for
// the runs that show the SSRF the guard prevents.
const guardOff = "address_guard:\n  enabled: false\n"

// TestAddressGuardSSRF: under default_action: allow, with address_guard
// at its defaults, a request for Host 169.254.169.254 (the metadata
// address exists in the net namespace, served by the origin), for a name
// the pod resolves to a private address (the origin's own) and for a name
// resolving to loopback is refused with 403 "destination address not
// allowed" and the origin sees no connection at all. With the guard off the
// same requests reach the origin (the SSRF this closes), so the test can
// fail.
func TestAddressGuardSSRF(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "guard on", false: "guard off"}[on], func(t *testing.T) {
			cfg := podConfig{
				defaultAllow: true,
				extraAddrs:   []netip.Addr{metadataIP},
				originNames:  []string{"private.e2e.test"},
				extraHosts: func(p *pod) string {
					return fmt.Sprintf("%s private.e2e.test\n127.0.0.1 loopback.e2e.test\n", p.netIP4)
				},
				addressGuard: guardDefaults,
				secrets:      map[string]string{"api-key": "unused"},
			}
			if !on {
				cfg.addressGuard = guardOff
			}
			p := newPod(t, cfg)
			for _, tt := range []struct {
				url string
				dst netip.AddrPort // where a leak would connect
			}{
				{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", netip.AddrPortFrom(metadataIP, 443)},
				{"http://private.e2e.test/internal", p.addr4(443)},
			} {
				t.Run(tt.url, func(t *testing.T) {
					mark := p.mark(t)
					r := p.app(t, "http", "-url", tt.url)
					if on {
						assertStatus(t, "GET "+tt.url, r, http.StatusForbidden, bodyGuard)
						p.assertNoTCP(t, mark, tt.dst)
						return
					}
					if r.Status != http.StatusOK {
						t.Fatalf("guard off: GET %s: %d %q (%s), want 200 from the origin", tt.url, r.Status, r.Body, r.Error)
					}
					if ev := p.httpEvent(t, mark, r.Echo.Path); ev.LocalAddrPort() != tt.dst {
						t.Errorf("guard off: the origin answered on %s, want %s", ev.Local, tt.dst)
					}
				})
			}
			// The app sends the name in Host to an address it does not
			// resolve (its own lookup would connect to its loopback
			// directly); BotBox resolves it to 127.0.0.1. Nothing listens on
			// port 443 in the pod: a dial there is refused (502); the guard
			// answers 403 without dialling.
			r := p.app(t, "http", "-url", "http://"+p.netIP4.String()+"/", "-host", "loopback.e2e.test")
			if on {
				assertStatus(t, "GET http://loopback.e2e.test/", r, http.StatusForbidden, bodyGuard)
			} else if r.Status != http.StatusBadGateway {
				t.Errorf("guard off: GET http://loopback.e2e.test/: %d %q, want 502 (BotBox dialled the pod's loopback)", r.Status, r.Body)
			}
		})
	}
}

// TestAddressGuardRebinding: a name whose first DNS answer is a public
// address and every later one the metadata address. The first request
// goes to the public address (200); a request that makes BotBox resolve
// the name again (another port, so another upstream connection) gets the
// metadata address and is refused with 403, and the metadata address sees
// no connection. With the guard off the second request reaches the
// metadata address. The pod's resolver is a DNS responder in the net
// namespace that counts its answers, so the test knows the second answer
// was given.
func TestAddressGuardRebinding(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "guard on", false: "guard off"}[on], func(t *testing.T) {
			cfg := podConfig{
				rules:        "\n    - host: " + hostRebind + "\n      action: allow\n      allowed_ports: [443, 8443]\n",
				extraAddrs:   []netip.Addr{publicIP, metadataIP},
				originNames:  []string{hostRebind},
				nameserver:   dnsIP,
				addressGuard: guardDefaults,
				secrets:      map[string]string{"api-key": "unused"},
			}
			if !on {
				cfg.addressGuard = guardOff
			}
			p := newPod(t, cfg)
			dns := startRebindingDNS(t, p.netNS, netip.AddrPortFrom(dnsIP, 53), hostRebind, publicIP, metadataIP)

			// The app connects to the public address itself (its own lookup
			// would take the first answer): BotBox's resolution is the
			// first the responder sees.
			mark := p.mark(t)
			r := p.app(t, "http", "-url", "http://"+publicIP.String()+"/first", "-host", hostRebind)
			if r.Status != http.StatusOK || r.Echo == nil {
				t.Fatalf("first request: %d %q (%s), want 200 from the public address", r.Status, r.Body, r.Error)
			}
			if ev := p.httpEvent(t, mark, "/first"); ev.LocalAddrPort() != netip.AddrPortFrom(publicIP, 443) {
				t.Fatalf("first request answered on %s, want %s", ev.Local, netip.AddrPortFrom(publicIP, 443))
			}

			mark = p.mark(t)
			url := "http://" + hostRebind + ":8443/second"
			r = p.app(t, "http", "-url", url, "-proxy", "http://127.0.0.1:8080")
			if n := dns.answered(); n < 2 {
				t.Fatalf("the responder gave %d A answers, want at least 2 (the second request did not resolve again)", n)
			}
			meta := netip.AddrPortFrom(metadataIP, 8443)
			if on {
				assertStatus(t, "GET "+url, r, http.StatusForbidden, bodyGuard)
				p.assertNoTCP(t, mark, meta)
				return
			}
			if r.Status != http.StatusOK {
				t.Fatalf("guard off: GET %s: %d %q (%s), want 200 from the rebound address", url, r.Status, r.Body, r.Error)
			}
			if ev := p.httpEvent(t, mark, "/second"); ev.LocalAddrPort() != meta {
				t.Errorf("guard off: second request answered on %s, want the rebound %s", ev.Local, meta)
			}
		})
	}
}

// rebindingDNS answers A queries for one name: first with first, then
// always with second; other queries get an empty answer.
type rebindingDNS struct {
	name          string
	first, second netip.Addr
	mu            sync.Mutex
	n             int // A answers given for name
}

func (d *rebindingDNS) answered() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// startRebindingDNS serves a rebindingDNS on UDP addr inside the network
// namespace ns until the test ends.
func startRebindingDNS(t *testing.T, ns string, addr netip.AddrPort, name string, first, second netip.Addr) *rebindingDNS {
	t.Helper()
	pc, err := listenUDPInNetns(ns, addr)
	if err != nil {
		t.Fatalf("DNS responder in %s: %v", ns, err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	d := &rebindingDNS{name: name + ".", first: first, second: second}
	go d.serve(pc)
	return d
}

func (d *rebindingDNS) serve(pc *net.UDPConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if q.Type == dnsmessage.TypeA && q.Name.String() == d.name {
			d.mu.Lock()
			a := d.second
			if d.n == 0 {
				a = d.first
			}
			d.n++
			d.mu.Unlock()
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: a.As4()})
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		_, _ = pc.WriteToUDPAddrPort(msg, from)
	}
}

// listenUDPInNetns opens a UDP socket bound to addr in the network
// namespace ns (a name under /var/run/netns). The socket is made on an OS
// thread moved into ns; that thread is never handed back to the runtime
// (the goroutine ends locked, so the thread exits), and the socket keeps
// its namespace wherever it is used from.
func listenUDPInNetns(ns string, addr netip.AddrPort) (*net.UDPConn, error) {
	type result struct {
		pc  *net.UDPConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		ch <- result{pc, err}
	}()
	r := <-ch
	return r.pc, r.err
}
