package mitm

import (
	"bytes"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func clientConfig(ca *CA, serverName string) *tls.Config {
	return &tls.Config{
		RootCAs:    ca.pool(),
		ServerName: serverName,
		NextProtos: []string{"h2", "http/1.1"},
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no CA", Options{}, "CA is required"},
		{"negative cert ttl", Options{CA: ca, CertTTL: -1}, "negative CertTTL"},
		{"negative cache ttl", Options{CA: ca, CacheTTL: -1}, "negative CacheTTL"},
		{"negative cache size", Options{CA: ca, CacheSize: -1}, "negative CacheSize"},
		{"deny without authorizer", Options{CA: ca, DenyDisallowedSNI: true}, "Allowed is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New(%+v) error = %v, want %q", tt.opts, err, tt.wantErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, Options{CA: newTestCA(t)})
	if ic.certTTL != DefaultCertTTL || ic.cache.capacity != DefaultCacheSize || ic.cache.ttl != 0 || ic.margin != time.Hour {
		t.Errorf("defaults: certTTL %v, capacity %d, cache ttl %v, margin %v", ic.certTTL, ic.cache.capacity, ic.cache.ttl, ic.margin)
	}
}

func TestTLSConfig(t *testing.T) {
	t.Parallel()
	ic := newInterceptor(t, Options{CA: newTestCA(t)})
	a, b := ic.TLSConfig(), ic.TLSConfig()
	if a == b {
		t.Error("TLSConfig returns a shared value")
	}
	if a.MinVersion != tls.VersionTLS12 || a.GetCertificate == nil || a.VerifyConnection == nil || len(a.Certificates) != 0 {
		t.Errorf("TLSConfig: MinVersion %#x, GetCertificate set %v, VerifyConnection set %v, %d static certs",
			a.MinVersion, a.GetCertificate != nil, a.VerifyConnection != nil, len(a.Certificates))
	}
	if d := cmp.Diff([]string{"h2", "http/1.1"}, a.NextProtos); d != "" {
		t.Errorf("NextProtos (-want +got):\n%s", d)
	}
}

// TestHandshakeValidSNI is reference §9.7
// https_interception_sni_validation_accepts_valid_ascii_and_punycode_hosts,
// with a verifying Go client over TLS 1.2 and 1.3.
func TestHandshakeValidSNI(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct{ sni, want string }{
		{"localhost", "localhost"},
		{"api.openai.com", "api.openai.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"API.OpenAI.com", "api.openai.com"},
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, tt := range tests {
			t.Run(tls.VersionName(version)+"/"+tt.sni, func(t *testing.T) {
				t.Parallel()
				obs := newCounter()
				ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs})
				cc := clientConfig(ca, tt.sni)
				cc.MaxVersion = version
				res := handshake(t, ic.TLSConfig(), cc)
				if res.clientErr != nil || res.serverErr != nil {
					t.Fatalf("handshake: client %v, server %v", res.clientErr, res.serverErr)
				}
				cs := res.client
				if cs.Version != version || cs.NegotiatedProtocol != "h2" || len(cs.VerifiedChains) == 0 {
					t.Errorf("version %s, ALPN %q, %d verified chains", tls.VersionName(cs.Version), cs.NegotiatedProtocol, len(cs.VerifiedChains))
				}
				if len(cs.PeerCertificates) != 2 || !bytes.Equal(cs.PeerCertificates[1].Raw, ca.cert.Raw) {
					t.Fatalf("server sent %d certificates, want [leaf, CA]", len(cs.PeerCertificates))
				}
				if d := cmp.Diff([]string{tt.want}, cs.PeerCertificates[0].DNSNames); d != "" {
					t.Errorf("leaf SANs (-want +got):\n%s", d)
				}
				if d := cmp.Diff(map[string]int{"cache/miss": 1, "issued/issued": 1}, obs.snapshot()); d != "" {
					t.Errorf("observer counts (-want +got):\n%s", d)
				}
			})
		}
	}
}

// TestHandshakeALPN: h2 is preferred so HTTP/2 and gRPC work; HTTP/1.1-only
// and ALPN-less clients still connect.
func TestHandshakeALPN(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour})
	tests := []struct {
		name    string
		offer   []string
		want    string
		wantErr bool
	}{
		{"h2 and http/1.1", []string{"h2", "http/1.1"}, "h2", false},
		{"http/1.1 preferred by client", []string{"http/1.1", "h2"}, "h2", false},
		{"h2 only (gRPC)", []string{"h2"}, "h2", false},
		{"http/1.1 only", []string{"http/1.1"}, "http/1.1", false},
		{"no ALPN", nil, "", false},
		{"unknown protocol", []string{"spdy/3"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cc := clientConfig(ca, "api.openai.com")
			cc.NextProtos = tt.offer
			res := handshake(t, ic.TLSConfig(), cc)
			if tt.wantErr {
				if res.serverErr == nil {
					t.Fatal("handshake succeeded")
				}
				return
			}
			if res.clientErr != nil || res.serverErr != nil {
				t.Fatalf("handshake: client %v, server %v", res.clientErr, res.serverErr)
			}
			if got := res.client.NegotiatedProtocol; got != tt.want {
				t.Errorf("ALPN = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHandshakeNoSNI: no SNI → refused without a certificate decision
// (reference §4.3 step 1). Go's client omits SNI for IP literals.
func TestHandshakeNoSNI(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		name string
		cfg  *tls.Config
	}{
		{"no server name", &tls.Config{InsecureSkipVerify: true}},
		{"ip literal", clientConfig(ca, "1.2.3.4")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := newCounter()
			ic := newInterceptor(t, Options{CA: ca, Observer: obs})
			res := handshake(t, ic.TLSConfig(), tt.cfg)
			if res.clientErr == nil || !errors.Is(res.serverErr, ErrNoSNI) {
				t.Fatalf("handshake: client %v, server %v; want ErrNoSNI", res.clientErr, res.serverErr)
			}
			if len(obs.snapshot()) != 0 {
				t.Errorf("observer counts %v, want none", obs.snapshot())
			}
		})
	}
}

// TestHandshakeCacheHitSameBytes is the handshake half of reference §4.5
// "same SNI twice → identical certificate bytes".
func TestHandshakeCacheHitSameBytes(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	obs := newCounter()
	ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs})
	cfg := ic.TLSConfig()
	var raws [][]byte
	for range 2 {
		cc := clientConfig(ca, "localhost")
		cc.SessionTicketsDisabled = true // force a full handshake
		res := handshake(t, cfg, cc)
		if res.clientErr != nil || res.serverErr != nil {
			t.Fatalf("handshake: client %v, server %v", res.clientErr, res.serverErr)
		}
		raws = append(raws, res.client.PeerCertificates[0].Raw)
	}
	if !bytes.Equal(raws[0], raws[1]) {
		t.Error("second handshake got a different leaf")
	}
	if d := cmp.Diff(map[string]int{"cache/miss": 1, "cache/hit": 1, "issued/issued": 1}, obs.snapshot()); d != "" {
		t.Errorf("observer counts (-want +got):\n%s", d)
	}
}

// allowOnly is an Authorizer for a fixed host set that records its calls.
type allowOnly struct {
	mu    sync.Mutex
	hosts map[string]bool
	calls []string
}

func (a *allowOnly) allowed(host string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, host)
	return a.hosts[host]
}

