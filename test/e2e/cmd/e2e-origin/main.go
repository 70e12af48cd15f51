// Command e2e-origin is the "internet" of the end-to-end suite: it runs in the
// suite's "net" network namespace and plays every origin the tests talk to.
//
// On each address given with -addr it serves:
//   - HTTPS on -tls-ports (certificate from -cert/-key), plain HTTP on
//     -http-ports: every request is answered with a JSON echo of its method,
//     path, Host and headers (wire.Echo);
//   - a bare TCP service on -tcp-ports (a banner, then close);
//   - UDP on -udp-ports, echoing each datagram back;
//   - UDP-Lite (IP protocol 136) on -udplite-ports, and raw IP of protocol
//     -raw-proto (an unassigned number by default), recording what arrives
//     (the packet filter must drop both from the app);
//   - with -dns, a DNS server on port 53 (UDP and TCP) instead of the echo
//     and banner services there, answering the -dns-answer names and
//     recording every query it receives (wire.KindDNS);
//   - with -mld-groups, the MLD reports for those groups (and every MLDv2
//     report, whose groups are inside the payload) that reach its IPv6
//     interface; with -mld-groups or -icmp6, also every ICMPv6
//     destination-unreachable and echo-request message that reaches it.
//
// /kv/ and, with -git-root, /git/ are stateful services (apps.go).
// A request for /stream-echo/ID?q=TEXT is answered with TEXT, then, once
// the test releases ID (or after sseHold), "\n.\n".
//
// A request for /sse/ID is answered with a server-sent event stream: event
// "one", then, once the test releases ID (POST /release?id=ID on the
// control socket) or after sseHold, event "two" naming which of the two
// happened, and the end of the response. A test that releases ID only after
// its client has shown event "one" proves the stream is not buffered on the
// way, without measuring time.
//
// Everything that arrives is recorded as a wire.Event the moment it arrives
// (TCP connections at accept, before any TLS), so a test can assert that
// nothing reached the origin. The record is served only on the unix socket
// -control (GET /events?since=N), which lives in the test's file system and
// cannot be reached from the pod namespace over the network.
//
// It deliberately has no configuration file and no state besides the record.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// ports parses "443,8443".
func ports(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2e-origin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var addrs listFlag
	fs.Var(&addrs, "addr", "IP address to listen on (repeatable)")
	tlsPorts := fs.String("tls-ports", "443,8443", "HTTPS ports")
	httpPorts := fs.String("http-ports", "80", "plain HTTP ports")
	tcpPorts := fs.String("tcp-ports", "22,53", "bare TCP ports")
	udpPorts := fs.String("udp-ports", "443,9999,53", "UDP echo ports")
	udpLitePorts := fs.String("udplite-ports", "9999", "UDP-Lite ports")
	rawProto := fs.Int("raw-proto", 253, "IP protocol number of the raw listener (0: none)")
	var mldGroups listFlag
	fs.Var(&mldGroups, "mld-group", "IPv6 multicast group whose MLD reports are recorded (repeatable)")
	icmp6 := fs.Bool("icmp6", false, "record ICMPv6 destination-unreachable and echo-request messages")
	dnsOn := fs.Bool("dns", false, "serve DNS on port 53 (UDP and TCP), recording every query")
	var capture listFlag
	fs.Var(&capture, "capture", "record every packet arriving from or to this address (repeatable)")
	var dnsAnswer listFlag
	fs.Var(&dnsAnswer, "dns-answer", "name=ip the DNS server answers (repeatable; other names: NXDOMAIN)")
	certFile := fs.String("cert", "", "PEM certificate chain for HTTPS")
	keyFile := fs.String("key", "", "PEM private key for HTTPS")
	control := fs.String("control", "", "unix socket for the event record")
	gitRoot := fs.String("git-root", "", "directory of the repositories served by git http-backend under /git/")
	gitAuthFile := fs.String("git-auth-file", "", "file holding the exact Authorization value /git/ requires")
	awsVerifyFile := fs.String("aws-verify", "", "JSON keys /aws/ verifies SigV4 with (credentials.go)")
	githubAppFile := fs.String("github-app", "", "JSON GitHub App the /app/, /installation/ and /gh/ API serves (credentials.go)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := log.New(stderr, "e2e-origin: ", log.LstdFlags|log.Lmicroseconds)
	if len(addrs) == 0 || *control == "" || *certFile == "" || *keyFile == "" {
		logger.Print("-addr, -cert, -key and -control are required")
		return 2
	}
	o := &origin{logger: logger}
	if *gitRoot != "" {
		auth, err := os.ReadFile(*gitAuthFile)
		if err != nil || len(auth) == 0 {
			logger.Printf("-git-root needs a readable, non-empty -git-auth-file: %v", err)
			return 2
		}
		o.git = gitHandler(*gitRoot, strings.TrimSpace(string(auth)))
	}
	creds, err := loadCredentialServices(*awsVerifyFile, *githubAppFile)
	if err != nil {
		logger.Print(err)
		return 2
	}
	o.creds = creds
	answers, err := parseDNSAnswers(dnsAnswer)
	if err != nil {
		logger.Print(err)
		return 2
	}
	if *dnsOn {
		*tcpPorts, *udpPorts = withoutPort53(*tcpPorts), withoutPort53(*udpPorts)
	}
	if err := o.start(addrs, *tlsPorts, *httpPorts, *tcpPorts, *udpPorts, *certFile, *keyFile, *control); err != nil {
		logger.Print(err)
		o.close()
		return 1
	}
	if err := o.startOther(addrs, *udpLitePorts, *rawProto); err != nil {
		logger.Print(err)
		o.close()
		return 1
	}
	if *dnsOn {
		if err := o.startDNS(addrs, answers); err != nil {
			logger.Print(err)
			o.close()
			return 1
		}
	}
	if len(capture) > 0 {
		var watch []netip.Addr
		for _, c := range capture {
			a, err := netip.ParseAddr(c)
			if err != nil {
				logger.Printf("bad -capture %q: %v", c, err)
				o.close()
				return 2
			}
			watch = append(watch, a)
		}
		if err := o.startCapture(watch); err != nil {
			logger.Print(err)
			o.close()
			return 1
		}
	}
	if len(mldGroups) > 0 || *icmp6 {
		if err := o.startMLD(addrs, mldGroups); err != nil {
			logger.Print(err)
			o.close()
			return 1
		}
	}
	logger.Printf("ready on %v", []string(addrs))
	<-ctx.Done()
	o.close()
	return 0
}

// origin holds the listeners and the record.
type origin struct {
	logger  *log.Logger
	mu      sync.Mutex
	events  []wire.Event
	closers []io.Closer
	gates   map[string]chan struct{} // /sse/ID streams waiting for POST /release?id=ID
	kv      kvStore                  // /kv/ (apps.go)
	git     http.Handler             // /git/ with -git-root (apps.go), else nil
	creds   *credentialServices      // /aws/, /app/, /installation/, /gh/ (credentials.go)
}

// sseHold is how long an /sse/ stream waits for its release before it goes
// on anyway (and says so): a bound for a broken test, not a measurement.
const sseHold = 15 * time.Second

// gate returns the release channel of an /sse/ stream id.
func (o *origin) gate(id string) chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gates == nil {
		o.gates = map[string]chan struct{}{}
	}
	g, ok := o.gates[id]
	if !ok {
		g = make(chan struct{})
		o.gates[id] = g
	}
	return g
}

