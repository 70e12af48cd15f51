package main

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// The -src forms of dns, tcp and ping send from a source address that need
// not be the host's (IP(V6)_FREEBIND, no capability): what an app does to
// make a responder answer somebody else. They send and do not wait for an
// answer (it goes to -src); Connected reports that the kernel accepted the
// send (tcp, in doTCP: that a connection was established, which it must not
// be).

// spoofedDNS sends one query for -name of -qtype to -addr from -src over
// UDP, or over TCP with -tcp (the SYN only: no handshake can complete).
func spoofedDNS(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	qt, ok := dns.StringToType[strings.ToUpper(o.qtype)]
	if len(o.addrs) != 1 || o.name == "" || !ok {
		fail(&r, errors.New("dns -src needs one -addr, -name and a known -qtype"))
		return r
	}
	if o.overTCP {
		return doTCP(o)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(o.name), qt)
	packed, err := m.Pack()
	if err != nil {
		fail(&r, err)
		return r
	}
	o.payload = string(packed)
	return doUDP(o)
}

// spoofedPing sends one echo request with -payload to -addr from -src, on
// an unprivileged ICMP socket (net.ipv4.ping_group_range must admit the
// caller).
func spoofedPing(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	src, err := netip.ParseAddr(o.src)
	if err != nil || len(o.addrs) != 1 {
		fail(&r, errors.New("ping -src needs a source address and one -addr"))
		return r
	}
	dst, err := netip.ParseAddr(o.addrs[0])
	if err != nil || dst.Is6() != src.Is6() {
		fail(&r, errors.New("ping -src: -addr must be an address of the source's family"))
		return r
	}
	family, proto := syscall.AF_INET, syscall.IPPROTO_ICMP
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if src.Is6() {
		family, proto, typ = syscall.AF_INET6, syscall.IPPROTO_ICMPV6, ipv6.ICMPTypeEchoRequest
	}
	fd, err := syscall.Socket(family, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, proto)
	if err != nil {
		fail(&r, err)
		return r
	}
	defer syscall.Close(fd)
	const ipFreebind, ipv6Freebind = 15, 78
	if src.Is6() {
		err = syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, ipv6Freebind, 1)
	} else {
		err = syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, ipFreebind, 1)
	}
	if err != nil {
		fail(&r, err)
		return r
	}
	if err := syscall.Bind(fd, sockaddr(src)); err != nil {
		fail(&r, err)
		return r
	}
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte(o.payload)}}).Marshal(nil)
	if err != nil {
		fail(&r, err)
		return r
	}
	if err := syscall.Sendto(fd, msg, 0, sockaddr(dst)); err != nil {
		fail(&r, err)
		return r
	}
	r.Connected = true
	time.Sleep(10 * time.Millisecond) // let the kernel hand the packet on before the socket closes
	return r
}

func sockaddr(a netip.Addr) syscall.Sockaddr {
	if a.Is4() {
		return &syscall.SockaddrInet4{Addr: a.As4()}
	}
	return &syscall.SockaddrInet6{Addr: a.As16()}
}
