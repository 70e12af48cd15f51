package e2e

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

const hostGit = "git.example.test"

// rulesGit: git.example.test gets the token as a Basic credential built
// by the {basic:USER} template.
const rulesGit = `
    - host: git.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "{basic:x-access-token}"
          secret_ref: git-token
`

// hostGitCmd runs git on the host (outside the pod), as root, failing
// the test on error.
func hostGitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.test", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.test"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// gitOrigin is the podConfig.originArgs of an origin serving, under /git/,
// a bare repository (*bare, branch main, one commit) through `git
// http-backend`, answering 401 unless Authorization is exactly wantAuth.
func gitOrigin(bare *string, wantAuth string) func(t *testing.T, p *pod) []string {
	return func(t *testing.T, p *pod) []string {
		root := filepath.Join(p.dir, "git")
		*bare = filepath.Join(root, "repo.git")
		seed := filepath.Join(p.dir, "seed")
		for _, d := range []string{root, seed} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		hostGitCmd(t, root, "init", "-q", "--bare", "-b", "main", *bare)
		hostGitCmd(t, *bare, "config", "http.receivepack", "true")
		hostGitCmd(t, seed, "init", "-q", "-b", "main")
		writeFile(t, filepath.Join(seed, "README"), []byte("seed\n"), 0o644)
		hostGitCmd(t, seed, "add", "README")
		hostGitCmd(t, seed, "commit", "-q", "-m", "seed")
		hostGitCmd(t, seed, "push", "-q", *bare, "main")
		auth := filepath.Join(p.dir, "git-auth")
		writeFile(t, auth, []byte(wantAuth), 0o400)
		return []string{"-git-root", root, "-git-auth-file", auth}
	}
}

// TestGitOverHTTPSWithBasicTemplate: real git (/usr/bin/git), as the app
// (UID 1000) in the pod, clones from and pushes to an origin serving
// `git http-backend` that answers 401 unless Authorization is exactly
// Basic base64(x-access-token:<real token>). The app holds no credential,
// or only the placeholder: in the remote URL (git sends it only after a
// 401, which never comes: BotBox injects the credential on every
// request) or as an explicit Authorization header (http.extraHeader, sent
// on every request: accepted there, because the rule's rewrite replaces
// that header whole). Every request the origin sees carries the real
// credential and never the placeholder. The placeholder in any other
// header is refused (403 tripwire) and git fails.
func TestGitOverHTTPSWithBasicTemplate(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/git"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git is missing in CI: %v", err)
		}
		t.Skipf("skipping: /usr/bin/git: %v", err)
	}
	token := "ghp_" + randomHex(t, 18)
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	var bare string
	p := newPod(t, podConfig{
		rules: rulesGit, placeholders: true,
		secrets:     map[string]string{"git-token": token},
		originNames: []string{hostGit},
		extraHosts:  func(p *pod) string { return p.netIP4.String() + " " + hostGit + "\n" },
		originArgs:  gitOrigin(&bare, wantAuth),
	})
	ph, _, code := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.dir, "placeholders", "git-token"))
	if code != 0 || len(ph) != len(token) || ph == token {
		t.Fatalf("no placeholder (exit %d)", code)
	}
	home := filepath.Join(p.dir, "apphome")
	if err := os.MkdirAll(home, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.test", "GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.test"}
	appGit := func(dir string, args ...string) (string, int) {
		t.Helper()
		out, errOut, code := p.run(t, p.podNS, uidApp, env, append([]string{"/usr/bin/git", "-C", dir}, args...)...)
		return out + errOut, code
	}
	phBasic := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph))
	assertOnlyRealCredential := func(t *testing.T, mark int64) {
		t.Helper()
		n := 0
		for _, ev := range p.events(t, mark) {
			if ev.Kind != wire.KindHTTP {
				continue
			}
			n++
			if got := ev.Header["Authorization"]; len(got) != 1 || got[0] != wantAuth {
				t.Errorf("origin got Authorization %q on %s, want the real credential", got, ev.Path)
			}
			for k, vs := range ev.Header {
				for _, v := range vs {
					if strings.Contains(v, ph) || strings.Contains(v, base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph))) {
						t.Errorf("the placeholder reached the origin in %s", k)
					}
				}
			}
		}
		if n == 0 {
			t.Error("the origin saw no git request")
		}
	}

	for i, tc := range []struct {
		name string
		url  string
		pre  []string // git options before the command
	}{
		{"no credential", "http://" + hostGit + "/git/repo.git", nil},
		{"placeholder in the URL", "http://x-access-token:" + ph + "@" + hostGit + "/git/repo.git", nil},
		{"placeholder as Authorization", "http://" + hostGit + "/git/repo.git", []string{"-c", "http.extraHeader=" + phBasic}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := filepath.Join(home, "clone"+string(rune('a'+i)))
			mark := p.mark(t)
			if out, code := appGit(home, append(tc.pre, "clone", "-q", tc.url, work)...); code != 0 {
				t.Fatalf("git clone: exit %d\n%s", code, out)
			}
			if b, err := os.ReadFile(filepath.Join(work, "README")); err != nil || string(b) != "seed\n" {
				t.Fatalf("clone content: %q %v", b, err)
			}
			msg := "agent commit " + tc.name
			if out, code := appGit(work, "commit", "-q", "--allow-empty", "-m", msg); code != 0 {
				t.Fatalf("git commit: exit %d\n%s", code, out)
			}
			if out, code := appGit(work, append(tc.pre, "push", "-q", "origin", "HEAD:refs/heads/main")...); code != 0 {
				t.Fatalf("git push: exit %d\n%s", code, out)
			}
			if log := hostGitCmd(t, bare, "log", "--format=%s", "main"); !strings.Contains(log, msg) {
				t.Errorf("the origin's repository lacks the pushed commit:\n%s", log)
			}
			assertOnlyRealCredential(t, mark)
		})
	}

	t.Run("placeholder in another header", func(t *testing.T) {
		mark := p.mark(t)
		out, code := appGit(home, "-c", "http.extraHeader=X-Token: "+ph, "clone", "-q", "http://"+hostGit+"/git/repo.git", filepath.Join(home, "refused"))
		if code == 0 || !strings.Contains(out, "403") {
			t.Fatalf("git clone with the placeholder in X-Token: exit %d, want a 403 failure\n%s", code, out)
		}
		for _, ev := range p.events(t, mark) {
			if ev.Kind == wire.KindHTTP {
				t.Errorf("the origin received %s", ev.Path)
			}
		}
	})
}
