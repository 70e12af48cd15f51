package mint

// Outside attacks on minted tokens (attack playbook classes 4, 8 and 10,
// threat c: the availability of the credential): each test fails when
// the hole it names is open.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/credential"
)

// Class 4 on the confused-deputy path to GitHub's revocation endpoint:
// every reading GitHub, or a proxy in front of GitHub Enterprise, may make
// of a path is judged, under the API's base path; the API's other paths
// are not.
func TestAttackReachesOwnEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		api, path string
		want      bool
	}{
		{"https://api.github.com", "/installation/token", true},
		{"https://api.github.com", "/INSTALLATION/TOKEN/", true},
		{"https://api.github.com", "/installation%252Ftoken", true},
		{"https://api.github.com", "/installation%5Ctoken", true},
		{"https://api.github.com", "/a/b/../../installation/token.", true},
		{"https://api.github.com", "/installation/token.json", true},
		{"https://api.github.com", "/installation/token;a", true},
		{"https://ghe.example.com/api/v3", "/api/v3/installation/token", true},
		{"https://ghe.example.com/api/v3", "/API/V3//installation/token", true},
		{"https://api.github.com", "/installation/repositories", false},
		{"https://api.github.com", "/installation/tokens", false},
		{"https://api.github.com", "/repos/acme/app/contents/installation/token", false},
		{"https://ghe.example.com/api/v3", "/installation/token", false}, // not the API: the token's host never serves it there
	} {
		g := &GitHubApp{APIURL: tc.api}
		if got := g.ReachesOwnEndpoint(tc.path); got != tc.want {
			t.Errorf("api %s, path %q: %v, want %v", tc.api, tc.path, got, tc.want)
		}
	}
	// A Source refuses such a request before any token is minted.
	e := newGitHubEnv(t)
	in := httptest.NewRequest("DELETE", "https://api.example.test/installation/token", nil)
	_, err := e.src.Prepare(context.Background(), &credential.Request{In: in})
	if _, ok := errors.AsType[*credential.RefusedError](err); !ok || e.srv.Mints.Load() != 0 {
		t.Fatalf("DELETE /installation/token: err %v, %d mints; want refused, none", err, e.srv.Mints.Load())
	}
}

// Class 8: a connection that outlives the drain (a tunnel, a request
// read just before its connection closed) reaches Prepare after the
// tokens were revoked at the end of Run. It must get no token: a token
// minted then is never revoked and outlives the Pod, the one thing
// github_app promises it does not.
func TestAttackNoMintAfterRevoke(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	if _, err := bearer(t, e.src); err != nil {
		t.Fatal(err)
	}
	if err := e.src.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := e.src.Prepare(context.Background(), &credential.Request{})
	if _, ok := errors.AsType[*credential.UnavailableError](err); !ok {
		t.Fatalf("Prepare after Revoke: err = %v, want *credential.UnavailableError", err)
	}
	if n := e.srv.Mints.Load(); n != 1 {
		t.Fatalf("%d mints, want 1: a token was minted after the revocation", n)
	}
	if live := e.srv.Issued(); len(live) != 0 {
		t.Fatalf("%d tokens live after the end", len(live))
	}
	// Run after Revoke does not mint either.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	e.src.Run(ctx)
	if n := e.srv.Mints.Load(); n != 1 {
		t.Fatalf("Run after Revoke minted (%d mints)", n)
	}
}

// Class 8, the same end seen from a mint in flight when Revoke runs: its
// token is revoked too, not stored after the revocation.
func TestAttackMintInFlightAtRevokeIsRevoked(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	gate := make(chan struct{})
	e.srv.Gate.Store(&gate)
	asked := make(chan struct{})
	go func() { defer close(asked); _, _ = e.src.Prepare(context.Background(), &credential.Request{}) }()
	for !e.inflight() {
		time.Sleep(time.Millisecond)
	}
	revoked := make(chan error, 1)
	go func() { revoked <- e.src.Revoke(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // Revoke reaches its wait (a shorter wait only loosens the check)
	close(gate)
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	<-asked
	if live := e.srv.Issued(); len(live) != 0 || e.srv.Mints.Load() != 1 {
		t.Fatalf("%d tokens live after Revoke (%d mints): the mint in flight outlived the revocation", len(live), e.srv.Mints.Load())
	}
}

// Class 10, threat c: while the token endpoint fails, a flood of
// concurrent requests costs the issuer one attempt per back-off, not one
// per request (the agent cannot exhaust the App's rate limit, nor get
// the installation throttled).
func TestAttackRefreshStormDuringOutage(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	e.srv.Fail.Store(true)
	for round := range 5 {
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				_, err := e.src.Prepare(context.Background(), &credential.Request{})
				if _, ok := errors.AsType[*credential.UnavailableError](err); !ok {
					t.Errorf("round %d: err = %v, want unavailable", round, err)
				}
			})
		}
		wg.Wait()
	}
	if n := e.srv.Refused.Load() + e.srv.Mints.Load(); n != 1 {
		t.Fatalf("160 requests within one back-off made %d attempts at the token endpoint, want 1", n)
	}
}

// Class 10, threat c: a token endpoint that hangs holds a request no
// longer than the request's own deadline, every waiting request shares
// the one attempt, and the token minted when it answers serves them.
func TestAttackHungTokenEndpoint(t *testing.T) {
	t.Parallel()
	e := newGitHubEnv(t)
	gate := make(chan struct{})
	e.srv.Gate.Store(&gate)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := e.src.Prepare(ctx, &credential.Request{})
			if ue, ok := errors.AsType[*credential.UnavailableError](err); !ok || ue.RetryAfter < time.Second {
				t.Errorf("err = %v, want unavailable with Retry-After", err)
			}
		})
	}
	wg.Wait()
	close(gate)
	if _, err := bearer(t, e.src); err != nil {
		t.Fatalf("once the endpoint answers: %v", err)
	}
	if n := e.srv.Mints.Load(); n != 1 {
		t.Fatalf("%d mints, want the one the waiting requests shared", n)
	}
}

// Fail closed on the grant, like the permissions check: a token asked
// for some repositories that GitHub grants for every repository of the
// installation (repository_selection "all", or none said) is refused and
// revoked, never used.
func TestAttackGrantForEveryRepositoryIsRefused(t *testing.T) {
	t.Parallel()
	for _, selection := range []string{"all", ""} {
		var revoked atomic.Int64
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete {
				revoked.Add(1)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"token":"ghs_wide","expires_at":%q,"permissions":{"contents":"read"},"repository_selection":%q}`,
				time.Now().Add(time.Hour).UTC().Format(time.RFC3339), selection)
		}))
		t.Cleanup(srv.Close)
		_, keyPEM := rsaKey(t)
		st := &store{}
		st.set(map[string]string{"gh-key": keyPEM})
		m := &GitHubApp{Name: "github", AppID: 1, InstallationID: 2, PrivateKeyRef: "gh-key", Repositories: []string{"app"},
			Permissions: map[string]string{"contents": "read"}, APIURL: srv.URL, Client: srv.Client(), Secrets: st.lookup, Now: time.Now}
		_, err := m.Mint(context.Background())
		if err == nil || strings.Contains(err.Error(), "ghs_wide") || revoked.Load() != 1 {
			t.Fatalf("repository_selection %q: err = %v, %d revocations; want refused and revoked", selection, err, revoked.Load())
		}
	}
}
