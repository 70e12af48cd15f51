package deploy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The Pod of TestImagePod: what its init container, BotBox and the app get.
const (
	podHostAllowed = "api.example.test"   // allowed, a credential injected
	podHostDenied  = "other.example.test" // no rule: denied by default
	podSecretName  = "api-token"
	podDirectPort  = 9999 // an origin port the app may not reach directly
)

// podConfig is BotBox's configuration in the Pod: the one place that says
// which upstreams the test allows. BotBox speaks TLS to port 443 upstream, so
// it trusts the test's origin CA. The origin lives at a private address in
// a namespace the test made; a default-on address guard needs the opt-in
// for it here (allow_private_addresses on the rule, or address_guard's
// allowed_cidrs).
const podConfig = `listen_port: 8080
metrics_port: 9090
secrets_dir: /var/run/secrets/botbox
upstream_ca_file: /etc/botbox/origin-ca.pem
egress_policy:
  default_action: deny
  rules:
    - host: ` + podHostAllowed + `
      action: allow
      allow_private_addresses: true
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: ` + podSecretName + `
`

// clientResult is the part of test/e2e/cmd/e2e-client's JSON result
// (test/e2e/internal/wire.Result) this test reads.
type clientResult struct {
	UID       int    `json:"uid"`
	Connected bool   `json:"connected"`
	Status    int    `json:"status"`
	Body      string `json:"body"`
	Error     string `json:"error"`
	ErrorKind string `json:"error_kind"`
}

