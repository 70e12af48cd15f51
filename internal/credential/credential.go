// Package credential is the request-side contract of credential brokering:
// a rule's credential (config credentials:) authenticates the requests the
// rule allows with something the app never holds — an AWS SigV4 signature
// made with the real keys (package credential/awssig), or a token BotBox
// mints and refreshes (package credential/mint). Package credential/broker
// builds them from the configuration and owns their lifetimes.
//
// A request goes through two steps. Prepare runs in the proxy's pipeline
// before anything is sent: it judges what the app sent (an AWS request
// signed with any key but the placeholder is refused), gets what Apply
// will need (a token, waiting for a refresh in flight; the real keys from
// the request's secret snapshot) and may read the body (SigV4 hashes it).
// Apply runs on the outbound request as the very last change to its head,
// so that a signature covers the headers as sent.
//
// Errors are typed so the proxy maps each to one status: *RefusedError
// 403 (reason credential_refused), *UnavailableError 503
// (credential_unavailable, with Retry-After), *BodyTooLargeError 413,
// *MissingSecretError 500 (secret_missing). They name the credential and
// secret refs, never a value: no error, log line or metric label of this
// package or its subpackages carries a key, a token or a signature.
package credential

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/botbox/botbox/internal/secrets"
)

// Lookup resolves a secret ref to its value (*secrets.Snapshot).
type Lookup interface {
	Lookup(ref string) (secrets.Value, bool)
}

// Placeholders tells which placeholders the process issued
// (*placeholder.Table); nil when placeholders are off.
type Placeholders interface {
	Issued(ref, s string) bool
}

// Request is what a credential sees of one request in Prepare.
type Request struct {
	// In is the agent's request: its head is final (the tripwire judged
	// it), its body not yet read. Prepare may replace In.Body (and set
	// In.ContentLength) with a buffered copy.
	In *http.Request
	// Host is the canonical host the rule allowed (no port).
	Host string
	// Cleartext is set when the request goes to the origin as plain HTTP.
	Cleartext bool
	// MaxBody is the rule's max_request_body_bytes (0: none set).
	MaxBody int64
	// Secrets is the request's secret snapshot.
	Secrets Lookup
	// Placeholders is the placeholder table in force (nil: off).
	Placeholders Placeholders
}

// Prepared is what Prepare readied for one request.
type Prepared interface {
	// Apply authenticates out, the request about to be sent, after every
	// other change to its head. On error out must not be sent.
	Apply(ctx context.Context, out *http.Request) error
}

// Injected is an immutable set of token values the minted credentials
// hold (each one's current token and the one before it, still valid until
// it expires): what the proxy masks in every scrubbed response
// (broker.Broker.Injected). A signature is derived and needs no entry; the
// keys are secrets of the snapshot, masked as such.
type Injected struct {
	// Values are the token bytes.
	Values [][]byte
	// Refs name, for each value, the credential it belongs to, in scrub
	// reports (a metric label: the credential's name, never a value).
	Refs []string
}

// Credential is one configured credential, as the request path uses it.
type Credential interface {
	// Name is the credential's name (config credentials.<name>).
	Name() string
	// Type is its config type (aws_sigv4, github_app, ...).
	Type() string
	// Prepare judges and readies one request (see the package comment).
	Prepare(ctx context.Context, req *Request) (Prepared, error)
	// AcceptsPlaceholder reports whether header name of a request for
	// this credential may carry the placeholder of secret ref: the
	// credential replaces that header whole (the tripwire asks it).
	AcceptsPlaceholder(name, ref string) bool
}

// RefusedError is a request the credential will not authenticate: signed
// with a key that is not the placeholder, presigned, or otherwise in a
// form it cannot re-sign. 403, reason credential_refused.
type RefusedError struct {
	Credential string
	// Why is a constant phrase, never a value from the request.
	Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("credential %q refused the request: %s", e.Credential, e.Why)
}

// UnavailableError is a credential that has no valid token now (minting
// failed and the last token expired). 503 credential_unavailable with
// Retry-After.
type UnavailableError struct {
	Credential string
	// RetryAfter is when the next attempt is due (at least 1s).
	RetryAfter time.Duration
	// Err is the minting failure; it names endpoints and statuses only.
	Err error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("credential %q has no valid token", e.Credential)
	}
	return fmt.Sprintf("credential %q has no valid token: %v", e.Credential, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// BodyTooLargeError is a body over the bound a credential buffers to hash
// it (the rule's max_request_body_bytes, else DefaultMaxBody). 413.
type BodyTooLargeError struct {
	Credential string
	Limit      int64
}

func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("credential %q: request body over %d bytes cannot be signed", e.Credential, e.Limit)
}

// MissingSecretError is a secret file the credential needs that the
// snapshot does not hold. 500 secret_missing.
type MissingSecretError struct {
	Credential string
	Ref        string
}

func (e *MissingSecretError) Error() string {
	return fmt.Sprintf("secret %q of credential %q not found", e.Ref, e.Credential)
}

// DefaultMaxBody is the largest body a credential buffers to hash it when
// the rule sets no max_request_body_bytes: 16 MiB, memory held per
// request, enough for the JSON APIs that sign their body (a Bedrock
// Converse request with images and documents). docs/config.md says why.
const DefaultMaxBody int64 = 16 << 20

// DefaultBufferBudget bounds the bytes all SigV4 credentials of a
// process hold in body buffers at once: four bodies of DefaultMaxBody.
// Without it the memory of the signing buffers grows with the agent's
// concurrency (HTTP/2 streams × connections × the body bound).
const DefaultBufferBudget int64 = 4 * DefaultMaxBody

// BufferBudget is a process-wide bound on buffered request bodies. A
// request reserves its body's bound before reading it and waits, within
// its context, while the budget is taken; a body larger than the whole
// budget waits for all of it. Safe for concurrent use; nil is no bound.
type BufferBudget struct {
	sem  *semaphore.Weighted
	size int64
}

// NewBufferBudget returns a budget of size bytes.
func NewBufferBudget(size int64) *BufferBudget {
	return &BufferBudget{sem: semaphore.NewWeighted(size), size: size}
}

// Reserve takes n bytes (at most the budget's size) and returns the
// function that gives them back (idempotent). It fails with ctx's error.
func (b *BufferBudget) Reserve(ctx context.Context, n int64) (release func(), err error) {
	if b == nil || n <= 0 {
		return func() {}, nil
	}
	n = min(n, b.size)
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }, nil
}

// Free reports whether the whole budget is free, waiting within ctx for
// the reservations to end (tests).
func (b *BufferBudget) Free(ctx context.Context) bool {
	if err := b.sem.Acquire(ctx, b.size); err != nil {
		return false
	}
	b.sem.Release(b.size)
	return true
}
