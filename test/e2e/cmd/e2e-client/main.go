// Command e2e-client is the "app" of the end-to-end suite: the tests run it
// inside the pod namespace under setpriv as an ordinary UID (1000), as the
// exempt UID 1337, or as root, and it prints one JSON object describing what
// it observed, so a test can tell "no connection" from "403".
//
// Modes:
//
//	http  -url URL [-method M] [-H 'Name: value']... [-host H] [-sni S] [-cacert F] [-proxy URL] [-data D]
//	tcp   -addr HOST:PORT            connect and hang up
//	udp   -addr HOST:PORT -payload P [-src IP] [-device DEV] [-via IP6]   send one
//	                                 datagram; -src binds that source address with
//	                                 IP(V6)_FREEBIND (no privilege needed: a foreign
//	                                 source); -device binds the socket to DEV
//	                                 (SO_BINDTODEVICE, unprivileged since Linux 5.7);
//	                                 -via sends it with an IPv6 segment routing header
//	                                 (IPV6_RTHDR type 4, no privilege needed) whose
//	                                 first hop is IP6 and final segment -addr
//	raw   -addr HOST:PORT -data D [-tls -sni S -cacert F]   write D, read one HTTP response
//	udplite -addr HOST:PORT -payload P   send one UDP-Lite (IP protocol 136) datagram
//	rawip -addr IP -proto N -payload P   send one raw IP packet of protocol N (needs CAP_NET_RAW)
//	join  -addr GROUP...             join IPv6/IPv4 multicast groups on the default route's
//	                                 interface (the kernel announces them), then leave
//	listen -addr HOST:PORT...        listen (a squatter): print "ready", then one JSON
//	                                 wire.Result line per accepted connection, answering
//	                                 each with a 200; runs until killed
//	ping  -addr IP                   one ICMP echo (unprivileged ping socket); Connected = reply received
//	wait  -addr HOST:PORT...         poll until every address accepts a connection
//	dns   -addr HOST:PORT -name N -qtype T [-tcp]   one DNS query; Connected = an answer
//	                                 came back, Status = its rcode, Body = its A/AAAA
//	                                 addresses, comma-separated
//	loop  -url URL -header-of NAME -stop-value V [-after N] [-duration D]   request loop
//	ws    -url http://HOST/PATH [-frames N] [-size S] [-interval D]   WebSocket upgrade,
//	                                 then N masked binary frames of S payload bytes, one per
//	                                 interval; Status = the upgrade's status, Body = "sent=<bytes
//	                                 of complete frames written> closed=<the peer closed>"
//
// Every mode writes wire.Result (loop: wire.LoopResult) to stdout and exits 0;
// exit status 2 means a usage error. It never honours proxy environment
// variables: the proxy, if any, is the -proxy flag.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// opts are the flags shared by every mode.
type opts struct {
	url, method, host, sni, cacert, proxy, data string
	src, sigv4                                  string
	device, via                                 string
	addrs, headers                              listFlag
	payload, headerOf, stopValue                string
	useTLS                                      bool
	connectTimeout, timeout, duration, interval time.Duration
	after, proto                                int
	name, qtype                                 string
	overTCP                                     bool
	frames, size                                int
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: e2e-client http|stream|tcp|udp|raw|wait|loop [flags]")
		return 2
	}
	mode := args[0]
	var o opts
	fs := flag.NewFlagSet("e2e-client "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.url, "url", "", "request URL")
	fs.StringVar(&o.method, "method", http.MethodGet, "request method")
	fs.Var(&o.headers, "H", "request header 'Name: value' (repeatable)")
	fs.StringVar(&o.host, "host", "", "Host header override")
	fs.StringVar(&o.sni, "sni", "", "TLS server name override")
	fs.StringVar(&o.cacert, "cacert", "", "PEM roots to trust (default: system roots)")
	fs.StringVar(&o.proxy, "proxy", "", "explicit HTTP proxy URL")
	fs.StringVar(&o.data, "data", "", "request body (raw: the bytes to send)")
	fs.Var(&o.addrs, "addr", "HOST:PORT (repeatable for wait)")
	fs.StringVar(&o.payload, "payload", "e2e", "UDP payload")
	fs.StringVar(&o.src, "src", "", "udp, tcp, dns, ping: source address, bound with IP(V6)_FREEBIND")
	fs.StringVar(&o.device, "device", "", "udp: bind the socket to this interface (SO_BINDTODEVICE)")
	fs.StringVar(&o.via, "via", "", "udp: IPv6 first hop of a segment routing header ending at -addr")
	fs.BoolVar(&o.useTLS, "tls", false, "raw: speak TLS")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 1500*time.Millisecond, "TCP connect timeout")
	fs.DurationVar(&o.timeout, "timeout", 8*time.Second, "overall timeout")
	fs.StringVar(&o.headerOf, "header-of", "", "loop: the echoed request header to track")
	fs.StringVar(&o.stopValue, "stop-value", "", "loop: stop after this value was seen -after times")
	fs.IntVar(&o.after, "after", 5, "loop: how many times the stop value must be seen")
	fs.IntVar(&o.proto, "proto", 253, "rawip: IP protocol number")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "loop: deadline")
	fs.DurationVar(&o.interval, "interval", 20*time.Millisecond, "loop: pause between requests")
	fs.StringVar(&o.name, "name", "", "dns: the query name")
	fs.StringVar(&o.qtype, "qtype", "A", "dns: the query type (A, AAAA, TXT, ...)")
	fs.BoolVar(&o.overTCP, "tcp", false, "dns: query over TCP")
	fs.IntVar(&o.frames, "frames", 10, "ws: frames to send")
	fs.IntVar(&o.size, "size", 500, "ws: payload bytes per frame (< 65536)")
	fs.StringVar(&o.sigv4, "sigv4", "", "http: SERVICE/REGION: sign the request with SigV4 and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment, as an AWS SDK does")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var out any
	switch mode {
	case "http":
		out = doHTTP(o)
	case "tcp":
		out = doTCP(o)
	case "udp":
		out = doUDP(o)
	case "raw":
		out = doRaw(o)
	case "udplite":
		out = doUDPLite(o)
	case "rawip":
		out = doRawIP(o)
	case "listen":
		return doListen(o, stdout, stderr)
	case "stream":
		return doStream(o, stdout, stderr)
	case "join":
		out = doJoin(o)
	case "ping":
		out = doPing(o)
	case "wait":
		out = doWait(o)
	case "loop":
		out = doLoop(o)
	case "dns":
		out = doDNS(o)
	case "ws":
		out = doWS(o)
	default:
		fmt.Fprintf(stderr, "unknown mode %q\n", mode)
		return 2
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// classify maps an error to a wire error kind.
func classify(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		verifyErr *tls.CertificateVerificationError
		alert     tls.AlertError
		recordErr tls.RecordHeaderError
		netErr    net.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ECONNREFUSED):
		return wire.ErrRefused
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return wire.ErrEPERM
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &verifyErr),
		errors.As(err, &alert), errors.As(err, &recordErr), strings.Contains(err.Error(), "tls:"):
		return wire.ErrTLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return wire.ErrTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return wire.ErrReset
	default:
		return wire.ErrOther
	}
}

