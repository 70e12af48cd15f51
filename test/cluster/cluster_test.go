package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The services the suite runs in the unlabelled namespace "infra": the
// cluster DNS (kubelet's clusterDNS) and the origin the agent talks to.
// Their ClusterIPs are fixed so the DNS zone can name the origin's.
const (
	dnsServiceIP    = "10.96.0.10"
	originServiceIP = "10.96.0.20"
	infraNS         = "infra"
	agentsNS        = "agents"
	releaseNS       = "botbox-system"
)

// agentPolicy is the agents' BotBox config: origin.botbox.test allowed
// with the Secret's key injected, every other name denied, the DNS guard
// on. extraRules are appended to the rules (the hot-reload test adds one).
func agentPolicy(extraRules string) string {
	return `listen_port: 8080
metrics_port: 9090
metrics_listen_addr: "0.0.0.0"
secrets_dir: /var/run/secrets/botbox
allow_non_loopback: false
egress_policy:
  default_action: deny
  rules:
    - host: origin.botbox.test
      action: allow
      allowed_ports: [80]
      upstream_tls: false
      allow_private_addresses: true
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: origin-key
` + extraRules + `https_interception:
  enabled: true
  listen_port: 8443
  ca_cert_path: /etc/botbox-ca/ca.crt
  ca_key_path: /etc/botbox-ca-key/ca.key
dns_guard:
  enabled: true
  listen_port: 8053
`
}

// installChart installs charts/botbox with real Helm and waits for its
// webhook Pods, which run BotBox's image on the node, to be Ready; then it
// checks that both webhook configurations exist (a missing one admits
// Pods uninjected without an error).
func (n *node) installChart(ctx context.Context) error {
	chart, err := filepath.Abs("../../charts/botbox")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, n.helm, "install", "botbox", chart, "--kubeconfig", n.kubecfg,
		"-n", releaseNS, "--create-namespace", "--wait", "--timeout", "180s",
		"--set", "webhook.allowedImageRegistries={localhost}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm install --wait: %w: %s\nkubelet log ends:\n%s", err, out, logTail(filepath.Join(n.work, "logs", "kubelet.log"), 20))
	}
	if _, err := n.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "botbox", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("the chart's MutatingWebhookConfiguration: %w", err)
	}
	if _, err := n.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "botbox", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("the chart's ValidatingWebhookConfiguration: %w", err)
	}
	return nil
}

// teardown deletes every Pod (so containerd's shims and runc's containers
// end), then stops the components.
func (n *node) teardown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// Workloads first, or their ReplicaSets would recreate the Pods.
	nss, _ := n.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if nss != nil {
		now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		for _, ns := range nss.Items {
			_ = n.client.AppsV1().Deployments(ns.Name).DeleteCollection(ctx, now, metav1.ListOptions{})
			_ = n.client.AppsV1().ReplicaSets(ns.Name).DeleteCollection(ctx, now, metav1.ListOptions{})
			_ = n.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, now, metav1.ListOptions{})
		}
	}
	for ctx.Err() == nil {
		pods, err := n.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "cluster suite: Pods still there after 90 s; stopping the node anyway")
	}
	n.stop()
}

