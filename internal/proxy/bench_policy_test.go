package proxy

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
)

// policyV2Rules is a 20-rule policy with wildcards, CIDRs and exact hosts
// whose hit rule for api.example.test is the wildcard *.example.test with 5
// routes, the fifth matching GET /v1/chat (the request of benchReq): every
// stage of matching (exact miss, suffix walk, route scan, path
// canonicalisation) runs on each request.
func policyV2Rules() string {
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, "    - host: host-%d.example.org\n      action: allow\n", i)
	}
	for i := range 6 {
		fmt.Fprintf(&b, "    - host: \"*.cdn-%d.example.net\"\n      action: allow\n", i)
	}
	b.WriteString(`    - host: "*.internal.example.test"
      action: deny
    - host: "10.0.0.0/8"
      action: allow
    - host: "10.1.0.0/16"
      action: deny
    - host: "2001:db8::/32"
      action: allow
    - host: blocked.example.test
      action: deny
    - host: "*.example.test"
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - paths: ["/admin/**"]
          action: deny
        - methods: [POST]
          paths: ["/v1/files/**"]
          action: deny
        - methods: [GET, HEAD]
          paths: ["/v1/models", "/v1/models/*"]
        - methods: [POST]
          paths: ["/v1/chat/completions", "/v1/responses"]
        - methods: [GET, POST]
          paths: ["/v1/chat", "/v1/embeddings"]
`)
	return b.String()
}

// BenchmarkServePlainPolicy is BenchmarkServePlain under the exact-host
// policy and under policyV2Rules, side by side in one run
// (docs/performance.md, "Policy v2"): the cost of wildcard matching and
// routes per small request.
func BenchmarkServePlainPolicy(b *testing.B) {
	exact := `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
`
	for _, v := range []struct{ name, rules string }{
		{"policy=exact", exact},
		{"policy=v2-20rules", policyV2Rules()},
	} {
		b.Run(v.name, func(b *testing.B) {
			h := newPolicyBenchHandler(b, v.rules)
			serveLoop(b, h.Plain(), parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test")))
		})
	}
}

func newPolicyBenchHandler(b *testing.B, rules string) *Handler {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte(benchSecret+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "secrets_dir: %s\negress_policy:\n  default_action: deny\n  rules:\n%s", dir, rules))
	if err != nil {
		b.Fatal(err)
	}
	if len(cfg.Policy.Rules) != 1 && len(cfg.Policy.Rules) != 20 {
		b.Fatalf("%d rules", len(cfg.Policy.Rules))
	}
	logger := telemetry.WithTarget(telemetry.NewLogger(io.Discard, nil), telemetry.TargetProxy)
	store, err := secrets.Open(secrets.Options{Dir: dir, Required: cfg.RequiredSecretRefs(), Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Options{Config: cfg, Secrets: store, Transport: cannedTransport{}, Metrics: telemetry.NewMetrics(), Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	return h
}
