// Package broker builds the credentials of a configuration (config
// credentials:) and owns their lifetimes: it starts the minted tokens'
// refresh loops, reports readiness (every minted credential has its first
// token) and, when its Run ends, revokes what can be revoked. The proxy
// reaches a credential through Broker.Credential.
//
// The set of credentials is fixed for the process: a configuration
// reload that changes it is refused by package server (tokens minted for
// this Pod are revoked only at its end).
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/credential/awssig"
	"github.com/botbox/botbox/internal/credential/mint"
	"github.com/botbox/botbox/internal/upstream"
)

// Options configures New.
type Options struct {
	// Credentials are the configuration's credentials.
	Credentials []config.Credential
	// Secrets supplies the key files of minted credentials (the private
	// key is read anew for every token, so a rotated file is used from
	// the next one on).
	Secrets func() credential.Lookup
	// Client reaches the token endpoints: BotBox's upstream transport
	// behind the address guard, verified TLS, no redirects (NewClient).
	Client *http.Client
	// Registerer receives the credential metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives refresh failures and revocations (names only).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RevokeTimeout bounds the revocations at the end of Run (default 5s).
	RevokeTimeout time.Duration
}

// Broker holds the credentials by name. Safe for concurrent use.
type Broker struct {
	creds         map[string]credential.Credential
	sources       []*mint.Source
	tokens        atomic.Pointer[tokenSet]
	revokeTimeout time.Duration
	log           *slog.Logger
}

// New builds every credential of o.Credentials. Nothing is minted before
// Run.
func New(o Options) (*Broker, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RevokeTimeout <= 0 {
		o.RevokeTimeout = 5 * time.Second
	}
	b := &Broker{creds: map[string]credential.Credential{}, revokeTimeout: o.RevokeTimeout, log: o.Logger}
	var metrics *mint.Metrics
	budget := credential.NewBufferBudget(credential.DefaultBufferBudget)
	for _, c := range o.Credentials {
		if c.Type == config.CredentialAWSSigV4 {
			s, err := awssig.New(awssig.Options{Name: c.Name, AccessKeyIDRef: c.AccessKeyIDRef, SecretAccessKeyRef: c.SecretAccessKeyRef,
				SessionTokenRef: c.SessionTokenRef, Region: c.Region, Service: c.Service, ServiceFor: config.AWSService, Now: o.Now, Budget: budget})
			if err != nil {
				return nil, fmt.Errorf("credential %q: %w", c.Name, err)
			}
			b.creds[c.Name] = s
			continue
		}
		if o.Client == nil || o.Secrets == nil {
			return nil, errors.New("broker: Client and Secrets are required for minted credentials")
		}
		if metrics == nil {
			metrics = mint.NewMetrics(o.Registerer)
		}
		m, err := mint.NewMinter(c, o.Client, o.Secrets, o.Now)
		if err != nil {
			return nil, fmt.Errorf("credential %q: %w", c.Name, err)
		}
		src := mint.NewSource(mint.SourceOptions{Name: c.Name, Type: c.Type, Minter: m, Metrics: metrics, Logger: o.Logger, Now: o.Now})
		b.sources = append(b.sources, src)
		b.creds[c.Name] = src
	}
	return b, nil
}

// Credential returns the credential named name.
func (b *Broker) Credential(name string) (credential.Credential, bool) {
	if b == nil {
		return nil, false
	}
	c, ok := b.creds[name]
	return c, ok
}

// Injected returns every token the minted credentials hold now (each
// one's current and previous token), as one immutable set: what the proxy
// scrubs from every scrubbed response, not only from the responses of the
// rule that sent the token (a token stored by one origin must not be read
// back through another). The same pointer is returned until a token
// changes; nil when there is none.
func (b *Broker) Injected() *credential.Injected {
	if b == nil || len(b.sources) == 0 {
		return nil
	}
	if c := b.tokens.Load(); c != nil && b.current(c) {
		return c.all // the per-request path: no allocation
	}
	gens := make([]*credential.Injected, 0, len(b.sources))
	for _, s := range b.sources {
		gens = append(gens, s.Tokens())
	}
	all := &credential.Injected{}
	for _, g := range gens {
		if g != nil {
			all.Values = append(all.Values, g.Values...)
			all.Refs = append(all.Refs, g.Refs...)
		}
	}
	if len(all.Values) == 0 {
		all = nil
	}
	b.tokens.Store(&tokenSet{gens: gens, all: all})
	return all
}

// current reports whether c was built from every source's token
// generation in force.
func (b *Broker) current(c *tokenSet) bool {
	for i, s := range b.sources {
		if s.Tokens() != c.gens[i] {
			return false
		}
	}
	return true
}

// tokenSet caches Injected: the per-source generations it was built from.
type tokenSet struct {
	gens []*credential.Injected
	all  *credential.Injected
}

// Ready reports whether every minted credential holds a valid token.
func (b *Broker) Ready() bool {
	if b == nil {
		return true
	}
	for _, s := range b.sources {
		if !s.Valid() {
			return false
		}
	}
	return true
}

// Run keeps every minted credential's token fresh until ctx is done, then
// revokes the tokens that can be revoked (github_app) within the revoke
// timeout, and returns.
func (b *Broker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range b.sources {
		wg.Go(func() { s.Run(ctx) })
	}
	wg.Wait()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.revokeTimeout)
	defer cancel()
	var errs []error
	for _, s := range b.sources {
		if err := s.Revoke(rctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NewClient returns the HTTP client of the token endpoints: rt (BotBox's
// upstream transport: verified TLS, system roots plus upstream_ca_file)
// with every request's dials judged by policy(host) (the address guard in
// force), and no redirects followed: a token request carries the client
// secret or a signed assertion, and a redirect could take it to another
// host.
func NewClient(rt http.RoundTripper, policy func(host string) upstream.DialPolicy) *http.Client {
	return &http.Client{
		Transport: guarded{next: rt, policy: policy},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("token endpoints may not redirect")
		},
		Timeout: 30 * time.Second,
	}
}

type guarded struct {
	next   http.RoundTripper
	policy func(host string) upstream.DialPolicy
}

func (g guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("token endpoint %s is not https", req.URL.Redacted())
	}
	return g.next.RoundTrip(req.WithContext(upstream.WithDialPolicy(req.Context(), g.policy(req.URL.Hostname()))))
}
