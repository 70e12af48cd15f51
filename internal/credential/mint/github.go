package mint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/botbox/botbox/internal/credential"
)

// GitHubApp mints installation access tokens of a GitHub App: an RS256
// JWT (iss: the App ID, iat a minute in the past for clock drift, exp
// nine minutes ahead; GitHub refuses more than ten) signed with the
// private key read from the secret snapshot at every mint, then POST
// {api}/app/installations/{id}/access_tokens with the repositories and
// permissions the token is limited to. A token GitHub grants with a
// permission it was not asked for, or a higher level, is refused (fail
// closed). Revoke is DELETE {api}/installation/token with the token.
type GitHubApp struct {
	Name           string
	AppID          int64
	InstallationID int64
	PrivateKeyRef  string
	Repositories   []string
	Permissions    map[string]string
	APIURL         string
	Client         *http.Client
	Secrets        func() credential.Lookup
	Now            func() time.Time
}

// githubAPIVersion is the REST API version BotBox speaks.
const githubAPIVersion = "2022-11-28"

// maxTokenResponse bounds a token endpoint's answer.
const maxTokenResponse = 1 << 20

// appJWT makes the App's JWT from the current private key.
func (g *GitHubApp) appJWT() (string, error) {
	var pem []byte
	if l := g.Secrets(); l != nil {
		if v, ok := l.Lookup(g.PrivateKeyRef); ok {
			pem = v.Reveal()
		}
	}
	if len(pem) == 0 {
		return "", &credential.MissingSecretError{Credential: g.Name, Ref: g.PrivateKeyRef}
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pem)
	if err != nil {
		// jwt's parse errors never quote the key.
		return "", fmt.Errorf("private key %q is not an RSA private key in PEM: %w", g.PrivateKeyRef, err)
	}
	now := g.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(g.AppID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
}

// Mint implements Minter.
func (g *GitHubApp) Mint(ctx context.Context) (Token, error) {
	appJWT, err := g.appJWT()
	if err != nil {
		return Token{}, err
	}
	body := map[string]any{}
	if len(g.Repositories) > 0 {
		body["repositories"] = g.Repositories
	}
	if len(g.Permissions) > 0 {
		body["permissions"] = g.Permissions
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return Token{}, err
	}
	url := g.APIURL + "/app/installations/" + strconv.FormatInt(g.InstallationID, 10) + "/access_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return Token{}, err
	}
	g.head(req, appJWT)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.Client.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return Token{}, fmt.Errorf("POST %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return Token{}, fmt.Errorf("POST %s: status %d (want 201)", url, resp.StatusCode)
	}
	var out struct {
		Token               string            `json:"token"`
		ExpiresAt           time.Time         `json:"expires_at"`
		Permissions         map[string]string `json:"permissions"`
		RepositorySelection string            `json:"repository_selection"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" || out.ExpiresAt.IsZero() {
		return Token{}, fmt.Errorf("POST %s: the answer is not an installation token (token, expires_at)", url)
	}
	err = g.checkGranted(out.Permissions)
	if err == nil && len(g.Repositories) > 0 && out.RepositorySelection != "selected" {
		// Asked for some repositories, granted every one (or said nothing).
		err = fmt.Errorf("GitHub granted repository_selection %q for a token limited to %d repositories; the token was refused", clipCode(out.RepositorySelection), len(g.Repositories))
	}
	if err != nil {
		// Revoke the token it should not have minted.
		_ = g.Revoke(ctx, Token{Value: out.Token})
		return Token{}, err
	}
	return Token{Value: out.Token, Expiry: out.ExpiresAt}, nil
}

var permissionLevel = map[string]int{"read": 1, "write": 2, "admin": 3}

// checkGranted refuses a grant wider than what was asked for.
func (g *GitHubApp) checkGranted(granted map[string]string) error {
	if len(g.Permissions) == 0 {
		return nil
	}
	for name, level := range granted {
		want, asked := g.Permissions[name]
		if name == "metadata" && level == "read" {
			continue // GitHub adds metadata: read to every token
		}
		if !asked || permissionLevel[level] > permissionLevel[want] || permissionLevel[level] == 0 {
			return fmt.Errorf("GitHub granted permission %q at level %q, more than requested; the token was refused", name, level)
		}
	}
	return nil
}

func (g *GitHubApp) head(req *http.Request, bearer string) {
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("X-GitHub-Api-Version", githubAPIVersion)
	req.Header.Set("User-Agent", "botbox")
}

// Revoke implements Minter: DELETE /installation/token (204).
func (g *GitHubApp) Revoke(ctx context.Context, tok Token) error {
	url := g.APIURL + "/installation/token"
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		return err
	}
	g.head(req, tok.Value)
	resp, err := g.Client.Do(req)
	if err != nil {
		return fmt.Errorf("DELETE %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxTokenResponse))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("DELETE %s: status %d (want 204)", url, resp.StatusCode)
	}
	return nil
}

// ReachesOwnEndpoint reports whether escapedPath (a request's, as the
// agent sent it) may be read as {api}/installation/token, where GitHub
// revokes the bearer token: decoded (up to three times), case-folded,
// backslashes as slashes, cut at ';', dot segments and repeated or
// trailing slashes and dots removed, a format suffix ("token.json")
// dropped. Any method: GitHub serves nothing else there.
func (g *GitHubApp) ReachesOwnEndpoint(escapedPath string) bool {
	base := ""
	if u, err := url.Parse(g.APIURL); err == nil {
		base = strings.TrimSuffix(u.Path, "/")
	}
	p := escapedPath
	for range 3 {
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
	}
	p = strings.ToLower(strings.ReplaceAll(p, `\`, "/"))
	p, _, _ = strings.Cut(p, ";")
	p = strings.TrimRight(path.Clean("/"+p), "/. ")
	want := strings.ToLower(base) + "/installation/token"
	return p == want || strings.HasPrefix(p, want+".")
}

var errNoClient = errors.New("mint: no HTTP client")
