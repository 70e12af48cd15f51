package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// appPATH is the PATH every process of the pod runs with (pod.runCaps).
const appPATH = "/usr/sbin:/usr/bin:/sbin:/bin"

// clientScript is a small program of one client library: it requests each
// URL given as an argument in turn, sending the app's own bogus
// Authorization header, and prints one clientResult JSON line per URL. TLS
// trust comes only from the environment, the way the manifests give it to
// an app container (docs/deploy.md, "App-side trust").
type clientScript struct {
	name string
	argv func(script string) []string // the command line, before the URLs
	ext  string                       // the script file's extension
	// src is the script; without one the command is run once per URL and
	// prints the body, a line break and the status code (curl -w).
	src  string
	need string // a program that must be on appPATH
	// check, when set, is a command that must succeed for the client to
	// be usable (e.g. the Python module is installed).
	check []string
	// setup, when set, prepares what the client's trust needs (run as
	// root before the client, e.g. the JVM's PKCS12 trust store).
	setup func(t *testing.T, p *pod)
}

// clientResult is one line of a client script's output.
type clientResult struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Body   string `json:"body"`
	Error  string `json:"error"`
	// Version is the HTTP version the client spoke, when it tells (Java).
	Version string `json:"version"`
}

const pythonClient = `import json, sys
mode = sys.argv[1]
for url in sys.argv[2:]:
    out = {"url": url, "status": 0, "body": "", "error": ""}
    try:
        if mode == "requests":
            import requests  # REQUESTS_CA_BUNDLE is the trust
            r = requests.get(url, headers={"Authorization": "Bearer app-own"}, timeout=10)
            out["status"], out["body"] = r.status_code, r.text
        else:
            import urllib.error, urllib.request  # SSL_CERT_FILE is the trust
            req = urllib.request.Request(url, headers={"Authorization": "Bearer app-own"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    out["status"], out["body"] = r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                out["status"], out["body"] = e.code, e.read().decode()
    except Exception as e:
        out["error"] = repr(e)
    print(json.dumps(out), flush=True)
`

// nodeClient uses the built-in http and https modules; NODE_EXTRA_CA_CERTS
// is the trust.
const nodeClient = `'use strict';
const http = require('http'), https = require('https');
function get(url) {
  return new Promise((resolve) => {
    const out = {url, status: 0, body: '', error: ''};
    const mod = url.startsWith('https:') ? https : http;
    const req = mod.get(url, {headers: {Authorization: 'Bearer app-own'}, timeout: 10000}, (res) => {
      out.status = res.statusCode;
      res.setEncoding('utf8');
      res.on('data', (d) => { out.body += d; });
      res.on('end', () => resolve(out));
      res.on('error', (e) => { out.error = String(e); resolve(out); });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => { out.error = String(e); resolve(out); });
  });
}
(async () => {
  for (const url of process.argv.slice(2)) {
    console.log(JSON.stringify(await get(url)));
  }
})();
`

