package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// startCapture records every IP packet that arrives in the net namespace,
// on any interface, with one of addrs as its source or destination: what
// went on the wire from the Pod to (or from) those addresses, whether or
// not anything listens there (wire.KindWire). An AF_PACKET socket sees the
// frame before any protocol handler, so an answer to a closed port, a TCP
// SYN-ACK or an ICMP error is recorded as well as a datagram.
func (o *origin) startCapture(addrs []netip.Addr) error {
	const ethPAll = 0x0003
	proto := int(htons(ethPAll))
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, proto)
	if err != nil {
		return fmt.Errorf("capture socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(ethPAll)}); err != nil {
		_ = syscall.Close(fd)
		return fmt.Errorf("binding the capture socket: %w", err)
	}
	o.closers = append(o.closers, fdCloser(fd))
	watch := map[netip.Addr]bool{}
	for _, a := range addrs {
		watch[a] = true
	}
	go o.serveCapture(fd, watch)
	return nil
}

type fdCloser int

func (f fdCloser) Close() error { return syscall.Close(int(f)) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (o *origin) serveCapture(fd int, watch map[netip.Addr]bool) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); !ok || ll.Pkttype == syscall.PACKET_OUTGOING {
			continue
		}
		src, dst, summary, ok := parsePacket(buf[:n])
		if !ok || !(watch[src.Addr()] || watch[dst.Addr()]) {
			continue
		}
		o.record(wire.Event{Kind: wire.KindWire, Local: dst.String(), Remote: src.String(), Payload: summary})
	}
}

// parsePacket reads an IPv4 or IPv6 packet's addresses, ports (0 for
// protocols without them) and a summary: "udp <payload>", "tcp flags=0x12",
// "icmp <type>", "icmpv6 <type> <data>", or "proto <n>".
func parsePacket(p []byte) (src, dst netip.AddrPort, summary string, ok bool) {
	if len(p) < 1 {
		return src, dst, "", false
	}
	var sa, da netip.Addr
	var next int
	var l4 []byte
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0xf) * 4
		if len(p) < 20 || ihl < 20 || len(p) < ihl {
			return src, dst, "", false
		}
		sa, da = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		next, l4 = int(p[9]), p[ihl:]
	case 6:
		if len(p) < 40 {
			return src, dst, "", false
		}
		sa, da = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		next, l4 = int(p[6]), p[40:]
	default:
		return src, dst, "", false
	}
	var sp, dp uint16
	switch {
	case (next == syscall.IPPROTO_UDP || next == syscall.IPPROTO_TCP) && len(l4) >= 4:
		sp, dp = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		if next == syscall.IPPROTO_UDP && len(l4) >= 8 {
			summary = "udp " + string(l4[8:])
		} else if next == syscall.IPPROTO_TCP && len(l4) >= 14 {
			summary = fmt.Sprintf("tcp flags=0x%02x", l4[13])
		}
	case next == syscall.IPPROTO_ICMP && len(l4) >= 1:
		summary = fmt.Sprintf("icmp %d", l4[0])
	case next == syscall.IPPROTO_ICMPV6 && len(l4) >= 8:
		summary = fmt.Sprintf("icmpv6 %d %s", l4[0], l4[8:])
	}
	if summary == "" {
		summary = fmt.Sprintf("proto %d", next)
	}
	return netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp), summary, true
}
