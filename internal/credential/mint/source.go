// Package mint holds the credentials whose token BotBox mints from a
// long-lived key: github_app (an installation token narrowed to
// repositories and permissions, revoked at shutdown),
// oauth2_client_credentials and google_service_account (golang.org/x/oauth2).
//
// A Source keeps one credential's token: minted at start (Run), again
// before it expires (a quarter of its lifetime before, at most five
// minutes), and on demand when a request finds none valid. One mint is in
// flight per credential at a time: every request that needs a token while
// one is being minted waits for it (TestOneRefreshUnderConcurrency). A
// failed mint is retried with back-off (1s doubling to 30s); while no
// valid token exists, requests fail at once with a
// *credential.UnavailableError whose RetryAfter is the next attempt (503
// credential_unavailable). Tokens live in memory only; the Source hands
// each request the current one and the one before it (still valid until
// it expires) for response scrubbing, never logs or labels them.
package mint

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/telemetry"
)

// Token is a minted token and when it expires.
type Token struct {
	Value  string
	Expiry time.Time
}

// Minter mints and revokes one credential's tokens. Errors name
// endpoints and statuses, never a key or a token.
type Minter interface {
	// Mint returns a fresh token.
	Mint(ctx context.Context) (Token, error)
	// Revoke invalidates tok at its issuer; ErrNotRevocable when the type
	// has no revocation.
	Revoke(ctx context.Context, tok Token) error
}

// errNotRevocable is Revoke's error for a type without revocation.
type errNotRevocable struct{}

func (errNotRevocable) Error() string { return "tokens of this type cannot be revoked" }

// ErrNotRevocable is Revoke's error for a type without revocation.
var ErrNotRevocable error = errNotRevocable{}

// Back-off of failed mints.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
	// maxMargin bounds how long before expiry a token is replaced.
	maxMargin = 5 * time.Minute
)

// SourceOptions configures NewSource.
type SourceOptions struct {
	Name, Type string
	Minter     Minter
	Metrics    *Metrics
	Logger     *slog.Logger
	Now        func() time.Time
}

// Source is one minted credential. It implements credential.Credential.
// Safe for concurrent use.
type Source struct {
	o SourceOptions

	mu       sync.Mutex
	cur      *held
	prev     *held         // the token cur replaced (revoked at the end too)
	inflight chan struct{} // closed when the mint in flight ends
	lastErr  error         // the last mint's error (nil after a success)
	failures int           // consecutive failed mints
	retryAt  time.Time     // when the next mint may start after a failure
	ended    bool          // Revoke ran: nothing is minted any more
}

// held is one token generation: the token, when it is due for
// replacement, and what a request injects (current and previous token).
type held struct {
	tok      Token
	minted   time.Time
	injected *credential.Injected
	header   []string // the Authorization value, cap 1 (shared, never appended to in place)
}

var _ credential.Credential = (*Source)(nil)

// NewSource returns the Source of o (nothing minted yet).
func NewSource(o SourceOptions) *Source {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Source{o: o}
	if o.Metrics != nil {
		o.Metrics.add(s)
	}
	return s
}

// Name implements credential.Credential.
func (s *Source) Name() string { return s.o.Name }

// Type implements credential.Credential.
func (s *Source) Type() string { return s.o.Type }

// AcceptsPlaceholder implements credential.Credential: the app is given
// no placeholder of a minted credential's keys, so none is accepted.
func (s *Source) AcceptsPlaceholder(string, string) bool { return false }

// skew is how long before its expiry a token stops being used: a tenth of
// its lifetime, at most 10 s, so a request never leaves with a token about
// to expire on the way.
func skew(h *held) time.Duration {
	return min(10*time.Second, h.tok.Expiry.Sub(h.minted)/10)
}

// margin is how long before its expiry a token is replaced.
func margin(h *held) time.Duration {
	return min(maxMargin, h.tok.Expiry.Sub(h.minted)/4)
}