// javaClient uses java.net.http.HttpClient with its DEFAULT settings: it
// prefers HTTP/2, so every http:// request carries "Upgrade: h2c" and
// HTTP2-Settings, which BotBox must drop and answer over HTTP/1.1 (issue
// 10 point 3). Run in source-file mode (java Client.java, no javac step);
// the JVM trust store given by JAVA_TOOL_OPTIONS is the trust.
const javaClient = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class Client {
    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) {
        HttpClient client = HttpClient.newHttpClient(); // defaults: HTTP/2 preferred
        for (String url : args) {
            int status = 0;
            String body = "", error = "", version = "";
            try {
                HttpRequest req = HttpRequest.newBuilder(URI.create(url))
                    .header("Authorization", "Bearer app-own")
                    .timeout(Duration.ofSeconds(10))
                    .GET().build();
                HttpResponse<String> r = client.send(req, HttpResponse.BodyHandlers.ofString());
                status = r.statusCode();
                body = r.body();
                version = r.version().toString();
            } catch (Exception e) {
                error = e.toString();
            }
            System.out.println("{\"url\":" + q(url) + ",\"status\":" + status + ",\"body\":" + q(body)
                + ",\"error\":" + q(error) + ",\"version\":" + q(version) + "}");
        }
    }
}
`

// javaTrustStore is the PKCS12 trust store of BotBox's CA that the JVM is
// given (JAVA_TOOL_OPTIONS in trustEnv), next to the PEM file.
func (p *pod) javaTrustStore() string { return p.botboxCA + ".p12" }

// writeJavaTrustStore imports BotBox's CA into javaTrustStore with keytool
// (part of every JRE), readable by the app.
func writeJavaTrustStore(t *testing.T, p *pod) {
	t.Helper()
	keytool, err := lookPathIn("keytool", appPATH)
	if err != nil {
		t.Fatalf("keytool (shipped with the JRE) is not on %s: %v", appPATH, err)
	}
	store := p.javaTrustStore()
	_ = os.Remove(store)
	out, err := exec.Command(keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", store,
		"-storepass", "changeit", "-alias", "botbox-ca", "-file", p.botboxCA).CombinedOutput()
	if err != nil {
		t.Fatalf("keytool -importcert: %v: %s", err, out)
	}
	if err := os.Chmod(store, 0o644); err != nil {
		t.Fatal(err)
	}
}

func clientScripts() []clientScript {
	return []clientScript{
		{name: "curl", need: "curl", // CURL_CA_BUNDLE is the trust
			argv: func(string) []string {
				return []string{"curl", "-sS", "--max-time", "10", "-H", "Authorization: Bearer app-own", "-w", "\n%{http_code}"}
			}},
		{name: "python-urllib", ext: ".py", src: pythonClient, need: "python3",
			argv: func(s string) []string { return []string{"python3", s, "urllib"} }},
		{name: "python-requests", ext: ".py", src: pythonClient, need: "python3",
			argv:  func(s string) []string { return []string{"python3", s, "requests"} },
			check: []string{"python3", "-c", "import requests"}},
		{name: "node", ext: ".js", src: nodeClient, need: "node",
			argv: func(s string) []string { return []string{"node", s} }},
		{name: "java-httpclient", ext: ".java", src: javaClient, need: "java", setup: writeJavaTrustStore,
			// Serial GC, C1 only and no perf data file: a faster JVM start
			// and nothing written to the app's /tmp.
			argv: func(s string) []string {
				return []string{"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", s}
			}},
	}
}

// clientMissing returns why c cannot run here, or "" when it can.
func clientMissing(c clientScript) string {
	if _, err := lookPathIn(c.need, appPATH); err != nil {
		return fmt.Sprintf("%s is not on %s", c.need, appPATH)
	}
	if len(c.check) == 0 {
		return ""
	}
	bin, err := lookPathIn(c.check[0], appPATH)
	if err != nil {
		return fmt.Sprintf("%s is not on %s", c.check[0], appPATH)
	}
	cmd := exec.Command(bin, c.check[1:]...)
	cmd.Env = []string{"PATH=" + appPATH}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("%s failed: %v: %s", strings.Join(c.check, " "), err, strings.TrimSpace(string(out)))
	}
	return ""
}

// lookPathIn is exec.LookPath with the given PATH.
func lookPathIn(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// trustEnv makes every client trust exactly BotBox's interception CA.
func (p *pod) trustEnv() []string {
	return []string{
		"CURL_CA_BUNDLE=" + p.botboxCA,
		"SSL_CERT_FILE=" + p.botboxCA,
		"REQUESTS_CA_BUNDLE=" + p.botboxCA,
		"NODE_EXTRA_CA_CERTS=" + p.botboxCA,
		// The JVM reads no PEM variable: its trust store is a system
		// property, which a manifest sets through JAVA_TOOL_OPTIONS.
		"JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore=" + p.javaTrustStore() +
			" -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=changeit",
	}
}

// runClient writes c's script and runs it as the app with urls.
func (p *pod) runClient(t *testing.T, c clientScript, urls ...string) []clientResult {
	t.Helper()
	if c.src == "" {
		var res []clientResult
		for _, url := range urls {
			out, errOut, code := p.run(t, p.podNS, uidApp, p.trustEnv(), append(c.argv(""), url)...)
			r := clientResult{URL: url}
			if i := strings.LastIndex(out, "\n"); i >= 0 {
				r.Body = out[:i]
				r.Status, _ = strconv.Atoi(out[i+1:])
			}
			if code != 0 {
				r.Error = fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(errOut))
			}
			res = append(res, r)
		}
		return res
	}
	if c.setup != nil {
		c.setup(t, p)
	}
	script := filepath.Join(p.dir, "client-"+c.name+c.ext)
	writeFile(t, script, []byte(c.src), 0o644)
	argv := append(c.argv(script), urls...)
	out, errOut, code := p.run(t, p.podNS, uidApp, p.trustEnv(), argv...)
	if code != 0 {
		t.Fatalf("%s as UID %d: exit %d\nstdout:\n%s\nstderr:\n%s", c.name, uidApp, code, out, errOut)
	}
	var res []clientResult
	for line := range strings.Lines(out) {
		var r clientResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s printed %q: %v (stderr %s)", c.name, line, err, errOut)
		}
		res = append(res, r)
	}
	if len(res) != len(urls) {
		t.Fatalf("%s answered %d of %d URLs:\n%s\nstderr:\n%s", c.name, len(res), len(urls), out, errOut)
	}
	return res
}

// TestClientCompatibility runs the clients agents are built on — curl,
// Python's urllib and requests, Node's http/https, Java's HttpClient with
// its default settings (an h2c offer on every http:// request) — as the
// app through the
// transparent redirect (issue 10, "Proof required"). Each, with its own
// bogus Authorization header and the trust a manifest gives it: an http://
// request to the allowed host reaches the origin with the credential
// injected instead; a host without a rule gets BotBox's 403 and the origin
// hears nothing of it; an https:// request is intercepted and injected
// alike. curl -N also receives a server-sent event stream event by event.
func TestClientCompatibility(t *testing.T) {
	t.Parallel()
	clients := clientScripts()
	missing := map[string]string{}
	for _, c := range clients {
		if why := clientMissing(c); why != "" {
			// CI must prove every client, never skip one.
			if os.Getenv("CI") != "" {
				t.Fatalf("client %s missing in CI (.ci/run installs curl, python3-requests, nodejs and default-jre-headless): %s", c.name, why)
			}
			missing[c.name] = why
		}
	}
	p, key := apiKeyPod(t, podConfig{ipv6: true, interception: true})
	injected := []string{"Bearer " + key}

	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			if why := missing[c.name]; why != "" {
				t.Skipf("skipping client %s: %s", c.name, why)
			}
			base := "/compat/" + c.name
			mark := p.mark(t)
			res := p.runClient(t, c,
				"http://"+hostAPI+base+"/http",
				"http://"+hostOther+base+"/denied",
				"https://"+hostAPI+base+"/https",
			)
			for i, want := range []int{http.StatusOK, http.StatusForbidden, http.StatusOK} {
				if r := res[i]; r.Status != want || r.Error != "" {
					t.Errorf("%s: status %d error %q body %q, want %d", r.URL, r.Status, r.Error, r.Body, want)
				}
			}
			if got := strings.TrimSpace(res[1].Body); got != "host not allowed" {
				t.Errorf("%s: body %q, want BotBox's \"host not allowed\"", res[1].URL, got)
			}
			for _, path := range []string{base + "/http", base + "/https"} {
				ev := p.httpEvent(t, mark, path)
				if !ev.TLS || ev.Port != 443 || ev.Host != hostAPI || !slices.Equal(ev.Header["Authorization"], injected) {
					t.Errorf("origin saw %s as tls=%v port=%d host=%q Authorization=%q, want TLS 443 %s with the injected key only",
						path, ev.TLS, ev.Port, ev.Host, ev.Header["Authorization"], hostAPI)
				}
			}
			if c.name == "java-httpclient" {
				// HttpClient offered h2c on the http:// request: BotBox
				// dropped the offer, answered over HTTP/1.1 and forwarded
				// neither the Upgrade nor its HTTP2-Settings.
				if res[0].Version != "HTTP_1_1" {
					t.Errorf("%s: answered over %q, want HTTP_1_1 (the h2c offer dropped)", res[0].URL, res[0].Version)
				}
				ev := p.httpEvent(t, mark, base+"/http")
				for _, h := range []string{"Upgrade", "Http2-Settings"} {
					if v, ok := ev.Header[h]; ok {
						t.Errorf("origin saw %s: %q on %s", h, v, base+"/http")
					}
				}
			}
			// The allowed requests are the barrier: the origin records in
			// order, and the denied request was made between them.
			for _, ev := range p.events(t, mark) {
				if ev.Path == base+"/denied" || ev.Host == hostOther || ev.SNI == hostOther {
					t.Errorf("origin saw the denied request: #%d %s %s host %q", ev.Seq, ev.Kind, ev.Path, ev.Host)
				}
			}
		})
	}

	t.Run("curl -N server-sent events", func(t *testing.T) {
		if why := missing["curl"]; why != "" {
			t.Skipf("skipping: %s", why)
		}
		id := randomHex(t, 6)
		url := "http://" + hostAPI + "/sse/" + id
		lines, wait := p.startApp(t, p.trustEnv(), "curl", "-sS", "-N", "--max-time", "20", url)
		readUntil := func(want string) {
			t.Helper()
			for line := range lines {
				if line == want {
					return
				}
			}
			t.Fatalf("curl -N %s: output ended before %q (%s)", url, want, wait())
		}
		// Event "one" reaches the app while the origin still holds the
		// stream open: only then is the second event released.
		readUntil("data: one")
		resp, err := p.control.Post("http://origin/release?id="+id, "", nil)
		if err != nil {
			t.Fatalf("releasing the stream: %v", err)
		}
		_ = resp.Body.Close()
		readUntil("data: two released")
		if err := wait(); err != "" {
			t.Errorf("curl -N %s: %s", url, err)
		}
	})
}

// startApp starts argv as the app in the pod and returns its stdout lines
// as they come, and a function that waits for the end and returns "" or
// what went wrong (exit status and stderr).
func (p *pod) startApp(t *testing.T, env []string, argv ...string) (<-chan string, func() string) {
	t.Helper()
	full := append([]string{"ip", "netns", "exec", p.podNS,
		"setpriv", "--reuid", strconv.Itoa(uidApp), "--regid", strconv.Itoa(uidApp), "--clear-groups"}, argv...)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = append([]string{"PATH=" + appPATH}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", full, err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	wait := func() string {
		for range lines { // the rest of the output, up to EOF
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Sprintf("%v: %s", err, stderr.String())
		}
		return ""
	}
	return lines, wait
}
