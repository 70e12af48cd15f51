package awssig

// Outside attacks on SigV4 re-signing (attack playbook classes 3, 4 and
// 10): each test fails when the hole it names is open.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
)

// trickleBody sends n bytes, then fails: an agent that declares a large
// Content-Length and stops sending.
type trickleBody struct{ n int }

func (b *trickleBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	k := min(len(p), b.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	b.n -= k
	return k, nil
}

func (b *trickleBody) Close() error { return nil }

// Class 10: the body buffer must grow with the bytes that arrive, not be
// allocated at the declared Content-Length: else every request that
// declares 16 MiB and sends 10 bytes pins 16 MiB (over HTTP/2, hundreds
// of streams per connection), and the sidecar runs out of memory for the
// price of a request head. Not parallel: it reads the process's
// allocation counter.
func TestAttackDeclaredLengthIsNotPreallocated(t *testing.T) {
	s := newSigner(t, "bedrock", "")
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	const requests = 4
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range requests {
		in := httptest.NewRequest(http.MethodPost, "https://"+host+"/model/x/converse", nil)
		in.Body, in.ContentLength = &trickleBody{n: 10}, credential.DefaultMaxBody
		_, err := s.Prepare(context.Background(), &credential.Request{In: in, Host: host, Secrets: snapshot(false)})
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a body cut short: err = %v, want the read error", err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > requests<<20 {
		t.Fatalf("%d requests that each sent 10 bytes of a declared %d allocated %d bytes (want under 1 MiB each)", requests, credential.DefaultMaxBody, got)
	}
}

// A body that arrives whole is still buffered exactly, under every
// declared length around the growth steps.
func TestAttackBufferGrowsToTheBody(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	for _, n := range []int{1, initialBodyBuffer - 1, initialBodyBuffer, initialBodyBuffer + 1, 5*initialBodyBuffer + 3} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i)
		}
		in := appRequest(t, http.MethodPost, "https://"+host+"/x", body, "", "", "", "")
		out, got, err := forward(t, s, in, host, false, 0, false)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if string(got) != string(body) || out.ContentLength != int64(n) || out.Header.Get("X-Amz-Content-Sha256") != hex.EncodeToString(sum(body)) {
			t.Fatalf("%d bytes: forwarded %d bytes, Content-Length %d, hash %q", n, len(got), out.ContentLength, out.Header.Get("X-Amz-Content-Sha256"))
		}
	}
}

// Class 3: which answer comes back must not tell the agent whether it
// guessed the real access key ID: signed with the real key ID, with a
// key ID one character off, or with any other key, the refusal is the
// same error, word for word.
func TestAttackRefusalIsNoKeyOracle(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "bedrock", "")
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	var first string
	for _, keyID := range []string{realKeyID, realKeyID[:len(realKeyID)-1] + "X", "AKIAOTHEROTHEROTHER1", phKeyID + "X"} {
		in := appRequest(t, http.MethodPost, "https://"+host+"/x", []byte("{}"), keyID, "whatever", "", "")
		_, _, err := forward(t, s, in, host, false, 0, false)
		if _, ok := errors.AsType[*credential.RefusedError](err); !ok {
			t.Fatalf("signed with %q: err = %v, want refused", keyID, err)
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("the refusal differs by key: %q vs %q", err, first)
		}
	}
}

// Class 4: a presigned request in every spelling an origin may decode
// (case, percent-encoded names, '+' and a session token alone) is
// refused: BotBox never adds its signature to a request that carries
// another.
func TestAttackPresignedSpellings(t *testing.T) {
	t.Parallel()
	host := "bucket.s3.us-east-1.amazonaws.com"
	for _, q := range []string{
		"x-amz-signature=00",
		"X-AMZ-CREDENTIAL=k",
		"X%2dAmz%2dAlgorithm=AWS4-HMAC-SHA256",
		"a=1&X-Amz-Security-Token=t",
		"X-Amz-SignedHeaders=host",
		"a=1&&X-Amz-Signature",
	} {
		s := newSigner(t, "", "")
		in := httptest.NewRequest(http.MethodGet, "https://"+host+"/o?"+q, nil)
		_, _, err := forward(t, s, in, host, false, 0, false)
		if _, ok := errors.AsType[*credential.RefusedError](err); !ok {
			t.Errorf("query %q: err = %v, want refused", q, err)
		}
	}
}

func sum(b []byte) []byte { h := sha256.Sum256(b); return h[:] }

