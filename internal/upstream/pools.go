package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/botbox/botbox/internal/addrguard"
)

// maxPools bounds the connection pools a Transport keeps (see poolFor).
const maxPools = 32

// poolKey is what a connection's admission by the address guard depended
// on when it was dialled. Two requests with equal keys get the same
// verdict for every address, so a connection dialled for one may carry the
// other; requests with different keys never share a connection.
type poolKey struct {
	cleartext bool
	unguarded bool
	guard     string // addrguard.Guard.Key of the request's guard
	opts      addrguard.Opts
}

func keyOf(p DialPolicy) poolKey {
	if p.Unguarded {
		return poolKey{unguarded: true, cleartext: p.Cleartext}
	}
	k := poolKey{opts: p.Opts, cleartext: p.Cleartext}
	if p.Guard != nil {
		k.guard = p.Guard.Key()
	}
	return k
}

// pool is one *http.Transport and its last use (for eviction).
type pool struct {
	tr   *http.Transport
	used uint64
}

// pools holds a Transport's connection pools, one per poolKey.
type pools struct {
	// first is the key of base, set once by the first poolFor.
	first atomic.Pointer[poolKey]
	mu    sync.Mutex
	clock uint64
	m     map[poolKey]*pool
}

// poolFor returns the *http.Transport whose connections may carry a
// request with DialPolicy p: base for the first key seen (in practice the
// requests without exceptions, the common case), a clone of base (same
// dialer, TLS settings and bounds, its own connections) for any other key. The
// dial guard checks an address only when a connection is made; keying the
// pools by what that check depended on is what stops a connection dialled
// for a rule with allow_private_addresses (or under an older, more lenient
// address_guard) from carrying a request that would have been refused
// (TestPooledConnNotReusedAcrossOptIns). At most maxPools are kept: beyond
// that the least recently used one is dropped and its idle connections
// closed (its busy ones finish their requests and are never reused).
func (t *Transport) poolFor(p DialPolicy) *http.Transport {
	k := keyOf(p)
	ps := &t.pools
	if f := ps.first.Load(); f != nil && *f == k {
		// The common case, without the lock: base is never evicted.
		return t.base
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.clock++
	if e := ps.m[k]; e != nil {
		e.used = ps.clock
		return e.tr
	}
	if ps.m == nil {
		ps.m = make(map[poolKey]*pool)
	}
	tr := t.base
	if len(ps.m) > 0 {
		tr = t.base.Clone()
	} else {
		first := k // only this branch allocates
		ps.first.Store(&first)
	}
	if len(ps.m) >= maxPools {
		var oldest poolKey
		var at uint64
		for key, e := range ps.m {
			if e.tr != t.base && (at == 0 || e.used < at) {
				oldest, at = key, e.used
			}
		}
		ps.m[oldest].tr.CloseIdleConnections()
		delete(ps.m, oldest)
	}
	ps.m[k] = &pool{tr: tr, used: ps.clock}
	return tr
}

// CloseIdleConnections closes the idle pooled connections of every pool.
// The synchronous pool's (Sync) included.
func (t *Transport) CloseIdleConnections() {
	t.base.CloseIdleConnections()
	t.syncRT.CloseIdleConnections()
	t.pools.mu.Lock()
	defer t.pools.mu.Unlock()
	for _, e := range t.pools.m {
		e.tr.CloseIdleConnections()
	}
}

// strictest judges dials whose context carries no DialPolicy, or a
// DialPolicy without a Guard: every refused range, no exception.
var strictest = addrguard.New(nil)

// CheckAddress is the Guard that applies the address guard (package
// addrguard, SPEC §5.3) with the DialPolicy of the dial's context: refused
// unless the policy's Guard and Opts admit addr, never refused when the
// policy is Unguarded. A context without a DialPolicy gets the strictest
// judgement (fails closed). The refusal's reason is an
// *AddressGuardError.
func CheckAddress(ctx context.Context, addr netip.AddrPort) error {
	p, _ := DialPolicyFrom(ctx)
	if p.Cleartext {
		if class, ok := addrguard.CleartextAllowed(addr.Addr()); !ok {
			return &AddressGuardError{Class: class, Cleartext: true}
		}
	}
	if p.Unguarded {
		return nil
	}
	g := p.Guard
	if g == nil {
		g = strictest
	}
	if reason, refused := g.Refused(addr.Addr(), p.Opts); refused {
		return &AddressGuardError{Class: reason}
	}
	return nil
}

// AddressGuardError is CheckAddress's reason for a refusal (wrapped in the
// *AddrDeniedError the transport returns).
type AddressGuardError struct {
	// Class is the addrguard class of the refused address ("loopback",
	// "metadata via ipv4_mapped", ...).
	Class string
	// Cleartext: refused because the request is plain HTTP
	// (upstream_tls: false) and addr is not loopback or private.
	Cleartext bool
}

func (e *AddressGuardError) Error() string {
	switch {
	case e.Cleartext:
		return fmt.Sprintf("%s address refused for plain HTTP (the rule has upstream_tls: false; only loopback and private origins get plain HTTP, no opt-in changes that)", e.Class)
	case !openedByAllowPrivate(e.Class):
		// Loopback, metadata, link-local, ...: allow_private_addresses
		// never opens them, so the hint does not offer it.
		return fmt.Sprintf("%s address refused by address_guard (open it with address_guard.allowed_cidrs or an IP/CIDR rule)", e.Class)
	}
	return fmt.Sprintf("%s address refused by address_guard (open it with address_guard.allowed_cidrs, an IP/CIDR rule or the rule's allow_private_addresses)", e.Class)
}

// openedByAllowPrivate reports whether a rule's allow_private_addresses
// opens addresses of class (a Class, possibly "CLASS via FORM").
func openedByAllowPrivate(class string) bool {
	base, _, _ := strings.Cut(class, " via ")
	switch base {
	case addrguard.ClassPrivate, addrguard.ClassCGNAT, addrguard.ClassULA, addrguard.ClassSiteLocal:
		return true
	}
	return false
}