// TestHandshakeDisallowedSNI is reference §9.7
// https_interception_integration_disallowed_sni_handshake_can_be_denied and
// its counterpart with denial off (the certificate is issued; the HTTP layer
// answers 403).
func TestHandshakeDisallowedSNI(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		name       string
		deny       bool
		sni        string
		wantErr    error
		wantCounts map[string]int
		wantCalls  []string
	}{
		{"denial on, allowed host", true, "api.openai.com", nil,
			map[string]int{"cache/miss": 1, "issued/issued": 1}, []string{"api.openai.com"}},
		{"denial on, allowed host canonicalised", true, "API.OPENAI.COM", nil,
			map[string]int{"cache/miss": 1, "issued/issued": 1}, []string{"api.openai.com"}},
		{"denial on, disallowed host", true, "evil.example", ErrHostNotAllowed,
			map[string]int{"issued/denied": 1}, []string{"evil.example"}},
		{"denial off, disallowed host", false, "evil.example", nil,
			map[string]int{"cache/miss": 1, "issued/issued": 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := newCounter()
			auth := &allowOnly{hosts: map[string]bool{"api.openai.com": true}}
			ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs, DenyDisallowedSNI: tt.deny, Allowed: auth.allowed})
			res := handshake(t, ic.TLSConfig(), clientConfig(ca, tt.sni))
			if tt.wantErr != nil {
				if res.clientErr == nil || !errors.Is(res.serverErr, tt.wantErr) {
					t.Fatalf("handshake: client %v, server %v; want %v", res.clientErr, res.serverErr, tt.wantErr)
				}
			} else if res.clientErr != nil || res.serverErr != nil {
				t.Fatalf("handshake: client %v, server %v", res.clientErr, res.serverErr)
			}
			if d := cmp.Diff(tt.wantCounts, obs.snapshot()); d != "" {
				t.Errorf("observer counts (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantCalls, auth.calls); d != "" {
				t.Errorf("Authorizer calls (-want +got):\n%s", d)
			}
		})
	}
}

