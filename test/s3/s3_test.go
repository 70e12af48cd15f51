package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

const (
	// The real keys: versitygw's root user, and BotBox's secret files.
	realKeyID  = "AKIAVERSITYREALKEY01"
	realSecret = "versityRealSecretKey/0123456789abcdefghi"
	region     = "us-east-1"
	s3Host     = "s3.botbox.test"
	bucket     = "botbox-bucket"
)

// gw is the one versitygw of the process (embedgw runs one per process).
var gw struct {
	addr string // 127.0.0.1:port, TLS
	ca   *testpki.CA
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "botbox-versitygw-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// posix.New changes the working directory to its root, and the
	// backend works relative to it from then on: the test uses absolute
	// paths only.
	// Object metadata in extended attributes (user.*: ext4, xfs, tmpfs).
	be, err := posix.New(root, meta.XattrMeta{}, posix.PosixOpts{NewDirPerm: 0o755})
	if err != nil {
		fmt.Fprintln(os.Stderr, "posix backend:", err)
		return 1
	}
	ca, certFile, keyFile, err := tlsFiles(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gw.addr, gw.ca = ln.Addr().String(), ca
	ln.Close()
	done := make(chan error, 1)
	go func() {
		done <- embedgw.RunVersityGW(ctx, be, &embedgw.Config{
			RootUserAccess: realKeyID, RootUserSecret: realSecret, Region: region,
			Ports: []string{gw.addr}, CertFile: certFile, KeyFile: keyFile,
			MaxConnections: 256, MaxRequests: 256, MultipartMaxParts: 10000, Quiet: true,
		})
	}()
	if err := waitTLS(gw.addr, done); err != nil {
		fmt.Fprintln(os.Stderr, "versitygw:", err)
		return 1
	}
	code := m.Run()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return code
}

// tlsFiles writes versitygw's certificate for s3Host, signed by a CA of
// the test's own that BotBox trusts as upstream root.
func tlsFiles(dir string) (*testpki.CA, string, string, error) {
	ca := testpki.NewCA(tbStub{}, "versitygw-test-ca")
	leaf := ca.Leaf(tbStub{}, s3Host, "127.0.0.1")
	key, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		return nil, "", "", err
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	var certs bytes.Buffer
	for _, der := range leaf.Certificate {
		_ = pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	if err := os.WriteFile(certFile, certs.Bytes(), 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		return nil, "", "", err
	}
	return ca, certFile, keyFile, nil
}

func waitTLS(addr string, done <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("stopped: %w", err)
		default:
		}
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only waits for the listener
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not listening after 30s")
}

// botbox is a running BotBox in front of the gateway.
type botbox struct {
	proxyURL     *url.URL // the plain listener (explicit proxy; CONNECT is intercepted)
	ca           *testpki.CA
	caFile       string
	placeholders string // placeholders.dir
	logs         *logcapture.Buffer
}

func startBotBox(t *testing.T) *botbox {
	t.Helper()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"aws-access-key-id": realKeyID, "aws-secret-access-key": realSecret} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := &botbox{ca: testpki.NewCA(t, "botbox-s3-interception-ca"), placeholders: filepath.Join(dir, "placeholders"), logs: &logcapture.Buffer{}}
	certPath, keyPath := b.ca.WriteFiles(t, dir)
	b.caFile = certPath
	yaml := fmt.Sprintf(`
secrets_dir: %s
shutdown_timeout_seconds: 5
https_interception:
  enabled: true
  ca_cert_path: %s
  ca_key_path: %s
placeholders:
  enabled: true
  dir: %s
address_guard:
  allowed_cidrs: ["127.0.0.1/32"]
credentials:
  s3:
    type: aws_sigv4
    access_key_id_ref: aws-access-key-id
    secret_access_key_ref: aws-secret-access-key
    region: %s
    service: s3
egress_policy:
  rules:
    - host: %s
      action: allow
      credential: s3
`, secrets, certPath, keyPath, b.placeholders, region, s3Host)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, server.Options{
		Logger:        telemetry.NewLogger(b.logs, nil),
		Listen:        func(network, addr string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") },
		UpstreamRoots: gw.ca.Pool(),
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, gw.addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	addrs, err := srv.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	b.proxyURL = &url.URL{Scheme: "http", Host: addrs.Proxy[0].String()}
	return b
}

// env reads the placeholders' env file: what the app is given.
func (b *botbox) env(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.placeholders, "env"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		out[k] = strings.Trim(v, "'")
	}
	return out
}

// client is the app's S3 client: the AWS SDK for Go v2 with the given
// keys, through BotBox (HTTPS_PROXY: CONNECT, intercepted; the app trusts
// BotBox's CA).
func (b *botbox) client(t *testing.T, keyID, secret string) *s3.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:           http.ProxyURL(b.proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: b.ca.Pool()},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return s3.New(s3.Options{
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(keyID, secret, ""),
		BaseEndpoint: aws.String("https://" + s3Host),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: tr},
	})
}

