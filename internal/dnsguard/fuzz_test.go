package dnsguard

import (
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzServeDNS: whatever message a client sends, the handler never
// panics, its answer (if any) packs, and nothing reaches the recording
// upstream unless the message is one plain query of a forwarded type for
// an allowed name, in which case only that lower-case name is asked.
func FuzzServeDNS(f *testing.F) {
	for _, m := range seedQueries() {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	h := newHarness(f, harnessOpts{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil {
			return // the server answers FORMERR or nothing; the handler never sees it
		}
		before := h.up.count()
		w := &fakeWriter{local: &net.UDPAddr{}}
		h.g.ServeDNS(w, m)
		if w.msg != nil {
			if _, err := w.msg.Pack(); err != nil {
				t.Fatalf("answer does not pack: %v\n%v", err, w.msg)
			}
		}
		if h.up.count() == before {
			return
		}
		q := h.up.last()
		plain := !m.Response && m.Opcode == dns.OpcodeQuery && len(m.Question) == 1 &&
			len(m.Answer) == 0 && len(m.Ns) == 0 && len(m.Extra) <= 1
		if !plain {
			t.Fatalf("forwarded a message that is not one plain query: %v", m)
		}
		name := q.Question[0].Name
		allowed := name == "api.example.test." ||
			strings.HasSuffix(name, ".allowed.test.") && name != "deny.allowed.test."
		if !allowed || !forwardedType(q.Question[0].Qtype) || name != strings.ToLower(m.Question[0].Name) {
			t.Fatalf("forwarded %q type %d for client question %v", name, q.Question[0].Qtype, m.Question[0])
		}
	})
}

func seedQueries() []*dns.Msg {
	var out []*dns.Msg
	for _, n := range []string{"api.example.test.", "x.allowed.test.", "deny.allowed.test.", "data.exfil.test.", `a\000b.allowed.test.`} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeHTTPS} {
			m := new(dns.Msg)
			m.SetQuestion(n, qt)
			out = append(out, m)
		}
	}
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeAAAA)
	m.SetEdns0(4096, true)
	out = append(out, m)
	return out
}
