package cluster

// The single-node cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd, kubelet and kube-proxy, all started by this
// test binary inside network, mount and PID namespaces of its own
// (TestMain re-executes it under unshare), so nothing they do reaches the
// host: the kubelet's and kube-proxy's netfilter rules, the sysctls they
// write, containerd's mounts and netns files and every listener live and
// die with those namespaces. What each workaround is for is in
// docs/kubernetes.md ("The cluster suite").

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The cluster's addresses. They exist only inside the suite's network
// namespace, which has no interface but lo and the Pods' veth pairs, so
// no packet to them can leave the machine.
const (
	nodeName    = "botbox-node"
	nodeIP      = "192.0.2.10"     // on lo: this kernel may have no dummy device, and the kubelet refuses loopback node IPs
	podCIDR     = "10.244.0.0/24"  // CNI ptp + host-local
	serviceCIDR = "10.96.0.0/24"   // ClusterIPs, translated by kube-proxy (nftables)
	apiServer   = "127.0.0.1:6443" // every control-plane listener is on loopback
	etcdClient  = "127.0.0.1:2379"
)

// node is a running cluster and what the tests need to talk to it.
type node struct {
	work    string // scratch directory: PKI, configs, logs, state
	bin     string // the binaries build.sh made
	helm    string
	procs   []*proc
	client  *kubernetes.Clientset
	kubecfg string
}

// proc is one component, its log, and whether it has exited.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// logTail returns the last lines of a component's log, for errors that
// must say why a piece did not come up.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func (n *node) start(name string, args ...string) (*proc, error) {
	return n.startEnv(name, nil, args...)
}

func (n *node) startEnv(name string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(n.work, "logs", name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.exited) }()
	n.procs = append(n.procs, p)
	return p, nil
}