// release lets the /sse/ stream id send its second event (once).
func (o *origin) release(id string) {
	g := o.gate(id)
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

func (o *origin) start(addrs []string, tlsPorts, httpPorts, tcpPorts, udpPorts, certFile, keyFile, control string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("loading certificate: %w", err)
	}
	tp, err := ports(tlsPorts)
	if err != nil {
		return err
	}
	hp, err := ports(httpPorts)
	if err != nil {
		return err
	}
	cp, err := ports(tcpPorts)
	if err != nil {
		return err
	}
	up, err := ports(udpPorts)
	if err != nil {
		return err
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("bad -addr %q: %w", a, err)
		}
		for _, p := range tp {
			ln, err := o.listen(ip, p)
			if err != nil {
				return err
			}
			o.serveHTTP(tls.NewListener(ln, tlsCfg))
		}
		for _, p := range hp {
			ln, err := o.listen(ip, p)
			if err != nil {
				return err
			}
			o.serveHTTP(ln)
		}
		for _, p := range cp {
			ln, err := o.listen(ip, p)
			if err != nil {
				return err
			}
			go o.serveBanner(ln)
		}
		for _, p := range up {
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(p))))
			if err != nil {
				return fmt.Errorf("listening on udp %s: %w", netip.AddrPortFrom(ip, uint16(p)), err)
			}
			o.closers = append(o.closers, pc)
			go o.serveUDP(pc)
		}
	}
	_ = os.Remove(control)
	cl, err := net.Listen("unix", control)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", control, err)
	}
	if err := os.Chmod(control, 0o600); err != nil {
		_ = cl.Close()
		return fmt.Errorf("chmod %s: %w", control, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(o.serveEvents), ReadHeaderTimeout: 5 * time.Second}
	o.closers = append(o.closers, srv)
	go func() { _ = srv.Serve(cl) }()
	return nil
}

