package dnsguard

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Peers decides which query sources the guard answers. Local reports
// whether a is an address of the Pod (its network namespace), loopback
// included; it must be safe for concurrent use and must not block for
// long.
type Peers interface {
	Local(a netip.Addr) bool
}

// How the default Peers follows the Pod's addresses: a query from an
// address not in the set re-reads the interfaces, at most once per
// localAddrsMinRefresh (so a flood of foreign sources costs one netlink
// dump a second); a set older than localAddrsMaxAge is re-read on the next
// query whatever its source, so an address the Pod lost stops counting.
const (
	localAddrsMinRefresh = time.Second
	localAddrsMaxAge     = 30 * time.Second
)

// LocalAddrs is the default Peers: loopback (127.0.0.0/8, ::1) and the
// addresses of the network namespace's interfaces, as list returns them
// (net.InterfaceAddrs), compared without zone and with IPv4-mapped
// addresses unmapped. The unspecified address and multicast addresses are
// never local. A failure to list the interfaces counts every non-loopback
// source as foreign (fail closed).
//
// This is defence in depth behind the init rules, whose first filter rule
// drops every packet from a foreign source in the kernel (the kernel's own
// view of "local", fib/addrtype): the guard should never see such a query.
// The interface list is the same view for every address a socket can
// bind without IPV6_FREEBIND, which is what an unprivileged app can send
// from.
type LocalAddrs struct {
	list func() ([]net.Addr, error)
	now  func() time.Time

	mu        sync.Mutex
	set       map[netip.Addr]struct{}
	refreshed time.Time // zero: never read
}

// NewLocalAddrs returns a LocalAddrs reading the interfaces with list (nil:
// net.InterfaceAddrs) and its clock from now (nil: time.Now).
func NewLocalAddrs(list func() ([]net.Addr, error), now func() time.Time) *LocalAddrs {
	if list == nil {
		list = net.InterfaceAddrs
	}
	if now == nil {
		now = time.Now
	}
	return &LocalAddrs{list: list, now: now}
}

// Local implements Peers.
func (l *LocalAddrs) Local(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	switch {
	case a.IsLoopback():
		return true
	case !a.IsValid(), a.IsUnspecified(), a.IsMulticast():
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	age := now.Sub(l.refreshed)
	_, found := l.set[a]
	switch {
	case l.refreshed.IsZero(), age >= localAddrsMaxAge, !found && age >= localAddrsMinRefresh:
		l.refresh(now)
		_, found = l.set[a]
	}
	return found
}

// refresh re-reads the interface addresses; on failure the set is empty.
func (l *LocalAddrs) refresh(now time.Time) {
	l.refreshed = now
	l.set = map[netip.Addr]struct{}{}
	addrs, err := l.list()
	if err != nil {
		return
	}
	for _, ad := range addrs {
		if a, ok := addrIP(ad); ok {
			l.set[a] = struct{}{}
		}
	}
}

// addrIP is the IP address of an interface address or a socket's peer,
// unmapped and without zone; ok is false for any other kind of address.
func addrIP(a net.Addr) (netip.Addr, bool) {
	var ip net.IP
	switch v := a.(type) {
	case *net.IPNet:
		ip = v.IP
	case *net.IPAddr:
		ip = v.IP
	case *net.UDPAddr:
		ip = v.IP
	case *net.TCPAddr:
		ip = v.IP
	default:
		return netip.Addr{}, false
	}
	addr, ok := netip.AddrFromSlice(ip)
	return addr.Unmap(), ok
}
