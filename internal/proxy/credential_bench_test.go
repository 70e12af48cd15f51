package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/credential/broker"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
)

// credentialBenchConfig has a header-injecting rule and a SigV4 rule for
// the same request shape: BenchmarkCredential's A/B (issue 21's budget: a
// re-signed small request costs at most 1.3x the CPU of a header-injected
// one).
const credentialBenchConfig = `
secrets_dir: %s
credentials:
  bedrock:
    type: aws_sigv4
    access_key_id_ref: aws-key-id
    secret_access_key_ref: aws-secret
    region: us-east-1
egress_policy:
  rules:
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: bedrock-runtime.us-east-1.amazonaws.com
      action: allow
      credential: bedrock
`

// credentialTransport answers like cannedTransport, refusing a request
// whose credential is missing: the injected key, or a SigV4 signature
// with the real key ID (its body read, as an origin does).
type credentialTransport struct{}

func (credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Host != "api.example.test" {
		v := req.Header["Authorization"]
		if len(v) != 1 || !strings.HasPrefix(v[0], "AWS4-HMAC-SHA256 Credential="+credRealKeyID+"/") || len(req.Header["X-Amz-Date"]) != 1 {
			return nil, errNotInjected
		}
		req.Header["Authorization"] = []string{"Bearer " + benchSecret} // for cannedTransport's check
	}
	return cannedTransport{}.RoundTrip(req)
}

// BenchmarkCredential: the same small POST (a 64-byte JSON body) through
// the plain listener's handler to a rule that injects a header and to a
// rule whose credential re-signs it with SigV4 (body buffered and hashed,
// canonical request, HMAC chain). The ratio of the two is the budget's.
func BenchmarkCredential(b *testing.B) {
	dir := b.TempDir()
	for name, v := range map[string]string{"api-key": benchSecret, "aws-key-id": credRealKeyID, "aws-secret": credRealSecret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Parse(fmt.Appendf(nil, credentialBenchConfig, dir))
	if err != nil {
		b.Fatal(err)
	}
	logger := telemetry.WithTarget(telemetry.NewLogger(io.Discard, nil), telemetry.TargetProxy)
	store, err := secrets.Open(secrets.Options{Dir: dir, Required: cfg.ReadySecretRefs(), Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	brk, err := broker.New(broker.Options{Credentials: cfg.Credentials, Secrets: func() credential.Lookup { return store.Snapshot() }})
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Options{Config: cfg, Secrets: store, Transport: credentialTransport{}, Metrics: telemetry.NewMetrics(), Logger: logger, Credentials: brk})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hello there"}]}]}`)
	for _, v := range []struct{ name, host string }{{"inject", "api.example.test"}, {"sigv4", bedrockHost}} {
		b.Run(v.name, func(b *testing.B) {
			req := parsedRequest(b, fmt.Sprintf("POST /model/m/converse HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", v.host, len(body)))
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				req.Body = io.NopCloser(bytes.NewReader(body))
				req.ContentLength = int64(len(body))
				h.Plain().ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
