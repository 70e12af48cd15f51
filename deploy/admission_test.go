package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/inject"
	"github.com/botbox/botbox/internal/webhook"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// chartWebhook serves the webhook with exactly the options the chart's
// rendering passes it (the flags parsed from its Deployment's args).
func chartWebhook(t *testing.T, args ...string) *httptest.Server {
	t.Helper()
	_, c, err := webhookDeployment(renderChart(t, args...))
	if err != nil {
		t.Fatal(err)
	}
	flags, err := parseWebhookArgs(c)
	if err != nil {
		t.Fatal(err)
	}
	o := inject.DefaultOptions()
	o.Image, o.ConfigMap, o.Secret = flags["--image"], flags["--config-map"], flags["--secret"]
	o.Interception, o.IPv6, o.DNSGuard = flags["--interception"] == "true", flags["--ipv6"] == "true", flags["--dns-guard"] == "true"
	o.DNSServers = flags["--dns-servers"]
	if v := flags["--allowed-image-registries"]; v != "" {
		o.AllowedImageRegistries = strings.Split(v, ",")
	}
	if v := flags["--allowed-csi-drivers"]; v != "" {
		o.AllowedCSIDrivers = strings.Split(v, ",")
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the chart's webhook flags: %v", err)
	}
	h := &webhook.Handler{Options: o, Logger: slog.New(slog.DiscardHandler), Metrics: webhook.NewMetrics(prometheus.NewRegistry())}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// docAgentPod is the agent Deployment of docs/kubernetes.md as the
// ReplicaSet controller creates its Pod.
func docAgentPod(t *testing.T) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := heredoc.FindAllStringSubmatch(string(data), -1)
	var d appsv1.Deployment
	if err := decodeStrict([]byte(blocks[1][1]), &d); err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-7d9c6b5f4-", Namespace: "agents", Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec}
}

