//go:build unix

package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

// benchOrigin is a TLS HTTP/1.1 origin that costs next to nothing per
// request (it reads a head to its blank line and writes a fixed answer),
// so that a benchmark's time and allocations are the client's.
func benchOrigin(b *testing.B) (url string, tr *Transport) {
	b.Helper()
	ca := testpki.NewCA(b, "bench-origin")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{ca.Leaf(b, "127.0.0.1")}, NextProtos: []string{"http/1.1"}})
	const resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	tr, err = NewTransport(Options{RootCAs: ca.Pool(), Guard: CheckAddress})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.CloseIdleConnections(); _ = tln.Close(); <-done })
	return "https://" + ln.Addr().String() + "/v1/models", tr
}

// processCPU is the CPU time this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSyncRoundTrip: one small keep-alive GET over TLS to a loopback
// origin, with a cancellable context carrying a DialPolicy (as the proxy
// sends them), through the SyncTransport and, as the same-run baseline,
// through the Transport (http.Transport, forced to HTTP/1.1 by the
// origin); serially and from 16 goroutines.
func BenchmarkSyncRoundTrip(b *testing.B) {
	url, tr := benchOrigin(b)
	policy := DialPolicy{Host: "127.0.0.1", Guard: addrguard.New(nil), Opts: addrguard.Opts{AllowPrivate: true}, Unguarded: true}
	one := func(b *testing.B, rt http.RoundTripper, buf []byte) {
		ctx, cancel := context.WithCancel(WithDialPolicy(context.Background(), policy))
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header["User-Agent"] = []string{""}
		req.Header["Accept"] = []string{"application/json"}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
		_ = resp.Body.Close()
	}
	// Interleaved blocks of requests, one transport then the other, so
	// that the load of a shared machine hits both alike: process CPU per
	// request (getrusage: this process is client and origin, the origin's
	// share being the same for both) and the median wall time of a block.
	b.Run("interleaved", func(b *testing.B) {
		const block = 32
		buf := make([]byte, 512)
		rts := []http.RoundTripper{tr.Sync(), tr}
		var cpu [2]time.Duration
		var walls [2][]time.Duration
		n := 0
		for b.Loop() {
			for i, rt := range rts {
				c0, w0 := processCPU(b), time.Now()
				for range block {
					one(b, rt, buf)
				}
				walls[i] = append(walls[i], time.Since(w0)/block)
				cpu[i] += processCPU(b) - c0
			}
			n += block
		}
		for i, name := range []string{"sync", "transport"} {
			slices.Sort(walls[i])
			b.ReportMetric(float64(cpu[i].Nanoseconds())/float64(n), name+"-cpu-ns/req")
			b.ReportMetric(float64(walls[i][len(walls[i])/2].Nanoseconds()), name+"-median-ns/req")
		}
		b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-ratio")
	})
	for _, rt := range []struct {
		name string
		rt   http.RoundTripper
	}{{"sync", tr.Sync()}, {"transport", tr}} {
		b.Run(rt.name, func(b *testing.B) {
			buf := make([]byte, 512)
			b.ReportAllocs()
			for b.Loop() {
				one(b, rt.rt, buf)
			}
		})
		b.Run(rt.name+"/parallel16", func(b *testing.B) {
			b.SetParallelism(8) // 16 goroutines on the 2 cores of the CI machine
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 512)
				for pb.Next() {
					one(b, rt.rt, buf)
				}
			})
		})
	}
}