func (s *Source) validLocked(now time.Time) bool {
	return s.cur != nil && now.Before(s.cur.tok.Expiry.Add(-skew(s.cur)))
}

// Tokens returns the current token generation's values (current and
// previous token; nil before the first): immutable, the same pointer until
// the next mint.
func (s *Source) Tokens() *credential.Injected {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil
	}
	return s.cur.injected
}

// Valid reports whether the Source holds a token that may be used now.
func (s *Source) Valid() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validLocked(s.o.Now())
}

// expiry returns the current token's expiry (zero when none).
func (s *Source) expiry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return time.Time{}
	}
	return s.cur.tok.Expiry
}

// current returns a valid token, minting one (or waiting for the mint in
// flight) when there is none. It fails with *credential.UnavailableError.
func (s *Source) current(ctx context.Context) (*held, error) {
	for {
		s.mu.Lock()
		now := s.o.Now()
		if s.validLocked(now) {
			h := s.cur
			s.mu.Unlock()
			return h, nil
		}
		if s.ended {
			s.mu.Unlock()
			return nil, &credential.UnavailableError{Credential: s.o.Name, RetryAfter: minBackoff, Err: errEnded}
		}
		if s.inflight == nil && s.lastErr != nil && now.Before(s.retryAt) {
			err := s.unavailableLocked(now)
			s.mu.Unlock()
			return nil, err
		}
		wait := s.startLocked(ctx)
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, &credential.UnavailableError{Credential: s.o.Name, RetryAfter: minBackoff, Err: context.Cause(ctx)}
		}
		s.mu.Lock()
		now = s.o.Now()
		if s.validLocked(now) {
			h := s.cur
			s.mu.Unlock()
			return h, nil
		}
		if s.lastErr != nil {
			err := s.unavailableLocked(now)
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
	}
}

func (s *Source) unavailableLocked(now time.Time) error {
	return &credential.UnavailableError{Credential: s.o.Name, RetryAfter: max(minBackoff, s.retryAt.Sub(now)), Err: s.lastErr}
}

// startLocked starts a mint unless one is in flight, and returns the
// channel closed when the mint in flight ends. The mint runs on its own
// goroutine, detached from the request that asked (a request that goes
// away does not cancel the others' token).
func (s *Source) startLocked(ctx context.Context) <-chan struct{} {
	if s.inflight != nil {
		return s.inflight
	}
	done := make(chan struct{})
	s.inflight = done
	go s.mint(context.WithoutCancel(ctx), done)
	return done
}

// mintTimeout bounds one mint.
const mintTimeout = 30 * time.Second

func (s *Source) mint(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, mintTimeout)
	defer cancel()
	tok, err := s.o.Minter.Mint(ctx)
	s.mu.Lock()
	defer func() {
		s.inflight = nil
		close(done)
		s.mu.Unlock()
	}()
	now := s.o.Now()
	if err == nil && !tok.Expiry.After(now) {
		err = errExpired
	}
	if err != nil {
		s.failures++
		s.lastErr = err
		s.retryAt = now.Add(backoff(s.failures))
		s.o.Metrics.refresh(s.o.Name, resultError)
		s.o.Logger.Warn("credential token could not be minted", slog.String(telemetry.KeyCredential, s.o.Name), slog.String(telemetry.KeyError, err.Error()))
		return
	}
	inj := &credential.Injected{Refs: []string{s.o.Name}, Values: [][]byte{[]byte(tok.Value)}}
	if s.cur != nil && s.cur.tok.Value != tok.Value && now.Before(s.cur.tok.Expiry) {
		inj.Values = append(inj.Values, []byte(s.cur.tok.Value))
		inj.Refs = append(inj.Refs, s.o.Name)
	}
	prev := s.cur
	bearer := "Bearer " + tok.Value
	s.cur = &held{tok: tok, minted: now, injected: inj, header: []string{bearer}[:1:1]}
	s.failures, s.lastErr, s.retryAt = 0, nil, time.Time{}
	s.o.Metrics.refresh(s.o.Name, resultOK)
	if prev != nil && prev.tok.Value != tok.Value {
		s.prev = prev
	}
}