// TestImagePod runs the image the way Kubernetes runs it, in a podman pod
// (one network namespace shared by every container): an init container of
// the image, as root with only NET_ADMIN and NET_RAW and the manifest's
// environment, installs the rules with `botbox netfilter install`; the image's default command serves as the
// sidecar, UID 1337; an app container (test/e2e/cmd/e2e-client, static,
// FROM scratch) runs as UID 1000. The pod's only way out is a veth to an
// "origin" namespace the test made, where the test itself listens.
//
// The app gets 403 from BotBox for a denied host (and the origin sees
// nothing), 200 for the allowed one with the credential injected on the way
// (the app never had it), and its direct TCP connection to the origin is
// dropped: it never arrives, while the same connection from UID 1337 does.
func TestImagePod(t *testing.T) {
	pm, img := requireImage(t, "catatonit", "ip")
	id := randomHex(3)
	app := buildAppImage(t, pm, id)

	// Random 10.<211-230>.<0-255>.0/24: inside namespaces this test makes,
	// apart from the e2e suite's 10.231-250.
	var r [2]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	originIP := netip.AddrFrom4([4]byte{10, 211 + r[0]%20, r[1], 1})
	podIP := netip.AddrFrom4([4]byte{10, 211 + r[0]%20, r[1], 2})

	pod := "botbox-smoke-" + id
	pm.mustRun(t, "pod", "create", "--name", pod, "--network", "none")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := pm.command("logs", pod+"-botbox").CombinedOutput()
			t.Logf("botbox logs:\n%s", logs)
		}
		if _, err := pm.run("pod", "rm", "-f", "-t", "0", pod); err != nil {
			t.Log(err)
		}
	})
	pm.mustRun(t, "pod", "start", pod)
	infra := strings.TrimSpace(pm.mustRun(t, "pod", "inspect", "--format", "{{.InfraContainerID}}", pod))
	infraPID := strings.TrimSpace(pm.mustRun(t, "inspect", "--format", "{{.State.Pid}}", infra))

	// The pod's namespace gets a name for ip(8); the origin's is new.
	podNS, netNS := "bbimg-pod-"+id, "bbimg-net-"+id
	t.Cleanup(func() {
		for _, ns := range []string{podNS, netNS} {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
				t.Logf("ip netns del %s: %v: %s", ns, err, out)
			}
		}
	})
	vpod, vnet := "bbip"+id, "bbin"+id // at most 15 characters
	for _, args := range [][]string{
		{"netns", "attach", podNS, infraPID},
		{"netns", "add", netNS},
		{"link", "add", vpod, "netns", podNS, "type", "veth", "peer", "name", vnet, "netns", netNS},
		{"-n", netNS, "link", "set", "lo", "up"},
		{"-n", podNS, "link", "set", vpod, "up"},
		{"-n", netNS, "link", "set", vnet, "up"},
		{"-n", podNS, "addr", "add", podIP.String() + "/24", "dev", vpod},
		{"-n", netNS, "addr", "add", originIP.String() + "/24", "dev", vnet},
		{"-n", podNS, "route", "add", "default", "via", originIP.String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	secret := "sk-pod-" + randomHex(12)
	originCA, originCert := newOriginTLS(t, podHostAllowed)
	origin := startOrigin(t, "/run/netns/"+netNS, originIP, originCert, "Bearer "+secret)

	// init: the image, root, only NET_ADMIN and NET_RAW, read-only root.
	initArgs := []string{"run", "--rm", "--pod", pod, "--name", pod + "-init", "--user", "0:0",
		"--cap-drop", "ALL", "--cap-add", "NET_ADMIN,NET_RAW", "--read-only",
		"--security-opt", "no-new-privileges"}
	// The init container's environment is the shipped manifest's
	// (deploy/kubernetes/deployment.yaml: nftables backend, IPv6 on, ICMP
	// dropped, 80 and 443 redirected), so this proves that it works in the
	// image. The app here uses neither 443 nor interception.
	for _, e := range container(t, loadBundle(t), nameIPTablesInit).Env {
		if strings.HasPrefix(e.Name, "BOTBOX_") {
			initArgs = append(initArgs, "-e", e.Name+"="+e.Value)
		}
	}
	pm.mustRun(t, append(initArgs, img.tag, "netfilter", "install")...)

	// sidecar: the image's default command with the test's config and secret.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf, secrets := filepath.Join(dir, "config"), filepath.Join(dir, "secrets")
	// podman 4.3 gives a --network none pod's containers an /etc/hosts
	// without the pod's --add-host entries: mount one into BotBox and the app.
	hosts := filepath.Join(dir, "hosts")
	for path, content := range map[string]string{
		hosts:                                 fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s %s %s\n", originIP, podHostAllowed, podHostDenied),
		filepath.Join(conf, "config.yaml"):    podConfig,
		filepath.Join(conf, "origin-ca.pem"):  originCA,
		filepath.Join(secrets, podSecretName): secret + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	pm.mustRun(t, "run", "-d", "--pod", pod, "--name", pod+"-botbox", "--cap-drop", "ALL", "--read-only",
		"--security-opt", "no-new-privileges",
		"-v", hosts+":/etc/hosts:ro", "-v", conf+":/etc/botbox:ro", "-v", secrets+":/var/run/secrets/botbox:ro", img.tag)
	waitHealthy(t, pm, pod+"-botbox")

	runApp := func(t *testing.T, user string, args ...string) clientResult {
		t.Helper()
		out := pm.mustRun(t, append([]string{"run", "--rm", "--pod", pod, "--user", user, "--cap-drop", "ALL",
			"--read-only", "--security-opt", "no-new-privileges", "-v", hosts + ":/etc/hosts:ro", app}, args...)...)
		var res clientResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("app output %q: %v", out, err)
		}
		return res
	}

	t.Run("denied host: 403 from BotBox", func(t *testing.T) {
		before := origin.count()
		res := runApp(t, "1000:1000", "http", "-url", "http://"+podHostDenied+"/")
		if res.UID != 1000 || res.Status != http.StatusForbidden {
			t.Errorf("app (uid %d) GET http://%s/: status %d (%s %s), want 403", res.UID, podHostDenied, res.Status, res.ErrorKind, res.Error)
		}
		if got := origin.since(before); len(got) > 0 {
			t.Errorf("the origin saw %v for a denied host", got)
		}
	})

	t.Run("allowed host: credential injected on the way", func(t *testing.T) {
		before := origin.count()
		res := runApp(t, "1000:1000", "http", "-url", "http://"+podHostAllowed+"/v1/models")
		if res.Status != http.StatusOK {
			t.Fatalf("GET http://%s/v1/models: status %d (%s %s), want 200", podHostAllowed, res.Status, res.ErrorKind, res.Error)
		}
		want := []string{fmt.Sprintf("http %s /v1/models auth=%t", podHostAllowed, true)}
		if got := origin.since(before); !slices.Equal(got, want) {
			t.Errorf("the origin saw %q, want %q", got, want)
		}
		if strings.Contains(res.Body, secret) {
			t.Error("the secret reached the app")
		}
	})

	t.Run("direct connection dropped", func(t *testing.T) {
		target := netip.AddrPortFrom(originIP, podDirectPort).String()
		before := origin.count()
		res := runApp(t, "1000:1000", "tcp", "-addr", target)
		if res.Connected || res.ErrorKind != "timeout" {
			t.Errorf("app tcp %s: connected %t, error %s %q; want a dropped connection (timeout)", target, res.Connected, res.ErrorKind, res.Error)
		}
		if got := origin.since(before); len(got) > 0 {
			t.Errorf("the origin saw %v from the app", got)
		}
		// The same connection from BotBox's UID goes out: the drop is the
		// rules' doing, not a missing route or listener.
		res = runApp(t, "1337:1337", "tcp", "-addr", target)
		if !res.Connected {
			t.Errorf("tcp %s as UID 1337: not connected (%s %s); the exempt UID must get out", target, res.ErrorKind, res.Error)
		}
		if got, want := origin.since(before), []string{fmt.Sprintf("tcp %d", podDirectPort)}; !slices.Equal(got, want) {
			t.Errorf("the origin saw %q, want %q", got, want)
		}
	})
}

// buildAppImage builds the app image: test/e2e/cmd/e2e-client, static, FROM
// scratch (nothing can be pulled, and Debian's curl is dynamically linked).
func buildAppImage(t *testing.T, pm *podman, id string) string {
	t.Helper()
	ctx := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ctx, "app"), "./test/e2e/cmd/e2e-client")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build e2e-client: %v\n%s", err, out)
	}
	file := "FROM scratch\nCOPY app /app\nUSER 1000:1000\nENTRYPOINT [\"/app\"]\n"
	if err := os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := "localhost/botbox-smoke-app:" + id
	pm.mustRun(t, "build", "--pull=never", "-q", "-t", tag, ctx)
	t.Cleanup(func() {
		if _, err := pm.run("rmi", "-f", tag); err != nil {
			t.Log(err)
		}
	})
	return tag
}