func fail(r *wire.Result, err error) {
	r.Error = err.Error()
	r.ErrorKind = classify(err)
}

// tlsConfig builds the client TLS config from -cacert and -sni.
func tlsConfig(o opts) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: o.sni, NextProtos: []string{"http/1.1"}}
	if o.cacert != "" {
		pem, err := os.ReadFile(o.cacert)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", o.cacert)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// newClient returns an HTTP/1.1 client that records whether it connected.
func newClient(o opts, connected *atomic.Bool, local *atomic.Value, keepAlive bool) (*http.Client, error) {
	tc, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: o.connectTimeout}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				connected.Store(true)
				local.Store(c.LocalAddr().String())
			}
			return c, err
		},
		TLSClientConfig:   tc,
		DisableKeepAlives: !keepAlive,
		ForceAttemptHTTP2: false,
	}
	if o.proxy != "" {
		pu, err := url.Parse(o.proxy)
		if err != nil {
			return nil, err
		}
		tr.Proxy = http.ProxyURL(pu)
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       o.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// newRequest builds the request of -url, -method, -H, -host and -data.
func newRequest(o opts) (*http.Request, error) {
	var body io.Reader
	if o.data != "" {
		body = strings.NewReader(o.data)
	}
	req, err := http.NewRequest(o.method, o.url, body)
	if err != nil {
		return nil, err
	}
	for _, h := range o.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("bad header %q", h)
		}
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if o.host != "" {
		req.Host = o.host
	}
	if o.sigv4 != "" {
		if err := signV4(req, o.sigv4, []byte(o.data)); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// fillResponse copies an HTTP response into r.
func fillResponse(r *wire.Result, resp *http.Response) {
	r.Status = resp.StatusCode
	r.Header = resp.Header
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	r.Body = string(b)
	if err != nil {
		fail(r, err)
	}
	var echo wire.Echo
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal(b, &echo) == nil {
		r.Echo = &echo
	}
}

func doHTTP(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	var connected atomic.Bool
	var local atomic.Value
	client, err := newClient(o, &connected, &local, false)
	if err != nil {
		fail(&r, err)
		return r
	}
	req, err := newRequest(o)
	if err != nil {
		fail(&r, err)
		return r
	}
	resp, err := client.Do(req)
	r.Connected = connected.Load()
	if l, ok := local.Load().(string); ok {
		r.Local = l
	}
	if err != nil {
		fail(&r, err)
		return r
	}
	defer resp.Body.Close()
	fillResponse(&r, resp)
	return r
}

// doStream GETs -url and writes each piece of the body as it arrives, one
// JSON string a line, then "end of body" (or the error): a test sees what
// reached the app before the origin went on.
func doStream(o opts, stdout, stderr io.Writer) int {
	var connected atomic.Bool
	var local atomic.Value
	client, err := newClient(o, &connected, &local, false)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	req, err := newRequest(o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer resp.Body.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			b, _ := json.Marshal(string(buf[:n]))
			fmt.Fprintln(stdout, string(b))
		}
		if err == io.EOF {
			fmt.Fprintln(stdout, "end of body")
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
}

func doTCP(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("tcp needs exactly one -addr"))
		return r
	}
	d := net.Dialer{Timeout: o.connectTimeout}
	if o.src != "" {
		src, err := netip.ParseAddr(o.src)
		if err != nil {
			fail(&r, err)
			return r
		}
		d.LocalAddr, d.Control = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), freebind(src.Is6())
	}
	c, err := d.Dial("tcp", o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	r.Connected = true
	r.Local = c.LocalAddr().String()
	_ = c.Close()
	return r
}

func doUDP(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("udp needs exactly one -addr"))
		return r
	}
	var d net.Dialer
	var src netip.Addr
	if o.src != "" {
		var err error
		if src, err = netip.ParseAddr(o.src); err != nil {
			fail(&r, err)
			return r
		}
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	var via netip.Addr
	if o.via != "" {
		var err error
		if via, err = netip.ParseAddr(o.via); err != nil || !via.Is6() {
			fail(&r, fmt.Errorf("-via %q: want an IPv6 address", o.via))
			return r
		}
	}
	d.Control = func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			switch {
			case src.Is6():
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, ipv6Freebind, 1)
			case src.Is4():
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipFreebind, 1)
			}
			if serr == nil && o.device != "" {
				serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, o.device)
			}
			if serr == nil && via.IsValid() {
				serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_IPV6, ipv6RTHdr, string(segmentRoutingHeader(via)))
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
	c, err := d.Dial("udp", o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	defer c.Close()
	r.Local = c.LocalAddr().String()
	if _, err := c.Write([]byte(o.payload)); err != nil {
		fail(&r, err)
		return r
	}
	r.Connected = true
	return r
}