// TestSDKThroughBotBox: the AWS SDK for Go v2, signing with the
// placeholder keys from the env file, creates a bucket, puts and gets 1
// byte and 64 MiB, lists them; versitygw verifies every signature (its
// own SigV4 verifier) against the real keys only BotBox holds.
func TestSDKThroughBotBox(t *testing.T) {
	b := startBotBox(t)
	env := b.env(t)
	keyID, secret := env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
	if keyID == "" || secret == "" || keyID == realKeyID || secret == realSecret {
		t.Fatalf("env file: want placeholder AWS keys, got %v", env)
	}
	c := b.client(t, keyID, secret)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("CreateBucket: %v\n%s", err, b.logs.String())
	}
	big := make([]byte, 64<<20)
	_, _ = rand.Read(big)
	objects := map[string][]byte{"one-byte": {'x'}, "sixty-four-mib": big}
	for key, data := range objects {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("PutObject %s: %v", key, err)
		}
	}
	for key, data := range objects {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatalf("GetObject %s: %d bytes, %v; want the %d bytes put", key, len(got), err, len(data))
		}
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	var keys []string
	for _, o := range list.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	if strings.Join(keys, ",") != "one-byte,sixty-four-mib" {
		t.Fatalf("listing: %v", keys)
	}
	if strings.Contains(b.logs.String(), realSecret) || strings.Contains(b.logs.String(), realKeyID) {
		t.Error("the logs carry a real key")
	}
}

// TestWrongSignatureRefused: a client signing with a key that is not the
// placeholder is refused by BotBox (403 credential_refused, nothing
// forwarded); and versitygw itself refuses the placeholder's signature
// when reached directly (the verifier verifies: only BotBox's re-signing
// makes a request pass).
func TestWrongSignatureRefused(t *testing.T) {
	b := startBotBox(t)
	ctx := context.Background()
	_, err := b.client(t, "AKIAAGENTOWNKEY00001", "agent-own-secret").ListBuckets(ctx, &s3.ListBucketsInput{})
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden || !strings.Contains(b.logs.String(), `"reason":"credential_refused"`) {
		t.Fatalf("own key through BotBox: %v, want 403 credential_refused", err)
	}

	env := b.env(t)
	direct := s3.New(s3.Options{
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], ""),
		BaseEndpoint: aws.String("https://" + gw.addr),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: gw.ca.Pool()}}},
	})
	_, err = direct.ListBuckets(ctx, &s3.ListBucketsInput{})
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("placeholder keys straight to versitygw: err = %v, want an S3 error", err)
	}
	// A request signed with the real key but altered after signing fails
	// too: versitygw checks the signature, not only the key ID.
	req, _ := http.NewRequest(http.MethodGet, "https://"+gw.addr+"/", nil)
	req.Header.Set("X-Amz-Content-Sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: realKeyID, SecretAccessKey: realSecret}, req,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "s3", region, time.Now()); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Date", time.Now().Add(-time.Minute).UTC().Format("20060102T150405Z"))
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: gw.ca.Pool()}}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tampered signature straight to versitygw: %d, want 403", resp.StatusCode)
	}
}