// listen binds a TCP listener that records every accepted connection.
func (o *origin) listen(ip netip.Addr, port int) (net.Listener, error) {
	ap := netip.AddrPortFrom(ip, uint16(port))
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("listening on tcp %s: %w", ap, err)
	}
	o.closers = append(o.closers, ln)
	return &recordingListener{Listener: ln, o: o}, nil
}

// close stops every listener.
func (o *origin) close() {
	for _, c := range o.closers {
		_ = c.Close()
	}
}

// record appends ev to the record, numbering and timestamping it.
func (o *origin) record(ev wire.Event) wire.Event {
	ev.Time = time.Now()
	if ap, err := netip.ParseAddrPort(ev.Local); err == nil {
		ev.Port = int(ap.Port())
		ev.IPv6 = ap.Addr().Is6() && !ap.Addr().Is4In6()
	}
	o.mu.Lock()
	ev.Seq = int64(len(o.events) + 1)
	o.events = append(o.events, ev)
	o.mu.Unlock()
	return ev
}

// recordingListener records a KindTCP event per accepted connection.
type recordingListener struct {
	net.Listener
	o *origin
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.o.record(wire.Event{Kind: wire.KindTCP, Local: c.LocalAddr().String(), Remote: c.RemoteAddr().String()})
	}
	return c, err
}

// serveHTTP serves the echo handler on ln.
func (o *origin) serveHTTP(ln net.Listener) {
	srv := &http.Server{
		Handler:           http.HandlerFunc(o.echo),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // barrier probes hang up before the TLS handshake
	}
	o.closers = append(o.closers, srv)
	go func() { _ = srv.Serve(ln) }()
}

// echo answers every request with a JSON description of it.
func (o *origin) echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	ev := wire.Event{
		Kind:   wire.KindHTTP,
		Remote: r.RemoteAddr,
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.RawQuery,
		Host:   r.Host,
		Proto:  r.Proto,
		Header: r.Header.Clone(),
		Body:   string(body),
		TLS:    r.TLS != nil,
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		ev.Local = la.String()
	}
	if r.TLS != nil {
		ev.SNI = r.TLS.ServerName
	}
	ev = o.record(ev)
	// The stateful services read the body again: what was read, then the rest.
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if o.dispatch(w, r) {
		return
	}
	if o.creds != nil && o.creds.serve(w, r, func() { o.writeEcho(w, r, ev) }) {
		return
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/sse/"); ok {
		o.serveSSE(w, r, id)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/ws/") && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		o.serveWS(w, ev)
		return
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/stream-echo/"); ok {
		o.serveStreamEcho(w, r, id)
		return
	}
	o.writeEcho(w, r, ev)
}

// writeEcho answers the JSON description of the request (its headers,
// Authorization included: an API that echoes what it received).
func (o *origin) writeEcho(w http.ResponseWriter, r *http.Request, ev wire.Event) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(wire.Echo{Seq: ev.Seq, Method: r.Method, Path: r.URL.Path, Host: r.Host, TLS: r.TLS != nil, Headers: r.Header})
}

// serveWS answers a WebSocket upgrade with 101 and records every read of
// what the agent sends through the tunnel as a KindWS event (its byte
// count), until the connection ends. It never answers: what crosses the
// tunnel is what the test measures.
func (o *origin) serveWS(w http.ResponseWriter, req wire.Event) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	if brw.Flush() != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := brw.Read(buf)
		if n > 0 {
			o.record(wire.Event{Kind: wire.KindWS, Local: req.Local, Remote: req.Remote, Path: req.Path, Payload: strconv.Itoa(n)})
		}
		if err != nil {
			return
		}
	}
}