// waitUp polls ready until it returns nil; it fails with the component's
// log when the component exits first or the deadline passes.
func (p *proc) waitUp(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v); its log ends:\n%s", p.name, p.cmd.ProcessState, logTail(p.log, 40))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v; its log ends:\n%s", p.name, timeout, err, logTail(p.log, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop sends SIGTERM to every component at once (the Pods are gone by
// then, so no order is needed) and SIGKILL to what is still running 10 s
// later. The PID namespace kills anything left when the test binary, its
// init, exits.
func (n *node) stop() {
	for _, p := range slices.Backward(n.procs) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(10 * time.Second)
	for _, p := range n.procs {
		select {
		case <-p.exited:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// run runs a command to completion, its output in the error when it fails.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// isolate prepares the namespaces the test binary was started in: lo with
// the node address, forwarding for Pod-to-Pod traffic, a tmpfs over /run
// (containerd's state and netns files), and the kernel settings the
// kubelet insists on shown to it in this mount namespace only.
func (n *node) isolate() error {
	for _, c := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", nodeIP + "/32", "dev", "lo"},
		// The API server dials ClusterIPs (the chart's webhook Service): the
		// route makes the connect succeed so kube-proxy's output DNAT can
		// send it to the Pod; the source is the node address, never 127/8,
		// which the kernel would not route out of lo.
		{"ip", "route", "add", serviceCIDR, "dev", "lo", "src", nodeIP},
		{"mount", "-t", "tmpfs", "tmpfs", "/run"},
	} {
		if err := run(c...); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable forwarding in the suite's network namespace: %w", err)
	}
	for _, d := range []string{"/run/containerd", "/run/netns"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The kubelet wants vm.overcommit_memory=1, kernel.panic=10 and
	// kernel.panic_on_oops=1, and writes them unless protectKernelDefaults
	// makes it refuse to start instead. Those are machine-wide: bind-mount
	// files with the values it expects over them, in this mount namespace.
	for sysctl, value := range map[string]string{
		"/proc/sys/vm/overcommit_memory": "1",
		"/proc/sys/kernel/panic":         "10",
		"/proc/sys/kernel/panic_on_oops": "1",
	} {
		fake := filepath.Join(n.work, "sysctl", strings.ReplaceAll(strings.TrimPrefix(sysctl, "/proc/sys/"), "/", "."))
		if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(fake, []byte(value+"\n"), 0o444); err != nil {
			return err
		}
		if err := run("mount", "--bind", fake, sysctl); err != nil {
			return err
		}
	}
	return nil
}

// pki writes the cluster's certificates: one CA for every serving and
// client certificate, the API server's serving certificate, the admin
// client certificate (system:masters, used by every component and the
// tests), the service-account signing key and a kubeconfig.
func (n *node) pki() error {
	dir := filepath.Join(n.work, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "botbox-cluster-suite-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	issue := func(name string, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(now.UnixNano())
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(48*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", keyDER)
	}
	if err := issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1"), net.ParseIP(nodeIP)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return err
	}
	if err := issue("admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub); err != nil {
		return err
	}
	n.kubecfg = filepath.Join(dir, "kubeconfig")
	return os.WriteFile(n.kubecfg, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: suite
  cluster: {server: "https://%s", certificate-authority: %s/ca.crt}
users:
- name: admin
  user: {client-certificate: %s/admin.crt, client-key: %s/admin.key}
contexts:
- name: suite
  context: {cluster: suite, user: admin}
current-context: suite
`, apiServer, dir, dir, dir), 0o600)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func (n *node) pkiPath(name string) string { return filepath.Join(n.work, "pki", name) }

func (n *node) adminTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(n.pkiPath("admin.crt"), n.pkiPath("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(n.pkiPath("ca.crt"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots}, nil
}

// httpOK is a readiness check: GET url answers 200.
func httpOK(c *http.Client, url string) func() error {
	return func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// up starts every component and waits for each to be ready: the control
// plane, then containerd with the suite's images, then the node.
func (n *node) up(ctx context.Context, images []string) error {
	for _, d := range []string{"logs", "etcd", "kubelet", "containerd", "cni-ipam", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(n.work, d), 0o755); err != nil {
			return err
		}
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}
	b := func(name string) string { return filepath.Join(n.bin, name) }
	p := n.pkiPath
	plain := &http.Client{Timeout: 2 * time.Second}
	etcd, err := n.start("etcd", b("etcd"), "--name", "suite", "--data-dir", filepath.Join(n.work, "etcd"),
		"--listen-client-urls", "http://"+etcdClient, "--advertise-client-urls", "http://"+etcdClient,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "suite=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := etcd.waitUp(30*time.Second, httpOK(plain, "http://"+etcdClient+"/health")); err != nil {
		return err
	}
	apiserver, err := n.start("kube-apiserver", b("kube-apiserver"),
		"--etcd-servers=http://"+etcdClient,
		"--bind-address=127.0.0.1", "--secure-port=6443", "--advertise-address="+nodeIP,
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--cert-dir="+filepath.Join(n.work, "apiserver-certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC", "--profiling=false",
		// exec and logs: the API server reaches the kubelet by its
		// InternalIP (never a name the host's resolver would be asked for)
		// with a client certificate the kubelet trusts.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate="+p("admin.crt"), "--kubelet-client-key="+p("admin.key"))
	if err != nil {
		return err
	}
	tlsCfg, err := n.adminTLS()
	if err != nil {
		return err
	}
	admin := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	if err := apiserver.waitUp(120*time.Second, httpOK(admin, "https://"+apiServer+"/readyz")); err != nil {
		return err
	}
	n.client, err = kubernetes.NewForConfig(&rest.Config{
		Host: "https://" + apiServer, QPS: 50, Burst: 100,
		TLSClientConfig: rest.TLSClientConfig{CAFile: p("ca.crt"), CertFile: p("admin.crt"), KeyFile: p("admin.key")},
	})
	if err != nil {
		return err
	}
	common := []string{"--kubeconfig=" + n.kubecfg, "--authentication-kubeconfig=" + n.kubecfg,
		"--authorization-kubeconfig=" + n.kubecfg, "--bind-address=127.0.0.1", "--leader-elect=false"}
	kcm, err := n.start("kube-controller-manager", append([]string{b("kube-controller-manager"),
		"--secure-port=10257", "--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"),
		"--use-service-account-credentials=false", "--service-cluster-ip-range=" + serviceCIDR, "--controllers=*"}, common...)...)
	if err != nil {
		return err
	}
	sched, err := n.start("kube-scheduler", append([]string{b("kube-scheduler"), "--secure-port=10259"}, common...)...)
	if err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := kcm.waitUp(60*time.Second, httpOK(insecure, "https://127.0.0.1:10257/healthz")); err != nil {
		return err
	}
	if err := sched.waitUp(60*time.Second, httpOK(insecure, "https://127.0.0.1:10259/healthz")); err != nil {
		return err
	}
	containerd, err := n.start("containerd", b("containerd"), "--config", filepath.Join(n.work, "containerd.toml"))
	if err != nil {
		return err
	}
	sock := "/run/containerd/containerd.sock"
	if err := containerd.waitUp(30*time.Second, func() error {
		return run(b("ctr"), "-a", sock, "version")
	}); err != nil {
		return err
	}
	for _, archive := range images {
		if err := run(b("ctr"), "-a", sock, "-n", "k8s.io", "images", "import", "--all-platforms", archive); err != nil {
			return fmt.Errorf("import %s into containerd: %w", archive, err)
		}
	}
	kubelet, err := n.startEnv("kubelet", []string{"PATH=" + os.Getenv("PATH") + ":/usr/sbin:/sbin"}, b("kubelet"),
		"--config="+filepath.Join(n.work, "kubelet.yaml"), "--kubeconfig="+n.kubecfg,
		"--root-dir="+filepath.Join(n.work, "kubelet"), "--cert-dir="+filepath.Join(n.work, "kubelet-pki"),
		"--hostname-override="+nodeName, "--node-ip="+nodeIP)
	if err != nil {
		return err
	}
	if err := kubelet.waitUp(90*time.Second, func() error { return n.nodeReady(ctx) }); err != nil {
		return err
	}
	proxy, err := n.start("kube-proxy", b("kube-proxy"), "--config="+filepath.Join(n.work, "kube-proxy.yaml"))
	if err != nil {
		return err
	}
	if err := proxy.waitUp(60*time.Second, httpOK(plain, "http://127.0.0.1:10256/healthz")); err != nil {
		return err
	}
	// Pods need their namespace's default ServiceAccount, which
	// kube-controller-manager makes.
	return kcm.waitUp(60*time.Second, func() error {
		_, err := n.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (n *node) nodeReady(ctx context.Context) error {
	nd, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return errors.New("node not Ready yet")
}

// writeConfigs writes containerd's, the kubelet's, kube-proxy's and the
// CNI configuration. Every path is under the work directory or the
// private /run.
func (n *node) writeConfigs() error {
	w := n.work
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(`version = 3
root = "%[1]s/containerd/root"
state = "/run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.internal.v1.opt']
  path = "%[1]s/containerd/opt"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "10010"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%[3]s"

[plugins.'io.containerd.cri.v1.runtime']
  # Root may lack CAP_SYS_RESOURCE here: runc then cannot set the sandbox's
  # oom_score_adj -998 ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "%[2]s"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["%[4]s/cni"]
    conf_dir = "%[1]s/cni"
`, w, runcPath(), pauseImage, n.bin),
		"cni/10-suite.conflist": fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "suite",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "ipam": {"type": "host-local", "dataDir": "%s/cni-ipam",
      "ranges": [[{"subnet": "%s"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`, w, podCIDR),
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[2]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[1]s/pki/ca.crt}
authorization: {mode: AlwaysAllow}
# cgroup v1 hosts without systemd as PID 1: cgroupfs, and nothing created
# under the host's cgroup roots beyond what runc makes per container.
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
# Read, never write, the machine-wide kernel settings (shown to it through
# bind mounts in the suite's mount namespace).
protectKernelDefaults: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
podLogsDir: %[1]s/pod-logs
resolvConf: %[1]s/resolv.conf
clusterDNS: [%[3]s]
clusterDomain: cluster.local
podCIDR: %[4]s
# Secret and ConfigMap volumes follow the API within seconds (rotation test).
syncFrequency: 5s
configMapAndSecretChangeDetectionStrategy: Watch
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
localStorageCapacityIsolation: false
`, w, nodeIP, dnsServiceIP, podCIDR),
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
mode: nftables
clusterCIDR: %s
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# 0: leave the (machine-wide) conntrack table size and timeouts alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, n.kubecfg, nodeName, podCIDR),
		"resolv.conf": "nameserver " + dnsServiceIP + "\n",
	}
	for name, content := range files {
		path := filepath.Join(w, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runcPath is Debian's runc (apt-get install runc).
func runcPath() string {
	if p, err := exec.LookPath("runc"); err == nil {
		return p
	}
	return "/usr/sbin/runc"
}

// cgroupDirs lists every cgroup directory on the machine, so what the
// suite's containers leave behind (runc's per-container directories stay
// after their processes are gone) can be removed, and only that.
func cgroupDirs() map[string]bool {
	dirs := map[string]bool{}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fs.SkipDir
		}
		if d.IsDir() {
			dirs[path] = true
		}
		return nil
	})
	return dirs
}

// removeNewCgroups removes the cgroup directories that did not exist in
// before, deepest first; a directory that still holds a process stays and
// is reported.
func removeNewCgroups(before map[string]bool) []string {
	var added []string
	for d := range cgroupDirs() {
		if !before[d] {
			added = append(added, d)
		}
	}
	slices.SortFunc(added, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var left []string
	for _, d := range added {
		if err := os.Remove(d); err != nil {
			left = append(left, fmt.Sprintf("%s: %v", d, err))
		}
	}
	return left
}
