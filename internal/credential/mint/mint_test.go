package mint

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/testutil/tokenserver"
)

// clock is a settable test clock.
type clock struct{ t atomic.Pointer[time.Time] }

func newClock() *clock {
	c := &clock{}
	now := time.Now()
	c.t.Store(&now)
	return c
}
func (c *clock) Now() time.Time          { return *c.t.Load() }
func (c *clock) Advance(d time.Duration) { t := c.Now().Add(d); c.t.Store(&t) }

// store is a secret source whose files the test replaces.
type store struct {
	p atomic.Pointer[secrets.Snapshot]
}

func (s *store) set(m map[string]string) {
	v := map[string]secrets.Value{}
	for k, s := range m {
		v[k] = secrets.NewValue([]byte(s))
	}
	s.p.Store(secrets.NewSnapshot(v))
}
func (s *store) lookup() credential.Lookup { return s.p.Load() }

func rsaKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

// githubEnv is a GitHub App source against a verifying test server.
type githubEnv struct {
	srv     *tokenserver.Server
	ts      *httptest.Server
	clk     *clock
	secrets *store
	src     *Source
	reg     *prometheus.Registry
}

func newGitHubEnv(t *testing.T) *githubEnv {
	t.Helper()
	e := &githubEnv{clk: newClock(), secrets: &store{}, reg: prometheus.NewRegistry()}
	key, keyPEM := rsaKey(t)
	e.srv = &tokenserver.Server{Now: e.clk.Now, AppID: 123456, InstallationID: 7890,
		Repositories: []string{"app"}, Permissions: map[string]string{"contents": "read", "pull_requests": "write"}}
	e.srv.AcceptKey(&key.PublicKey)
	e.ts = httptest.NewTLSServer(e.srv)
	t.Cleanup(e.ts.Close)
	e.secrets.set(map[string]string{"gh-key": keyPEM})
	m := &GitHubApp{Name: "github", AppID: 123456, InstallationID: 7890, PrivateKeyRef: "gh-key",
		Repositories: []string{"app"}, Permissions: map[string]string{"contents": "read", "pull_requests": "write"},
		APIURL: e.ts.URL, Client: e.ts.Client(), Secrets: e.secrets.lookup, Now: e.clk.Now}
	e.src = NewSource(SourceOptions{Name: "github", Type: "github_app", Minter: m, Metrics: NewMetrics(e.reg), Now: e.clk.Now})
	return e
}

// bearer runs Prepare and Apply and returns the Authorization sent.
func bearer(t *testing.T, src *Source) (string, error) {
	t.Helper()
	p, err := src.Prepare(context.Background(), &credential.Request{})
	if err != nil {
		return "", err
	}
	out := httptest.NewRequest(http.MethodGet, "https://api.example.test/", nil)
	out.Header["authorization"] = []string{"Bearer agent-sent-this"}
	out.Header.Set("Authorization", "token another")
	if err := p.Apply(context.Background(), out); err != nil {
		return "", err
	}
	if len(out.Header) != 1 || len(out.Header["Authorization"]) != 1 {
		t.Fatalf("Apply left the app's Authorization: %v", out.Header)
	}
	tok := strings.TrimPrefix(out.Header.Get("Authorization"), "Bearer ")
	if inj := src.Tokens(); inj == nil || string(inj.Values[0]) != tok {
		t.Fatal("Tokens does not hold the token sent (it would not be scrubbed)")
	}
	return tok, nil
}

func TestGitHubAppTokenNarrowedAndRefreshedAtExpiry(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	e.srv.Lifetime = time.Hour
	tok, err := bearer(t, e.src)
	if err != nil {
		t.Fatal(err)
	}
	if !e.srv.Live(tok) || e.srv.Mints.Load() != 1 {
		t.Fatalf("token %v live, %d mints; want the server's token, 1 mint", e.srv.Live(tok), e.srv.Mints.Load())
	}
	if again, _ := bearer(t, e.src); again != tok || e.srv.Mints.Load() != 1 {
		t.Fatal("a valid token was minted again")
	}
	e.clk.Advance(time.Hour) // expired (the server's JWT checks follow the clock)
	tok2, err := bearer(t, e.src)
	if err != nil || tok2 == tok || e.srv.Mints.Load() != 2 {
		t.Fatalf("after expiry: %v, %d mints; want a new token", err, e.srv.Mints.Load())
	}
	if n := testutil.ToFloat64(e.src.o.Metrics.refreshes.WithLabelValues("github", "ok")); n != 2 {
		t.Errorf("botbox_credential_refreshes_total{credential=github,result=ok} = %v, want 2", n)
	}
	if n, err := testutil.GatherAndCount(e.reg, "botbox_credential_expiry_seconds"); err != nil || n != 1 {
		t.Errorf("botbox_credential_expiry_seconds series: %d, %v", n, err)
	}
	// A predecessor still valid would be scrubbed too; tok expired at the
	// moment of the refresh: only the new one.
	if vals := e.src.Tokens().Values; len(vals) != 1 {
		t.Errorf("%d token values after an expired predecessor, want 1", len(vals))
	}
}

func TestOneRefreshUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	gate := make(chan struct{})
	e.srv.Gate.Store(&gate)
	var wg sync.WaitGroup
	toks := make([]string, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Go(func() { toks[i], errs[i] = bearer(t, e.src) })
	}
	// Every request is waiting on the one mint in flight before it answers.
	for e.srv.Mints.Load() == 0 && !e.inflight() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the 16 reach the wait (not a timing assertion: more waiting only makes the check stricter)
	close(gate)
	wg.Wait()
	for i := range 16 {
		if errs[i] != nil || toks[i] != toks[0] {
			t.Fatalf("request %d: %q, %v; want the one token", i, toks[i], errs[i])
		}
	}
	if n := e.srv.Mints.Load(); n != 1 {
		t.Fatalf("%d mints for 16 concurrent requests, want 1", n)
	}
}

func (e *githubEnv) inflight() bool {
	e.src.mu.Lock()
	defer e.src.mu.Unlock()
	return e.src.inflight != nil
}

func TestFailureIs503ThenRecovers(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	e.srv.Fail.Store(true)
	_, err := bearer(t, e.src)
	ue, ok := errors.AsType[*credential.UnavailableError](err)
	if !ok || ue.RetryAfter < time.Second {
		t.Fatalf("err = %v, want *credential.UnavailableError with RetryAfter >= 1s", err)
	}
	// Within the back-off no request mints again.
	if _, err := bearer(t, e.src); err == nil || e.srv.Mints.Load()+e.srv.Refused.Load() != 1 {
		t.Fatalf("second request during back-off: %v, %d attempts; want no new attempt", err, e.srv.Refused.Load())
	}
	for _, v := range []string{"BEGIN", "PRIVATE"} {
		if strings.Contains(err.Error(), v) {
			t.Fatalf("error %q carries the key", err)
		}
	}
	e.srv.Fail.Store(false)
	e.clk.Advance(2 * time.Second)
	if _, err := bearer(t, e.src); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if n := testutil.ToFloat64(e.src.o.Metrics.refreshes.WithLabelValues("github", "error")); n != 1 {
		t.Errorf("refreshes{result=error} = %v, want 1", n)
	}
}

func TestPrivateKeyRotation(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	if _, err := bearer(t, e.src); err != nil {
		t.Fatal(err)
	}
	key2, pem2 := rsaKey(t)
	e.srv.DropKeys()
	e.srv.AcceptKey(&key2.PublicKey) // GitHub now knows only the new key
	e.secrets.set(map[string]string{"gh-key": pem2})
	e.clk.Advance(time.Hour)
	if _, err := bearer(t, e.src); err != nil || e.srv.Mints.Load() != 2 {
		t.Fatalf("after rotating the key file: %v, %d mints; want a token signed with the new key", err, e.srv.Mints.Load())
	}
	e.secrets.set(map[string]string{"gh-key": "not a PEM key"})
	e.clk.Advance(time.Hour)
	if _, err := bearer(t, e.src); err == nil || strings.Contains(err.Error(), "not a PEM key") {
		t.Fatalf("a broken key file: err = %v, want an error that does not quote it", err)
	}
}

func TestRevokeAtEnd(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.src.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !e.src.Valid() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	tok, err := bearer(t, e.src)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if err := e.src.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.srv.Live(tok) || e.srv.Revocations.Load() != 1 {
		t.Fatalf("after Revoke: token live %v, %d revocations", e.srv.Live(tok), e.srv.Revocations.Load())
	}
	if _, err := e.src.Prepare(ctx, &credential.Request{}); err == nil {
		t.Fatal("a revoked source still hands out a token")
	}
}

