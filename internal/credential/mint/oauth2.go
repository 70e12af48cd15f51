package mint

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/oauth2/google"

	"github.com/botbox/botbox/internal/credential"
)

// defaultLifetime is the lifetime assumed for a token whose endpoint
// gives no expires_in: it is replaced after that long.
const defaultLifetime = time.Hour

// ClientCredentials mints OAuth 2.0 client-credentials tokens (RFC 6749
// §4.4) with golang.org/x/oauth2/clientcredentials; the client ID and
// secret are read from the secret snapshot at every mint.
type ClientCredentials struct {
	Name                         string
	TokenURL                     string
	ClientIDRef, ClientSecretRef string
	Scopes                       []string
	Client                       *http.Client
	Secrets                      func() credential.Lookup
	Now                          func() time.Time
}

func secret(name string, l credential.Lookup, ref string) (string, error) {
	if l != nil {
		if v, ok := l.Lookup(ref); ok && v.Len() > 0 {
			return string(v.Reveal()), nil
		}
	}
	return "", &credential.MissingSecretError{Credential: name, Ref: ref}
}

// Mint implements Minter.
func (c *ClientCredentials) Mint(ctx context.Context) (Token, error) {
	l := c.Secrets()
	id, err := secret(c.Name, l, c.ClientIDRef)
	if err != nil {
		return Token{}, err
	}
	sec, err := secret(c.Name, l, c.ClientSecretRef)
	if err != nil {
		return Token{}, err
	}
	cfg := clientcredentials.Config{ClientID: id, ClientSecret: sec, TokenURL: c.TokenURL, Scopes: c.Scopes}
	tok, err := cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, c.Client))
	return fromOAuth2(c.TokenURL, tok, err, c.Now)
}

// Revoke implements Minter (client-credentials tokens expire on their own).
func (c *ClientCredentials) Revoke(context.Context, Token) error { return ErrNotRevocable }

// GoogleServiceAccount mints Google access tokens from a service
// account's JSON key (golang.org/x/oauth2/google's JWT config: a JWT
// signed with the key, exchanged at the key's token_uri, which must be
// https).
type GoogleServiceAccount struct {
	Name    string
	KeyRef  string
	Scopes  []string
	Client  *http.Client
	Secrets func() credential.Lookup
	Now     func() time.Time
}

// Mint implements Minter.
func (g *GoogleServiceAccount) Mint(ctx context.Context) (Token, error) {
	key, err := secret(g.Name, g.Secrets(), g.KeyRef)
	if err != nil {
		return Token{}, err
	}
	cfg, err := google.JWTConfigFromJSON([]byte(key), g.Scopes...)
	if err != nil {
		// Its errors describe the JSON's shape, never the key.
		return Token{}, fmt.Errorf("key %q is not a service account JSON key: %w", g.KeyRef, err)
	}
	if u, err := url.Parse(cfg.TokenURL); err != nil || u.Scheme != "https" || u.Host == "" {
		return Token{}, fmt.Errorf("key %q: token_uri must be an https URL", g.KeyRef)
	}
	tok, err := cfg.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, g.Client)).Token()
	return fromOAuth2(cfg.TokenURL, tok, err, g.Now)
}

// Revoke implements Minter (Google access tokens expire on their own).
func (g *GoogleServiceAccount) Revoke(context.Context, Token) error { return ErrNotRevocable }

// fromOAuth2 checks an oauth2 token: a bearer token (token_type empty or
// Bearer), with its expiry (defaultLifetime when none was given). Errors
// keep oauth2's status and error code, never the response body, which may
// echo what was sent.
func fromOAuth2(endpoint string, tok *oauth2.Token, err error, now func() time.Time) (Token, error) {
	if err != nil {
		if re, ok := err.(*oauth2.RetrieveError); ok {
			status := 0
			if re.Response != nil {
				status = re.Response.StatusCode
			}
			return Token{}, fmt.Errorf("token endpoint %s: status %d, error %q", endpoint, status, clipCode(re.ErrorCode))
		}
		return Token{}, fmt.Errorf("token endpoint %s: %w", endpoint, err)
	}
	if tok == nil || tok.AccessToken == "" {
		return Token{}, fmt.Errorf("token endpoint %s: no access_token in the answer", endpoint)
	}
	if tt := tok.TokenType; tt != "" && !strings.EqualFold(tt, "bearer") {
		return Token{}, fmt.Errorf("token endpoint %s: token_type %q is not Bearer", endpoint, clipCode(tt))
	}
	exp := tok.Expiry
	if exp.IsZero() {
		exp = now().Add(defaultLifetime)
	}
	return Token{Value: tok.AccessToken, Expiry: exp}, nil
}

// clipCode bounds an error code from a server (RFC 6749 §5.2: a short
// ASCII token) for an error message.
func clipCode(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