// Socket options syscall does not name (linux/in.h, linux/in6.h).
const ipFreebind, ipv6Freebind, ipv6RTHdr = 15, 78, 57

// segmentRoutingHeader is an IPv6 segment routing header (RFC 8754, type
// 4) of two segments: the final one, which the kernel fills in with the
// socket's destination, and firstHop, the packet's IPv6 destination.
func segmentRoutingHeader(firstHop netip.Addr) []byte {
	h := make([]byte, 8+2*16)
	h[1] = 4 // hdrlen: 8-octet units after the first 8
	h[2] = 4 // routing type: segment routing
	h[3] = 1 // segments left
	h[4] = 1 // last entry
	hop := firstHop.As16()
	copy(h[8+16:], hop[:])
	return h
}

// freebind sets IP_FREEBIND or IPV6_FREEBIND before the bind: the socket
// may then use an address that is not the host's, without any capability.
func freebind(v6 bool) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if v6 {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, ipv6Freebind, 1)
			} else {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipFreebind, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

func doRaw(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("raw needs exactly one -addr"))
		return r
	}
	c := dialTCP(o, o.addrs[0], &r)
	if c == nil {
		return r
	}
	defer c.Close()
	if o.useTLS {
		tc, err := tlsConfig(o)
		if err != nil {
			fail(&r, err)
			return r
		}
		tlsConn := tls.Client(c, tc)
		if err := tlsConn.Handshake(); err != nil {
			fail(&r, err)
			return r
		}
		c = tlsConn
	}
	if _, err := io.WriteString(c, o.data); err != nil {
		fail(&r, err)
		return r
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		fail(&r, err)
		return r
	}
	defer resp.Body.Close()
	fillResponse(&r, resp)
	return r
}

