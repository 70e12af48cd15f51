// Package awssig re-signs an app's AWS requests with SigV4 and the real
// keys (config credential type aws_sigv4), with the AWS SDK for Go v2's
// signer: no SigV4 is written here.
//
// The app signs with placeholder keys (package placeholder writes them as
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY). Prepare accepts a request that
// is unsigned, or signed (Authorization: AWS4-HMAC-SHA256 ...) with an
// access key ID that is exactly a placeholder the process issued for the
// credential's access_key_id_ref (and, if it sends one, a session token
// that is the placeholder of session_token_ref); anything else — another
// key, another scheme, several Authorization values, a presigned query,
// chunk signatures — is refused, so an agent cannot have BotBox sign for
// keys it brought. Prepare then settles the payload hash: UNSIGNED-PAYLOAD
// for S3 over TLS (or the app's STREAMING-UNSIGNED-PAYLOAD-TRAILER, kept:
// the aws-chunked body it describes is not signed either), else the
// SHA-256 of the body, buffered up to the rule's max_request_body_bytes
// (credential.DefaultMaxBody when unset). Apply removes the app's
// Authorization, X-Amz-Date, X-Amz-Security-Token and
// X-Amz-Content-Sha256 (every value, any case) and signs the outbound
// request as it will be sent.
//
// Presigned URLs are out of scope: a request carrying X-Amz-Credential,
// X-Amz-Signature or X-Amz-Algorithm in its query is refused.
package awssig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/secrets"
)

