package upstream

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

// connGauge counts a server's open connections and remembers the peak.
type connGauge struct {
	mu         sync.Mutex
	open, peak int
	accepted   int
}

func (g *connGauge) hook(_ net.Conn, s http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch s {
	case http.StateNew:
		g.open++
		g.accepted++
		g.peak = max(g.peak, g.open)
	case http.StateClosed, http.StateHijacked:
		g.open--
	}
}

func (g *connGauge) get() (open, peak, accepted int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.peak, g.accepted
}

// TestMaxConnsPerHostBoundsSockets floods one HTTP/1.1-only TLS origin with
// 64 concurrent requests through a ReverseProxy using the transport with
// MaxConnsPerHost 4. The origin holds every request until all 64 have asked
// the transport for a connection and the cap's worth are being served; then
// it lets them go. The origin never has more than 4 connections open, and
// every request completes.
func TestMaxConnsPerHostBoundsSockets(t *testing.T) {
	const (
		capConns = 4
		requests = 64
	)
	ca := testpki.NewCA(t, "limits")
	var gauge connGauge
	var inflight atomic.Int32
	release := make(chan struct{})
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	origin.EnableHTTP2 = false // HTTP/1.1 only: one request per connection at a time
	origin.Config.ConnState = gauge.hook
	origin.StartTLS()
	defer origin.Close()

	tr, err := NewTransport(Options{RootCAs: ca.Pool(), MaxConnsPerHost: capConns})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	u, _ := url.Parse(origin.URL)
	var asked atomic.Int32 // requests that reached the transport
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: countingRT{next: tr, n: &asked},
	}
	front := httptest.NewServer(rp)
	defer front.Close()

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: requests}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Go(func() {
			resp, err := client.Get(front.URL)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && (resp.StatusCode != http.StatusOK || string(b) != "ok") {
				err = &statusError{resp.StatusCode}
			}
			if err != nil {
				errs <- err
			}
		})
	}
	// Barrier: every request is waiting on the transport and the origin
	// serves the cap's worth. Without the cap all 64 would be dialled.
	eventually.Eventually(t, 30*time.Second, func() bool {
		return asked.Load() == requests && inflight.Load() >= capConns
	}, "64 requests at the transport and the cap in flight")
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	if _, peak, accepted := gauge.get(); peak > capConns {
		t.Errorf("origin saw %d connections open at once (%d accepted), want at most MaxConnsPerHost = %d", peak, accepted, capConns)
	}
	if n := inflight.Load(); n != requests {
		t.Errorf("origin served %d requests, want %d", n, requests)
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "unexpected status " + http.StatusText(e.code) }

type countingRT struct {
	next http.RoundTripper
	n    *atomic.Int32
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func TestTransportBounds(t *testing.T) {
	tests := []struct {
		name                                   string
		opts                                   Options
		wantPerHost, wantIdle, wantIdlePerHost int
	}{
		{"defaults", Options{}, 512, 1024, 256},
		{"set", Options{MaxConnsPerHost: 1000, MaxIdleConns: 10, MaxIdleConnsPerHost: 300}, 1000, 10, 300},
		{"idle per host never above the per-host cap", Options{MaxConnsPerHost: 4}, 4, 1024, 4},
	}
	for _, tt := range tests {
		tr, err := NewTransport(tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if tr.base.MaxConnsPerHost != tt.wantPerHost || tr.base.MaxIdleConns != tt.wantIdle || tr.base.MaxIdleConnsPerHost != tt.wantIdlePerHost {
			t.Errorf("%s: MaxConnsPerHost, MaxIdleConns, MaxIdleConnsPerHost = %d, %d, %d, want %d, %d, %d", tt.name,
				tr.base.MaxConnsPerHost, tr.base.MaxIdleConns, tr.base.MaxIdleConnsPerHost, tt.wantPerHost, tt.wantIdle, tt.wantIdlePerHost)
		}
	}
}
