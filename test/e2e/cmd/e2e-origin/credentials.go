package main

import (
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/golang-jwt/jwt/v5"

	"github.com/botbox/botbox/internal/testutil/sigv4check"
	"github.com/botbox/botbox/internal/testutil/tokenserver"
)

// The credential services (credentials_test.go in the suite), each on
// when its flag file is given:
//
//   - -aws-verify FILE (JSON {"key_id","secret","region","service"}):
//     /aws/... answers 401 unless the request verifies as SigV4 with
//     those keys (internal/testutil/sigv4check: recomputed with the AWS
//     SDK's signer from the received request), else the echo, which
//     carries the Authorization received (the real key ID in it).
//   - -github-app FILE (JSON {"app_id","installation_id","repositories",
//     "permissions","public_key_pem"}): a GitHub API
//     (internal/testutil/tokenserver): POST
//     /app/installations/{id}/access_tokens verifies the App JWT and the
//     scope requested, DELETE /installation/token revokes, /gh/... answers
//     the echo when the bearer token is live, else 401.
type credentialServices struct {
	aws *awsVerify
	gh  *tokenserver.Server
}

type awsVerify struct {
	KeyID   string `json:"key_id"`
	Secret  string `json:"secret"`
	Region  string `json:"region"`
	Service string `json:"service"`
}

type githubApp struct {
	AppID          int64             `json:"app_id"`
	InstallationID int64             `json:"installation_id"`
	Repositories   []string          `json:"repositories"`
	Permissions    map[string]string `json:"permissions"`
	PublicKeyPEM   string            `json:"public_key_pem"`
}

func loadCredentialServices(awsFile, githubFile string) (*credentialServices, error) {
	s := &credentialServices{}
	if awsFile != "" {
		s.aws = &awsVerify{}
		if err := readJSON(awsFile, s.aws); err != nil {
			return nil, err
		}
	}
	if githubFile != "" {
		var g githubApp
		if err := readJSON(githubFile, &g); err != nil {
			return nil, err
		}
		var pub *rsa.PublicKey
		pub, err := jwt.ParseRSAPublicKeyFromPEM([]byte(g.PublicKeyPEM))
		if err != nil {
			return nil, fmt.Errorf("-github-app: %w", err)
		}
		s.gh = &tokenserver.Server{AppID: g.AppID, InstallationID: g.InstallationID, Repositories: g.Repositories, Permissions: g.Permissions}
		s.gh.AcceptKey(pub)
	}
	return s, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serve answers the credential services' paths; false: not one of them.
// Their echo also carries the Authorization received in a header.
func (s *credentialServices) serve(w http.ResponseWriter, r *http.Request, writeEcho func()) bool {
	echo := func() {
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		writeEcho()
	}
	switch p := r.URL.Path; {
	case s.aws != nil && strings.HasPrefix(p, "/aws/"):
		body, _ := io.ReadAll(r.Body)
		creds := aws.Credentials{AccessKeyID: s.aws.KeyID, SecretAccessKey: s.aws.Secret}
		if err := sigv4check.Verify(r, body, creds, s.aws.Region, s.aws.Service, time.Now()); err != nil {
			http.Error(w, "signature does not verify: "+err.Error(), http.StatusUnauthorized)
			return true
		}
		echo()
	case s.gh != nil && (strings.HasPrefix(p, "/app/installations/") || p == "/installation/token"):
		s.gh.ServeHTTP(w, r)
	case s.gh != nil && strings.HasPrefix(p, "/gh/"):
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !s.gh.Live(tok) {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return true
		}
		echo()
	default:
		return false
	}
	return true
}