// origin records what reaches the test's listeners in the origin namespace:
// "http HOST PATH auth=BOOL" per HTTP request (auth: the Authorization
// header carried the Pod's secret) and "tcp PORT" per connection accepted on
// podDirectPort.
type origin struct {
	mu     sync.Mutex
	events []string
}

func (o *origin) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *origin) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.events)
}

func (o *origin) since(n int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events[n:])
}

// startOrigin listens on ip:443 (HTTPS with cert) and ip:podDirectPort (bare
// TCP) inside the network namespace at nsPath and serves until the test
// ends; auth is the Authorization header BotBox should inject.
func startOrigin(t *testing.T, nsPath string, ip netip.Addr, cert tls.Certificate, auth string) *origin {
	t.Helper()
	ls, err := listenInNetns(nsPath, netip.AddrPortFrom(ip, 443).String(), netip.AddrPortFrom(ip, podDirectPort).String())
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{}
	var wg sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.add(fmt.Sprintf("http %s %s auth=%t", r.Host, r.URL.Path, r.Header.Get("Authorization") == auth))
		_, _ = io.WriteString(w, "origin\n")
	})}
	wg.Add(2)
	tlsListener := tls.NewListener(ls[0], &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	go func() { defer wg.Done(); _ = srv.Serve(tlsListener) }()
	go func() {
		defer wg.Done()
		for {
			c, err := ls[1].Accept()
			if err != nil {
				return
			}
			o.add(fmt.Sprintf("tcp %d", podDirectPort))
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = ls[1].Close()
		wg.Wait()
	})
	return o
}

// listenInNetns opens TCP listeners inside the network namespace at nsPath.
// A socket belongs to the namespace it was created in, so the listeners keep
// serving there from any thread; the thread that entered the namespace is
// locked and never unlocked, so the runtime discards it with its goroutine
// and no other goroutine ever runs in that namespace.
func listenInNetns(nsPath string, addrs ...string) ([]net.Listener, error) {
	type result struct {
		ls  []net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		var ls []net.Listener
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				for _, l := range ls {
					_ = l.Close()
				}
				ch <- result{err: errors.Join(fmt.Errorf("listening on %s in %s", a, nsPath), err)}
				return
			}
			ls = append(ls, l)
		}
		ch <- result{ls: ls}
	}()
	r := <-ch
	return r.ls, r.err
}

// newOriginTLS makes a test CA (returned as PEM, for upstream_ca_file) and a
// certificate for host signed by it.
func newOriginTLS(t *testing.T, host string) (caPEM string, cert tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "botbox image test origin CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caTmpl, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	return caPEM, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
}
