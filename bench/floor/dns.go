package main

import (
	"log"
	"net"

	"github.com/miekg/dns"
)

// serveDNS answers every query on the UDP address addr with its question
// and, for type A, one record 203.0.113.7 (TTL 60), the address the guarded
// cell answers too.
func serveDNS(addr string) {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(203, 0, 113, 7)}}
		}
		_ = w.WriteMsg(m)
	})
	log.Fatal((&dns.Server{Addr: addr, Net: "udp", Handler: h}).ListenAndServe())
}
