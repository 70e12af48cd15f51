package dnsguard

import (
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// cacheKey is what an upstream answer depends on: the canonical name, the
// type, and the client's DO and CD bits (they change what the resolver
// returns). Class is always IN.
type cacheKey struct {
	name  string
	qtype uint16
	do    bool
	cd    bool
}

// String is the singleflight key.
func (k cacheKey) String() string {
	b := make([]byte, 0, len(k.name)+12)
	b = append(b, k.name...)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(k.qtype), 10)
	if k.do {
		b = append(b, "/do"...)
	}
	if k.cd {
		b = append(b, "/cd"...)
	}
	return string(b)
}

// cache holds sanitised upstream answers until they expire. It is bounded:
// when full, expired entries are dropped, then an arbitrary one. Cached
// messages are never modified (reply copies what it serves).
type cache struct {
	mu  sync.Mutex
	m   map[cacheKey]entry
	max int
}

type entry struct {
	msg     *dns.Msg
	expires time.Time
}

func newCache(size int) *cache { return &cache{m: make(map[cacheKey]entry), max: size} }

// get returns the unexpired answer for k.
func (c *cache) get(k cacheKey, now time.Time) (*dns.Msg, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, time.Time{}, false
	}
	if !now.Before(e.expires) {
		delete(c.m, k)
		return nil, time.Time{}, false
	}
	return e.msg, e.expires, true
}

// put caps every TTL of m at maxTTL (in place: m is the guard's own copy)
// and stores m until its smallest TTL has passed: the answer's records,
// or for a negative answer its SOA's (min of TTL and MINIMUM, RFC 2308).
// It returns the expiry; a zero TTL stores nothing and expires now.
func (c *cache) put(k cacheKey, m *dns.Msg, now time.Time, maxTTL time.Duration) time.Time {
	capSecs := uint32(min(maxTTL/time.Second, 1<<31))
	ttl := capSecs
	for _, rr := range m.Answer {
		h := rr.Header()
		h.Ttl = min(h.Ttl, capSecs)
		ttl = min(ttl, h.Ttl)
	}
	for _, rr := range m.Ns {
		h := rr.Header()
		h.Ttl = min(h.Ttl, capSecs)
		if len(m.Answer) == 0 {
			ttl = min(ttl, h.Ttl)
			if soa, ok := rr.(*dns.SOA); ok {
				ttl = min(ttl, soa.Minttl)
			}
		}
	}
	if len(m.Answer) == 0 && len(m.Ns) == 0 {
		// A negative answer without SOA says nothing about how long it
		// holds: do not cache it.
		ttl = 0
	}
	exp := now.Add(time.Duration(ttl) * time.Second)
	if ttl == 0 {
		return exp
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for key, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, key)
			}
		}
		for key := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, key)
		}
	}
	c.m[k] = entry{msg: m, expires: exp}
	return exp
}
