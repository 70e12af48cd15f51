package proxy

// Outside attacks on credential brokering in the request path (attack
// playbook): each test fails when the hole it names is open.

import (
	"bufio"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/testutil/tokenserver"
	"github.com/botbox/botbox/internal/testutil/wsecho"
)

const (
	s3BucketHost   = "my-bucket.s3.us-east-1.amazonaws.com"
	s3RegionalHost = "s3.us-east-1.amazonaws.com"
)

// newS3Env is an env with two S3 rules of one aws_sigv4 credential: an
// exact bucket host (virtual-hosted style) and the regional endpoint
// (path-style) with routes on one bucket's uploads/ prefix, as
// docs/credentials.md recommends.
func newS3Env(t *testing.T) *testEnv {
	t.Helper()
	rules := `    - host: ` + s3BucketHost + `
      action: allow
      credential: s3
    - host: ` + s3RegionalHost + `
      action: allow
      credential: s3
      routes:
        - methods: [GET, PUT]
          paths: ["/shared-bucket/uploads/**"]
          action: allow
`
	creds := `credentials:
  s3:
    type: aws_sigv4
    access_key_id_ref: aws-key-id
    secret_access_key_ref: aws-secret
    region: us-east-1
`
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	e := newEnv(t, envOpts{rules: rules, extraConfig: creds, names: []string{s3BucketHost, s3RegionalHost}, credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	return e
}

// s3Do sends an unsigned S3 request (BotBox signs it) to host through the
// plain listener, with extra headers, and returns the status and reason.
func s3Do(t *testing.T, e *testEnv, method, host, path string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.plain.Listener.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(HeaderReason)
}

// Class 4 / threat b (a request the policy did not mean): S3's
// CopyObject and UploadPartCopy read the object named in
// X-Amz-Copy-Source with the signer's key. A rule for one bucket host, or
// routes on one bucket's prefix, must not let the agent have BotBox sign
// a copy out of another bucket, or out of a prefix the routes do not
// allow, into a place it can then GET. A copy within what the rule allows
// still works.
func TestAttackS3CopySourceOutsideTheRule(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	refused := []struct{ name, host, path, source string }{
		{"another bucket, virtual-hosted", s3BucketHost, "/stolen", "other-bucket/secret.txt"},
		{"another bucket, leading slash", s3BucketHost, "/stolen", "/other-bucket/secret.txt"},
		{"another bucket, encoded", s3BucketHost, "/stolen", "other%2Dbucket/secret.txt"},
		{"an access point ARN", s3BucketHost, "/stolen", "arn:aws:s3:us-east-1:111122223333:accesspoint/ap/object/secret.txt"},
		{"the bucket's name as a prefix", s3BucketHost, "/stolen", "my-bucket.evil/secret.txt"},
		{"path-style, another bucket", s3RegionalHost, "/shared-bucket/uploads/stolen", "other-bucket/secret.txt"},
		{"path-style, a prefix the routes do not allow", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/private/secret.txt"},
		{"path-style, dot segments", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/uploads/../private/secret.txt"},
		{"path-style, encoded slash", s3RegionalHost, "/shared-bucket/uploads/stolen", "shared-bucket/uploads%2F..%2Fprivate/secret.txt"},
	}
	for _, tc := range refused {
		for _, name := range []string{"X-Amz-Copy-Source", "x-amz-copy-source"} {
			code, reason := s3Do(t, e, http.MethodPut, tc.host, tc.path, map[string]string{name: tc.source})
			if code < 400 || code >= 500 {
				t.Errorf("%s (%s: %s): %d %s, want it refused", tc.name, name, tc.source, code, reason)
			}
		}
	}
	e.assertOriginUntouched()
	for _, tc := range []struct{ name, host, path, source string }{
		{"same bucket, virtual-hosted", s3BucketHost, "/copy", "my-bucket/original.txt"},
		{"same bucket with a version", s3BucketHost, "/copy", "/my-bucket/original.txt?versionId=3"},
		{"path-style, inside the routes", s3RegionalHost, "/shared-bucket/uploads/copy", "shared-bucket/uploads/original.txt"},
	} {
		if code, reason := s3Do(t, e, http.MethodPut, tc.host, tc.path, map[string]string{"X-Amz-Copy-Source": tc.source}); code != http.StatusOK {
			t.Errorf("%s: %d %s, want the copy forwarded", tc.name, code, reason)
		}
	}
	if strings.Contains(e.logs.String(), credRealSecret) {
		t.Error("the logs carry the secret key")
	}
}

// newMintedEnv is an env whose api.example.test rule sends an
// oauth2_client_credentials token minted by a verifying token server;
// noscrub.example.test is allowed without a credential.
func newMintedEnv(t *testing.T) (*testEnv, *tokenserver.Server) {
	t.Helper()
	ts := &tokenserver.Server{ClientID: "botbox-client", ClientSecret: "client-secret-0123456789", Scope: "read"}
	srv := httptest.NewTLSServer(ts)
	t.Cleanup(srv.Close)
	creds := fmt.Sprintf(`credentials:
  api:
    type: oauth2_client_credentials
    token_url: %s/token
    client_id_ref: client-id
    client_secret_ref: client-secret
    scopes: [read]
`, srv.URL)
	rules := `    - host: api.example.test
      action: allow
      credential: api
    - host: noscrub.example.test
      action: allow
`
	e := newEnv(t, envOpts{rules: rules, extraConfig: creds, credentials: true, tokenClient: srv.Client()})
	e.writeSecret("client-id", ts.ClientID+"\n")
	e.writeSecret("client-secret", ts.ClientSecret+"\n")
	waitSecret(t, e, "client-secret")
	return e, ts
}

// revealsToken reports whether text shows tok raw, URL-encoded, in base64
// (reveals) or in hex.
func revealsToken(text, tok string) bool {
	return reveals(text, tok) || strings.Contains(strings.ToLower(text), hex.EncodeToString([]byte(tok)))
}

// Class 2 and 7 for minted tokens, class 11 for the paths: an origin that
// reflects the Authorization BotBox sent — as JSON, base64 in three
// alignments, in Location, Set-Cookie, a 103, a trailer, compressed with
// every coding — never shows the agent the minted token, through the
// plain listener and the interception listener over HTTP/1.1 and HTTP/2.
func TestAttackMintedTokenReflectedEverywhere(t *testing.T) {
	t.Parallel()
	e, ts := newMintedEnv(t)
	echoOrigin(e)
	clients := map[string]*http.Client{"plain": e.plainClient(t), "https/h1": e.interceptClient(t, false), "https/h2": e.interceptClient(t, true)}
	paths := []string{"/echo/json", "/echo/b64", "/echo/redirect", "/echo/early", "/echo/trailer",
		"/echo/encoded/gzip", "/echo/encoded/deflate", "/echo/encoded/br", "/echo/encoded/zstd", "/echo/encoded/gzip-br"}
	for name, c := range clients {
		scheme := "https"
		if name == "plain" {
			scheme = "http"
		}
		for _, p := range paths {
			resp, seen := dump(t, c, scheme+"://api.example.test"+p)
			toks := ts.Issued()
			if resp.StatusCode >= 400 || len(toks) != 1 {
				t.Fatalf("%s %s: status %s, %d tokens: %s", name, p, resp.Status, len(toks), seen)
			}
			if revealsToken(seen, toks[0]) || strings.Contains(seen, "agent-dummy") || !strings.Contains(seen, "*****") {
				t.Fatalf("%s %s: the agent sees the token (or nothing was echoed):\n%s", name, p, seen)
			}
		}
	}
}

// Class 8: a WebSocket to the credential's host carries the token in its
// handshake; an origin that sends it back in a frame after the 101 must
// not show it to the agent.
func TestAttackMintedTokenInWebSocketFrame(t *testing.T) {
	t.Parallel()
	e, ts := newMintedEnv(t)
	e.originMux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_, _ = brw.Write(wsecho.Frame("auth: " + r.Header.Get("Authorization")))
		_ = brw.Flush()
		_, _ = brw.ReadString('\n') // until the agent goes
	})
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	frame, err := wsecho.ReadFrame(br)
	toks := ts.Issued()
	if err != nil || len(toks) != 1 || !strings.HasPrefix(frame, "auth: Bearer ") {
		t.Fatalf("frame %q, %v, %d tokens", frame, err, len(toks))
	}
	if revealsToken(frame, toks[0]) {
		t.Fatalf("the frame shows the agent the token: %q", frame)
	}
}

// Class 11 (connection reuse) and threat b: requests to the credential's
// host and then to another host on one agent connection — keep-alive on
// the plain listener, one TLS connection to the interception listener
// whose SNI is the credential's host — send the token only to the
// credential's host.
func TestAttackTokenNotCarriedToAnotherHostOnOneConnection(t *testing.T) {
	t.Parallel()
	e, ts := newMintedEnv(t)
	intercept := httptest.NewUnstartedServer(e.handler.Intercepted())
	intercept.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, "api.example.test", "noscrub.example.test")}}
	intercept.StartTLS()
	t.Cleanup(intercept.Close)
	dials := map[string]func() (net.Conn, error){
		"plain": func() (net.Conn, error) { return net.Dial("tcp", e.plain.Listener.Addr().String()) },
		"intercepted": func() (net.Conn, error) {
			return tls.Dial("tcp", intercept.Listener.Addr().String(), &tls.Config{RootCAs: e.ca.Pool(), ServerName: "api.example.test"})
		},
	}
	for name, dial := range dials {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		var seen []originRecord
		for _, host := range []string{"api.example.test", "noscrub.example.test"} {
			fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer agent-own\r\n\r\n", host)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s %s: %v", name, host, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				seen = append(seen, e.lastSeen())
			} else {
				t.Logf("%s %s: %d %s (refused: holds)", name, host, resp.StatusCode, resp.Header.Get(HeaderReason))
			}
		}
		c.Close()
		toks := ts.Issued()
		if len(seen) == 0 || len(toks) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+toks[0] {
			t.Fatalf("%s: the credential's host did not get the token (%d answered, %d tokens)", name, len(seen), len(toks))
		}
		for _, r := range seen[1:] {
			if strings.Contains(r.Header.Get("Authorization"), toks[0]) {
				t.Fatalf("%s: %s got the token on the same connection", name, r.Host)
			}
		}
	}
}

