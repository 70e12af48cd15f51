package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/tokenserver"
)

// githubCredential is a github_app credential whose API (and token
// endpoint) is the harness origin, api.example.test.
const githubCredential = `credentials:
  github:
    type: github_app
    app_id: 42
    private_key_ref: github-app-key
    installation_id: 7
    repositories: [acme/app]
    permissions: {contents: read}
    api_url: https://api.example.test
`

const githubRule = `    - host: api.example.test
      action: allow
      credential: github
    - host: other.example.test
      action: allow
      scrub_responses: true
`

// readBack is an origin that keeps what /store received in Authorization
// and answers it on /load, whichever host asks: a token written through
// one host, read back through another (attack playbook class 2).
type readBack struct {
	next http.Handler
	mu   sync.Mutex
	kept string
}

func (b *readBack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/store":
		b.mu.Lock()
		b.kept = r.Header.Get("Authorization")
		b.mu.Unlock()
	case "/load":
		b.mu.Lock()
		defer b.mu.Unlock()
		_, _ = io.WriteString(w, "kept: "+b.kept)
	default:
		b.next.ServeHTTP(w, r)
	}
}

// TestGitHubAppThroughServer: readiness waits for the first token; while
// none can be minted requests get 503 credential_unavailable with
// Retry-After; then the app's request carries the minted token (never
// its own), the origin's echo of Authorization reaches the app masked,
// the metrics count the mint, and the token is revoked at shutdown, after
// the drain.
func TestGitHubAppThroughServer(t *testing.T) {
	t.Parallel()
	gh, keyPEM := githubApp(t)
	gh.Fail.Store(true)
	h := start(t, harnessOpts{extraYAML: githubCredential, rules: githubRule, origin: &readBack{next: gh}})
	h.waitHealth(http.StatusServiceUnavailable)

	resp := h.githubGet(t)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Botbox-Reason") != "credential_unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("before any token: %d %s Retry-After %q (%s)", resp.StatusCode, resp.Header.Get("X-Botbox-Reason"), resp.Header.Get("Retry-After"), body)
	}

	h.writeGitHubKey(keyPEM)
	gh.Fail.Store(false)
	h.waitHealth(http.StatusOK)

	resp = h.githubGet(t)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	toks := gh.Issued()
	if resp.StatusCode != http.StatusOK || len(toks) != 1 {
		t.Fatalf("with a token: %d (%s), %d tokens issued", resp.StatusCode, body, len(toks))
	}
	all := string(body) + resp.Header.Get("X-Echo-Authorization")
	if strings.Contains(all, toks[0]) || strings.Contains(all, "agent-token") || !strings.Contains(string(body), "authorization") {
		t.Fatalf("the app saw the token or its own was forwarded: %s / %s", body, resp.Header.Get("X-Echo-Authorization"))
	}
	// Stored through the credential's host, read back through another
	// (scrubbed) host: masked there too.
	if resp := h.hostGet(t, "api.example.test", "/store"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/store: %d", resp.StatusCode)
	}
	back := h.hostGet(t, "other.example.test", "/load")
	kept, _ := io.ReadAll(back.Body)
	back.Body.Close()
	if !strings.HasPrefix(string(kept), "kept: Bearer ") || strings.Contains(string(kept), toks[0]) {
		t.Fatalf("read back through other.example.test: %q, want the token masked", kept)
	}
	metrics := h.scrape(t)
	if !strings.Contains(metrics, `botbox_credential_refreshes_total{credential="github",result="ok"} 1`) ||
		!strings.Contains(metrics, `botbox_credential_expiry_seconds{credential="github"}`) {
		t.Errorf("metrics:\n%s", grepLines(metrics, "botbox_credential"))
	}

	h.cancel() // SIGTERM
	select {
	case err := <-h.done:
		h.done <- err // for the harness's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
	}
	if gh.Live(toks[0]) || gh.Revocations.Load() != 1 {
		t.Fatalf("after shutdown: token live %v, %d revocations; want it revoked", gh.Live(toks[0]), gh.Revocations.Load())
	}
	if strings.Contains(h.logs.String(), toks[0]) || strings.Contains(h.logs.String(), "PRIVATE KEY") {
		t.Error("the logs carry the token or the key")
	}
	eventually.Eventually(t, time.Second, func() bool { return strings.Contains(h.logs.String(), "credential token revoked") }, "the revocation is logged")
}

