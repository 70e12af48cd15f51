// Command loadclient drives the benchmark scenarios wrk cannot:
//
//	loadclient newconn -addr A -sni S -host H -c 16 -d 5s   a new TLS connection per request
//	loadclient sni     -addr A -host H -n 200                first-seen SNI vs a cached SNI
//	loadclient idle    -addr A -host H -n 10000              hold N idle keep-alive connections
//
// It prints one line of key=value pairs (idle: "READY n=... errors=...",
// then waits for a line on stdin before closing the connections). TLS client
// handshakes offer X25519 only (what OpenSSL 3.0 clients and nginx use) and
// never resume a session, so every connection pays a full handshake.
package main

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

type options struct {
	addr, sni, host, path, auth, cas string
	conns, n                         int
	dur                              time.Duration
	useTLS, verify                   bool
	roots                            *x509.CertPool
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadclient newconn|sni|idle [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	var o options
	fs.StringVar(&o.addr, "addr", "127.0.0.1:18444", "address to connect to")
	fs.StringVar(&o.sni, "sni", "localhost", "TLS server name")
	fs.StringVar(&o.host, "host", "localhost", "Host header")
	fs.StringVar(&o.path, "path", "/small", "request path")
	fs.StringVar(&o.auth, "auth", "Bearer client-supplied-junk", "Authorization header sent by the client")
	fs.StringVar(&o.cas, "ca", "", "comma-separated PEM roots (TLS modes)")
	fs.IntVar(&o.conns, "c", 16, "concurrent workers (newconn)")
	fs.IntVar(&o.n, "n", 200, "SNIs (sni) or connections (idle)")
	fs.DurationVar(&o.dur, "d", 5*time.Second, "duration (newconn)")
	fs.BoolVar(&o.useTLS, "tls", false, "idle: connect with TLS")
	fs.BoolVar(&o.verify, "verify", true, "verify the server certificate (newconn: off makes the client cheaper than the server under test)")
	_ = fs.Parse(os.Args[2:])
	if o.cas != "" {
		o.roots = x509.NewCertPool()
		for _, f := range strings.Split(o.cas, ",") {
			pem, err := os.ReadFile(f)
			if err != nil {
				fatal(err)
			}
			o.roots.AppendCertsFromPEM(pem)
		}
	}
	switch mode {
	case "newconn":
		newConn(o)
	case "sni":
		firstSeenSNI(o)
	case "idle":
		idle(o)
	default:
		fatal(fmt.Errorf("unknown mode %q", mode))
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "loadclient:", err)
	os.Exit(1)
}

func (o options) tlsConfig(sni string) *tls.Config {
	return &tls.Config{
		ServerName:       sni,
		RootCAs:          o.roots,
		MinVersion:       tls.VersionTLS12,
		CurvePreferences: []tls.CurveID{tls.X25519},
		NextProtos:       []string{"http/1.1"},
		// No ClientSessionCache: no resumption, a full handshake each time.
		InsecureSkipVerify: !o.verify,
	}
}

func (o options) request(closeConn bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nUser-Agent: botbox-bench\r\n", o.path, o.host, o.auth)
	if closeConn {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// once opens a TLS connection, sends one request, reads the whole response
// and closes with RST (SO_LINGER 0) so that no TIME_WAIT state exhausts
// the loopback ports.
func (o options) once(sni string, req []byte) (int, error) {
	c, err := net.DialTimeout("tcp", o.addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	_ = c.(*net.TCPConn).SetLinger(0)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, o.tlsConfig(sni))
	if err := tc.Handshake(); err != nil {
		return 0, err
	}
	if _, err := tc.Write(req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, err
}

func newConn(o options) {
	req := o.request(true)
	deadline := time.Now().Add(o.dur)
	var mu sync.Mutex
	var lat []time.Duration
	var errs, non2xx int
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range o.conns {
		wg.Go(func() {
			var mine []time.Duration
			var e, bad int
			var fe error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				code, err := o.once(o.sni, req)
				switch {
				case err != nil:
					e++
					if fe == nil {
						fe = err
					}
				case code != http.StatusOK:
					bad++
				default:
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += e
			non2xx += bad
			if firstErr == nil {
				firstErr = fe
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	fmt.Printf("requests=%d errors=%d non2xx=%d rps=%.1f p50_us=%.1f p99_us=%.1f\n",
		len(lat), errs, non2xx, float64(len(lat))/elapsed.Seconds(), us(pct(lat, 50)), us(pct(lat, 99)))
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "loadclient: first error:", firstErr)
	}
}

// firstSeenSNI alternates a connection with a never-seen SNI (the proxy must
// issue a leaf inside the handshake) and one with an SNI whose leaf is
// cached, so that drift on a noisy host hits both series alike.
func firstSeenSNI(o options) {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	tag := hex.EncodeToString(nonce[:])
	req := o.request(true)
	warm := "warm-" + tag + ".bench.test"
	if _, err := o.once(warm, req); err != nil { // issue the warm leaf
		fatal(err)
	}
	var fresh, cached []time.Duration
	errs := 0
	for i := range o.n {
		for _, sni := range []string{fmt.Sprintf("s%d-%s.bench.test", i, tag), warm} {
			t0 := time.Now()
			code, err := o.once(sni, req)
			d := time.Since(t0)
			if err != nil || code != http.StatusOK {
				errs++
				continue
			}
			if sni == warm {
				cached = append(cached, d)
			} else {
				fresh = append(fresh, d)
			}
		}
	}
	slices.Sort(fresh)
	slices.Sort(cached)
	fmt.Printf("fresh=%d cached=%d errors=%d fresh_p50_us=%.1f fresh_p99_us=%.1f cached_p50_us=%.1f cached_p99_us=%.1f delta_p50_us=%.1f\n",
		len(fresh), len(cached), errs, us(pct(fresh, 50)), us(pct(fresh, 99)), us(pct(cached, 50)), us(pct(cached, 99)),
		us(pct(fresh, 50))-us(pct(cached, 50)))
}

// idle opens n keep-alive connections, sends one request on each (so every
// connection has been through the request path), reads the response, and
// keeps them open until a line (or EOF) arrives on stdin.
func idle(o options) {
	req := o.request(false)
	conns := make([]net.Conn, o.n)
	var mu sync.Mutex
	errs := 0
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 { // bounded parallelism: stays under the listen backlog
		wg.Go(func() {
			for i := range next {
				c, err := o.openIdle(req)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					conns[i] = c
				}
				mu.Unlock()
			}
		})
	}
	for i := range o.n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "loadclient: first error:", firstErr)
	}
	fmt.Printf("READY n=%d errors=%d\n", o.n-errs, errs)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (o options) openIdle(req []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", o.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	rw := c
	if o.useTLS {
		tc := tls.Client(c, o.tlsConfig(o.sni))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return nil, err
		}
		rw = tc
	}
	if _, err := rw.Write(req); err != nil {
		_ = c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(rw), nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return rw, nil
}

func pct(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
