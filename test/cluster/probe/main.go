// Command probe is the one binary of the cluster suite's test image
// (FROM scratch): the agent's app container runs it to try the network from
// inside an injected Pod, and plain Pods run it as the origin and the
// cluster's DNS server. Every subcommand prints what it saw on stdout and
// exits 0 when the attempt succeeded, 1 when it failed, 2 on bad usage, so
// the suite's assertions read `kubectl exec` results.
//
//	probe sleep                        wait for SIGTERM
//	probe get [-connect ADDR] URL      HTTP GET (to ADDR whatever the URL's host resolves to); prints "status=N" and the body
//	probe tcp HOST:PORT                connect, send "ping\n", expect it back
//	probe udp HOST:PORT                send "ping", expect it back within 2 s
//	probe resolve [-server ADDR] NAME  A lookup; prints the addresses
//	probe caps                         prints the effective capabilities
//	probe raw                          tries a raw ICMP socket (NET_RAW)
//	probe origin                       HTTP :8080 (GET /_seen lists requests), TCP echo :7000, UDP echo :7001
//	probe dns NAME=IP...               DNS on :53 (UDP, TCP) for those names; GET :8081/_queries lists names asked
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	args := os.Args[2:]
	var err error
	switch os.Args[1] {
	case "sleep":
		<-ctx.Done()
	case "get":
		err = get(ctx, args)
	case "tcp":
		err = tcpPing(ctx, args)
	case "udp":
		err = udpPing(args)
	case "resolve":
		err = resolve(ctx, args)
	case "caps":
		err = caps()
	case "raw":
		err = raw()
	case "origin":
		err = origin(ctx)
	case "dns":
		err = dnsServer(ctx, args)
	default:
		usage()
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe sleep|get|tcp|udp|resolve|caps|raw|origin|dns ...")
	os.Exit(2)
}

func oneArg(args []string) string {
	if len(args) != 1 {
		usage()
	}
	return args[0]
}

func get(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	connect := fs.String("connect", "", "connect to this host:port instead of the URL's")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, oneArg(fs.Args()), nil)
	if err != nil {
		return err
	}
	transport := &http.Transport{DisableKeepAlives: true}
	if *connect != "" {
		transport.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *connect)
		}
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Printf("status=%d\n%s\n", resp.StatusCode, body)
	return err
}

func tcpPing(ctx context.Context, args []string) error {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.DialContext(ctx, "tcp", oneArg(args))
	if err != nil {
		return err
	}
	defer c.Close()
	return echoed(c)
}

func udpPing(args []string) error {
	c, err := net.Dial("udp", oneArg(args))
	if err != nil {
		return err
	}
	defer c.Close()
	return echoed(c)
}

// echoed writes "ping\n" and wants it back within 2 s.
func echoed(c net.Conn) error {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return fmt.Errorf("got %q back", buf)
	}
	fmt.Println("echoed")
	return nil
}

func resolve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resolve", flag.ExitOnError)
	server := fs.String("server", "", "ask this DNS server (host:port) instead of resolv.conf's")
	_ = fs.Parse(args)
	r := net.DefaultResolver
	if *server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *server)
		}}
	}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	addrs, err := r.LookupIPAddr(ctx, oneArg(fs.Args()))
	if err != nil {
		return err
	}
	for _, a := range addrs {
		fmt.Println(a.IP)
	}
	return nil
}

func caps() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Cap") {
			fmt.Println(line)
		}
	}
	return nil
}

func raw() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	syscall.Close(fd)
	fmt.Println("raw socket opened")
	return nil
}

// seenRequest is what the origin records of each request it answers.
type seenRequest struct {
	Method string      `json:"method"`
	Host   string      `json:"host"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
}

func origin(ctx context.Context) error {
	var mu sync.Mutex
	var seen []seenRequest
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_seen", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(seen)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, seenRequest{r.Method, r.Host, r.URL.Path, r.Header.Clone()})
		mu.Unlock()
		fmt.Fprintf(w, "origin answered %s %s\n", r.Method, r.URL.Path)
	})
	errs := make(chan error, 3)
	go func() { errs <- serveHTTP(ctx, ":8080", mux) }()
	go func() { errs <- tcpEcho(ctx, ":7000") }()
	go func() { errs <- udpEcho(ctx, ":7001") }()
	return firstError(ctx, errs)
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func tcpEcho(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return ctx.Err()
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.Copy(c, io.LimitReader(c, 64))
		}()
	}
}

func udpEcho(ctx context.Context, addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); pc.Close() }()
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return ctx.Err()
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

func firstError(ctx context.Context, errs <-chan error) error {
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
}

// dnsServer answers A queries for the NAME=IP pairs it was given and
// NXDOMAIN for every other name, over UDP and TCP on port 53, and records
// every name asked, so the suite can tell which queries left the agent's Pod.
func dnsServer(ctx context.Context, args []string) error {
	zone := map[string]net.IP{}
	for _, a := range args {
		name, ip, ok := strings.Cut(a, "=")
		if !ok || net.ParseIP(ip).To4() == nil {
			usage()
		}
		zone[dns.Fqdn(strings.ToLower(name))] = net.ParseIP(ip).To4()
	}
	var mu sync.Mutex
	var asked []string
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for _, question := range q.Question {
			name := strings.ToLower(question.Name)
			mu.Lock()
			asked = append(asked, name)
			mu.Unlock()
			ip, ok := zone[name]
			switch {
			case !ok:
				m.Rcode = dns.RcodeNameError
			case question.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: ip})
			}
		}
		_ = w.WriteMsg(m)
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_queries", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(asked)
	})
	errs := make(chan error, 3)
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: ":53", Net: network, Handler: handler}
		go func() { <-ctx.Done(); _ = srv.Shutdown() }()
		go func() { errs <- srv.ListenAndServe() }()
	}
	go func() { errs <- serveHTTP(ctx, ":8081", mux) }()
	return firstError(ctx, errs)
}
