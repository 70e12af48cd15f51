package e2e

import (
	"net/http"
	"slices"
	"testing"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// rulesScopedToken is a GitHub-style token scoped by routes: reads of one
// organisation's repositories only; DELETE refused explicitly.
const rulesScopedToken = `
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**", "/user"]
        - methods: [DELETE]
          action: deny
`

// Token misuse against an allowlisted upstream is mitigated by route rules
// (seed matrix row "Use the injected token for unwanted actions"): with the
// token scoped by routes, a GET in scope reaches the origin with the
// credential, while DELETE (a deny route), a write outside the routes and an
// ambiguous path are refused by BotBox, over plain http:// and through HTTPS
// interception, and the origin never sees them.
func TestTokenScopedByRoutes(t *testing.T) {
	t.Parallel()
	p, key := apiKeyPod(t, podConfig{interception: true, rules: rulesScopedToken})
	injected := []string{"Bearer " + key}
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			base := scheme + "://api.example.test"
			args := func(extra ...string) []string {
				if scheme == "https" {
					extra = append(extra, "-cacert", p.botboxCA)
				}
				return extra
			}
			mark := p.mark(t)
			for _, tc := range []struct {
				method, path string
				code         int
				body         string
			}{
				{http.MethodDelete, "/repos/acme/app", http.StatusForbidden, "route not allowed"},
				{http.MethodPost, "/repos/acme/app/issues", http.StatusForbidden, "route not allowed"},
				{http.MethodGet, "/repos/other/app", http.StatusForbidden, "route not allowed"},
				{http.MethodGet, "/repos/acme/%2e%2e/other/app", http.StatusBadRequest, "ambiguous request path"},
			} {
				r := p.app(t, "http", args("-url", base+tc.path, "-method", tc.method)...)
				assertStatus(t, tc.method+" "+base+tc.path, r, tc.code, tc.body)
			}
			r := p.app(t, "http", args("-url", base+"/repos/acme/app")...)
			if r.Status != http.StatusOK {
				t.Fatalf("GET %s/repos/acme/app: status %d body %q error %q, want 200", base, r.Status, r.Body, r.Error)
			}
			ev := p.httpEvent(t, mark, "/repos/acme/app")
			if ev.Method != http.MethodGet || !slices.Equal(ev.Header["Authorization"], injected) {
				t.Errorf("origin saw %s with Authorization %q, want GET with the injected credential", ev.Method, ev.Header["Authorization"])
			}
			// The allowed GET is the barrier: BotBox served the refusals
			// first and none dialled, so nothing else can arrive later.
			for _, e := range p.events(t, mark) {
				if e.Kind == wire.KindHTTP && e.Seq < ev.Seq || e.Kind == wire.KindHTTP && e.Method != http.MethodGet {
					t.Errorf("origin saw %s %s: a refused request reached it", e.Method, e.Path)
				}
			}
		})
	}
}