// anySession is a client session cache that offers its one session for any
// server name: it plays a client that resumes a ticket under another SNI.
type anySession struct {
	mu sync.Mutex
	s  *tls.ClientSessionState
}

func (c *anySession) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s, c.s != nil
}

func (c *anySession) Put(_ string, s *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != nil {
		c.s = s
	}
}

// TestResumptionRechecksSNI: crypto/tls resumes a TLS 1.3 session without
// calling GetCertificate and without comparing SNIs, so a ticket for an allowed host
// would otherwise open a handshake for any SNI. VerifyConnection re-checks.
func TestResumptionRechecksSNI(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		name    string
		deny    bool
		sni     string
		wantErr error // nil: resumes
	}{
		{"allowed host resumes", true, "api2.example", nil},
		{"disallowed host", true, "evil.example", ErrHostNotAllowed},
		{"invalid SNI", false, "bad_host", ErrInvalidSNI},
		{"no SNI", false, "", ErrNoSNI},
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, tt := range tests {
			t.Run(tls.VersionName(version)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				obs := newCounter()
				auth := &allowOnly{hosts: map[string]bool{"api.openai.com": true, "api2.example": true}}
				ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs, DenyDisallowedSNI: tt.deny, Allowed: auth.allowed})
				serverCfg := ic.TLSConfig() // one config: one set of ticket keys
				cache := &anySession{}
				first := clientConfig(ca, "api.openai.com")
				first.MaxVersion, first.ClientSessionCache = version, cache
				if res := handshake(t, serverCfg, first); res.clientErr != nil || res.serverErr != nil {
					t.Fatalf("first handshake: client %v, server %v", res.clientErr, res.serverErr)
				}
				if cache.s == nil {
					t.Fatal("client got no session ticket")
				}
				second := &tls.Config{
					ServerName: tt.sni, MaxVersion: version, ClientSessionCache: cache,
					// Skips the client's own hostname check of the resumed
					// session, as a hostile client would.
					InsecureSkipVerify: true,
				}
				if tt.wantErr != nil && version == tls.VersionTLS13 {
					// The gap is real in TLS 1.3: without VerifyConnection
					// (same ticket keys) this resumption succeeds. (TLS 1.2
					// servers call GetCertificate before resuming.)
					unguarded := serverCfg.Clone()
					unguarded.VerifyConnection = nil
					if res := handshake(t, unguarded, second); res.clientErr != nil || res.serverErr != nil || !res.client.DidResume {
						t.Fatalf("control without VerifyConnection: client %v, server %v, resumed %v", res.clientErr, res.serverErr, res.client.DidResume)
					}
				}
				res := handshake(t, serverCfg, second)
				if tt.wantErr != nil {
					if res.clientErr == nil || !errors.Is(res.serverErr, tt.wantErr) {
						t.Fatalf("resumed handshake: client %v, server %v; want %v", res.clientErr, res.serverErr, tt.wantErr)
					}
					return
				}
				if res.clientErr != nil || res.serverErr != nil || !res.client.DidResume {
					t.Fatalf("resumed handshake: client %v, server %v, resumed %v", res.clientErr, res.serverErr, res.client.DidResume)
				}
			})
		}
	}
}

