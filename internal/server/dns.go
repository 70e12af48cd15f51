package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/dnsguard"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/telemetry"
)

// newDNSGuard builds the DNS guard of dns_guard: it follows the policy
// generation in force, forwards to dns_guard.upstream or, when that is
// empty, to the nameservers of Options.ResolvConf (BotBox's own
// /etc/resolv.conf, whose queries the init rules never redirect: they
// come from BotBox's UID).
func (s *Server) newDNSGuard() (*dnsguard.Guard, error) {
	ups := s.cfg.DNSGuard.Upstream
	if len(ups) == 0 {
		var err error
		if ups, err = resolvConfServers(s.opts.ResolvConf); err != nil {
			return nil, err
		}
	}
	g, err := dnsguard.New(dnsguard.Options{
		Policies:      s.gen,
		Upstreams:     ups,
		MaxTTL:        s.cfg.DNSGuard.MaxTTL,
		AddrFilter:    s.dnsAddrFilter(),
		NameInspector: s.dnsNameInspector(),
		Metrics:       telemetry.NewDNSMetrics(s.metrics.Registry),
		Logger:        telemetry.WithTarget(s.opts.Logger, telemetry.TargetDNS),
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the DNS guard: %w", err)
	}
	s.logger.Info("DNS guard enabled", slog.String(telemetry.KeyUpstreamAddr, fmt.Sprint(ups)))
	return g, nil
}

// resolvConfServers reads the nameserver lines of a resolv.conf file.
func resolvConfServers(path string) ([]netip.AddrPort, error) {
	rc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("dns_guard.upstream is empty and %s cannot be read (%w); list the resolvers in dns_guard.upstream", path, err)
	}
	port, err := strconv.ParseUint(rc.Port, 10, 16)
	if err != nil || port == 0 {
		port = 53
	}
	var out []netip.AddrPort
	for _, srv := range rc.Servers {
		a, err := netip.ParseAddr(srv)
		if err != nil || a.IsUnspecified() {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dns_guard.upstream is empty and %s lists no usable nameserver; list the resolvers in dns_guard.upstream", path)
	}
	return out, nil
}

// bindDNS binds the guard's UDP and TCP sockets on listen_addr and, when
// listen_addr was left at its default, on [::1] too, where ip6tables
// REDIRECT delivers IPv6 queries (as bindAll does for the proxy). A kernel
// without IPv6 skips the [::1] sockets.
func (s *Server) bindDNS() error {
	port := s.cfg.DNSGuard.ListenPort
	addrs := []netip.Addr{s.cfg.ListenAddr}
	if !s.cfg.ListenAddrExplicit && s.cfg.ListenAddr == netip.MustParseAddr("127.0.0.1") {
		addrs = append(addrs, netip.IPv6Loopback())
	}
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a, port).String()
		pc, err := s.opts.ListenPacket("udp", ap)
		if err == nil {
			var ln net.Listener
			if ln, err = s.opts.Listen("tcp", ap); err == nil {
				s.dnsPCs, s.dnsLns = append(s.dnsPCs, pc), append(s.dnsLns, ln)
				s.addrs.DNSUDP, s.addrs.DNSTCP = append(s.addrs.DNSUDP, pc.LocalAddr()), append(s.addrs.DNSTCP, ln.Addr())
				continue
			}
			_ = pc.Close()
		}
		if i > 0 && (errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)) {
			s.logger.Info("IPv6 loopback not available, DNS guard on IPv4 only", slog.String(telemetry.KeyAddr, ap))
			continue
		}
		return fmt.Errorf("binding the DNS guard on %s (dns_guard.listen_port): %w", ap, err)
	}
	return nil
}

// serveDNS runs the DNS guard until ctx is cancelled; a socket failure is
// reported on errs (Run then shuts everything down).
func serveDNS(ctx context.Context, wg *sync.WaitGroup, g *dnsguard.Guard, pcs []net.PacketConn, lns []net.Listener, errs chan<- error) {
	defer wg.Done()
	if err := g.Serve(ctx, pcs, lns); err != nil {
		errs <- err
	}
}

// dnsNameInspector is the DNS guard's name inspector: Options.DNSNameInspector
// when set, else, with placeholders on, the placeholder tripwire on query
// names (issue 13): a name carrying a placeholder is refused (NXDOMAIN, the
// name never leaves the Pod), counted in botbox_secret_tripwire_total and
// raised as an ERROR secret_tripwire line, whatever the policy and mode say.
// The line does not carry the name: it may carry other data the app tried
// to smuggle out (TestDNSTripwire).
func (s *Server) dnsNameInspector() dnsguard.NameInspector {
	if s.opts.DNSNameInspector != nil {
		return s.opts.DNSNameInspector
	}
	m := s.placeholders
	if m == nil {
		return nil
	}
	alarms := telemetry.WithTarget(s.opts.Logger, telemetry.TargetDNS)
	return func(name string) bool {
		ref, found := m.InspectName(name)
		if !found {
			return false
		}
		s.metrics.SecretTripwire.WithLabelValues(ref).Inc()
		alarms.LogAttrs(context.Background(), slog.LevelError, "credential not allowed for this host",
			slog.String(telemetry.KeyEvent, telemetry.EventSecretTripwire),
			slog.Any(telemetry.KeySecretRef, []string{ref}),
			slog.String(telemetry.KeyListener, telemetry.ListenerDNS),
			slog.String(telemetry.KeyFoundIn, telemetry.FoundInDNSQuery))
		return true
	}
}

// dnsAddrFilter is the DNS guard's answer filter: Options.DNSAddrFilter when
// set, else the address guard of the generation in force, with the
// exceptions of the rule that allowed the name (none under default_action:
// allow). So an allowed name whose answer points at a loopback, link-local,
// metadata or private address reaches the app without that record — a
// rebinding answer never even reaches it — unless the rule or
// allowed_cidrs opts in, exactly as for the proxy's own dials
// (TestDNSGuardFiltersRefusedAddresses).
func (s *Server) dnsAddrFilter() dnsguard.AddrFilter {
	if s.opts.DNSAddrFilter != nil {
		return s.opts.DNSAddrFilter
	}
	return dnsguard.AddrFilterFunc(func(a netip.Addr, r *policy.Rule) bool {
		g := s.gen.Load()
		if g.AddrGuardOff {
			return false
		}
		var o addrguard.Opts
		if r != nil {
			o = generation.RuleAddrOpts(r.Rule)
		}
		_, refused := g.AddrGuard.Refused(a, o)
		return refused
	})
}
