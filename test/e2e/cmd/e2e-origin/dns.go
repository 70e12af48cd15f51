package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// dnsAnswers maps a lower-case fully qualified name to its addresses.
type dnsAnswers map[string][]netip.Addr

// parseDNSAnswers reads -dns-answer values "name=ip".
func parseDNSAnswers(vals []string) (dnsAnswers, error) {
	out := dnsAnswers{}
	for _, v := range vals {
		name, ip, ok := strings.Cut(v, "=")
		a, err := netip.ParseAddr(ip)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad -dns-answer %q (want name=ip)", v)
		}
		k := dns.Fqdn(strings.ToLower(name))
		out[k] = append(out[k], a)
	}
	return out, nil
}

// startDNS serves DNS on port 53, UDP and TCP, of every address: each
// query is recorded as a wire.KindDNS event (Payload "<name> <type>", the
// name as received) before it is answered from answers (A and AAAA of a
// known name; NOERROR without records for other types of a known name;
// NXDOMAIN otherwise).
func (o *origin) startDNS(addrs []string, answers dnsAnswers) error {
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("bad -addr %q: %w", a, err)
		}
		ap := netip.AddrPortFrom(ip, 53)
		pc, err := net.ListenPacket("udp", ap.String())
		if err != nil {
			return fmt.Errorf("listening on udp %s: %w", ap, err)
		}
		ln, err := net.Listen("tcp", ap.String())
		if err != nil {
			_ = pc.Close()
			return fmt.Errorf("listening on tcp %s: %w", ap, err)
		}
		h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) { o.serveDNS(w, q, answers) })
		for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
			started := make(chan struct{})
			srv.NotifyStartedFunc = func() { close(started) }
			go func() { _ = srv.ActivateAndServe() }()
			<-started
			o.closers = append(o.closers, closerFunc(srv.Shutdown))
		}
	}
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (o *origin) serveDNS(w dns.ResponseWriter, q *dns.Msg, answers dnsAnswers) {
	payload := ""
	if len(q.Question) > 0 {
		payload = q.Question[0].Name + " " + dns.TypeToString[q.Question[0].Qtype]
	}
	o.record(wire.Event{Kind: wire.KindDNS, Local: w.LocalAddr().String(), Remote: w.RemoteAddr().String(), Payload: payload})
	m := new(dns.Msg)
	m.SetReply(q)
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	qq := q.Question[0]
	addrs, ok := answers[strings.ToLower(qq.Name)]
	if !ok {
		m.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(m)
		return
	}
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: qq.Name, Class: dns.ClassINET, Ttl: 300}
		switch {
		case qq.Qtype == dns.TypeA && a.Is4():
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case qq.Qtype == dns.TypeAAAA && a.Is6():
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	_ = w.WriteMsg(m)
}

// withoutPort53 removes 53 from a -tcp-ports or -udp-ports list (the DNS
// server takes the port).
func withoutPort53(list string) string {
	var keep []string
	for _, p := range strings.Split(list, ",") {
		if strings.TrimSpace(p) != "53" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, ",")
}
