// Package tokenserver holds test token endpoints that verify what the
// real ones verify, and count what they did:
//
//   - GitHub: POST /app/installations/{id}/access_tokens checks the App JWT
//     (RS256 with a registered public key, iss = the App ID, iat not in
//     the future, exp after now and at most 10 minutes after iat, as
//     GitHub does), the installation and the exact repositories and
//     permissions requested; DELETE /installation/token revokes the
//     bearer token; any other path answers with the Authorization it
//     received if the token is live (an API that echoes it), else 401.
//   - OAuth2 client credentials (RFC 6749 §4.4): POST /token checks the
//     client ID and secret (HTTP Basic or the form), the grant type and
//     the scope.
//   - Google: POST /google/token checks the JWT-bearer assertion (RS256
//     with the service account's key, iss = its email, aud = the token
//     URL, the scope).
//
// Fail makes every mint answer 500 until cleared; Gate, when set, holds
// each mint until it is closed.
package tokenserver

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Server is the state of the test endpoints. Configure its fields before
// serving; the counters are safe to read at any time.
type Server struct {
	// Now is the server's clock (default time.Now).
	Now func() time.Time
	// Lifetime is the lifetime of the tokens it issues (default 1h).
	Lifetime time.Duration

	// GitHub.
	AppID          int64
	InstallationID int64
	Repositories   []string
	Permissions    map[string]string

	// OAuth2.
	ClientID, ClientSecret string
	Scope                  string

	// Google.
	ClientEmail string
	TokenURL    string // the aud the assertion must have

	Mints, Revocations, Refused atomic.Int64
	Fail                        atomic.Bool
	Gate                        atomic.Pointer[chan struct{}]

	mu   sync.Mutex
	keys []*rsa.PublicKey // accepted App / service account keys
	live map[string]bool  // issued, not revoked
}

// AcceptKey makes k's signatures valid (a rotated key: add the new one,
// DropKeys the old one).
func (s *Server) AcceptKey(k *rsa.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, k)
}

// DropKeys forgets every accepted key.
func (s *Server) DropKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
}

// Issued returns every token issued and not revoked.
func (s *Server) Issued() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.live))
}

// Live reports whether tok was issued and not revoked.
func (s *Server) Live(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[tok]
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) lifetime() time.Duration {
	if s.Lifetime > 0 {
		return s.Lifetime
	}
	return time.Hour
}

func (s *Server) issue(prefix string) string {
	b := make([]byte, 27)
	_, _ = rand.Read(b)
	tok := prefix + base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live = map[string]bool{}
	}
	s.live[tok] = true
	s.Mints.Add(1)
	return tok
}

func (s *Server) refuse(w http.ResponseWriter, status int, why string) {
	s.Refused.Add(1)
	http.Error(w, why, status)
}

// hold waits for the gate and reports whether to fail.
func (s *Server) hold() bool {
	if g := s.Gate.Load(); g != nil {
		<-*g
	}
	return s.Fail.Load()
}

// verifyJWT checks an RS256 JWT against the accepted keys.
func (s *Server) verifyJWT(raw string, claims jwt.Claims) error {
	s.mu.Lock()
	keys := slices.Clone(s.keys)
	s.mu.Unlock()
	var last error = fmt.Errorf("no key accepted")
	for _, k := range keys {
		_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return k, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(s.now), jwt.WithIssuedAt(), jwt.WithExpirationRequired())
		if err == nil {
			return nil
		}
		last = err
	}
	return last
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/app/installations/"+strconv.FormatInt(s.InstallationID, 10)+"/access_tokens":
		s.githubMint(w, r)
	case r.Method == http.MethodDelete && r.URL.Path == "/installation/token":
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		ok := s.live[tok]
		delete(s.live, tok)
		s.mu.Unlock()
		if !ok {
			s.refuse(w, http.StatusUnauthorized, "bad credentials")
			return
		}
		s.Revocations.Add(1)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && r.URL.Path == "/token":
		s.oauth2Mint(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/google/token":
		s.googleMint(w, r)
	default:
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !s.Live(tok) {
			s.refuse(w, http.StatusUnauthorized, "bad credentials")
			return
		}
		// An API that echoes what it received, Authorization included.
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "authorization": r.Header.Get("Authorization")})
	}
}

func (s *Server) githubMint(w http.ResponseWriter, r *http.Request) {
	if s.hold() {
		s.refuse(w, http.StatusInternalServerError, "unavailable")
		return
	}
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var claims jwt.RegisteredClaims
	if !ok || s.verifyJWT(raw, &claims) != nil {
		s.refuse(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	if claims.Issuer != strconv.FormatInt(s.AppID, 10) || claims.IssuedAt == nil ||
		claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute+time.Second {
		s.refuse(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future")
		return
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil ||
		!slices.Equal(body.Repositories, s.Repositories) || !maps.Equal(body.Permissions, s.Permissions) {
		s.refuse(w, http.StatusUnprocessableEntity, "repositories or permissions not as configured")
		return
	}
	tok := s.issue("ghs_")
	granted := maps.Clone(s.Permissions)
	if granted == nil {
		granted = map[string]string{}
	}
	granted["metadata"] = "read"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_at": s.now().Add(s.lifetime()).UTC().Format(time.RFC3339),
		"permissions": granted, "repository_selection": "selected"})
}

func (s *Server) oauth2Mint(w http.ResponseWriter, r *http.Request) {
	if s.hold() {
		s.refuse(w, http.StatusInternalServerError, "unavailable")
		return
	}
	if err := r.ParseForm(); err != nil {
		s.refuse(w, http.StatusBadRequest, "bad form")
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != s.ClientID || secret != s.ClientSecret || s.ClientSecret == "" {
		w.Header().Set("Content-Type", "application/json")
		s.Refused.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	if r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != s.Scope {
		s.refuse(w, http.StatusBadRequest, `{"error":"invalid_scope"}`)
		return
	}
	s.tokenAnswer(w, s.issue("oat_"))
}

func (s *Server) googleMint(w http.ResponseWriter, r *http.Request) {
	if s.hold() {
		s.refuse(w, http.StatusInternalServerError, "unavailable")
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		s.refuse(w, http.StatusBadRequest, `{"error":"unsupported_grant_type"}`)
		return
	}
	var claims struct {
		jwt.RegisteredClaims
		Scope string `json:"scope"`
	}
	if err := s.verifyJWT(r.PostForm.Get("assertion"), &claims); err != nil ||
		claims.Issuer != s.ClientEmail || !slices.Contains(claims.Audience, s.TokenURL) || claims.Scope != s.Scope {
		s.refuse(w, http.StatusBadRequest, `{"error":"invalid_grant"}`)
		return
	}
	s.tokenAnswer(w, s.issue("ya29."))
}

func (s *Server) tokenAnswer(w http.ResponseWriter, tok string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(s.lifetime() / time.Second)})
}