func (h *harness) githubGet(t *testing.T) *http.Response {
	t.Helper()
	return h.hostGet(t, "api.example.test", "/repos/acme/app")
}

// hostGet sends GET path to host through the plain listener, with the
// app's own Authorization.
func (h *harness) hostGet(t *testing.T, host, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+h.addrs.Proxy[0].String()+path, nil)
	req.Host = host
	req.Header.Set("Authorization", "Bearer agent-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (h *harness) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + h.addrs.Metrics.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestReloadRefusesChangedCredentials: the credentials are made once per
// process; a reload that changes them is refused (the last good
// configuration stays), one that only changes rules is applied.
func TestReloadRefusesChangedCredentials(t *testing.T) {
	t.Parallel()
	aws := "credentials:\n  s3:\n    type: aws_sigv4\n    access_key_id_ref: k\n    secret_access_key_ref: s\n    region: us-east-1\n    service: s3\n"
	rule := "    - host: api.example.test\n      action: allow\n      credential: s3\n"
	h := start(t, harnessOpts{extraYAML: aws, rules: rule, configFile: true})
	h.writeConfig(strings.Replace(h.yaml, "us-east-1", "eu-west-1", 1))
	if err := h.srv.Reload(TriggerSIGHUP); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("reload with changed credentials: %v, want refused (restart)", err)
	}
	h.writeConfig(strings.Replace(h.yaml, rule, rule+"    - host: other.example.test\n      action: allow\n", 1))
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatalf("reload with the same credentials: %v", err)
	}
}

// TestTokenEndpointBehindAddressGuard: BotBox dials the token endpoint
// under the address guard in force, like any upstream: at a loopback
// address the guard refuses by default, no mint reaches it, BotBox stays
// not ready and counts the failures.
func TestTokenEndpointBehindAddressGuard(t *testing.T) {
	t.Parallel()
	gh, keyPEM := githubApp(t)
	h := start(t, harnessOpts{extraYAML: githubCredential, rules: githubRule, origin: gh, strictGuard: true})
	h.writeGitHubKey(keyPEM)
	eventually.Eventually(t, 15*time.Second, func() bool {
		return strings.Contains(h.scrape(t), `botbox_credential_refreshes_total{credential="github",result="error"} 2`)
	}, "two failed mints (the key file loaded for the second at the latest)")
	if code, _ := h.health(); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz %d without a token, want 503", code)
	}
	if n := gh.Mints.Load() + gh.Refused.Load(); n != 0 {
		t.Fatalf("the token endpoint at a loopback address was reached %d times", n)
	}
	if !strings.Contains(h.logs.String(), "address") {
		t.Errorf("the failure does not say the address guard refused it:\n%s", grepLines(h.logs.String(), "minted"))
	}
}

// githubApp is a verifying GitHub token server for githubCredential and
// the App's private key (PEM) that it accepts.
func githubApp(t *testing.T) (*tokenserver.Server, []byte) {
	t.Helper()
	gh := &tokenserver.Server{AppID: 42, InstallationID: 7, Repositories: []string{"app"}, Permissions: map[string]string{"contents": "read"}}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh.AcceptKey(&key.PublicKey)
	return gh, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// writeGitHubKey puts the App's private key into the Secret volume.
func (h *harness) writeGitHubKey(keyPEM []byte) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.secretDir, "github-app-key"), keyPEM, 0o600); err != nil {
		h.t.Fatal(err)
	}
}