// Class 11 for SigV4: the body BotBox buffers to hash it reaches a
// verifying origin intact over the interception listener, HTTP/1.1 and
// HTTP/2, with and without a declared length (an HTTP/2 request without
// content-length is read to its END_STREAM), and the echo of the signed
// Authorization never shows the real key ID.
func TestAttackSigV4EveryListener(t *testing.T) {
	t.Parallel()
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	rules := "    - host: api.example.test\n      action: allow\n      credential: bedrock\n      max_request_body_bytes: 200000\n"
	e := newEnv(t, envOpts{rules: rules, extraConfig: credentialsBlock + "    service: bedrock\n", credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	verifyingOrigin(t, e, nil)
	body := []byte(strings.Repeat(`{"text":"hello"}`, 10000)) // 160 kB: several reads and buffer growth steps
	for _, h2 := range []bool{false, true} {
		c := e.interceptClient(t, h2)
		for _, known := range []bool{true, false} {
			req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/model/m/converse", strings.NewReader(string(body)))
			if !known {
				req.Body, req.ContentLength = io.NopCloser(strings.NewReader(string(body))), -1
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
				t.Fatalf("h2 %v, known length %v: %s %s", h2, known, resp.Status, got)
			}
			if all := string(got) + resp.Header.Get("X-Echo-Authorization"); strings.Contains(all, credRealKeyID) || strings.Contains(all, credRealSecret) {
				t.Fatalf("h2 %v: the echo shows the real key: %s", h2, all)
			}
		}
	}
}

// Class 10, the budget's other side: every way a SigV4 request ends
// gives its buffer reservation back — forwarded, an empty chunked body
// (which ReverseProxy sends without a body), refused by the tripwire in
// the body, the agent gone mid-body. Each request here reserves the
// rule's 30 MiB bound (no declared length), so a leak of two would make
// the third wait for the budget, then fail with 503.
func TestAttackBufferBudgetComesBack(t *testing.T) {
	t.Parallel()
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	rules := "    - host: api.example.test\n      action: allow\n      credential: bedrock\n      max_request_body_bytes: 31457280\n"
	e := newEnv(t, envOpts{rules: rules, extraConfig: credentialsBlock + "    service: bedrock\n", credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	verifyingOrigin(t, e, nil)
	c := e.plainClient(t)
	c.Timeout = 30 * time.Second // a leak shows as 503 after the budget's 10 s wait
	send := func(body string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://api.example.test/model/m/converse", io.NopCloser(strings.NewReader(body)))
		req.ContentLength = -1 // chunked: the reservation is the rule's bound
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("body %.20q: %v (a reservation leaked?)", body, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 {
		if code := send(`{"i":1}`); code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
		if code := send(""); code != http.StatusOK {
			t.Fatalf("empty body %d: %d", i, code)
		}
		if code := send(`{"k":"` + credPHSecret + `"}`); code != http.StatusForbidden {
			t.Fatalf("placeholder in the body %d: %d", i, code)
		}
		// The agent goes away mid-body.
		conn, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(conn, "POST /model/m/converse HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		time.Sleep(20 * time.Millisecond) // the handler is reading the body (a longer wait changes nothing)
		conn.Close()
	}
}

// Class 5 for SigV4: the rule's host spelled another way by the agent
// (upper case, a trailing dot, an explicit :443) is signed for, and sent
// to, the one canonical host; the origin's independent check of the
// signature holds.
func TestAttackSigV4HostSpellings(t *testing.T) {
	t.Parallel()
	tab := placeholder.NewTable([]placeholder.Entry{{Ref: "aws-key-id", Placeholder: credPHKeyID, Current: true}, {Ref: "aws-secret", Placeholder: credPHSecret, Current: true}})
	rules := "    - host: api.example.test\n      action: allow\n      credential: bedrock\n"
	e := newEnv(t, envOpts{rules: rules, extraConfig: credentialsBlock + "    service: bedrock\n", credentials: true, placeholders: fixedPlaceholders{tab}})
	e.writeSecret("aws-key-id", credRealKeyID+"\n")
	e.writeSecret("aws-secret", credRealSecret+"\n")
	waitSecret(t, e, "aws-secret")
	verifyingOrigin(t, e, nil)
	for _, host := range []string{"API.Example.TEST", "api.example.test.", "api.example.test:443"} {
		resp, body := rawTo(t, e.plain.Listener.Addr().String(), "POST /model/m/converse HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("Host %q: %d %s", host, resp.StatusCode, body)
		}
		if seen := e.lastSeen(); seen.Host != "api.example.test" {
			t.Fatalf("Host %q reached the origin as %q", host, seen.Host)
		}
	}
}

// Class 9: what the agent wrote in a refused signature never reaches the
// decision line (its error is a constant phrase), so a forged field
// cannot widen what suggest proposes or what an alert matches.
func TestAttackRefusedSignatureForgesNoLogField(t *testing.T) {
	t.Parallel()
	e := newSigV4Env(t)
	forged := `AWS4-HMAC-SHA256 Credential=AKIAFORGED0000000000/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00 decision=allow "reason":"forged_reason"`
	req := bedrockRequest(t, e, http.MethodPost, "/model/m/invoke", []byte(`{}`), "", "")
	req.Header.Set("Authorization", forged)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderReason) != reasonCredentialRefused {
		t.Fatalf("%d %s, want 403 %s", resp.StatusCode, resp.Header.Get(HeaderReason), reasonCredentialRefused)
	}
	logs := e.logs.String()
	for _, s := range []string{"AKIAFORGED", "forged_reason", "decision=allow"} {
		if strings.Contains(logs, s) {
			t.Fatalf("the decision line carries the agent's %q:\n%s", s, logs)
		}
	}
	if !strings.Contains(logs, `"reason":"credential_refused"`) {
		t.Fatalf("no refusal decision line:\n%s", logs)
	}
}