// ipprotoUDPLite is IPPROTO_UDPLITE (the syscall package has no name for it).
const ipprotoUDPLite = 136

// doUDPLite sends one datagram from a SOCK_DGRAM socket of protocol 136,
// which any unprivileged user may create. Connected = the kernel accepted
// it (a DROP in OUTPUT makes sendto fail with EPERM).
func doUDPLite(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("udplite needs exactly one -addr"))
		return r
	}
	ap, err := netip.ParseAddrPort(o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	family := syscall.AF_INET6
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family = syscall.AF_INET
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, ipprotoUDPLite)
	if err != nil {
		fail(&r, fmt.Errorf("udplite socket: %w", err))
		return r
	}
	defer syscall.Close(fd)
	if err := syscall.Sendto(fd, []byte(o.payload), 0, sa); err != nil {
		fail(&r, fmt.Errorf("udplite sendto %s: %w", ap, err))
		return r
	}
	r.Connected = true
	return r
}

// doRawIP sends one IP packet of protocol -proto with the payload as its
// body (a raw socket: CAP_NET_RAW).
func doRawIP(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("rawip needs exactly one -addr"))
		return r
	}
	dst, err := netip.ParseAddr(o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	network := fmt.Sprintf("ip4:%d", o.proto)
	if dst.Is6() {
		network = fmt.Sprintf("ip6:%d", o.proto)
	}
	c, err := net.DialIP(network, nil, &net.IPAddr{IP: dst.AsSlice()})
	if err != nil {
		fail(&r, err)
		return r
	}
	defer c.Close()
	if _, err := c.Write([]byte(o.payload)); err != nil {
		fail(&r, err)
		return r
	}
	r.Connected = true
	return r
}

// doJoin joins each -addr group, as any unprivileged process may, on the
// interface of the default route; the kernel sends its membership report
// (MLDv1 at once, MLDv2/IGMPv3 a moment later) on the process's behalf.
// Connected = every join succeeded. The groups are left at exit.
func doJoin(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	var conns []net.PacketConn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for _, a := range o.addrs {
		g, err := netip.ParseAddr(a)
		if err != nil || !g.IsMulticast() {
			fail(&r, fmt.Errorf("bad group %q", a))
			return r
		}
		network := "udp6"
		if g.Is4() {
			network = "udp4"
		}
		c, err := net.ListenMulticastUDP(network, nil, &net.UDPAddr{IP: g.AsSlice()}) // nil: the default interface
		if err != nil {
			fail(&r, fmt.Errorf("joining %s: %w", g, err))
			return r
		}
		conns = append(conns, c)
	}
	r.Connected = true
	return r
}