// errEnded is the error of a request after Revoke (the Pod is ending).
var errEnded = errorString("the credential's tokens were revoked at shutdown")

// errExpired is the error of a mint whose token is already expired.
var errExpired = errorString("the token endpoint returned a token that is already expired")

type errorString string

func (e errorString) Error() string { return string(e) }

func backoff(failures int) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// Run mints the first token and keeps it fresh until ctx is done.
func (s *Source) Run(ctx context.Context) {
	for {
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			return
		}
		now := s.o.Now()
		var wait time.Duration
		switch {
		case s.inflight != nil:
			wait = minBackoff / 10
		case s.lastErr != nil:
			wait = s.retryAt.Sub(now)
		case s.cur != nil:
			wait = s.cur.tok.Expiry.Add(-margin(s.cur)).Sub(now)
		}
		var done <-chan struct{}
		if wait <= 0 {
			done = s.startLocked(ctx)
		}
		s.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// Revoke revokes the current token and the one before it, where the type
// can (github_app); the Source then holds none and mints no more (a
// request that outlived the drain gets 503, never a token that would
// outlive the Pod: TestAttackNoMintAfterRevoke). A mint in flight is
// waited for (within ctx) so that its token is revoked too.
func (s *Source) Revoke(ctx context.Context) error {
	s.mu.Lock()
	s.ended = true
	if wait := s.inflight; wait != nil {
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		s.mu.Lock()
	}
	toks := []*held{s.cur, s.prev}
	s.cur, s.prev = nil, nil
	s.mu.Unlock()
	var first error
	for _, h := range toks {
		if h == nil || !s.o.Now().Before(h.tok.Expiry) {
			continue
		}
		err := s.o.Minter.Revoke(ctx, h.tok)
		switch {
		case err == ErrNotRevocable:
			return nil
		case err != nil:
			s.o.Metrics.revoke(s.o.Name, resultError)
			s.o.Logger.Warn("credential token could not be revoked", slog.String(telemetry.KeyCredential, s.o.Name), slog.String(telemetry.KeyError, err.Error()))
			if first == nil {
				first = err
			}
		default:
			s.o.Metrics.revoke(s.o.Name, resultOK)
			s.o.Logger.Info("credential token revoked", slog.String(telemetry.KeyCredential, s.o.Name))
		}
	}
	return first
}

// ownEndpoints is implemented by a Minter whose token may be sent to an
// endpoint that acts on the token itself (GitHub's revocation).
type ownEndpoints interface {
	// ReachesOwnEndpoint reports whether a request for the escaped path
	// may reach such an endpoint under any reading the issuer may make.
	ReachesOwnEndpoint(escapedPath string) bool
}

// Prepare implements credential.Credential: a valid token (waiting for
// the mint in flight), sent as Authorization: Bearer. A request that may
// reach an endpoint acting on the token itself is refused: the agent
// must not have BotBox revoke the Pod's token
// (TestAttackAgentCannotRevokeTheToken).
func (s *Source) Prepare(ctx context.Context, req *credential.Request) (credential.Prepared, error) {
	if o, ok := s.o.Minter.(ownEndpoints); ok && req != nil && req.In != nil && o.ReachesOwnEndpoint(req.In.URL.EscapedPath()) {
		return nil, &credential.RefusedError{Credential: s.o.Name, Why: "the token is never sent to its own revocation endpoint"}
	}
	h, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Apply implements credential.Prepared: every Authorization value the
// app sent (any case) is replaced by the token.
func (h *held) Apply(_ context.Context, out *http.Request) error {
	for k := range out.Header {
		if strings.EqualFold(k, "Authorization") {
			delete(out.Header, k)
		}
	}
	out.Header["Authorization"] = h.header
	return nil
}
