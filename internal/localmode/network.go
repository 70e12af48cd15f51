package localmode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftTable is the helper's nftables table, "inet botbox", in the command's
// network namespace (the only table there).
const nftTable = "botbox"

// prepareNetwork runs in the helper's new network namespace, which holds
// only lo: it brings lo up, routes every IPv4 and IPv6 address to it
// (without a route a connect to a public address fails before any rule is
// consulted, so nothing could be redirected), and installs the rules.
func prepareNetwork(s setup) error {
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := defaultRoutes(); err != nil {
		return err
	}
	return installRules(s.Redirects, s.DNSPort)
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// defaultRoutes adds "default dev lo src 127.0.0.1" and "default dev lo src
// ::1": every destination is reachable, through loopback, with a loopback
// source (so the replies of BotBox's listeners and the DNS guard go to a
// loopback address too).
func defaultRoutes() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("routing to lo: %w", err)
	}
	c, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return fmt.Errorf("routing to lo: %w", err)
	}
	defer c.Close()
	for _, src := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		family := byte(unix.AF_INET)
		if src.Is6() {
			family = unix.AF_INET6
		}
		// struct rtmsg: family, dst_len, src_len, tos, table, protocol,
		// scope, type, flags (u32).
		rtm := []byte{family, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0, 0, 0, 0}
		ae := netlink.NewAttributeEncoder()
		ae.Uint32(unix.RTA_OIF, uint32(lo.Index))
		ae.Bytes(unix.RTA_PREFSRC, src.AsSlice())
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{Type: unix.RTM_NEWROUTE, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
			Data:   append(rtm, attrs...),
		})
		if err != nil {
			if src.Is6() && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL)) {
				continue // a kernel without IPv6: nothing to route
			}
			return fmt.Errorf("adding the default route to lo (src %s): %w", src, err)
		}
	}
	return nil
}

// installRules installs "inet botbox" in one transaction:
//
//	chain output.nat   (nat, output, dstnat): UDP and TCP 53 → DNSPort;
//	                   TCP From → To for each redirect
//	chain output.filter (filter, output, policy drop): accept what goes to
//	                   127.0.0.0/8 or ::1 (the redirected connections, the
//	                   listeners' replies, the command's own loopback
//	                   servers); drop everything else: other ports, UDP,
//	                   ICMP, every other protocol, IPv4 and IPv6 alike.
func installRules(redirects []redirect, dnsPort uint16) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nf_tables: %w", err)
	}
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: nftTable})
	nat := c.AddChain(&nftables.Chain{Name: "output.nat", Table: tab, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	drop := nftables.ChainPolicyDrop
	filter := c.AddChain(&nftables.Chain{Name: "output.filter", Table: tab, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	for _, r := range natRules(redirects, dnsPort) {
		c.AddRule(&nftables.Rule{Table: tab, Chain: nat, Exprs: r})
	}
	for _, r := range filterRules() {
		c.AddRule(&nftables.Rule{Table: tab, Chain: filter, Exprs: r})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the nftables rules in the command's network namespace: %w (the kernel needs nf_tables with nat and inet support: sudo modprobe nf_tables)", err)
	}
	return nil
}

func natRules(redirects []redirect, dnsPort uint16) [][]expr.Any {
	var out [][]expr.Any
	if dnsPort != 0 {
		out = append(out, redirectRule(unix.IPPROTO_UDP, 53, dnsPort), redirectRule(unix.IPPROTO_TCP, 53, dnsPort))
	}
	for _, r := range redirects {
		out = append(out, redirectRule(unix.IPPROTO_TCP, r.From, r.To))
	}
	return out
}

// redirectRule is "meta l4proto PROTO th dport FROM redirect to :TO".
func redirectRule(proto byte, from, to uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, from)},
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, to)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

// filterRules are "meta nfproto ipv4 ip daddr 127.0.0.0/8 accept" and
// "meta nfproto ipv6 ip6 daddr ::1 accept"; the chain's policy drops the
// rest.
func filterRules() [][]expr.Any {
	dst := func(proto byte, off uint32, addr []byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}
	}
	return [][]expr.Any{
		dst(unix.NFPROTO_IPV4, 16, []byte{127}), // the first byte of the destination: 127.0.0.0/8
		dst(unix.NFPROTO_IPV6, 24, netip.IPv6Loopback().AsSlice()),
	}
}
