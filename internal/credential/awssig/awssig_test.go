package awssig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/testutil/sigv4check"
)

const (
	realKeyID   = "AKIAREALREALREAL1234"
	realSecret  = "REALSECRETrealsecretREALSECRETrealsecre"
	phKeyID     = "QZXWPLACEHOLDER98765"
	phSecret    = "placeholderSECRETplaceholderSECRET12345"
	realSession = "REALSESSIONTOKEN/abc+def=="
	phSession   = "PLACEHOLDERSESSION/xyz+uvw=="
)

type table map[string]string // ref -> placeholder

func (t table) Issued(ref, s string) bool { return t[ref] == s && s != "" }

func snapshot(withSession bool) *secrets.Snapshot {
	m := map[string]secrets.Value{
		"aws-key-id": secrets.NewValue([]byte(realKeyID)),
		"aws-secret": secrets.NewValue([]byte(realSecret)),
	}
	if withSession {
		m["aws-session"] = secrets.NewValue([]byte(realSession))
	}
	return secrets.NewSnapshot(m)
}

func newSigner(t *testing.T, service, session string) *Signer {
	t.Helper()
	s, err := New(Options{Name: "aws", AccessKeyIDRef: "aws-key-id", SecretAccessKeyRef: "aws-secret", SessionTokenRef: session,
		Region: "us-east-1", Service: service, ServiceFor: config.AWSService})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// appRequest is what an SDK configured with the placeholder keys sends.
func appRequest(t *testing.T, method, url string, body []byte, keyID, secret, token, payload string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, url, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	r.Header.Set("X-Amz-Content-Sha256", payload)
	if keyID != "" {
		err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret, SessionToken: token},
			r, payload, "bedrock", "us-east-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// forward runs Prepare and Apply as the proxy does and returns the
// outbound request and the body it carries.
func forward(t *testing.T, s *Signer, in *http.Request, host string, cleartext bool, maxBody int64, withSession bool) (*http.Request, []byte, error) {
	t.Helper()
	req := &credential.Request{In: in, Host: host, Cleartext: cleartext, MaxBody: maxBody, Secrets: snapshot(withSession),
		Placeholders: table{"aws-key-id": phKeyID, "aws-session": phSession}}
	p, err := s.Prepare(context.Background(), req)
	if err != nil {
		return nil, nil, err
	}
	out := in.Clone(context.Background())
	out.URL.Scheme, out.URL.Host, out.Host = "https", host, host
	out.RequestURI = ""
	if err := p.Apply(context.Background(), out); err != nil {
		return nil, nil, err
	}
	var body []byte
	if out.Body != nil {
		body, _ = io.ReadAll(out.Body)
	}
	return out, body, nil
}

func TestResignVerifies(t *testing.T) {
	t.Parallel()
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	tests := []struct {
		name, host, service string
		keyID, secret       string
		session             bool
		payload             string
		wantHash            string
	}{
		{name: "bedrock placeholder-signed", host: "bedrock-runtime.us-east-1.amazonaws.com", service: "bedrock", keyID: phKeyID, secret: phSecret},
		{name: "bedrock unsigned", host: "bedrock-runtime.us-east-1.amazonaws.com", service: "bedrock"},
		{name: "session token", host: "bedrock-runtime.us-east-1.amazonaws.com", service: "bedrock", keyID: phKeyID, secret: phSecret, session: true},
		{name: "s3 over TLS is unsigned-payload", host: "bucket.s3.us-east-1.amazonaws.com", service: "s3", keyID: phKeyID, secret: phSecret, wantHash: UnsignedPayload},
		{name: "s3 streaming unsigned trailer kept", host: "s3.us-east-1.amazonaws.com", service: "s3", keyID: phKeyID, secret: phSecret, payload: streamingUnsignedTrailer, wantHash: streamingUnsignedTrailer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			session := ""
			token := ""
			if tc.session {
				session, token = "aws-session", phSession
			}
			s := newSigner(t, "", session)
			in := appRequest(t, http.MethodPost, "https://"+tc.host+"/model/x/converse", body, tc.keyID, tc.secret, token, tc.payload)
			out, got, err := forward(t, s, in, tc.host, false, 0, tc.session)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantHash != "" && out.Header.Get("X-Amz-Content-Sha256") != tc.wantHash {
				t.Errorf("payload hash %q, want %q", out.Header.Get("X-Amz-Content-Sha256"), tc.wantHash)
			}
			if !bytes.Equal(got, body) {
				t.Errorf("body forwarded %q, want %q", got, body)
			}
			real := aws.Credentials{AccessKeyID: realKeyID, SecretAccessKey: realSecret}
			if tc.session {
				real.SessionToken = realSession
			}
			if err := sigv4check.Verify(out, got, real, "us-east-1", tc.service, time.Now()); err != nil {
				t.Fatalf("the re-signed request does not verify: %v", err)
			}
			for _, h := range []string{phKeyID, phSecret, phSession} {
				for k, vs := range out.Header {
					if strings.Contains(strings.Join(vs, " "), h) {
						t.Errorf("header %s still carries a placeholder", k)
					}
				}
			}
			// The check is not vacuous: the app's own signature fails it,
			// and so does one header changed after signing.
			if tc.keyID != "" {
				app := appRequest(t, http.MethodPost, "https://"+tc.host+"/model/x/converse", body, tc.keyID, tc.secret, token, tc.payload)
				if sigv4check.Verify(app, body, real, "us-east-1", tc.service, time.Now()) == nil {
					t.Error("the placeholder signature verified against the real key")
				}
			}
			out.Header.Set("Content-Type", "text/plain")
			if sigv4check.Verify(out, got, real, "us-east-1", tc.service, time.Now()) == nil {
				t.Error("a header changed after signing still verified")
			}
		})
	}
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	signed := func(keyID, secret, token string) func(t *testing.T) *http.Request {
		return func(t *testing.T) *http.Request {
			return appRequest(t, http.MethodPost, "https://"+host+"/model/x/invoke", body, keyID, secret, token, "")
		}
	}
	tests := []struct {
		name string
		req  func(t *testing.T) *http.Request
		// session configures session_token_ref.
		session bool
	}{
		{name: "signed with the real key", req: signed(realKeyID, realSecret, "")},
		{name: "signed with another key", req: signed("AKIAOTHEROTHEROTHER1", "x", "")},
		{name: "not SigV4", req: func(t *testing.T) *http.Request {
			r := httptest.NewRequest(http.MethodPost, "https://"+host+"/", nil)
			r.Header.Set("Authorization", "Bearer "+phKeyID)
			return r
		}},
		{name: "SigV2", req: func(t *testing.T) *http.Request {
			r := httptest.NewRequest(http.MethodGet, "https://"+host+"/", nil)
			r.Header.Set("Authorization", "AWS "+phKeyID+":c2lnbmF0dXJl")
			return r
		}},
		{name: "two Authorization values", req: func(t *testing.T) *http.Request {
			r := signed(phKeyID, phSecret, "")(t)
			r.Header.Add("authorization", r.Header.Get("Authorization"))
			return r
		}},
		{name: "second Authorization under another case", req: func(t *testing.T) *http.Request {
			r := signed(phKeyID, phSecret, "")(t)
			r.Header["authorization"] = []string{"AWS4-HMAC-SHA256 Credential=" + realKeyID + "/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00"}
			return r
		}},
		{name: "presigned query", req: func(t *testing.T) *http.Request {
			return httptest.NewRequest(http.MethodGet, "https://"+host+"/o?X-Amz-Credential="+phKeyID+"%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=00", nil)
		}},
		{name: "presigned query, encoded name", req: func(t *testing.T) *http.Request {
			return httptest.NewRequest(http.MethodGet, "https://"+host+"/o?X%2DAmz%2DSignature=00", nil)
		}},
		{name: "chunk-signed payload", req: func(t *testing.T) *http.Request {
			return appRequest(t, http.MethodPut, "https://"+host+"/o", body, phKeyID, phSecret, "", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
		}},
		{name: "session token not the placeholder", session: true, req: signed(phKeyID, phSecret, realSession)},
		{name: "session token without session_token_ref", req: signed(phKeyID, phSecret, phSession)},
		{name: "session token unsigned", req: func(t *testing.T) *http.Request {
			r := httptest.NewRequest(http.MethodGet, "https://"+host+"/", nil)
			r.Header.Set("X-Amz-Security-Token", phSession)
			return r
		}},
		{name: "unsigned trailer outside S3", req: func(t *testing.T) *http.Request {
			return appRequest(t, http.MethodPut, "https://"+host+"/o", body, phKeyID, phSecret, "", streamingUnsignedTrailer)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			session := ""
			if tc.session {
				session = "aws-session"
			}
			s := newSigner(t, "", session)
			_, _, err := forward(t, s, tc.req(t), host, false, 0, tc.session)
			if _, ok := errors.AsType[*credential.RefusedError](err); !ok {
				t.Fatalf("err = %v, want *credential.RefusedError", err)
			}
			for _, v := range []string{realKeyID, realSecret, realSession, phSecret} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("error %q carries a key", err)
				}
			}
		})
	}
}