// serveSSE streams event "one", waits for the release of id (or sseHold),
// then sends event "two" saying which came first.
func (o *origin) serveSSE(w http.ResponseWriter, r *http.Request, id string) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = io.WriteString(w, "data: one\n\n")
	flusher.Flush()
	how := "released"
	select {
	case <-o.gate(id):
	case <-time.After(sseHold):
		how = "not-released"
	case <-r.Context().Done():
		return
	}
	_, _ = io.WriteString(w, "data: two "+how+"\n\n")
}

// serveStreamEcho writes the query parameter q as plain text, waits for
// the release of id (or sseHold), then writes "\n.\n" (no byte of a key:
// the scrubber skips the line break): a log tail that
// echoes what the client chose and pauses (the prefix oracle of report
// 2026-12-01 §3).
func (o *origin) serveStreamEcho(w http.ResponseWriter, r *http.Request, id string) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, r.URL.Query().Get("q"))
	flusher.Flush()
	select {
	case <-o.gate(id):
	case <-time.After(sseHold):
	case <-r.Context().Done():
		return
	}
	_, _ = io.WriteString(w, "\n.\n")
}

// serveBanner accepts connections, greets and closes them.
func (o *origin) serveBanner(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(c, "SSH-2.0-e2e-origin\r\n")
		_ = c.Close()
	}
}

// serveUDP records and echoes datagrams.
func (o *origin) serveUDP(pc *net.UDPConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		o.record(wire.Event{Kind: wire.KindUDP, Local: pc.LocalAddr().String(), Remote: from.String(), Payload: string(buf[:n])})
		_, _ = pc.WriteToUDPAddrPort(buf[:n], from)
	}
}

// ipprotoUDPLite is IPPROTO_UDPLITE (the syscall package has no name for it).
const ipprotoUDPLite = 136

// startOther opens the UDP-Lite and raw IP listeners on every address.
func (o *origin) startOther(addrs []string, udpLitePorts string, rawProto int) error {
	lp, err := ports(udpLitePorts)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("bad -addr %q: %w", a, err)
		}
		for _, p := range lp {
			pc, err := listenUDPLite(netip.AddrPortFrom(ip, uint16(p)))
			if err != nil {
				return err
			}
			o.closers = append(o.closers, pc)
			go o.serveDatagrams(pc, wire.KindUDPLite, pc.LocalAddr().String())
		}
		if rawProto > 0 {
			network := "ip4:" + strconv.Itoa(rawProto)
			if ip.Is6() {
				network = "ip6:" + strconv.Itoa(rawProto)
			}
			pc, err := net.ListenIP(network, &net.IPAddr{IP: ip.AsSlice()})
			if err != nil {
				return fmt.Errorf("listening on %s %s: %w", network, ip, err)
			}
			o.closers = append(o.closers, pc)
			go o.serveDatagrams(pc, wire.KindRaw, netip.AddrPortFrom(ip, 0).String())
		}
	}
	return nil
}

// listenUDPLite binds a UDP-Lite socket: a SOCK_DGRAM socket of protocol
// 136, which the net package then drives like a UDP socket.
func listenUDPLite(ap netip.AddrPort) (net.PacketConn, error) {
	family := syscall.AF_INET6
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family = syscall.AF_INET
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, ipprotoUDPLite)
	if err != nil {
		return nil, fmt.Errorf("udplite socket for %s: %w", ap, err)
	}
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("binding udplite %s: %w", ap, err)
	}
	f := os.NewFile(uintptr(fd), "udplite")
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("udplite %s: %w", ap, err)
	}
	return pc, nil
}

// serveDatagrams records every packet that arrives on pc as kind.
func (o *origin) serveDatagrams(pc net.PacketConn, kind, local string) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		remote := from.String()
		if ia, ok := from.(*net.IPAddr); ok {
			if a, ok := netip.AddrFromSlice(ia.IP); ok {
				remote = netip.AddrPortFrom(a.Unmap(), 0).String()
			}
		}
		o.record(wire.Event{Kind: kind, Local: local, Remote: remote, Payload: string(buf[:n])})
	}
}