func TestCertificateForCache(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)

	t.Run("hit returns identical bytes", func(t *testing.T) {
		t.Parallel()
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs})
		a := mustCert(t, ic, "localhost")
		b := mustCert(t, ic, "LOCALHOST")
		if a != b || !bytes.Equal(a.Certificate[0], b.Certificate[0]) {
			t.Error("second lookup returned a different leaf")
		}
		if d := cmp.Diff(map[string]int{"cache/miss": 1, "cache/hit": 1, "issued/issued": 1}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
	})

	t.Run("capacity 1 evicts", func(t *testing.T) {
		t.Parallel()
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, CacheSize: 1, Observer: obs})
		a1 := mustCert(t, ic, "a.example")
		mustCert(t, ic, "b.example")
		a2 := mustCert(t, ic, "a.example")
		if bytes.Equal(a1.Certificate[0], a2.Certificate[0]) {
			t.Error("a.example was not evicted by b.example")
		}
		if d := cmp.Diff(map[string]int{"cache/miss": 3, "issued/issued": 3}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
		if n := ic.cache.len(); n != 1 {
			t.Errorf("cache holds %d entries, want 1", n)
		}
	})

	t.Run("cache ttl 0 never hits", func(t *testing.T) {
		t.Parallel()
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: ca, Observer: obs})
		first, second := mustCert(t, ic, "localhost"), mustCert(t, ic, "localhost")
		if first == second {
			t.Error("cache hit with CacheTTL 0")
		}
		if d := cmp.Diff(map[string]int{"cache/miss": 2, "issued/issued": 2}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
	})

	t.Run("invalid sni denied", func(t *testing.T) {
		t.Parallel()
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: ca, Observer: obs})
		if _, err := ic.CertificateFor("bad_host"); !errors.Is(err, ErrInvalidSNI) {
			t.Fatalf("CertificateFor(bad_host) = %v", err)
		}
		if d := cmp.Diff(map[string]int{"issued/denied": 1}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
	})
}

func mustCert(t testing.TB, ic *Interceptor, host string) *tls.Certificate {
	t.Helper()
	c, err := ic.CertificateFor(host)
	if err != nil {
		t.Fatalf("CertificateFor(%q): %v", host, err)
	}
	return c
}

// TestCacheTTLExpiry is reference §4.5: with a 1 s cache TTL a re-request
// after 2 s gets a new certificate; a hit inside the TTL does not extend it.
func TestCacheTTLExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: newTestCA(t), CertTTL: 86400 * time.Second, CacheTTL: time.Second, Observer: obs})
		a := mustCert(t, ic, "localhost")
		time.Sleep(900 * time.Millisecond)
		if mustCert(t, ic, "localhost") != a {
			t.Fatal("miss inside the cache TTL")
		}
		time.Sleep(200 * time.Millisecond) // 1.1 s after insertion; the hit did not refresh
		b := mustCert(t, ic, "localhost")
		if b == a || bytes.Equal(a.Certificate[0], b.Certificate[0]) {
			t.Fatal("hit after the cache TTL")
		}
		time.Sleep(2 * time.Second)
		if c := mustCert(t, ic, "localhost"); c == b {
			t.Fatal("hit 2 s after insertion with a 1 s TTL")
		}
		if d := cmp.Diff(map[string]int{"cache/miss": 3, "cache/hit": 1, "issued/issued": 3}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
	})
}

// TestNearExpiryLeafNotServed: the reference can hand out a leaf at the edge
// of expiry when cache TTL = cert TTL (§10.3 #14). With a 1 h leaf the margin
// is 6 min, so the cached leaf is replaced at 54 min whatever the cache TTL.
func TestNearExpiryLeafNotServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCounter()
		ic := newInterceptor(t, Options{CA: newTestCA(t), CertTTL: time.Hour, CacheTTL: time.Hour, Observer: obs})
		a := mustCert(t, ic, "api.openai.com")
		time.Sleep(53*time.Minute + 59*time.Second)
		if mustCert(t, ic, "api.openai.com") != a {
			t.Fatal("leaf with 6 min left was not reused")
		}
		time.Sleep(time.Second) // exactly NotAfter - 6 min
		b := mustCert(t, ic, "api.openai.com")
		if b == a {
			t.Fatalf("leaf expiring at %v served at %v", a.Leaf.NotAfter, time.Now())
		}
		if left := time.Until(b.Leaf.NotAfter); left != time.Hour {
			t.Errorf("new leaf has %v left, want 1h", left)
		}
		if d := cmp.Diff(map[string]int{"cache/miss": 2, "cache/hit": 1, "issued/issued": 2}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
	})
}

