package proxy

// Outside attacks on credential brokering in the request path (attack
// playbook): each test fails when the hole it names is open.

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/placeholder"
)

const (
	s3BucketHost   = "my-bucket.s3.us-east-1.amazonaws.com"
	s3RegionalHost = "s3.us-east-1.amazonaws.com"
)

// newS3Env is an env with two S3 rules of one aws_sigv4 credential: an
// exact bucket host (virtual-hosted style) and the regional endpoint
// (path-style) with routes on one bucket's uploads/ prefix, as
// docs/credentials.md recommends.
func newS3Env(t *testing.T) *testEnv {
	t.Helper()
	rules := `    - host: ` + s3BucketHost + `
      action: allow
      credential: s3
    - host: ` + s3RegionalHost + `
      action: allow
      credential: s3
      routes:
        - methods: [GET, PUT]
          paths: ["/shared-bucket/uploads/**"]
          action: allow
`
	creds := `credentials:
  s3:
    type: aws_sigv4
    access_key_id_ref: aws-key-id
    secret_access_key_ref: aws-secret
    region: us-east-1
`
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	e := newEnv(t, envOpts{rules: rules, extraConfig: creds, names: []string{s3BucketHost, s3RegionalHost}, credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	return e
}

// s3Do sends an unsigned S3 request (BotBox signs it) to host through the
// plain listener, with extra headers, and returns the status and reason.
func s3Do(t *testing.T, e *testEnv, method, host, path string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.plain.Listener.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(HeaderReason)
}

// Class 4 / threat b (a request the policy did not mean): S3's
// CopyObject and UploadPartCopy read the object named in
// X-Amz-Copy-Source with the signer's key. A rule for one bucket host, or
// routes on one bucket's prefix, must not let the agent have BotBox sign
// a copy out of another bucket, or out of a prefix the routes do not
// allow, into a place it can then GET. A copy within what the rule allows
// still works.
func TestAttackS3CopySourceOutsideTheRule(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	refused := []struct{ name, host, path, source string }{
		{"another bucket, virtual-hosted", s3BucketHost, "/stolen", "other-bucket/secret.txt"},
		{"another bucket, leading slash", s3BucketHost, "/stolen", "/other-bucket/secret.txt"},
		{"another bucket, encoded", s3BucketHost, "/stolen", "other%2Dbucket/secret.txt"},
		{"an access point ARN", s3BucketHost, "/stolen", "arn:aws:s3:us-east-1:111122223333:accesspoint/ap/object/secret.txt"},
		{"the bucket's name as a prefix", s3BucketHost, "/stolen", "my-bucket.evil/secret.txt"},
		{"path-style, another bucket", s3RegionalHost, "/shared-bucket/uploads/stolen", "other-bucket/secret.txt"},
		{"path-style, a prefix the routes do not allow", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/private/secret.txt"},
		{"path-style, dot segments", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/uploads/../private/secret.txt"},
		{"path-style, encoded slash", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/uploads%2F..%2Fprivate/secret.txt"},
	}
	for _, tc := range refused {
		for _, name := range []string{"X-Amz-Copy-Source", "x-amz-copy-source"} {
			code, reason := s3Do(t, e, http.MethodPut, tc.host, tc.path, map[string]string{name: tc.source})
			if code < 400 || code >= 500 {
				t.Errorf("%s (%s: %s): %d %s, want it refused", tc.name, name, tc.source, code, reason)
			}
		}
	}
	e.assertOriginUntouched()
	for _, tc := range []struct{ name, host, path, source string }{
		{"same bucket, virtual-hosted", s3BucketHost, "/copy", "my-bucket/original.txt"},
		{"same bucket with a version", s3BucketHost, "/copy", "/my-bucket/original.txt?versionId=3"},
		{"path-style, inside the routes", s3RegionalHost, "/shared-bucket/uploads/copy", "shared-bucket/uploads/original.txt"},
	} {
		if code, reason := s3Do(t, e, http.MethodPut, tc.host, tc.path, map[string]string{"X-Amz-Copy-Source": tc.source}); code != http.StatusOK {
			t.Errorf("%s: %d %s, want the copy forwarded", tc.name, code, reason)
		}
	}
	if strings.Contains(e.logs.String(), credRealSecret) {
		t.Error("the logs carry the secret key")
	}
}