// doListen is a squatter: it listens on every -addr, prints "ready", then a
// wire.Result line (Local, and Body = the peer) per accepted connection and
// answers it with a 200 and a forged body. It returns only on a listen
// error.
func doListen(o opts, stdout, stderr io.Writer) int {
	var lns []net.Listener
	for _, a := range o.addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintf(stderr, "listen %s: %v\n", a, err)
			return 1
		}
		lns = append(lns, ln)
	}
	lines := make(chan string)
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				b, _ := json.Marshal(wire.Result{UID: os.Getuid(), Connected: true, Local: c.LocalAddr().String(), Body: c.RemoteAddr().String()})
				lines <- string(b)
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				// Read the request first: a response written before the
				// client sent its request is "unsolicited" to net/http's
				// client, and the barrier request fails at random.
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nforged\n")
				_ = c.Close()
			}
		}()
	}
	fmt.Fprintln(stdout, "ready")
	for l := range lines {
		fmt.Fprintln(stdout, l)
	}
	return 0
}

// doPing sends one ICMP echo request over an unprivileged ping socket (the
// pod's net.ipv4.ping_group_range must include the UID) and waits for the
// reply.
func doPing(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	if len(o.addrs) != 1 {
		fail(&r, errors.New("ping needs exactly one -addr"))
		return r
	}
	if o.src != "" {
		return spoofedPing(o)
	}
	dst, err := netip.ParseAddr(o.addrs[0])
	if err != nil {
		fail(&r, err)
		return r
	}
	network, laddr, proto := "udp4", "0.0.0.0", 1
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if dst.Is6() {
		network, laddr, proto, typ = "udp6", "::", 58, ipv6.ICMPTypeEchoRequest
	}
	c, err := icmp.ListenPacket(network, laddr)
	if err != nil {
		fail(&r, err)
		return r
	}
	defer c.Close()
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte(o.payload)}}).Marshal(nil)
	if err != nil {
		fail(&r, err)
		return r
	}
	if _, err := c.WriteTo(msg, &net.UDPAddr{IP: dst.AsSlice()}); err != nil {
		fail(&r, err)
		return r
	}
	_ = c.SetReadDeadline(time.Now().Add(o.connectTimeout))
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			fail(&r, err)
			return r
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err == nil && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) {
			r.Connected = true
			return r
		}
	}
}

