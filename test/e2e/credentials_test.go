package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// rulesCredentials: api.example.test is "AWS" (SigV4 re-signed with the
// real keys, service bedrock), other.example.test is "GitHub" (a minted
// installation token; its API, token endpoint included, is the origin).
const rulesCredentials = `
    - host: api.example.test
      action: allow
      credential: aws
    - host: other.example.test
      action: allow
      credential: github
`

const credentialsConfig = `credentials:
  aws:
    type: aws_sigv4
    access_key_id_ref: aws-access-key-id
    secret_access_key_ref: aws-secret-access-key
    region: us-east-1
    service: bedrock
  github:
    type: github_app
    app_id: 4242
    private_key_ref: github-app-key
    installation_id: 99
    repositories: [acme/app]
    permissions: {contents: read}
    api_url: https://other.example.test
`

// TestCredentialsNeverReachTheApp: the app (UID 1000) gets placeholder
// AWS keys in the env file, signs a Bedrock-shaped request with them; the
// origin verifies the SigV4 signature against the real keys (recomputed
// from the request it received) and echoes the Authorization it got, and
// the app's copy of that echo has the real key ID masked. A GitHub App
// token is minted by BotBox at the origin's token endpoint (JWT verified,
// scope checked), sent in place of the app's own Authorization, echoed
// back masked, and revoked when BotBox stops. Nothing the app can read —
// its env file, its placeholder files, every response — holds a real key
// or token, and the Secret volume is not readable by it (in a Pod it is
// mounted into BotBox's container only).
func TestCredentialsNeverReachTheApp(t *testing.T) {
	t.Parallel()
	realKeyID, realSecret := "AKIA"+strings.ToUpper(randomHex(t, 8)), "aws-secret-"+randomHex(t, 15)
	appKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(appKey)}))
	pubDER, _ := x509.MarshalPKIXPublicKey(&appKey.PublicKey)
	pubPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))

	p := newPod(t, podConfig{
		rules: rulesCredentials, placeholders: true, extraConfig: credentialsConfig,
		secrets: map[string]string{"aws-access-key-id": realKeyID, "aws-secret-access-key": realSecret, "github-app-key": keyPEM},
		originArgs: func(t *testing.T, p *pod) []string {
			awsFile, ghFile := filepath.Join(p.dir, "aws-verify.json"), filepath.Join(p.dir, "github-app.json")
			writeJSON(t, awsFile, map[string]any{"key_id": realKeyID, "secret": realSecret, "region": "us-east-1", "service": "bedrock"})
			writeJSON(t, ghFile, map[string]any{"app_id": 4242, "installation_id": 99, "repositories": []string{"app"},
				"permissions": map[string]string{"contents": "read"}, "public_key_pem": pubPEM})
			return []string{"-aws-verify", awsFile, "-github-app", ghFile}
		},
	})
	// The Secret volume is BotBox's: in a Pod the app's container does not
	// mount it; here the namespaces share one file system, so close it.
	if err := os.Chown(p.secrets.dir, uidBotBox, uidBotBox); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.secrets.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if r, _ := p.waitHealthz(t, http.StatusOK, 20*time.Second); r.Status != http.StatusOK {
		t.Fatalf("BotBox not ready (the GitHub token is minted first): %d %s", r.Status, r.Body)
	}

	secretsOfPod := []string{realKeyID, realSecret, "PRIVATE KEY"}
	// The app's files: the placeholder directory, and the Secret volume it
	// cannot read.
	envFile, _, code := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.dir, "placeholders", "env"))
	if code != 0 {
		t.Fatal("the app cannot read its env file")
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(envFile), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = strings.Trim(v, "'")
	}
	if env["AWS_ACCESS_KEY_ID"] == "" || env["AWS_SECRET_ACCESS_KEY"] == "" || len(env["AWS_ACCESS_KEY_ID"]) != len(realKeyID) {
		t.Fatalf("env file lacks the AWS placeholders: %q", envFile)
	}
	all, _, _ := p.run(t, p.podNS, uidApp, nil, "sh", "-c", "cat "+filepath.Join(p.dir, "placeholders")+"/*")
	if _, _, code := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.secrets.dir, "aws-secret-access-key")); code == 0 {
		t.Error("the app can read the Secret volume")
	}

	// AWS: signed by the app with the placeholders, re-signed by BotBox.
	mark := p.mark(t)
	out, errOut, code := p.run(t, p.podNS, uidApp, []string{"AWS_ACCESS_KEY_ID=" + env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY=" + env["AWS_SECRET_ACCESS_KEY"]},
		p.bins.client, "http", "-url", "http://api.example.test/aws/model/anthropic.claude/converse", "-method", "POST",
		"-H", "Content-Type: application/json", "-data", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`, "-sigv4", "bedrock/us-east-1")
	var aws wire.Result
	if code != 0 || json.Unmarshal([]byte(out), &aws) != nil {
		t.Fatalf("e2e-client: exit %d %s %s", code, out, errOut)
	}
	if aws.Status != http.StatusOK {
		t.Fatalf("SigV4 request: %d %s (the origin verifies the signature with the real keys)", aws.Status, aws.Body)
	}
	if ev := p.httpEvent(t, mark, "/aws/model/anthropic.claude/converse"); !strings.Contains(strings.Join(ev.Header["Authorization"], ""), "Credential="+realKeyID+"/") {
		t.Errorf("the origin did not receive a signature with the real key")
	}

	// GitHub: the app sends its own token; the origin gets the minted one.
	mark = p.mark(t)
	gh := p.app(t, "http", "-url", "http://other.example.test/gh/repos/acme/app", "-H", "Authorization: Bearer app-own-token")
	if gh.Status != http.StatusOK {
		t.Fatalf("GitHub API request: %d %s", gh.Status, gh.Body)
	}
	ev := p.httpEvent(t, mark, "/gh/repos/acme/app")
	minted, ok := strings.CutPrefix(strings.Join(ev.Header["Authorization"], ","), "Bearer ")
	if !ok || !strings.HasPrefix(minted, "ghs_") {
		t.Fatalf("the origin received Authorization %q, want the minted token only", ev.Header["Authorization"])
	}
	secretsOfPod = append(secretsOfPod, minted)

	seen := map[string]string{"env file and placeholders": envFile + all, "AWS response": dumpResult(aws), "GitHub response": dumpResult(gh)}
	for where, text := range seen {
		for _, s := range secretsOfPod {
			if strings.Contains(text, s) {
				t.Errorf("the app sees a real credential in its %s", where)
			}
		}
	}
	if !strings.Contains(gh.Body, "authorization") && !strings.Contains(gh.Body, "Authorization") {
		t.Errorf("the origin's echo is missing from the response: %s", gh.Body)
	}

	mark = p.mark(t)
	if !p.botbox.stop(10 * time.Second) {
		t.Fatal("botbox did not stop within 10s of SIGTERM")
	}
	rev := p.httpEvent(t, mark, "/installation/token")
	if rev.Method != http.MethodDelete || strings.Join(rev.Header["Authorization"], "") != "Bearer "+minted {
		t.Errorf("revocation at SIGTERM: %s %v, want DELETE with the minted token", rev.Method, rev.Header["Authorization"])
	}
	log, err := os.ReadFile(p.botbox.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secretsOfPod {
		if strings.Contains(string(log), s) {
			t.Error("BotBox's log contains a real credential")
		}
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dumpResult is everything of a response the app received.
func dumpResult(r wire.Result) string {
	b, _ := json.Marshal(r.Header)
	return string(b) + r.Body
}
