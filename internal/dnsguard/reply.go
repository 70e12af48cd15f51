package dnsguard

import (
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/internal/policy"
)

// reply builds the client's answer from a sanitised upstream answer up
// (shared, never modified): the client's ID and question, up's rcode,
// copies of up's records with TTLs counted down to expires (never above
// what up holds, already capped at MaxTTL), owner names equal to the
// question in the client's case, addresses the AddrFilter refuses for
// rule removed, and an OPT record when the client sent one.
func (g *Guard) reply(req, up *dns.Msg, expires time.Time, rule *policy.Rule, do bool) *dns.Msg {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	resp.Rcode = up.Rcode
	resp.AuthenticatedData = up.AuthenticatedData && (do || req.AuthenticatedData)
	left := uint32(0)
	if d := expires.Sub(g.now()); d > 0 {
		left = uint32(min((d+time.Second-1)/time.Second, 1<<31))
	}
	qname := req.Question[0].Name
	for _, rr := range up.Answer {
		if c := g.filtered(rr, rule); c != nil {
			h := c.Header()
			h.Ttl = min(h.Ttl, left)
			if strings.EqualFold(h.Name, qname) {
				h.Name = qname
			}
			resp.Answer = append(resp.Answer, c)
		}
	}
	for _, rr := range up.Ns {
		c := dns.Copy(rr)
		c.Header().Ttl = min(c.Header().Ttl, left)
		resp.Ns = append(resp.Ns, c)
	}
	if opt, _ := onlyOPT(req); opt != nil {
		resp.SetEdns0(clientUDPSize, do)
	}
	return resp
}

// filtered returns a copy of rr as the client may see it, nil when the
// record must be removed: an A or AAAA record whose address the
// AddrFilter refuses, or an HTTPS or SVCB record keeps only the allowed
// addresses of its ipv4hint and ipv6hint (a hint left empty is removed).
func (g *Guard) filtered(rr dns.RR, rule *policy.Rule) dns.RR {
	f := g.opts.AddrFilter
	switch v := rr.(type) {
	case *dns.A:
		if f != nil && refused(f, v.A, rule, true) {
			return nil
		}
	case *dns.AAAA:
		if f != nil && refused(f, v.AAAA, rule, false) {
			return nil
		}
	case *dns.HTTPS:
		c := dns.Copy(v).(*dns.HTTPS)
		c.Value = filterHints(f, c.Value, rule)
		return c
	case *dns.SVCB:
		c := dns.Copy(v).(*dns.SVCB)
		c.Value = filterHints(f, c.Value, rule)
		return c
	}
	return dns.Copy(rr)
}

// refused asks f about ip; an address that does not parse is refused. An
// A record's address (v4) is judged as IPv4 whatever its slice length; an
// AAAA record's stays IPv6 even when IPv4-mapped (the filter judges the
// IPv4 an IPv6 address embeds).
func refused(f AddrFilter, ip net.IP, rule *policy.Rule, v4 bool) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return true
	}
	if v4 {
		if a = a.Unmap(); !a.Is4() {
			return true
		}
	}
	return f.Refused(a, rule)
}

// filterHints returns kvs with refused hint addresses removed (dns.Copy
// deep-copied the hint slices, so they may be rewritten).
func filterHints(f AddrFilter, kvs []dns.SVCBKeyValue, rule *policy.Rule) []dns.SVCBKeyValue {
	if f == nil {
		return kvs
	}
	out := kvs[:0]
	for _, kv := range kvs {
		switch h := kv.(type) {
		case *dns.SVCBIPv4Hint:
			h.Hint = keepAddrs(f, h.Hint, rule, true)
			if len(h.Hint) == 0 {
				continue
			}
		case *dns.SVCBIPv6Hint:
			h.Hint = keepAddrs(f, h.Hint, rule, false)
			if len(h.Hint) == 0 {
				continue
			}
		}
		out = append(out, kv)
	}
	return out
}

func keepAddrs(f AddrFilter, ips []net.IP, rule *policy.Rule, v4 bool) []net.IP {
	out := ips[:0]
	for _, ip := range ips {
		if !refused(f, ip, rule, v4) {
			out = append(out, ip)
		}
	}
	return out
}