// TestDebianClients: awscli and python3-boto3, from Debian's packages,
// signing with the placeholders of the env file, through BotBox
// (HTTPS_PROXY, BotBox's CA as their bundle). With CI set they must be
// installed (.ci/run installs them); without CI the test says what is
// missing and skips.
func TestDebianClients(t *testing.T) {
	b := startBotBox(t)
	env := b.env(t)
	// Debian's, on the app's PATH (not a pyenv shim or a pip install).
	const appPath = "/usr/sbin:/usr/bin:/sbin:/bin"
	awsCLI, errCLI := lookPath("aws", appPath)
	python, errPy := lookPath("python3", appPath)
	boto := errPy == nil && exec.Command(python, "-c", "import boto3").Run() == nil
	if errCLI != nil || !boto {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but awscli (%v) or python3-boto3 (%v) is missing: apt-get install -y awscli python3-boto3", errCLI, boto)
		}
		t.Skipf("awscli (%v) or python3-boto3 (importable: %v) not installed; apt-get install -y awscli python3-boto3", errCLI, boto)
	}
	appEnv := []string{
		"PATH=" + appPath, "HOME=" + t.TempDir(),
		"AWS_ACCESS_KEY_ID=" + env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY=" + env["AWS_SECRET_ACCESS_KEY"],
		"AWS_DEFAULT_REGION=" + region, "AWS_CA_BUNDLE=" + b.caFile,
		"HTTPS_PROXY=" + b.proxyURL.String(), "https_proxy=" + b.proxyURL.String(), "NO_PROXY=",
		"AWS_EC2_METADATA_DISABLED=true",
	}
	endpoint := "https://" + s3Host
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("hello from awscli"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = appEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s\nBotBox:\n%s", name, args, err, out, b.logs.String())
		}
		return string(out)
	}
	run(awsCLI, "--endpoint-url", endpoint, "s3api", "create-bucket", "--bucket", "cli-bucket")
	run(awsCLI, "--endpoint-url", endpoint, "s3", "cp", src, "s3://cli-bucket/from-cli")
	if out := run(awsCLI, "--endpoint-url", endpoint, "s3", "ls", "s3://cli-bucket/"); !strings.Contains(out, "from-cli") {
		t.Fatalf("aws s3 ls: %s", out)
	}
	run(awsCLI, "--endpoint-url", endpoint, "s3", "cp", "s3://cli-bucket/from-cli", filepath.Join(dir, "back"))
	if got, _ := os.ReadFile(filepath.Join(dir, "back")); string(got) != "hello from awscli" {
		t.Fatalf("aws s3 cp back: %q", got)
	}
	script := `
import boto3, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], config=boto3.session.Config(s3={"addressing_style": "path"}))
s3.put_object(Bucket="cli-bucket", Key="from-boto3", Body=b"hello from boto3")
print(s3.get_object(Bucket="cli-bucket", Key="from-boto3")["Body"].read().decode())
print(",".join(o["Key"] for o in s3.list_objects_v2(Bucket="cli-bucket")["Contents"]))
`
	out := run(python, "-c", script, endpoint)
	if !strings.Contains(out, "hello from boto3") || !strings.Contains(out, "from-boto3,from-cli") {
		t.Fatalf("boto3: %s", out)
	}
}

// lookPath finds name in the directories of path.
func lookPath(name, path string) (string, error) {
	for dir := range strings.SplitSeq(path, ":") {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, path)
}

// tbStub lets testpki build the gateway's CA in TestMain (no *testing.T
// yet); it fails loudly.
type tbStub struct{ testing.TB }

func (tbStub) Helper()                   {}
func (tbStub) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (tbStub) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
