package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/credential/broker"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/testutil/sigv4check"
)

const (
	credRealKeyID  = "AKIAREALKEYID0000001"
	credRealSecret = "realSecretAccessKey/0123456789abcdefghij"
	credPHKeyID    = "QKZPLACEHOLDERKEY777"
	credPHSecret   = "placeholderSecretAccessKey0123456789abcd"
	bedrockHost    = "bedrock-runtime.us-east-1.amazonaws.com"
)

const credentialRules = `    - host: ` + bedrockHost + `
      action: allow
      credential: bedrock
      max_request_body_bytes: 4096
`

const credentialsBlock = `credentials:
  bedrock:
    type: aws_sigv4
    access_key_id_ref: aws-key-id
    secret_access_key_ref: aws-secret
    region: us-east-1
`

type fixedPlaceholders struct{ t *placeholder.Table }

func (f fixedPlaceholders) Table() *placeholder.Table { return f.t }

// newBroker builds the broker of cfg's credentials for the test env.
func (e *testEnv) newBroker(cfg *config.Config, client *http.Client) CredentialSource {
	e.t.Helper()
	b, err := broker.New(broker.Options{Credentials: cfg.Credentials, Client: client,
		Secrets: func() credential.Lookup { return e.store.Snapshot() }})
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func newSigV4Env(t *testing.T) *testEnv {
	t.Helper()
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	e := newEnv(t, envOpts{rules: credentialRules, extraConfig: credentialsBlock, names: []string{bedrockHost}, credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	return e
}

func waitSecret(t *testing.T, e *testEnv, ref string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := e.store.Snapshot().Lookup(ref); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("secret %s not loaded", ref)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bedrockRequest is what the AWS SDK sends, signed with keyID/secret ("":
// unsigned), to the plain listener (transparent mode).
func bedrockRequest(t *testing.T, e *testEnv, method, path string, body []byte, keyID, secret string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+bedrockHost+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if keyID != "" {
		err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}, req,
			sha256Hex(body), "bedrock", "us-east-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
	}
	req.URL.Host = e.plain.Listener.Addr().String()
	req.Host = bedrockHost
	return req
}

// verifyingOrigin answers 401 unless the request verifies with the real
// keys, and echoes the Authorization it received in a header and the body.
func verifyingOrigin(t *testing.T, e *testEnv, stream func(w http.ResponseWriter)) {
	e.originMux.HandleFunc("/model/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := sigv4check.Verify(r, body, aws.Credentials{AccessKeyID: credRealKeyID, SecretAccessKey: credRealSecret}, "us-east-1", "bedrock", time.Now())
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, err.Error())
			return
		}
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		if stream != nil {
			stream(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"output":{"message":{"content":[{"text":"seen `+r.Header.Get("Authorization")+`"}]}}}`)
	})
}

func TestSigV4ResignedBedrockJSON(t *testing.T) {
	t.Parallel()
	e := newSigV4Env(t)
	verifyingOrigin(t, e, nil)
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`)
	for _, signer := range []struct{ name, key, secret string }{{"placeholder-signed", credPHKeyID, credPHSecret}, {"unsigned", "", ""}} {
		resp, err := http.DefaultClient.Do(bedrockRequest(t, e, http.MethodPost, "/model/anthropic.claude-3/converse", body, signer.key, signer.secret))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", signer.name, resp.StatusCode, got)
		}
		all := string(got) + resp.Header.Get("X-Echo-Authorization")
		if strings.Contains(all, credRealKeyID) || strings.Contains(all, credRealSecret) {
			t.Fatalf("%s: the response reveals the real key: %s", signer.name, all)
		}
		if !strings.Contains(string(got), "seen AWS4-HMAC-SHA256") {
			t.Fatalf("%s: the origin's echo is missing: %s", signer.name, got)
		}
	}
	if !strings.Contains(e.logs.String(), `"credential":"bedrock"`) {
		t.Errorf("decision lines do not name the credential:\n%s", e.logs.String())
	}
}

// TestSigV4EventStreamUnbuffered: a ConverseStream-shaped response
// (application/vnd.amazon.eventstream, no Content-Length) reaches the
// agent frame by frame, before the origin has sent the next one, with the
// real key masked where the origin reflects it.
func TestSigV4EventStreamUnbuffered(t *testing.T) {
	t.Parallel()
	e := newSigV4Env(t)
	next := make(chan struct{})
	verifyingOrigin(t, e, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		_, _ = io.WriteString(w, "frame-1:contentBlockDelta\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-time.After(10 * time.Second):
			return
		}
		_, _ = io.WriteString(w, "frame-2:reflected "+credRealKeyID+"\nframe-3:messageStop\n")
	})
	resp, err := http.DefaultClient.Do(bedrockRequest(t, e, http.MethodPost, "/model/m/converse-stream", []byte(`{}`), credPHKeyID, credPHSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "frame-1:contentBlockDelta\n" {
		t.Fatalf("first frame %q, %v (it must arrive before the origin sends the next)", first, err)
	}
	close(next)
	rest, _ := io.ReadAll(br)
	if strings.Contains(string(rest), credRealKeyID) || !strings.Contains(string(rest), "frame-3:messageStop") {
		t.Fatalf("rest of the stream %q: want the key masked and every frame", rest)
	}
}

func TestSigV4Refusals(t *testing.T) {
	t.Parallel()
	e := newSigV4Env(t)
	verifyingOrigin(t, e, nil)
	tests := []struct {
		name   string
		req    func() *http.Request
		status int
		reason string
	}{
		{"own key", func() *http.Request {
			return bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", []byte(`{}`), "AKIAAGENTSOWNKEY0001", "x")
		}, http.StatusForbidden, reasonCredentialRefused},
		{"the real key", func() *http.Request {
			return bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", []byte(`{}`), credRealKeyID, credRealSecret)
		}, http.StatusForbidden, reasonCredentialRefused},
		{"presigned", func() *http.Request {
			return bedrockRequest(t, e, http.MethodGet, "/model/m/invoke?X-Amz-Signature=00", nil, "", "")
		}, http.StatusForbidden, reasonCredentialRefused},
		{"body over the bound", func() *http.Request {
			return bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", bytes.Repeat([]byte("a"), 5000), credPHKeyID, credPHSecret)
		}, http.StatusRequestEntityTooLarge, reasonBodyTooLarge},
		{"streamed body over the bound", func() *http.Request {
			r := bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", nil, "", "")
			r.Body = io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("a"), 5000)))
			r.ContentLength = -1
			return r
		}, http.StatusRequestEntityTooLarge, reasonBodyTooLarge},
		{"placeholder in another header", func() *http.Request {
			r := bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", []byte(`{}`), credPHKeyID, credPHSecret)
			r.Header.Set("X-Note", credPHKeyID)
			return r
		}, http.StatusForbidden, reasonTripwire},
		{"placeholder secret in the body", func() *http.Request {
			return bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", []byte(`{"k":"`+credPHSecret+`"}`), credPHKeyID, credPHSecret)
		}, http.StatusForbidden, reasonTripwire},
		{"TRACE", func() *http.Request {
			return bedrockRequest(t, e, "TRACE", "/model/m", nil, "", "")
		}, http.StatusForbidden, reasonTraceCredential},
	}
	for _, tc := range tests {
		resp, err := http.DefaultClient.Do(tc.req())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get(HeaderReason) != tc.reason {
			t.Errorf("%s: %d %s (%s), want %d %s", tc.name, resp.StatusCode, resp.Header.Get(HeaderReason), b, tc.status, tc.reason)
		}
	}
	e.assertOriginUntouched()
	for _, v := range []string{credRealKeyID, credRealSecret} {
		if strings.Contains(e.logs.String(), v) {
			t.Errorf("the logs carry a real key")
		}
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