func TestPlaceholdersOffAcceptsUnsignedOnly(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	in := appRequest(t, http.MethodPost, "https://"+host+"/x", []byte("{}"), phKeyID, phSecret, "", "")
	_, err := s.Prepare(context.Background(), &credential.Request{In: in, Host: host, Secrets: snapshot(false)})
	if _, ok := errors.AsType[*credential.RefusedError](err); !ok {
		t.Fatalf("signed request with placeholders off: err = %v, want refused", err)
	}
	in = appRequest(t, http.MethodPost, "https://"+host+"/x", []byte("{}"), "", "", "", "")
	if _, err := s.Prepare(context.Background(), &credential.Request{In: in, Host: host, Secrets: snapshot(false)}); err != nil {
		t.Fatalf("unsigned request: %v", err)
	}
}

func TestBodyBound(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	body := bytes.Repeat([]byte("a"), 1025)
	for _, known := range []bool{true, false} {
		in := appRequest(t, http.MethodPost, "https://"+host+"/x", body, "", "", "", "")
		if !known {
			in.ContentLength = -1 // chunked or HTTP/2: counted while read
		}
		_, _, err := forward(t, s, in, host, false, 1024, false)
		if _, ok := errors.AsType[*credential.BodyTooLargeError](err); !ok {
			t.Errorf("known length %v: err = %v, want *credential.BodyTooLargeError", known, err)
		}
	}
	in := appRequest(t, http.MethodPost, "https://"+host+"/x", body[:1024], "", "", "", "")
	in.ContentLength = -1
	out, got, err := forward(t, s, in, host, false, 1024, false)
	if err != nil || len(got) != 1024 || out.ContentLength != 1024 {
		t.Fatalf("a body at the bound: err %v, %d bytes, Content-Length %d", err, len(got), out.ContentLength)
	}
	// S3 over cleartext hashes the body too.
	s3 := newSigner(t, "s3", "")
	in = appRequest(t, http.MethodPut, "http://minio.local/b/o", body[:10], "", "", "", "")
	out, _, err = forward(t, s3, in, "minio.local", true, 0, false)
	if err != nil || out.Header.Get("X-Amz-Content-Sha256") == UnsignedPayload {
		t.Fatalf("S3 in the clear: err %v, payload hash %q (want the body's SHA-256)", err, out.Header.Get("X-Amz-Content-Sha256"))
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	in := appRequest(t, http.MethodPost, "https://h/x", nil, "", "", "", "")
	_, err := s.Prepare(context.Background(), &credential.Request{In: in, Host: "h", Secrets: secrets.NewSnapshot(nil)})
	if m, ok := errors.AsType[*credential.MissingSecretError](err); !ok || m.Ref != "aws-key-id" {
		t.Fatalf("err = %v, want the missing aws-key-id", err)
	}
}

func TestAcceptsPlaceholder(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "aws-session")
	for _, tc := range []struct {
		name, ref string
		want      bool
	}{
		{"Authorization", "aws-key-id", true},
		{"authorization", "aws-key-id", true},
		{"X-Amz-Security-Token", "aws-session", true},
		{"Authorization", "aws-secret", false},
		{"X-Amz-Security-Token", "aws-key-id", false},
		{"Cookie", "aws-key-id", false},
	} {
		if got := s.AcceptsPlaceholder(tc.name, tc.ref); got != tc.want {
			t.Errorf("AcceptsPlaceholder(%s, %s) = %v, want %v", tc.name, tc.ref, got, tc.want)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	good := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{good, "AKIDEXAMPLE", true},
		{strings.ReplaceAll(good, ", ", ","), "AKIDEXAMPLE", true},
		{"AWS4-HMAC-SHA256Credential=A/b/c/d/aws4_request, SignedHeaders=h, Signature=s", "", false},
		{"aws4-hmac-sha256 " + good[len("AWS4-HMAC-SHA256 "):], "", false},
		{"AWS4-ECDSA-P256-SHA256 Credential=A/b/c/d/aws4_request, SignedHeaders=h, Signature=s", "", false},
		{"AWS4-HMAC-SHA256 Credential=A/b/c/d/aws4_request, SignedHeaders=h", "", false},
		{"AWS4-HMAC-SHA256 Credential=A/b/c/d/aws4_request, Credential=B/b/c/d/aws4_request, SignedHeaders=h, Signature=s", "", false},
		{"AWS4-HMAC-SHA256 Credential=/b/c/d/aws4_request, SignedHeaders=h, Signature=s", "", false},
		{"AWS4-HMAC-SHA256 Credential=A/b/c/aws4_request, SignedHeaders=h, Signature=s", "", false},
		{"AWS4-HMAC-SHA256 Credential=A/b/c/d/e, SignedHeaders=h, Signature=s", "", false},
		{"AWS4-HMAC-SHA256 Credential=A/b/c/d/aws4_request, SignedHeaders=h, Signature=s, Extra=x", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, ok := ParseAuthorization(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseAuthorization(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseAuthorization: never panics; an accepted value yields a key
// without '/', ',' or '=' that parses back from a canonical value.
func FuzzParseAuthorization(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=5d67")
	f.Add("AWS4-HMAC-SHA256 Credential==/a/b/c/aws4_request,SignedHeaders=,Signature=")
	f.Fuzz(func(t *testing.T, v string) {
		key, ok := ParseAuthorization(v)
		if !ok {
			return
		}
		if key == "" || strings.ContainsAny(key, "/,") {
			t.Fatalf("key %q from %q", key, v)
		}
		again, ok := ParseAuthorization("AWS4-HMAC-SHA256 Credential=" + key + "/d/r/s/aws4_request, SignedHeaders=host, Signature=00")
		if !ok || again != key {
			t.Fatalf("key %q does not parse back", key)
		}
	})
}

// FuzzPresigned: presigned never panics and finds the signing parameters
// however their names are cased or escaped.
func FuzzPresigned(f *testing.F) {
	f.Add("X-Amz-Signature=1")
	f.Add("a=b&x%2damz%2dcredential=c")
	f.Fuzz(func(t *testing.T, q string) {
		_ = presigned(q)
		if !presigned(q + "&X-Amz-Signature=0") {
			t.Fatal("missed X-Amz-Signature")
		}
	})
}

// TestKeysFollowRotation: the keys are cached per snapshot; a new
// snapshot (a rotation) is read again, and a Lookup that is not a
// snapshot is never cached.
func TestKeysFollowRotation(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	first := snapshot(false)
	if c, err := s.keys(first); err != nil || c.AccessKeyID != realKeyID {
		t.Fatalf("keys: %v, %v", c.AccessKeyID, err)
	}
	rotated := secrets.NewSnapshot(map[string]secrets.Value{"aws-key-id": secrets.NewValue([]byte("AKIAROTATEDROTATED00")), "aws-secret": secrets.NewValue([]byte("x"))})
	if c, _ := s.keys(rotated); c.AccessKeyID != "AKIAROTATEDROTATED00" {
		t.Fatalf("after rotation: %s", c.AccessKeyID)
	}
	m := mapLookup{"aws-key-id": "AKIAMAPLOOKUP0000001", "aws-secret": "y"}
	if c, _ := s.keys(m); c.AccessKeyID != "AKIAMAPLOOKUP0000001" {
		t.Fatalf("map lookup: %s", c.AccessKeyID)
	}
}

type mapLookup map[string]string

func (m mapLookup) Lookup(ref string) (secrets.Value, bool) {
	v, ok := m[ref]
	return secrets.NewValue([]byte(v)), ok
}