// TestInjectedClock: Options.Now drives issuance and the cache.
func TestInjectedClock(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	var mu sync.Mutex
	now := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	ic := newInterceptor(t, Options{CA: ca, CertTTL: time.Hour, CacheTTL: 30 * time.Minute, Now: clock})
	a := mustCert(t, ic, "localhost")
	if want := clock().Add(-5 * time.Minute); !a.Leaf.NotBefore.Equal(want) {
		t.Errorf("NotBefore %v, want %v", a.Leaf.NotBefore, want)
	}
	advance(29 * time.Minute)
	if mustCert(t, ic, "localhost") != a {
		t.Error("miss at 29 min with a 30 min cache TTL")
	}
	advance(time.Minute)
	if mustCert(t, ic, "localhost") == a {
		t.Error("hit at 30 min with a 30 min cache TTL")
	}
}

// TestSingleflight: 50 concurrent first requests for one host sign once.
// The CA's signer blocks until every request is waiting, so all 50 miss.
func TestSingleflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCounter()
		gs := &gateSigner{gate: make(chan struct{})}
		ic := newInterceptor(t, Options{CA: withSigner(newTestCA(t), gs), CacheTTL: time.Hour, Observer: obs})
		const n = 50
		certs := make([]*tls.Certificate, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { certs[i] = mustCert(t, ic, "api.openai.com") })
		}
		synctest.Wait() // everyone is blocked: one in Sign, 49 waiting on the flight
		if got := gs.calls.Load(); got != 1 {
			t.Fatalf("%d signatures in flight, want 1", got)
		}
		close(gs.gate)
		wg.Wait()
		for i, c := range certs {
			if c != certs[0] {
				t.Fatalf("request %d got a different certificate", i)
			}
		}
		if d := cmp.Diff(map[string]int{"cache/miss": n, "issued/issued": 1}, obs.snapshot()); d != "" {
			t.Errorf("observer counts (-want +got):\n%s", d)
		}
		// Other hosts are not held up by, nor merged with, this one.
		if mustCert(t, ic, "other.example") == certs[0] {
			t.Error("different host shared a certificate")
		}
	})
}

// TestSingleflightRace is the same with real scheduling, for -race.
func TestSingleflightRace(t *testing.T) {
	t.Parallel()
	obs := newCounter()
	ic := newInterceptor(t, Options{CA: newTestCA(t), CacheTTL: time.Hour, Observer: obs})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			<-start
			mustCert(t, ic, "api.openai.com")
		})
	}
	close(start)
	wg.Wait()
	got := obs.snapshot()
	if got["issued/issued"] != 1 || got["cache/hit"]+got["cache/miss"] != 50 {
		t.Errorf("observer counts %v, want exactly 1 issuance for 50 lookups", got)
	}
}

// TestSigningFailure: a signing error fails the handshake, is counted as
// cert_error{signing_failed}, logged at ERROR, and not cached.
func TestSigningFailure(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	obs := newCounter()
	logger, buf := logBuffer()
	gs := &gateSigner{fail: true}
	ic := newInterceptor(t, Options{CA: withSigner(ca, gs), CacheTTL: time.Hour, Observer: obs, Logger: logger})

	res := handshake(t, ic.TLSConfig(), clientConfig(ca, "api.openai.com"))
	if res.clientErr == nil || res.serverErr == nil || !strings.Contains(res.serverErr.Error(), "hsm unavailable") {
		t.Fatalf("handshake: client %v, server %v; want a signing failure", res.clientErr, res.serverErr)
	}
	if _, err := ic.CertificateFor("api.openai.com"); err == nil {
		t.Fatal("CertificateFor succeeded with a failing signer")
	}
	if d := cmp.Diff(map[string]int{"cache/miss": 2, "error/signing_failed": 2}, obs.snapshot()); d != "" {
		t.Errorf("observer counts (-want +got):\n%s", d)
	}
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "failed to issue HTTPS interception leaf certificate") ||
		!strings.Contains(out, "host=api.openai.com") {
		t.Errorf("log:\n%s", out)
	}
}

// TestExpiredCAAtRuntime: a CA that expires while BotBox runs makes issuance
// fail as signing_failed instead of minting unverifiable leaves.
func TestExpiredCAAtRuntime(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	obs := newCounter()
	after := ca.cert.NotAfter.Add(time.Minute)
	ic := newInterceptor(t, Options{CA: ca, Observer: obs, Now: func() time.Time { return after }})
	if _, err := ic.CertificateFor("api.openai.com"); err == nil || !strings.Contains(err.Error(), "CA certificate expired") {
		t.Fatalf("CertificateFor after CA expiry: %v", err)
	}
	if obs.snapshot()["error/signing_failed"] != 1 {
		t.Errorf("observer counts %v", obs.snapshot())
	}
}