func doWait(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	deadline := time.Now().Add(o.timeout)
	pending := append([]string(nil), o.addrs...)
	for {
		var still []string
		var lastErr error
		for _, a := range pending {
			c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
			if err != nil {
				still = append(still, a)
				lastErr = err
				continue
			}
			_ = c.Close()
		}
		pending = still
		if len(pending) == 0 {
			r.Connected = true
			return r
		}
		if time.Now().After(deadline) {
			fail(&r, fmt.Errorf("not listening: %v: %w", pending, lastErr))
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func doLoop(o opts) wire.LoopResult {
	res := wire.LoopResult{UID: os.Getuid(), Failures: []string{}, Runs: []wire.Run{}}
	var connected atomic.Bool
	var local atomic.Value
	client, err := newClient(o, &connected, &local, true)
	if err != nil {
		res.Failures = append(res.Failures, err.Error())
		return res
	}
	deadline := time.Now().Add(o.duration)
	seen := 0
	for time.Now().Before(deadline) {
		req, err := newRequest(o)
		if err != nil {
			res.Failures = append(res.Failures, err.Error())
			return res
		}
		res.Requests++
		var r wire.Result
		resp, err := client.Do(req)
		now := time.Now()
		if err != nil {
			res.Failures = append(res.Failures, fmt.Sprintf("request %d: %v", res.Requests, err))
		} else {
			fillResponse(&r, resp)
			_ = resp.Body.Close()
			switch {
			case r.Status != http.StatusOK:
				res.Failures = append(res.Failures, fmt.Sprintf("request %d: status %d: %s", res.Requests, r.Status, r.Body))
			case r.Echo == nil:
				res.Failures = append(res.Failures, fmt.Sprintf("request %d: not an echo: %s", res.Requests, r.Body))
			default:
				v := strings.Join(http.Header(r.Echo.Headers).Values(o.headerOf), "\x00")
				if n := len(res.Runs); n > 0 && res.Runs[n-1].Value == v {
					res.Runs[n-1].Count++
					res.Runs[n-1].Last = now
				} else {
					res.Runs = append(res.Runs, wire.Run{Value: v, Count: 1, First: now, Last: now})
				}
				if v == o.stopValue {
					seen++
				}
			}
		}
		if o.stopValue != "" && seen >= o.after {
			res.Stopped = true
			return res
		}
		time.Sleep(o.interval)
	}
	return res
}

// doWS upgrades -url (plain http, so a transparent redirect takes it) to a
// WebSocket and sends -frames masked binary frames of -size bytes, one
// per -interval, stopping at the first failed write. After the last frame
// it waits up to -timeout for the peer to close. Connected is the TCP
// connection; Body says how many bytes of complete frames were written and
// whether the peer closed the connection.
func doWS(o opts) wire.Result {
	r := wire.Result{UID: os.Getuid()}
	u, err := url.Parse(o.url)
	if err != nil || u.Scheme != "http" || o.size < 0 || o.size > 65535 {
		fail(&r, fmt.Errorf("ws needs an http:// -url and -size below 65536 (got %q, %d)", o.url, o.size))
		return r
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	c := dialTCP(o, addr, &r)
	if c == nil {
		return r
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", u.RequestURI(), u.Host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fail(&r, err)
		return r
	}
	r.Status = resp.StatusCode
	if resp.StatusCode != http.StatusSwitchingProtocols {
		fillResponse(&r, resp)
		return r
	}
	frame := maskedFrame(bytes.Repeat([]byte("w"), o.size))
	sent, closed := 0, false
	var werr error
	for i := 0; i < o.frames; i++ {
		if i > 0 {
			time.Sleep(o.interval)
		}
		if _, werr = c.Write(frame); werr != nil {
			break
		}
		sent += len(frame)
	}
	// The peer never answers: a read returns only when it closes (or the
	// deadline passes).
	if _, rerr := br.ReadByte(); rerr != nil && classify(rerr) != wire.ErrTimeout {
		closed = true
	}
	r.Body = fmt.Sprintf("sent=%d closed=%t", sent, closed)
	if werr != nil {
		fail(&r, werr)
	}
	return r
}

// maskedFrame is payload as one final, masked binary frame (RFC 6455
// §5.2), as a client sends it.
func maskedFrame(payload []byte) []byte {
	var f []byte
	if len(payload) < 126 {
		f = []byte{0x82, 0x80 | byte(len(payload))}
	} else {
		f = []byte{0x82, 0x80 | 126, byte(len(payload) >> 8), byte(len(payload))}
	}
	mask := [4]byte{0x11, 0x22, 0x33, 0x44}
	f = append(f, mask[:]...)
	for i, b := range payload {
		f = append(f, b^mask[i%4])
	}
	return f
}

// dialTCP connects to addr within -connect-timeout and records it in r
// (Connected, Local), with -timeout as the connection's deadline; nil,
// with the failure in r, when the connection fails.
func dialTCP(o opts, addr string, r *wire.Result) net.Conn {
	c, err := net.DialTimeout("tcp", addr, o.connectTimeout)
	if err != nil {
		fail(r, err)
		return nil
	}
	r.Connected = true
	r.Local = c.LocalAddr().String()
	_ = c.SetDeadline(time.Now().Add(o.timeout))
	return c
}
