package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// resolve returns the upstream answer for key from the cache or, on a
// miss, from the upstreams (one exchange for concurrent identical misses),
// with the time it expires from the cache.
func (g *Guard) resolve(key cacheKey) (*dns.Msg, time.Time, error) {
	now := g.now()
	if m, exp, ok := g.cache.get(key, now); ok {
		return m, exp, nil
	}
	select {
	case g.pending <- struct{}{}:
		defer func() { <-g.pending }()
	default:
		return nil, time.Time{}, errTooMany
	}
	v, err, _ := g.flight.Do(key.String(), func() (any, error) {
		m, err := g.exchange(key)
		if err != nil {
			return nil, err
		}
		exp := g.cache.put(key, m, g.now(), g.opts.MaxTTL)
		return cached{m, exp}, nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	c := v.(cached)
	return c.msg, c.expires, nil
}

type cached struct {
	msg     *dns.Msg
	expires time.Time
}

// errNoAnswer: no upstream gave a usable answer in time.
var errNoAnswer = errors.New("no upstream resolver answered")

// errTooMany: maxPending queries are already waiting for upstream answers.
var errTooMany = errors.New("too many queries waiting for upstream answers")

// exchange asks the upstreams in order, within Timeout in total, and
// returns the first usable answer (NOERROR or NXDOMAIN matching the
// query), sanitised (sanitize). A truncated UDP answer is asked again over
// TCP from the same upstream.
func (g *Guard) exchange(key cacheKey) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.Timeout)
	defer cancel()
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	case <-ctx.Done():
		return nil, errNoAnswer
	}
	var last error = errNoAnswer
	for i, up := range g.opts.Upstreams {
		// Each upstream gets an equal share of what is left, the last one
		// all of it, so a dead first resolver cannot eat the whole budget.
		left := len(g.opts.Upstreams) - i
		actx, acancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && left > 1 {
			actx, acancel = context.WithTimeout(ctx, time.Until(dl)/time.Duration(left))
		}
		m, err := g.ask(actx, up.String(), key)
		acancel()
		if err == nil {
			return m, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: %w", errNoAnswer, last)
}

// ask does one exchange with one upstream (UDP, then TCP if truncated).
func (g *Guard) ask(ctx context.Context, addr string, key cacheKey) (*dns.Msg, error) {
	q := query(key)
	// The client's own timeouts (2 s per read by default) would cut a
	// longer Timeout short: ctx alone bounds the exchange.
	var budget time.Duration
	if dl, ok := ctx.Deadline(); ok {
		budget = max(time.Until(dl), time.Millisecond)
	}
	r, err := exchangeOnce(ctx, &dns.Client{Net: "udp", UDPSize: clientUDPSize, Timeout: budget}, q, addr)
	if err == nil && r.Truncated {
		q = query(key) // a new ID for the new exchange
		r, err = exchangeOnce(ctx, &dns.Client{Net: "tcp", Timeout: budget}, q, addr)
	}
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", addr, err)
	}
	if err := matches(q, r); err != nil {
		return nil, fmt.Errorf("answer from %s: %w", addr, err)
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("answer from %s: rcode %s", addr, dns.RcodeToString[r.Rcode])
	}
	sanitize(r)
	return r, nil
}

// exchangeOnce is c.ExchangeContext that also ends when ctx is cancelled
// (Close), not only at its deadline: the dns client applies the deadline
// to the socket but does not watch for cancellation, so the socket is
// closed under it.
func exchangeOnce(ctx context.Context, c *dns.Client, q *dns.Msg, addr string) (*dns.Msg, error) {
	conn, err := c.DialContext(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	r, _, err := c.ExchangeWithConnContext(ctx, q, conn)
	return r, err
}

// query builds the message sent upstream for key: a fresh random ID (from
// crypto/rand), the canonical name, class IN, RD, the client's CD bit,
// and an OPT record (UDP size clientUDPSize, the client's DO bit, no
// options). Nothing of the client's message but those bits is copied.
func query(key cacheKey) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(key.name+".", key.qtype)
	q.CheckingDisabled = key.cd
	q.SetEdns0(clientUDPSize, key.do)
	return q
}

// matches checks that r answers q: a response, same ID (the dns client
// already skips other IDs on UDP), one question equal to q's (name
// compared case-insensitively: a resolver may change case), opcode QUERY.
func matches(q, r *dns.Msg) error {
	switch {
	case !r.Response:
		return errors.New("not a response")
	case r.Id != q.Id:
		return errors.New("ID does not match the query")
	case r.Opcode != dns.OpcodeQuery:
		return errors.New("opcode is not QUERY")
	case len(r.Question) != 1:
		return errors.New("not exactly one question")
	}
	a, b := r.Question[0], q.Question[0]
	if a.Qtype != b.Qtype || a.Qclass != b.Qclass || !strings.EqualFold(a.Name, b.Name) {
		return errors.New("question does not match the query")
	}
	return nil
}

// sanitize keeps, in place, what an answer may carry to the client: in
// the answer section A, AAAA, CNAME, DNAME, HTTPS, SVCB and RRSIG records
// of class IN; in the authority section SOA records (negative caching);
// nothing in the additional section (the OPT is rebuilt per client).
func sanitize(r *dns.Msg) {
	ans := r.Answer[:0]
	for _, rr := range r.Answer {
		if rr.Header().Class != dns.ClassINET {
			continue
		}
		switch rr.(type) {
		case *dns.A, *dns.AAAA, *dns.CNAME, *dns.DNAME, *dns.HTTPS, *dns.SVCB, *dns.RRSIG:
			ans = append(ans, rr)
		}
	}
	clear(r.Answer[len(ans):])
	r.Answer = ans
	ns := r.Ns[:0]
	for _, rr := range r.Ns {
		if _, ok := rr.(*dns.SOA); ok && rr.Header().Class == dns.ClassINET {
			ns = append(ns, rr)
		}
	}
	clear(r.Ns[len(ns):])
	r.Ns = ns
	r.Extra = nil
}