// Class 4 / threat b on X-Amz-Copy-Source (the proxy judges the path
// returned as a GET by the rule's routes): a virtual-hosted bucket host
// copies only from its own bucket, whatever the spelling; a path-style
// host keeps the bucket in the path for the routes to judge.
func TestAttackCopySourcePath(t *testing.T) {
	t.Parallel()
	const vh = "my-bucket.s3.us-east-1.amazonaws.com"
	for _, tc := range []struct {
		host, value, want string
		ok                bool
	}{
		{vh, "my-bucket/a/b.txt", "/a/b.txt", true},
		{vh, "/my-bucket/a.txt?versionId=3", "/a.txt", true},
		{vh, "my%2Dbucket/a.txt", "/a.txt", true},
		{vh, "other-bucket/a.txt", "", false},
		{vh, "My-Bucket/a.txt", "", false},
		{vh, "my-bucket.evil/a.txt", "", false},
		{vh, "my-bucket%2Fx/a.txt", "", false},
		{vh, "arn:aws:s3:us-east-1:111122223333:accesspoint/ap/object/a.txt", "", false},
		{vh, "my-bucket", "", false},
		{vh, "my-bucket/", "", false},
		{vh, "", "", false},
		{"my.dotted.bucket.s3-us-west-2.amazonaws.com", "my.dotted.bucket/k", "/k", true},
		{"my.dotted.bucket.s3-us-west-2.amazonaws.com", "my/k", "", false},
		{"s3.us-east-1.amazonaws.com", "any-bucket/k", "/any-bucket/k", true},
		{"minio.local", "b/k%20x", "/b/k%20x", true},
	} {
		got, ok := CopySourcePath(tc.host, tc.value)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CopySourcePath(%q, %q) = %q, %v; want %q, %v", tc.host, tc.value, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzCopySourcePath: on a virtual-hosted bucket host an accepted source
// always names that bucket, and every accepted path starts with '/'.
func FuzzCopySourcePath(f *testing.F) {
	for _, s := range []string{"my-bucket/a", "/other/a?versionId=1", "my%2Dbucket/a", "arn:aws:s3:::x/y", "my-bucket%2Fx/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, ok := CopySourcePath("my-bucket.s3.us-east-1.amazonaws.com", v)
		if !ok {
			return
		}
		bucket, _, _ := strings.Cut(strings.TrimPrefix(v, "/"), "/")
		if name, err := url.PathUnescape(bucket); err != nil || name != "my-bucket" || !strings.HasPrefix(p, "/") {
			t.Fatalf("%q accepted as %q: bucket %q", v, p, bucket)
		}
	})
}

// Class 10: the signing buffers of all requests together stay within the
// process's budget. A request whose body does not fit waits (within its
// context) instead of allocating; the budget comes back when the holding
// request ends (its context: the handler returned) and at once when
// buffering fails, so that neither a failed body nor an empty chunked
// one leaks it.
func TestAttackBufferBudget(t *testing.T) {
	t.Parallel()
	budget := credential.NewBufferBudget(1 << 20)
	s, err := New(Options{Name: "aws", AccessKeyIDRef: "aws-key-id", SecretAccessKeyRef: "aws-secret", Region: "us-east-1",
		Service: "bedrock", ServiceFor: config.AWSService, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	host := "bedrock-runtime.us-east-1.amazonaws.com"
	prepare := func(ctx context.Context, body io.Reader, length, maxBody int64) error {
		in := httptest.NewRequest(http.MethodPost, "https://"+host+"/x", nil)
		in.Body, in.ContentLength = io.NopCloser(body), length
		_, err := s.Prepare(ctx, &credential.Request{In: in, Host: host, MaxBody: maxBody, Secrets: snapshot(false)})
		return err
	}
	big := func() io.Reader { return strings.NewReader(strings.Repeat("a", 800<<10)) }
	holdA, endA := context.WithCancel(context.Background())
	if err := prepare(holdA, big(), 800<<10, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := prepare(short, big(), 800<<10, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second 800 KiB body within a 1 MiB budget: err = %v, want it to wait for the budget", err)
	}
	// An undeclared length reserves the rule's bound: 900 KiB do not fit
	// beside A either.
	short2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := prepare(short2, strings.NewReader(""), -1, 900<<10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a chunked body under a 900 KiB bound beside A: err = %v, want it to wait", err)
	}
	// A bounded wait: then 503 with Retry-After, never a wait without end.
	s.o.BudgetWait = 50 * time.Millisecond
	if err := prepare(context.Background(), big(), 800<<10, 0); !isUnavailable(err) {
		t.Fatalf("budget still full after BudgetWait: err = %v, want *credential.UnavailableError", err)
	}
	s.o.BudgetWait = 10 * time.Second
	endA() // A's handler returned
	waitB, cancelB := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelB()
	holdB, endB := context.WithCancel(waitB)
	if err := prepare(holdB, big(), 800<<10, 0); err != nil {
		t.Fatalf("after A ended: %v", err)
	}
	endB()
	// Failures give the budget back at once, while their context lives.
	live := context.Background()
	for range 3 {
		if err := prepare(live, &trickleBody{n: 10}, 800<<10, 0); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a body cut short: %v", err)
		}
	}
	if err := prepare(waitB, strings.NewReader(strings.Repeat("a", 2000)), -1, 1000); err == nil {
		t.Fatal("a chunked body over its bound was accepted")
	}
	if !budget.Free(waitB) {
		t.Fatal("the budget was not given back")
	}
}

func isUnavailable(err error) bool {
	ue, ok := errors.AsType[*credential.UnavailableError](err)
	return ok && ue.RetryAfter >= time.Second
}
