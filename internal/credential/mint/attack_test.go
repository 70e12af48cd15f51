package mint

// Outside attacks on minted tokens (attack playbook classes 4, 8 and 10,
// threat c: the availability of the credential): each test fails when
// the hole it names is open.

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

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