// review is an AdmissionReview v1 request as the API server sends it.
func review(t *testing.T, op, sub, kind string, object, old any) []byte {
	t.Helper()
	raw := func(v any) json.RawMessage {
		if v == nil {
			return json.RawMessage("null")
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return fmt.Appendf(nil, `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{
"uid":"0c3f7d1e-2b4a-4c8e-9f10-7a6b5c4d3e2f",
"kind":{"group":"","version":"v1","kind":%q},"resource":{"group":"","version":"v1","resource":"pods"},"subResource":%q,
"namespace":"agents","name":"agent-7d9c6b5f4-q2x8z","operation":%q,
"userInfo":{"username":"system:serviceaccount:agents:agent"},
"object":%s,"oldObject":%s,"dryRun":false}}`, kind, sub, op, raw(object), raw(old))
}

func postReview(t *testing.T, srv *httptest.Server, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", path, resp.Status, data)
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &rev); err != nil || rev.Response == nil {
		t.Fatalf("response: %v %s", err, data)
	}
	return rev.Response
}

func patchPod(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	b, _ := json.Marshal(pod)
	if len(resp.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if b, err = p.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestChartWebhookAdmission: the webhook, run with the options the chart
// passes it (hardened: an image allowlist), decides the report's cases on
// the documented agent Pod as real AdmissionReview JSON: CREATE through
// /mutate then /validate, UPDATE and pods/ephemeralcontainers of the
// injected Pod, CONNECT.
func TestChartWebhookAdmission(t *testing.T) {
	t.Parallel()
	srv := chartWebhook(t, "--set", "webhook.allowedImageRegistries={docker.io}")
	create := func(t *testing.T, f func(p *corev1.Pod)) (*corev1.Pod, *admissionv1.AdmissionResponse, *admissionv1.AdmissionResponse) {
		p := docAgentPod(t)
		f(p)
		body := review(t, "CREATE", "", "Pod", p, nil)
		return p, postReview(t, srv, webhook.PathMutate, body), postReview(t, srv, webhook.PathValidate, body)
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   string // "" = patched, then admitted
	}{
		{"documented Pod", func(*corev1.Pod) {}, ""},
		{"A07 no capabilities", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil }, ""},
		{"B11 probe host", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "d.exfil.attacker.example", Port: intstr.FromInt32(80)}}}
		}, "httpGet.host"},
		{"B15 image registry", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.attacker.example/d:x" }, "not in --allowed-image-registries"},
		{"C08 inline CSI", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "o", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "nfs.csi.k8s.io"}}})
		}, "inline CSI driver"},
		{"B09 hostPort", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9090, HostPort: 9090}}
		}, "hostPort"},
	} {
		t.Run("CREATE "+tc.name, func(t *testing.T) {
			p, m, v := create(t, tc.mutate)
			if tc.want != "" {
				if m.Allowed || v.Allowed || !strings.Contains(m.Result.Message, tc.want) || !strings.Contains(v.Result.Message, tc.want) {
					t.Fatalf("mutate %+v, validate %+v; want both refused with %q", m.Result, v.Result, tc.want)
				}
				return
			}
			if !m.Allowed || len(m.Patch) == 0 || v.Allowed {
				t.Fatalf("mutate allowed %v (patch %d bytes), validate of the unpatched Pod allowed %v", m.Allowed, len(m.Patch), v.Allowed)
			}
			injected := patchPod(t, p, m)
			if resp := postReview(t, srv, webhook.PathValidate, review(t, "CREATE", "", "Pod", injected, nil)); !resp.Allowed {
				t.Fatalf("validate of the patched Pod: %s", resp.Result.Message)
			}
		})
	}

	p, m, _ := create(t, func(*corev1.Pod) {})
	injected := patchPod(t, p, m)
	injected.Name = "agent-7d9c6b5f4-q2x8z"
	debug := func(image string) *corev1.Pod {
		q := injected.DeepCopy()
		q.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: image, SecurityContext: &corev1.SecurityContext{RunAsUser: new(int64(1000))},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}}}
		return q
	}
	for _, tc := range []struct {
		name, sub string
		pod       *corev1.Pod
		want      string
	}{
		{"D04 debug container, runtime capabilities", "ephemeralcontainers", debug("busybox:1.37"), ""},
		{"D10 debug image from another registry", "ephemeralcontainers", debug("ghcr.io/attacker/x"), "registry ghcr.io"},
		{"D11 app image from another registry", "", func() *corev1.Pod {
			q := injected.DeepCopy()
			q.Spec.Containers[0].Image = "registry.attacker.example/x"
			return q
		}(), "registry.attacker.example"},
		{"D12 label removed", "", func() *corev1.Pod {
			q := injected.DeepCopy()
			delete(q.Labels, inject.LabelInjected)
			return q
		}(), "botbox.dev/injected"},
	} {
		t.Run("UPDATE "+tc.name, func(t *testing.T) {
			body := review(t, "UPDATE", tc.sub, "Pod", tc.pod, injected)
			m := postReview(t, srv, webhook.PathMutate, body)
			if tc.want != "" {
				v := postReview(t, srv, webhook.PathValidate, body)
				if m.Allowed || v.Allowed || !strings.Contains(v.Result.Message, tc.want) {
					t.Fatalf("mutate allowed %v, validate %+v; want both refused with %q", m.Allowed, v.Result, tc.want)
				}
				return
			}
			if !m.Allowed || !strings.Contains(string(m.Patch), `"/spec/ephemeralContainers"`) {
				t.Fatalf("mutate %+v patch %s", m.Result, m.Patch)
			}
			after := patchPod(t, tc.pod, m)
			if c := after.Spec.EphemeralContainers[0].SecurityContext; c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" {
				t.Errorf("debug container capabilities %+v, want drop [ALL]", c.Capabilities)
			}
			if v := postReview(t, srv, webhook.PathValidate, review(t, "UPDATE", tc.sub, "Pod", after, injected)); !v.Allowed {
				t.Errorf("validate of the patched debug container: %s", v.Result.Message)
			}
		})
	}

	for _, tc := range []struct {
		name, sub, kind string
		opts            map[string]any
		allowed         bool
	}{
		{"exec into botbox", "exec", "PodExecOptions", map[string]any{"container": "botbox", "command": []string{"/botbox", "probe", "http://203.0.113.5/"}, "stdout": true}, false},
		{"attach to iptables-init", "attach", "PodAttachOptions", map[string]any{"container": "iptables-init", "stdin": true}, false},
		{"port-forward to the proxy", "portforward", "PodPortForwardOptions", map[string]any{"ports": []int{8080}}, false},
		{"exec into the app", "exec", "PodExecOptions", map[string]any{"container": "app", "command": []string{"sh"}, "stdout": true}, true},
	} {
		t.Run("CONNECT "+tc.name, func(t *testing.T) {
			o := map[string]any{"kind": tc.kind, "apiVersion": "v1"}
			for k, v := range tc.opts {
				o[k] = v
			}
			resp := postReview(t, srv, webhook.PathValidate, review(t, "CONNECT", tc.sub, tc.kind, o, nil))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %+v", resp.Allowed, tc.allowed, resp.Result)
			}
		})
	}
}