// startMLD listens for ICMPv6 on the interface of the first IPv6 -addr and
// joins ff02::16 (where MLDv2 reports go) and every group (where MLDv1
// reports for it go), so that the kernel delivers those reports here.
func (o *origin) startMLD(addrs, groups []string) error {
	var ifi *net.Interface
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is6() {
			continue
		}
		if ifi, err = interfaceOf(ip); err != nil {
			return err
		}
		break
	}
	if ifi == nil {
		return errors.New("-mld-group needs an IPv6 -addr")
	}
	c, err := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return fmt.Errorf("listening for ICMPv6: %w", err)
	}
	o.closers = append(o.closers, c)
	pc := c.IPv6PacketConn()
	if err := pc.SetControlMessage(ipv6.FlagDst, true); err != nil {
		return fmt.Errorf("ICMPv6 control messages: %w", err)
	}
	for _, g := range append([]string{"ff02::16"}, groups...) {
		ip, err := netip.ParseAddr(g)
		if err != nil || !ip.IsMulticast() {
			return fmt.Errorf("bad -mld-group %q", g)
		}
		if err := pc.JoinGroup(ifi, &net.IPAddr{IP: ip.AsSlice()}); err != nil {
			return fmt.Errorf("joining %s on %s: %w", g, ifi.Name, err)
		}
	}
	go o.serveMLD(pc)
	return nil
}

// interfaceOf returns the interface that holds ip.
func interfaceOf(ip netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		addrs, _ := ifs[i].Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == ip {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface has %s", ip)
}

// serveMLD records MLD reports: an MLDv1 report (131) names its group at
// offset 8; an MLDv2 report (143) carries records of 20 bytes plus sources
// and auxiliary data, the group at offset 4 of each.
func (o *origin) serveMLD(pc *ipv6.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, cm, src, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := buf[:n]
		from := src.String()
		if ia, ok := src.(*net.IPAddr); ok {
			if a, ok := netip.AddrFromSlice(ia.IP); ok {
				from = netip.AddrPortFrom(a.WithZone(ia.Zone), 0).String()
			}
		}
		record := func(typ string, group []byte) {
			if g, ok := netip.AddrFromSlice(group); ok {
				o.record(wire.Event{Kind: wire.KindMLD, Local: netip.AddrPortFrom(g, 0).String(), Remote: from, Payload: typ})
			}
		}
		switch {
		case len(msg) >= 8 && (msg[0] == 1 || msg[0] == 128):
			// The data after the 8-byte header: the echo data, or the
			// quoted packet (IPv6 header, then UDP header and payload).
			data := msg[8:]
			if msg[0] == 1 && len(data) >= 48 {
				data = data[48:]
			}
			local := ""
			if cm != nil && cm.Dst != nil {
				if a, ok := netip.AddrFromSlice(cm.Dst); ok {
					local = netip.AddrPortFrom(a, 0).String()
				}
			}
			o.record(wire.Event{Kind: wire.KindICMPv6, Local: local, Remote: from, Payload: strconv.Itoa(int(msg[0])) + " " + string(data)})
		case len(msg) >= 24 && msg[0] == 131:
			record("131", msg[8:24])
		case len(msg) >= 8 && msg[0] == 143:
			records := int(msg[6])<<8 | int(msg[7])
			off := 8
			for range records {
				if off+20 > len(msg) {
					break
				}
				aux, nsrc := int(msg[off+1]), int(msg[off+2])<<8|int(msg[off+3])
				record("143", msg[off+4:off+20])
				off += 20 + 16*nsrc + 4*aux
			}
		}
	}
}

// serveEvents is the control endpoint: GET /events?since=N returns the
// events with Seq > N.
func (o *origin) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/release" && r.Method == http.MethodPost {
		o.release(r.URL.Query().Get("id"))
		return
	}
	if r.URL.Path != "/events" {
		http.NotFound(w, r)
		return
	}
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	o.mu.Lock()
	var out []wire.Event
	if since >= 0 && since < int64(len(o.events)) {
		out = append(out, o.events[since:]...)
	}
	o.mu.Unlock()
	if out == nil {
		out = []wire.Event{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
