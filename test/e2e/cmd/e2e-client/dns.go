package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// doDNS sends one query for -name of -qtype to -addr, over UDP or -tcp.
func doDNS(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	qt, ok := dns.StringToType[strings.ToUpper(o.qtype)]
	if len(o.addrs) != 1 || o.name == "" || !ok {
		r.Error, r.ErrorKind = fmt.Sprintf("dns needs one -addr, -name and a known -qtype (got %q)", o.qtype), wire.ErrOther
		return r
	}
	if o.src != "" {
		return spoofedDNS(o)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(o.name), qt)
	c := dns.Client{Net: "udp", Timeout: o.timeout}
	if o.overTCP {
		c.Net = "tcp"
	}
	resp, _, err := c.Exchange(m, o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	r.Connected = true
	r.Status = resp.Rcode
	var addrs []string
	for _, rr := range resp.Answer {
		switch v := rr.(type) {
		case *dns.A:
			addrs = append(addrs, v.A.String())
		case *dns.AAAA:
			addrs = append(addrs, v.AAAA.String())
		}
	}
	r.Body = strings.Join(addrs, ",")
	return r
}