// Payload hash values of X-Amz-Content-Sha256.
const (
	UnsignedPayload          = "UNSIGNED-PAYLOAD"
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	streamingSignedPrefix    = "STREAMING-AWS4-"
	// emptySHA256 is the hex SHA-256 of no bytes.
	emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// The headers the app may have set for its own signature; Apply deletes
// every value of each, under any case, before signing.
var appSigningHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

// Options configures New.
type Options struct {
	// Name is the credential's name (errors, logs).
	Name string
	// AccessKeyIDRef, SecretAccessKeyRef and SessionTokenRef ("" = none)
	// are the secret refs of the real keys.
	AccessKeyIDRef, SecretAccessKeyRef, SessionTokenRef string
	// Region is the signing region.
	Region string
	// Service is the signing name; "" infers it per host (ServiceFor).
	Service string
	// ServiceFor infers the signing name of a host when Service is ""
	// (config.AWSService); ok false refuses the request.
	ServiceFor func(service, host string) (string, bool)
	// Now is the signing clock (default time.Now).
	Now func() time.Time
	// Budget bounds the body buffers of every Signer of the process (nil:
	// no bound).
	Budget *credential.BufferBudget
	// BudgetWait bounds how long a request waits for Budget (default
	// 10s); then it fails with *credential.UnavailableError (503).
	BudgetWait time.Duration
}

// Signer is one aws_sigv4 credential. Safe for concurrent use.
type Signer struct {
	o      Options
	signer *v4.Signer
	// services caches ServiceFor by host (the hosts of the rules that
	// name the credential: a handful).
	services sync.Map // string -> string
	// keys caches the keys resolved from the last snapshot seen (a
	// snapshot is immutable; a rotation makes a new one).
	keyCache atomic.Pointer[resolvedKeys]
}

type resolvedKeys struct {
	from  *secrets.Snapshot
	creds aws.Credentials
}

var _ credential.Credential = (*Signer)(nil)

// New returns the Signer of o.
func New(o Options) (*Signer, error) {
	if o.Name == "" || o.AccessKeyIDRef == "" || o.SecretAccessKeyRef == "" || o.Region == "" {
		return nil, errors.New("awssig: Name, AccessKeyIDRef, SecretAccessKeyRef and Region are required")
	}
	if o.Service == "" && o.ServiceFor == nil {
		return nil, errors.New("awssig: Service or ServiceFor is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BudgetWait <= 0 {
		o.BudgetWait = 10 * time.Second
	}
	// DisableHeaderHoisting: header signing never moves headers to the
	// query (hoisting only applies to presigning anyway).
	return &Signer{o: o, signer: v4.NewSigner(func(so *v4.SignerOptions) { so.DisableHeaderHoisting = true })}, nil
}

// Name implements credential.Credential.
func (s *Signer) Name() string { return s.o.Name }

// Type implements credential.Credential.
func (s *Signer) Type() string { return "aws_sigv4" }

// AcceptsPlaceholder accepts the access key placeholder in Authorization
// and the session token placeholder in X-Amz-Security-Token: Apply
// replaces both.
func (s *Signer) AcceptsPlaceholder(name, ref string) bool {
	switch {
	case strings.EqualFold(name, "Authorization"):
		return ref == s.o.AccessKeyIDRef
	case strings.EqualFold(name, "X-Amz-Security-Token"):
		return s.o.SessionTokenRef != "" && ref == s.o.SessionTokenRef
	}
	return false
}

func (s *Signer) refuse(why string) error {
	return &credential.RefusedError{Credential: s.o.Name, Why: why}
}

// Prepare implements credential.Credential.
func (s *Signer) Prepare(ctx context.Context, req *credential.Request) (credential.Prepared, error) {
	in := req.In
	service := s.o.Service
	if service == "" {
		if v, ok := s.services.Load(req.Host); ok {
			service = v.(string)
		} else {
			if service, ok = s.o.ServiceFor("", req.Host); !ok {
				return nil, s.refuse("the SigV4 service of this host is unknown (set service on the credential)")
			}
			s.services.Store(req.Host, service)
		}
	}
	if presigned(in.URL.RawQuery) {
		return nil, s.refuse("presigned URLs are not supported (X-Amz-Credential/X-Amz-Signature in the query)")
	}
	if err := s.checkSignature(in.Header, req.Placeholders); err != nil {
		return nil, err
	}
	creds, err := s.keys(req.Secrets)
	if err != nil {
		return nil, err
	}
	hash, err := s.payloadHash(ctx, in, service, req)
	if err != nil {
		return nil, err
	}
	return &prepared{s: s, service: service, hash: hash, creds: creds}, nil
}

// checkSignature accepts an unsigned request, or one signed with the
// placeholder access key ID (and, if any, the placeholder session token).
func (s *Signer) checkSignature(h http.Header, ph credential.Placeholders) error {
	auth := values(h, "Authorization")
	token := values(h, "X-Amz-Security-Token")
	if len(auth) == 0 {
		if len(token) > 0 {
			return s.refuse("X-Amz-Security-Token without a signature")
		}
		return nil
	}
	if len(auth) > 1 {
		return s.refuse("more than one Authorization header")
	}
	keyID, ok := ParseAuthorization(auth[0])
	if !ok {
		return s.refuse("Authorization is not a SigV4 (AWS4-HMAC-SHA256) signature")
	}
	if ph == nil || !ph.Issued(s.o.AccessKeyIDRef, keyID) {
		return s.refuse("signed with an access key that is not the credential's placeholder")
	}
	switch {
	case len(token) > 1:
		return s.refuse("more than one X-Amz-Security-Token header")
	case len(token) == 1 && (s.o.SessionTokenRef == "" || !ph.Issued(s.o.SessionTokenRef, token[0])):
		return s.refuse("X-Amz-Security-Token is not the credential's placeholder")
	}
	return nil
}

// payloadHash settles X-Amz-Content-Sha256 and, when it is the body's
// hash, buffers the body into in (bounded).
func (s *Signer) payloadHash(ctx context.Context, in *http.Request, service string, req *credential.Request) (string, error) {
	declared := values(in.Header, "X-Amz-Content-Sha256")
	if len(declared) > 1 {
		return "", s.refuse("more than one X-Amz-Content-Sha256 header")
	}
	app := ""
	if len(declared) == 1 {
		app = declared[0]
	}
	if strings.HasPrefix(app, streamingSignedPrefix) {
		return "", s.refuse("chunk-signed payloads (STREAMING-AWS4-*) cannot be re-signed; use TLS so the SDK sends an unsigned payload")
	}
	unsignedOK := service == "s3" && !req.Cleartext
	if app == streamingUnsignedTrailer {
		if !unsignedOK {
			return "", s.refuse("an unsigned streaming payload is accepted only for S3 over TLS")
		}
		return streamingUnsignedTrailer, nil
	}
	if unsignedOK {
		return UnsignedPayload, nil
	}
	body, err := s.buffer(ctx, in, req.MaxBody)
	if err != nil {
		return "", err
	}
	if len(body) == 0 {
		return emptySHA256, nil
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// buffer reads in's body whole, up to limit (credential.DefaultMaxBody
// when 0), and replaces it with the bytes read. It grows the buffer with
// what arrives: one allocation of the body's size for a body of known
// length up to initialBodyBuffer, doubling steps above it.
func (s *Signer) buffer(ctx context.Context, in *http.Request, limit int64) (_ []byte, err error) {
	if in.Body == nil || in.Body == http.NoBody || in.ContentLength == 0 {
		return nil, nil
	}
	if limit <= 0 {
		limit = credential.DefaultMaxBody
	}
	if in.ContentLength > limit {
		return nil, &credential.BodyTooLargeError{Credential: s.o.Name, Limit: limit}
	}
	// The body's bound is reserved before a byte is read (the declared
	// length, else the limit) and given back when ctx ends — the request's
	// context, cancelled when its handler returns and the buffer is
	// garbage: the buffers of all requests together stay within the
	// process's budget (TestAttackBufferBudget).
	need := limit
	if in.ContentLength > 0 {
		need = in.ContentLength
	}
	wait, cancel := context.WithTimeout(ctx, s.o.BudgetWait)
	release, err := s.o.Budget.Reserve(wait, need)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil:
		// Fail closed and visible, never a wait without end behind
		// bodies that do not arrive.
		return nil, &credential.UnavailableError{Credential: s.o.Name, RetryAfter: time.Second, Err: errBudgetFull}
	case err != nil:
		return nil, fmt.Errorf("credential %q: waiting for body buffer space: %w", s.o.Name, err)
	}
	context.AfterFunc(ctx, release)
	defer func() {
		if err != nil {
			release()
		}
	}()
	var body []byte
	if in.ContentLength > 0 {
		// The declared length (net/http's server ends the body there),
		// allocated as it arrives: a declared length costs nothing until
		// its bytes come (TestAttackDeclaredLengthIsNotPreallocated).
		var err error
		if body, err = readDeclared(in.Body, in.ContentLength); err != nil {
			return nil, fmt.Errorf("credential %q: reading the request body to sign it: %w", s.o.Name, err)
		}
	} else {
		var buf bytes.Buffer
		n, err := buf.ReadFrom(io.LimitReader(in.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("credential %q: reading the request body to sign it: %w", s.o.Name, err)
		}
		if n > limit {
			return nil, &credential.BodyTooLargeError{Credential: s.o.Name, Limit: limit}
		}
		body = buf.Bytes()
	}
	in.Body = &bufferedBody{Reader: bytes.NewReader(body), orig: in.Body}
	// Sent with its length, never chunked: the signature covers
	// Content-Length (TestAttackSigV4EveryListener).
	in.ContentLength, in.TransferEncoding = int64(len(body)), nil
	return body, nil
}

// bufferedBody is the buffered body; Close closes the agent's.
type bufferedBody struct {
	*bytes.Reader
	orig io.Closer
}

func (b *bufferedBody) Close() error { return b.orig.Close() }

// keys resolves the real keys from the request's snapshot (cached for
// the last snapshot seen).
func (s *Signer) keys(l credential.Lookup) (aws.Credentials, error) {
	// Only an immutable snapshot is cached, by its pointer (another Lookup
	// may change, or not even be comparable).
	snap, cacheable := l.(*secrets.Snapshot)
	if k := s.keyCache.Load(); cacheable && snap != nil && k != nil && k.from == snap {
		return k.creds, nil
	}
	c, err := s.resolveKeys(l)
	if err == nil && cacheable && snap != nil {
		s.keyCache.Store(&resolvedKeys{from: snap, creds: c})
	}
	return c, err
}

func (s *Signer) resolveKeys(l credential.Lookup) (aws.Credentials, error) {
	get := func(ref string) (string, error) {
		if l == nil {
			return "", &credential.MissingSecretError{Credential: s.o.Name, Ref: ref}
		}
		v, ok := l.Lookup(ref)
		if !ok || v.Len() == 0 {
			return "", &credential.MissingSecretError{Credential: s.o.Name, Ref: ref}
		}
		return string(v.Reveal()), nil
	}
	var c aws.Credentials
	var err error
	if c.AccessKeyID, err = get(s.o.AccessKeyIDRef); err != nil {
		return c, err
	}
	if c.SecretAccessKey, err = get(s.o.SecretAccessKeyRef); err != nil {
		return c, err
	}
	if s.o.SessionTokenRef != "" {
		if c.SessionToken, err = get(s.o.SessionTokenRef); err != nil {
			return c, err
		}
	}
	return c, nil
}

// prepared is one request's signing state.
type prepared struct {
	s       *Signer
	service string
	hash    string
	creds   aws.Credentials
}

// Apply implements credential.Prepared.
func (p *prepared) Apply(ctx context.Context, out *http.Request) error {
	for k := range out.Header {
		for _, name := range appSigningHeaders {
			if strings.EqualFold(k, name) {
				delete(out.Header, k)
				break
			}
		}
	}
	out.Header["X-Amz-Content-Sha256"] = []string{p.hash}
	err := p.s.signer.SignHTTP(ctx, p.creds, out, p.hash, p.service, p.s.o.Region, p.s.o.Now(), func(o *v4.SignerOptions) {
		// S3 signs the path as sent; every other service escapes it
		// once more (what the SDK's service clients do).
		o.DisableURIPathEscaping = p.service == "s3"
	})
	if err != nil {
		return fmt.Errorf("credential %q: signing: %w", p.s.o.Name, err)
	}
	return nil
}

// values returns every value of the header name under any case of its key.
func values(h http.Header, name string) []string {
	key := textproto.CanonicalMIMEHeaderKey(name)
	out := h[key]
	for k, v := range h {
		if k != key && strings.EqualFold(k, key) {
			out = append(out[:len(out):len(out)], v...)
		}
	}
	return out
}

// presigned reports whether a raw query carries SigV4 query-signing
// parameters (any case, percent-encoded or not).
func presigned(rawQuery string) bool {
	if rawQuery == "" {
		return false
	}
	for piece := range strings.SplitSeq(rawQuery, "&") {
		name, _, _ := strings.Cut(piece, "=")
		if n, err := unescape(name); err == nil {
			name = n
		}
		switch strings.ToLower(name) {
		case "x-amz-credential", "x-amz-signature", "x-amz-algorithm", "x-amz-security-token", "x-amz-signedheaders":
			return true
		}
	}
	return false
}

// errBudgetFull is the error of a body that found no buffer space in time.
var errBudgetFull = errors.New("the signing buffers of all requests are at their budget")

// initialBodyBuffer is the most buffer allocated before any body byte
// arrives; it then doubles with what arrives, up to the declared length.
const initialBodyBuffer = 64 << 10

// readDeclared reads exactly n bytes from r into a buffer that starts at
// min(n, initialBodyBuffer) and doubles, capped at n, only when full.
func readDeclared(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, min(n, initialBodyBuffer))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*int64(cap(buf))))
			copy(grown, buf)
			buf = grown
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		switch {
		case int64(len(buf)) == n:
			return buf, nil
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}