// kubectl runs the kubectl built with the cluster.
func (n *node) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, "kubectl"), append([]string{"--kubeconfig", n.kubecfg}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// execIn runs the probe in a container through `kubectl exec` (the API
// server, the validating webhook's CONNECT rule, the kubelet, containerd).
func (n *node) execIn(t *testing.T, ns, pod, container string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	return n.kubectl(ctx, append([]string{"exec", "-n", ns, pod, "-c", container, "--"}, args...)...)
}

func (n *node) waitPod(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pod, err := n.client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning && podReady(pod) {
			return pod
		}
		if time.Now().After(deadline) {
			events, _ := n.kubectl(t.Context(), "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
			status := ""
			if pod != nil {
				b, _ := json.Marshal(pod.Status)
				status = string(b)
			}
			t.Fatalf("Pod %s/%s not Running and Ready after %s (%v): %s\nevents:\n%s", ns, name, timeout, err, status, events)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// probePod is a Pod running the probe image with args, labelled app=name,
// as UID 2000 (the webhook refuses Pods whose UID only the image decides).
func probePod(ns, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr(int64(2000))},
			Containers: []corev1.Container{{
				Name: "app", Image: probeImage, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
}

func service(ns, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Selector: map[string]string{"app": name}, Ports: ports},
	}
}

// fixture is what TestCluster sets up once: the infra Pods and the agent.
type fixture struct {
	originPod *corev1.Pod
	dnsPod    *corev1.Pod
	clientPod *corev1.Pod
	agent     *corev1.Pod
	key       string
}

func create[T any](t *testing.T, what string, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
	return v
}

func (n *node) setUp(t *testing.T) *fixture {
	ctx := t.Context()
	c := n.client.CoreV1()
	fx := &fixture{key: "suite-key-" + randomWord()}
	create(t, "namespace infra", func() (*corev1.Namespace, error) {
		return c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: infraNS}}, metav1.CreateOptions{})
	})
	n.waitServiceAccount(t, infraNS)
	for _, p := range []*corev1.Pod{
		probePod(infraNS, "origin", "origin"),
		probePod(infraNS, "dns", "dns", "origin.botbox.test="+originServiceIP, "denied.botbox.test="+originServiceIP, "other.botbox.test="+originServiceIP),
		probePod(infraNS, "client", "sleep"),
	} {
		if p.Name == "dns" {
			// Port 53 needs the capability the runtime grants by default.
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: new(int64)}
		}
		create(t, "Pod "+p.Name, func() (*corev1.Pod, error) { return c.Pods(infraNS).Create(ctx, p, metav1.CreateOptions{}) })
	}
	create(t, "Service dns", func() (*corev1.Service, error) {
		return c.Services(infraNS).Create(ctx, service(infraNS, "dns", dnsServiceIP,
			corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53},
			corev1.ServicePort{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 53}), metav1.CreateOptions{})
	})
	create(t, "Service origin", func() (*corev1.Service, error) {
		return c.Services(infraNS).Create(ctx, service(infraNS, "origin", originServiceIP,
			corev1.ServicePort{Name: "http", Port: 80, TargetPort: intOrString(8080)}), metav1.CreateOptions{})
	})
	fx.originPod = n.waitPod(t, infraNS, "origin", 90*time.Second)
	fx.dnsPod = n.waitPod(t, infraNS, "dns", 90*time.Second)
	fx.clientPod = n.waitPod(t, infraNS, "client", 90*time.Second)

	create(t, "namespace agents", func() (*corev1.Namespace, error) {
		return c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentsNS,
			Labels: map[string]string{"botbox.dev/inject": "enabled"}}}, metav1.CreateOptions{})
	})
	n.waitServiceAccount(t, agentsNS)
	create(t, "ConfigMap botbox-config", func() (*corev1.ConfigMap, error) {
		return c.ConfigMaps(agentsNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "botbox-config"},
			Data: map[string]string{"config.yaml": agentPolicy("")}}, metav1.CreateOptions{})
	})
	create(t, "Secret botbox-secrets", func() (*corev1.Secret, error) {
		return c.Secrets(agentsNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "botbox-secrets"},
			StringData: map[string]string{"origin-key": fx.key}}, metav1.CreateOptions{})
	})
	// The agent as users deploy it: a Deployment whose container says
	// nothing about capabilities; the ReplicaSet controller creates the
	// Pod, and the API server's admission chain calls the webhook.
	one := int32(1)
	create(t, "Deployment agent", func() (*appsv1.Deployment, error) {
		return n.client.AppsV1().Deployments(agentsNS).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "agent"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: new(int64),
						SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr(int64(2000)), RunAsNonRoot: ptr(true)},
						Containers: []corev1.Container{{
							Name: "app", Image: probeImage, ImagePullPolicy: corev1.PullNever, Args: []string{"sleep"},
						}},
					},
				},
			},
		}, metav1.CreateOptions{})
	})
	deadline := time.Now().Add(120 * time.Second)
	for fx.agent == nil {
		pods, err := c.Pods(agentsNS).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err == nil && len(pods.Items) > 0 {
			fx.agent = n.waitPod(t, agentsNS, pods.Items[0].Name, time.Until(deadline))
			break
		}
		if time.Now().After(deadline) {
			rs, _ := n.kubectl(ctx, "describe", "rs", "-n", agentsNS)
			t.Fatalf("no agent Pod after 120 s (%v); ReplicaSets:\n%s", err, rs)
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fx
}

func (n *node) waitServiceAccount(t *testing.T, ns string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := n.client.CoreV1().ServiceAccounts(ns).Get(t.Context(), "default", metav1.GetOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount in %s (kube-controller-manager): %v", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

func randomWord() string { return fmt.Sprintf("%x", time.Now().UnixNano()) }

// seen is what the origin recorded (probe origin's GET /_seen), read by
// the test from the node's network namespace straight from the Pod IP.
type seenRequest struct {
	Method string      `json:"method"`
	Host   string      `json:"host"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	var v T
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

func (fx *fixture) originSeen(t *testing.T, path string) []seenRequest {
	var out []seenRequest
	for _, r := range getJSON[[]seenRequest](t, "http://"+net.JoinHostPort(fx.originPod.Status.PodIP, "8080")+"/_seen") {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (fx *fixture) dnsAsked(t *testing.T) []string {
	return getJSON[[]string](t, "http://"+net.JoinHostPort(fx.dnsPod.Status.PodIP, "8081")+"/_queries")
}

// TestCluster is the suite, in order: the steps share one cluster, one
// agent, and the later ones change the policy and take the webhook down.
func TestCluster(t *testing.T) {
	if suite == nil {
		t.Fatal("the cluster is not running (TestMain)")
	}
	n := suite
	fx := n.setUp(t)
	agent := fx.agent

	t.Run("stored Pod is the injected one", func(t *testing.T) {
		var inits []string
		for _, c := range agent.Spec.InitContainers {
			inits = append(inits, c.Name)
		}
		if !slices.Equal(inits, []string{"ca-init", "iptables-init", "botbox"}) {
			t.Fatalf("stored initContainers %v, want ca-init, iptables-init, botbox", inits)
		}
		if agent.Labels["botbox.dev/injected"] != "true" {
			t.Errorf("stored labels %v lack botbox.dev/injected=true", agent.Labels)
		}
		if p := agent.Spec.InitContainers[2].RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
			t.Errorf("botbox is not a native sidecar (restartPolicy %v)", p)
		}
		if len(agent.OwnerReferences) == 0 || agent.OwnerReferences[0].Kind != "ReplicaSet" {
			t.Errorf("the agent Pod was not made by its ReplicaSet: %v", agent.OwnerReferences)
		}
		for _, st := range agent.Status.InitContainerStatuses {
			switch st.Name {
			case "ca-init", "iptables-init":
				if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
					t.Errorf("%s did not complete: %+v", st.Name, st.State)
				}
			case "botbox":
				if !st.Ready || st.Started == nil || !*st.Started {
					t.Errorf("the botbox sidecar is not ready: %+v", st)
				}
			}
		}
		if len(fx.clientPod.Spec.InitContainers) != 0 || fx.clientPod.Labels["botbox.dev/injected"] != "" {
			t.Errorf("a Pod in an unlabelled namespace was injected: %v", fx.clientPod.Spec.InitContainers)
		}
		webhookPods, err := n.client.CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(webhookPods.Items) == 0 {
			t.Fatalf("the chart's webhook Pods: %v", err)
		}
		for _, p := range webhookPods.Items {
			if len(p.Spec.InitContainers) != 0 {
				t.Errorf("the release namespace's Pod %s was injected", p.Name)
			}
		}
		rules, err := nftRulesOf(agent.Status.PodIP)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"table ip botbox", "redirect to :8080", "redirect to :8443", "redirect to :8053", "skuid 1337"} {
			if !strings.Contains(rules, want) {
				t.Errorf("the agent's network namespace has no %q in its ruleset:\n%s", want, rules)
			}
		}
	})

	t.Run("allowed request gets the Secret's credential", func(t *testing.T) {
		out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "get", "http://origin.botbox.test/allowed")
		if err != nil || !strings.Contains(out, "status=200") {
			t.Fatalf("allowed request: %v\n%s", err, out)
		}
		if strings.Contains(out, fx.key) {
			t.Errorf("the app saw the key in the response: %s", out)
		}
		seen := fx.originSeen(t, "/allowed")
		if len(seen) != 1 {
			t.Fatalf("the origin saw %d requests for /allowed, want 1: %+v", len(seen), seen)
		}
		if got := seen[0].Header.Get("Authorization"); got != "Bearer "+fx.key {
			t.Errorf("the origin got Authorization %q, want the Secret's key", got)
		}
		// Plain HTTP upstreams get the port written out (setUpstream).
		if seen[0].Host != "origin.botbox.test:80" {
			t.Errorf("the origin got Host %q, want origin.botbox.test:80", seen[0].Host)
		}
	})

	t.Run("denied request gets 403 and never reaches the origin", func(t *testing.T) {
		out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "get", "-connect", originServiceIP+":80", "http://denied.botbox.test/denied")
		if err != nil || !strings.Contains(out, "status=403") {
			t.Fatalf("denied request: want 403 from BotBox: %v\n%s", err, out)
		}
		if seen := fx.originSeen(t, "/denied"); len(seen) != 0 {
			t.Errorf("the origin saw the denied request: %+v", seen)
		}
	})

	t.Run("direct TCP and UDP to another Pod are dropped", func(t *testing.T) {
		tcp := net.JoinHostPort(fx.originPod.Status.PodIP, "7000")
		udp := net.JoinHostPort(fx.originPod.Status.PodIP, "7001")
		// Controls: the same listeners answer a Pod without BotBox.
		for _, c := range [][]string{{"tcp", tcp}, {"udp", udp}} {
			if out, err := n.execIn(t, infraNS, fx.clientPod.Name, "app", "/probe", c[0], c[1]); err != nil || !strings.Contains(out, "echoed") {
				t.Fatalf("control: %s %s from a plain Pod: %v\n%s", c[0], c[1], err, out)
			}
		}
		for _, c := range [][]string{{"tcp", tcp}, {"udp", udp}, {"tcp", net.JoinHostPort(fx.originPod.Status.PodIP, "8080")}} {
			if out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", c[0], c[1]); err == nil || strings.Contains(out, "echoed") {
				t.Errorf("%s to %s from the agent got through: %s", c[0], c[1], out)
			}
		}
	})

	t.Run("DNS goes through the guard", func(t *testing.T) {
		out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "resolve", "origin.botbox.test.")
		if err != nil || !strings.Contains(out, originServiceIP) {
			t.Fatalf("allowed name: %v\n%s", err, out)
		}
		// A denied name, through resolv.conf and straight to the DNS Pod.
		for _, args := range [][]string{
			{"/probe", "resolve", "denied.botbox.test."},
			{"/probe", "resolve", "-server", net.JoinHostPort(fx.dnsPod.Status.PodIP, "53"), "denied.botbox.test."},
		} {
			if out, err := n.execIn(t, agentsNS, agent.Name, "app", args...); err == nil {
				t.Errorf("%v resolved: %s", args, out)
			}
		}
		asked := fx.dnsAsked(t)
		if !slices.Contains(asked, "origin.botbox.test.") {
			t.Errorf("the cluster DNS never saw the allowed name (asked: %v)", asked)
		}
		for _, name := range asked {
			if strings.HasPrefix(name, "denied.") {
				t.Errorf("a query for %s left the agent's Pod", name)
			}
		}
	})

	t.Run("admission: drop ALL added, no NET_RAW inside", func(t *testing.T) {
		app := agent.Spec.Containers[0]
		if app.SecurityContext == nil || app.SecurityContext.Capabilities == nil || !slices.Contains(app.SecurityContext.Capabilities.Drop, "ALL") {
			t.Fatalf("the stored app container does not drop ALL: %+v", app.SecurityContext)
		}
		out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "caps")
		if err != nil {
			t.Fatalf("caps: %v\n%s", err, out)
		}
		bnd, okB := capSet(out, "CapBnd:")
		eff, okE := capSet(out, "CapEff:")
		if !okB || !okE || bnd != 0 || eff != 0 {
			t.Errorf("the app keeps capabilities (bounding %#x, effective %#x): %s", bnd, eff, out)
		}
		if out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "raw"); err == nil || !strings.Contains(out, "operation not permitted") {
			t.Errorf("raw socket in the app: %v\n%s", err, out)
		}
		// Control: a plain Pod keeps the runtime's default bounding set,
		// NET_RAW (bit 13) in it: the drop above is the webhook's doing.
		out, err = n.execIn(t, infraNS, fx.clientPod.Name, "app", "/probe", "caps")
		if bnd, ok := capSet(out, "CapBnd:"); err != nil || !ok || bnd&(1<<13) == 0 {
			t.Errorf("control: a plain Pod's bounding set lacks NET_RAW (%v): %s", err, out)
		}
	})

	t.Run("admission: refusals through the API server's chain", func(t *testing.T) {
		withHostProbe := probePod(agentsNS, "probe-host", "sleep")
		withHostProbe.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Host: originServiceIP, Port: intOrString(80), Path: "/"}}}
		otherRegistry := probePod(agentsNS, "other-registry", "sleep")
		otherRegistry.Spec.Containers[0].Image = "registry.example.com/tool:1"
		for _, tc := range []struct {
			pod  *corev1.Pod
			want string
		}{
			{withHostProbe, "httpGet.host"},
			{otherRegistry, "registry.example.com"},
		} {
			_, err := n.client.CoreV1().Pods(agentsNS).Create(t.Context(), tc.pod, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Pod %s: want a webhook denial naming %q, got %v", tc.pod.Name, tc.want, err)
			}
		}
		// exec into BotBox's container: the validating webhook's CONNECT rule.
		if out, err := n.execIn(t, agentsNS, agent.Name, "botbox", "/botbox", "version"); err == nil || !strings.Contains(out, "validate.botbox.dev") {
			t.Errorf("exec into the botbox container: want a denial by validate.botbox.dev, got %v: %s", err, out)
		}
		// kubectl set image on the sidecar is refused, not silently reverted.
		out, err := n.kubectl(t.Context(), "set", "image", "-n", agentsNS, "pod/"+agent.Name, "botbox=localhost/evil:1")
		if err == nil {
			t.Errorf("kubectl set image on the sidecar succeeded: %s", out)
		} else if !strings.Contains(out, "image of BotBox's container") {
			t.Errorf("kubectl set image on the sidecar: unexpected refusal: %s", out)
		}
		stored, err := n.client.CoreV1().Pods(agentsNS).Get(t.Context(), agent.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := stored.Spec.InitContainers[2].Image; img != agent.Spec.InitContainers[2].Image {
			t.Errorf("the sidecar's image changed to %s", img)
		}
	})

	t.Run("admission: token-mounting Pods are admitted under either reinvocationPolicy", func(t *testing.T) {
		// The API server re-runs its built-in mutating plugins after any
		// webhook patch, and the ServiceAccount plugin then mounts the
		// token into the containers BotBox just added. An older webhook
		// refused that under reinvocationPolicy Never (the feasibility
		// run's finding); /mutate and /validate now accept the mount in
		// exactly the plugin's form, so the chart's IfNeeded only re-applies
		// BotBox after other mutating webhooks.
		setReinvocation := func(p string) {
			patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/reinvocationPolicy","value":%q}]`, p)
			if _, err := n.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(t.Context(), "botbox",
				types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("set reinvocationPolicy %s: %v", p, err)
			}
		}
		defer setReinvocation("IfNeeded")
		for _, policy := range []string{"Never", "IfNeeded"} {
			setReinvocation(policy)
			// The API server's webhook informer takes a moment; a dry-run
			// create goes through the whole admission chain and returns
			// what would be stored.
			time.Sleep(3 * time.Second)
			pod, err := n.client.CoreV1().Pods(agentsNS).Create(t.Context(), probePod(agentsNS, "token-"+strings.ToLower(policy), "sleep"),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Errorf("reinvocationPolicy %s: a Pod automounting its token was refused: %v", policy, err)
				continue
			}
			for _, c := range pod.Spec.InitContainers {
				for _, m := range c.VolumeMounts {
					if strings.HasPrefix(m.Name, "kube-api-access-") && (!m.ReadOnly || m.MountPath != "/var/run/secrets/kubernetes.io/serviceaccount") {
						t.Errorf("reinvocationPolicy %s: %s mounts the token as %+v, not in the plugin's read-only form", policy, c.Name, m)
					}
				}
			}
			if len(pod.Spec.InitContainers) != 3 {
				t.Errorf("reinvocationPolicy %s: the dry-run Pod is not injected: %d init containers", policy, len(pod.Spec.InitContainers))
			}
		}
	})

	t.Run("admission: kubectl debug's ephemeral container is made safe, or refused at BotBox", func(t *testing.T) {
		debug := func(name, target string) error {
			patch := fmt.Sprintf(`{"spec":{"ephemeralContainers":[{"name":%q,"image":%q,"imagePullPolicy":"Never","args":["sleep"],"targetContainerName":%q}]}}`, name, probeImage, target)
			_, err := n.client.CoreV1().Pods(agentsNS).Patch(t.Context(), agent.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "ephemeralcontainers")
			return err
		}
		if err := debug("debug-botbox", "botbox"); err == nil || !strings.Contains(err.Error(), "denied the request") {
			t.Errorf("an ephemeral container targeting BotBox's container: want a denial, got %v", err)
		}
		if err := debug("debug", "app"); err != nil {
			t.Fatalf("an ephemeral container targeting the app: %v", err)
		}
		p, err := n.client.CoreV1().Pods(agentsNS).Get(t.Context(), agent.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Spec.EphemeralContainers {
			sc := e.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("stored ephemeral container %s is not made safe: %+v", e.Name, sc)
			}
		}
		if len(p.Spec.EphemeralContainers) != 1 {
			t.Errorf("stored ephemeral containers: %d, want 1", len(p.Spec.EphemeralContainers))
		}
	})

	t.Run("helm upgrade keeps the webhook's CA", func(t *testing.T) {
		secret := func() string {
			s, err := n.client.CoreV1().Secrets(releaseNS).Get(t.Context(), "botbox-webhook-tls", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return string(s.Data["ca.crt"])
		}
		before := secret()
		chart, _ := filepath.Abs("../../charts/botbox")
		if out, err := exec.CommandContext(t.Context(), n.helm, "upgrade", "botbox", chart, "--kubeconfig", n.kubecfg,
			"-n", releaseNS, "--reuse-values", "--wait", "--timeout", "120s").CombinedOutput(); err != nil {
			t.Fatalf("helm upgrade: %v: %s", err, out)
		}
		if after := secret(); after != before || before == "" {
			t.Errorf("helm upgrade changed the webhook's CA")
		}
		mwc, err := n.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "botbox", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(mwc.Webhooks[0].ClientConfig.CABundle) != before {
			t.Errorf("the caBundle is not the Secret's ca.crt after the upgrade")
		}
	})

	t.Run("rotation: a new Secret value is used without a restart", func(t *testing.T) {
		newKey := "suite-key-rotated-" + randomWord()
		patch, _ := json.Marshal(map[string]any{"stringData": map[string]string{"origin-key": newKey}})
		if _, err := n.client.CoreV1().Secrets(agentsNS).Patch(t.Context(), "botbox-secrets", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := n.eventually(t, 120*time.Second, func(i int) error {
			path := fmt.Sprintf("/rotated-%d", i)
			out, err := n.execIn(t, agentsNS, agent.Name, "app", "/probe", "get", "http://origin.botbox.test"+path)
			if err != nil || !strings.Contains(out, "status=200") {
				return fmt.Errorf("request: %v %s", err, out)
			}
			seen := fx.originSeen(t, path)
			if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+newKey {
				return fmt.Errorf("the origin does not get the new key yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("new key in use %s after the Secret update", time.Since(start).Round(100*time.Millisecond))
		n.assertNoRestart(t, agent)
	})

	t.Run("rotation: a policy ConfigMap change is hot-reloaded", func(t *testing.T) {
		deniedNow := func() (string, error) {
			return n.execIn(t, agentsNS, agent.Name, "app", "/probe", "get", "-connect", originServiceIP+":80", "http://other.botbox.test/other")
		}
		if out, err := deniedNow(); err != nil || !strings.Contains(out, "status=403") {
			t.Fatalf("before the change other.botbox.test must be denied: %v %s", err, out)
		}
		cfg := agentPolicy(`    - host: other.botbox.test
      action: allow
      allowed_ports: [80]
      upstream_tls: false
      allow_private_addresses: true
`)
		patch, _ := json.Marshal(map[string]any{"data": map[string]string{"config.yaml": cfg}})
		if _, err := n.client.CoreV1().ConfigMaps(agentsNS).Patch(t.Context(), "botbox-config", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := n.eventually(t, 120*time.Second, func(int) error {
			out, err := deniedNow()
			if err != nil || !strings.Contains(out, "status=200") {
				return fmt.Errorf("other.botbox.test not allowed yet: %v %s", err, out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		n.assertNoRestart(t, agent)
	})

	t.Run("admission: webhook down means no Pod is created", func(t *testing.T) {
		n.scaleWebhook(t, 0)
		defer n.scaleWebhook(t, 2)
		err := n.eventually(t, 60*time.Second, func(i int) error {
			_, err := n.client.CoreV1().Pods(agentsNS).Create(t.Context(), probePod(agentsNS, fmt.Sprintf("no-webhook-%d", i), "sleep"), metav1.CreateOptions{})
			if err == nil {
				return fmt.Errorf("a Pod was created with the webhook down")
			}
			if !strings.Contains(err.Error(), "failed calling webhook") {
				return fmt.Errorf("refused, but not for the webhook: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pods, _ := n.client.CoreV1().Pods(agentsNS).List(t.Context(), metav1.ListOptions{})
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "no-webhook-") {
				t.Errorf("Pod %s exists", p.Name)
			}
		}
	})
}

// eventually calls f (with the attempt number) until it returns nil or
// timeout passes, and returns f's last error then.
func (n *node) eventually(t *testing.T, timeout time.Duration, f func(attempt int) error) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		err := f(i)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(time.Second)
	}
}

func (n *node) assertNoRestart(t *testing.T, agent *corev1.Pod) {
	t.Helper()
	p, err := n.client.CoreV1().Pods(agentsNS).Get(t.Context(), agent.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if st.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", st.Name, st.RestartCount)
		}
	}
}

// scaleWebhook sets the chart's webhook Deployment to replicas and waits
// until that many are ready (0: until none is left).
func (n *node) scaleWebhook(t *testing.T, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := n.client.AppsV1().Deployments(releaseNS).Patch(t.Context(), "botbox", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale the webhook to %d: %v", replicas, err)
	}
	if err := n.eventually(t, 120*time.Second, func(int) error {
		d, err := n.client.AppsV1().Deployments(releaseNS).Get(t.Context(), "botbox", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pods, err := n.client.CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != replicas || (replicas == 0 && len(pods.Items) > 0) {
			return fmt.Errorf("%d ready, %d Pods", d.Status.ReadyReplicas, len(pods.Items))
		}
		return nil
	}); err != nil {
		t.Fatalf("scale the webhook to %d: %v", replicas, err)
	}
}

// nftRulesOf lists the netfilter ruleset of the Pod network namespace
// (containerd's /run/netns/cni-*) whose eth0 has ip.
func nftRulesOf(ip string) (string, error) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		out, err := exec.Command("ip", "-n", e.Name(), "-4", "-o", "addr", "show").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(" "+ip+"/")) {
			continue
		}
		rules, err := exec.Command("ip", "netns", "exec", e.Name(), "nft", "list", "ruleset").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("nft list ruleset in %s: %w: %s", e.Name(), err, rules)
		}
		return string(rules), nil
	}
	return "", fmt.Errorf("no network namespace under /run/netns has %s", ip)
}

// capSet reads one capability set ("CapBnd:") from probe caps' output;
// ok is false when the line is missing or unreadable.
func capSet(out, name string) (set uint64, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseUint(f[1], 16, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }
