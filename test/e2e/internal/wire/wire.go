// Package wire holds the JSON shapes exchanged between the end-to-end tests
// and their helper programs: what the test origin (cmd/e2e-origin) recorded,
// and what the test app (cmd/e2e-client) observed.
//
// It deliberately has no behaviour: the helpers and the tests agree on these
// types and nothing else.
package wire

import (
	"net/netip"
	"time"
)

// Event kinds recorded by the origin.
const (
	KindTCP  = "tcp"  // a TCP connection was accepted (before any TLS or HTTP)
	KindHTTP = "http" // an HTTP request was served
	KindUDP  = "udp"  // a datagram arrived
	// KindUDPLite is a UDP-Lite (IP protocol 136) datagram; KindRaw an IP
	// packet of the origin's raw protocol (-raw-proto), Local's port 0.
	KindUDPLite = "udplite"
	KindRaw     = "raw"
	// KindMLD is an MLD report the origin heard: Local is the multicast
	// group it announces (port 0), Payload "131" (MLDv1) or "143" (MLDv2,
	// one event per group record).
	KindMLD = "mld"
	// KindICMPv6 is an ICMPv6 message the origin received (-icmp6):
	// Payload is its type, a space, and its data: "128 <echo data>", or
	// "1 <UDP payload of the quoted packet>" for a destination unreachable.
	KindICMPv6 = "icmpv6"
	// KindDNS is a DNS query the origin's DNS server received (-dns):
	// Payload is "<name> <type>", the name as it arrived.
	KindDNS = "dns"
	// KindWS is a read of bytes an agent sent through a WebSocket tunnel
	// (an upgrade of a path under /ws/): Payload is the number of bytes.
	KindWS = "ws"
	// KindWire is a packet the origin's capture (-capture ADDR) saw arrive
	// in the net namespace with ADDR as its source or destination, whether
	// or not anything listens there: Local is its destination, Remote its
	// source (ports 0 when the protocol has none), Payload a summary: "udp
	// <payload>", "tcp flags=0x12", "icmp <type>", "icmpv6 <type> <data>"
	// or "proto <n>".
	KindWire = "wire"
)

// Event is one thing the origin saw. Events are numbered from 1 in the order
// the origin recorded them.
type Event struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Local is the origin's address (the listener), Remote the peer's.
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// Port is Local's port, IPv6 whether Local is an IPv6 address.
	Port int  `json:"port"`
	IPv6 bool `json:"ipv6"`

	// HTTP only.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Query is the raw query string as the origin received it.
	Query  string              `json:"query,omitempty"`
	Host   string              `json:"host,omitempty"`
	Proto  string              `json:"proto,omitempty"`
	Header map[string][]string `json:"header,omitempty"`
	Body   string              `json:"body,omitempty"`
	TLS    bool                `json:"tls,omitempty"`
	SNI    string              `json:"sni,omitempty"`

	// UDP, UDP-Lite and raw IP only.
	Payload string `json:"payload,omitempty"`
}

// LocalAddrPort parses Local (zero value when it does not parse).
func (e Event) LocalAddrPort() netip.AddrPort {
	ap, _ := netip.ParseAddrPort(e.Local)
	return ap
}

// Echo is the origin's response body for every HTTP request.
type Echo struct {
	Seq     int64               `json:"seq"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Host    string              `json:"host"`
	TLS     bool                `json:"tls"`
	Headers map[string][]string `json:"headers"`
}

// Error kinds reported by the client.
const (
	ErrTimeout = "timeout" // connect or request timed out (a DROP rule looks like this)
	ErrRefused = "refused" // connection refused (RST)
	ErrEPERM   = "eperm"   // the local packet filter refused the packet outright
	ErrTLS     = "tls"     // TLS handshake or verification failed
	ErrReset   = "reset"   // the peer closed or reset the connection
	ErrOther   = "other"
)

// Result is what one client invocation observed.
type Result struct {
	// UID is the client's real user id (a guard against a broken setpriv).
	UID int `json:"uid"`
	// Connected reports that a TCP connection was established (for UDP: the
	// datagram was handed to the kernel without error).
	Connected bool `json:"connected"`
	// Local is the client's side of the connection, when Connected.
	Local string `json:"local,omitempty"`
	// Status and Body are the HTTP response (0 and "" when there was none).
	Status int                 `json:"status"`
	Body   string              `json:"body"`
	Header map[string][]string `json:"header,omitempty"`
	// Echo is Body decoded, when it is an origin echo.
	Echo *Echo `json:"echo,omitempty"`
	// Error is the failure, ErrorKind its class (one of the Err constants).
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"error_kind,omitempty"`
}

// Run is a run of identical observed header values in a request loop.
type Run struct {
	Value string    `json:"value"`
	Count int       `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// LoopResult summarises a request loop.
type LoopResult struct {
	UID      int      `json:"uid"`
	Requests int      `json:"requests"`
	Failures []string `json:"failures"`
	Runs     []Run    `json:"runs"`
	// Stopped reports that the stop value was seen the requested number of
	// times (false: the loop ran until its deadline).
	Stopped bool `json:"stopped"`
}