// TestRunRefreshesBeforeExpiry: Run replaces a token a quarter of its
// lifetime before it expires, without a request asking.
func TestRunRefreshesBeforeExpiry(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	e.src.o.Now, e.srv.Now = time.Now, time.Now
	e.src.o.Minter.(*GitHubApp).Now = time.Now
	e.srv.Lifetime = 2 * time.Second // refreshed after 1.5 s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.src.Run(ctx)
	// The source holds the second generation once the refresh is stored:
	// refreshed before the first token expired, it keeps that one too
	// (still valid at the issuer, so still scrubbed).
	twoTokens := func() bool { inj := e.src.Tokens(); return inj != nil && len(inj.Values) == 2 }
	deadline := time.Now().Add(20 * time.Second)
	for !twoTokens() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.srv.Mints.Load(); n < 2 || !twoTokens() {
		t.Fatalf("%d mints, tokens %v; want a refresh before expiry keeping the previous token", n, e.src.Tokens())
	}
	if inj := e.src.Tokens(); string(inj.Values[0]) == string(inj.Values[1]) {
		t.Fatal("the refresh returned the same token")
	}
}

func TestGitHubGrantWiderThanAskedIsRefused(t *testing.T) {
	t.Parallel()
	m := &GitHubApp{Name: "github", Permissions: map[string]string{"contents": "read"}}
	for _, granted := range []map[string]string{{"contents": "write"}, {"contents": "read", "issues": "read"}, {"contents": "sudo"}} {
		if err := m.checkGranted(granted); err == nil {
			t.Errorf("grant %v accepted", granted)
		}
	}
	if err := m.checkGranted(map[string]string{"contents": "read", "metadata": "read"}); err != nil {
		t.Errorf("the exact grant refused: %v", err)
	}
}

func TestClientCredentials(t *testing.T) {
	t.Parallel()
	srv := &tokenserver.Server{ClientID: "botbox-client", ClientSecret: "client-secret-0123456789", Scope: "read:things write:things"}
	ts := httptest.NewTLSServer(srv)
	t.Cleanup(ts.Close)
	sec := &store{}
	sec.set(map[string]string{"cid": "botbox-client", "csec": "client-secret-0123456789"})
	m := &ClientCredentials{Name: "internal", TokenURL: ts.URL + "/token", ClientIDRef: "cid", ClientSecretRef: "csec",
		Scopes: []string{"read:things", "write:things"}, Client: ts.Client(), Secrets: sec.lookup, Now: time.Now}
	src := NewSource(SourceOptions{Name: "internal", Type: "oauth2_client_credentials", Minter: m})
	tok, err := bearer(t, src)
	if err != nil || !srv.Live(tok) {
		t.Fatalf("token %q live %v, %v", tok, srv.Live(tok), err)
	}
	// A wrong secret: the server refuses, the error keeps its code only.
	sec.set(map[string]string{"cid": "botbox-client", "csec": "wrong-secret-value"})
	_, err = m.Mint(context.Background())
	if err == nil || !strings.Contains(err.Error(), "invalid_client") || strings.Contains(err.Error(), "wrong-secret-value") {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := src.Revoke(context.Background()); err != nil {
		t.Fatalf("Revoke of a non-revocable type: %v", err)
	}
}

func TestGoogleServiceAccount(t *testing.T) {
	t.Parallel()
	key, _ := rsaKey(t)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	srv := &tokenserver.Server{ClientEmail: "agent@project.iam.gserviceaccount.com", Scope: "https://www.googleapis.com/auth/cloud-platform"}
	srv.AcceptKey(&key.PublicKey)
	ts := httptest.NewTLSServer(srv)
	t.Cleanup(ts.Close)
	srv.TokenURL = ts.URL + "/google/token"
	keyJSON, _ := json.Marshal(map[string]string{"type": "service_account", "client_email": srv.ClientEmail, "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": srv.TokenURL})
	sec := &store{}
	sec.set(map[string]string{"sa": string(keyJSON)})
	m := &GoogleServiceAccount{Name: "gcp", KeyRef: "sa", Scopes: []string{srv.Scope}, Client: ts.Client(), Secrets: sec.lookup, Now: time.Now}
	src := NewSource(SourceOptions{Name: "gcp", Type: "google_service_account", Minter: m})
	tok, err := bearer(t, src)
	if err != nil || !srv.Live(tok) {
		t.Fatalf("token %q live %v, %v", tok, srv.Live(tok), err)
	}
	// A token_uri that is not https is refused before anything is sent.
	bad, _ := json.Marshal(map[string]string{"type": "service_account", "client_email": srv.ClientEmail,
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": "http://attacker.example/token"})
	sec.set(map[string]string{"sa": string(bad)})
	if _, err := m.Mint(context.Background()); err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("http token_uri: %v", err)
	}
}
