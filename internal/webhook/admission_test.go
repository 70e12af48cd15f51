package webhook

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/inject"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite the generated testdata (update-*.json)")

func testOptions() inject.Options {
	o := inject.DefaultOptions()
	o.Interception, o.IPv6, o.DNSGuard = true, true, true
	o.PlaceholdersDir = inject.DefaultPlaceholdersDir
	return o
}

func newTestServer(t *testing.T, o inject.Options) *httptest.Server {
	t.Helper()
	h := &Handler{Options: o, Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics(prometheus.NewRegistry())}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to path and decodes the AdmissionReview answer strictly.
func post(t *testing.T, srv *httptest.Server, path string, body []byte) *admissionv1.AdmissionResponse {
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rev); err != nil {
		t.Fatalf("decoding the response: %v\n%s", err, data)
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || rev.Response == nil {
		t.Fatalf("response is not an AdmissionReview v1: %s", data)
	}
	return rev.Response
}

func readReview(t *testing.T, path string) (*admissionv1.AdmissionReview, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := decodeReview(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rev, data
}

// strictPod decodes a Pod rejecting unknown fields.
func strictPod(t *testing.T, raw []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pod); err != nil {
		t.Fatalf("strict decoding of the patched Pod: %v", err)
	}
	return &pod
}

// applyPatch applies the response's JSON patch to the request's object with
// an independent RFC 6902 implementation.
func applyPatch(t *testing.T, resp *admissionv1.AdmissionResponse, object []byte) []byte {
	t.Helper()
	if len(resp.Patch) == 0 {
		return object
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType %v, want JSONPatch", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decoding the patch: %v\n%s", err, resp.Patch)
	}
	out, err := p.Apply(object)
	if err != nil {
		t.Fatalf("applying the patch: %v\n%s", err, resp.Patch)
	}
	return out
}

// withObject returns the review with its request's object (and operation,
// oldObject) replaced.
func withObject(t *testing.T, rev *admissionv1.AdmissionReview, op admissionv1.Operation, object, old []byte) []byte {
	t.Helper()
	r := *rev
	req := *rev.Request
	req.Operation = op
	req.Object.Raw = object
	req.OldObject.Raw = old
	r.Request = &req
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mutateCreate runs testdata/create-pod.json through /mutate and returns
// the patched Pod as JSON.
func mutateCreate(t *testing.T, srv *httptest.Server) (*admissionv1.AdmissionReview, []byte) {
	t.Helper()
	rev, body := readReview(t, "testdata/create-pod.json")
	resp := post(t, srv, PathMutate, body)
	if resp.UID != rev.Request.UID {
		t.Errorf("response uid %q, want the request's %q", resp.UID, rev.Request.UID)
	}
	if !resp.Allowed {
		t.Fatalf("create denied: %+v", resp.Result)
	}
	return rev, applyPatch(t, resp, rev.Request.Object.Raw)
}

// TestMutateCreate: the API server's CREATE review of a Deployment's Pod
// gets a patch; applied with an independent JSON-patch library and decoded
// strictly, the Pod keeps every invariant, BotBox runs first, the
// workload's own init container after the rules, and the app trusts the CA.
func TestMutateCreate(t *testing.T) {
	o := testOptions()
	srv := newTestServer(t, o)
	_, patched := mutateCreate(t, srv)
	pod := strictPod(t, patched)
	for _, err := range inject.CheckPod(&pod.Spec, o.Layout(), nil, inject.Admission) {
		t.Error(err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{inject.NameCAInit, inject.NameInit, inject.NameBotBox, "fetch"}; !slices.Equal(names, want) {
		t.Errorf("init containers %v, want %v", names, want)
	}
	for _, c := range []corev1.Container{pod.Spec.InitContainers[3], pod.Spec.Containers[0]} {
		for _, n := range inject.TrustEnv {
			if !slices.Contains(c.Env, corev1.EnvVar{Name: n, Value: inject.CABundlePath}) {
				t.Errorf("container %q: no %s=%s", c.Name, n, inject.CABundlePath)
			}
		}
	}
	// What the API server had already set is kept.
	if pod.Spec.ServiceAccountName != "default" || len(pod.Spec.Tolerations) != 2 || pod.Labels["app"] != "agent" {
		t.Errorf("the patch lost fields of the original Pod: %+v", pod.Spec)
	}
	if pod.Annotations[inject.AnnotationScrape] != "true" || pod.Annotations[inject.AnnotationPort] != "9090" {
		t.Errorf("scrape annotations: %v", pod.Annotations)
	}
	if pod.Labels[inject.LabelInjected] != "true" {
		t.Errorf("label %s missing (the chart's PodMonitor selects by it): %v", inject.LabelInjected, pod.Labels)
	}
}

// TestMutateIsIdempotent: the injected Pod, reviewed again (the API
// server's reinvocation), gets no patch, and /validate admits it.
func TestMutateIsIdempotent(t *testing.T) {
	srv := newTestServer(t, testOptions())
	rev, patched := mutateCreate(t, srv)
	body := withObject(t, rev, admissionv1.Create, patched, nil)
	if resp := post(t, srv, PathMutate, body); !resp.Allowed || len(resp.Patch) != 0 {
		t.Errorf("second mutate: allowed %v, patch %s; want allowed, no patch", resp.Allowed, resp.Patch)
	}
	if resp := post(t, srv, PathValidate, body); !resp.Allowed {
		t.Errorf("validate of the injected Pod denied: %+v", resp.Result)
	}
}

// TestValidateRejectsUninjected: a Pod that skipped the mutating webhook
// (or was created before the namespace was labelled) is refused.
func TestValidateRejectsUninjected(t *testing.T) {
	srv := newTestServer(t, testOptions())
	_, body := readReview(t, "testdata/create-pod.json")
	resp := post(t, srv, PathValidate, body)
	if resp.Allowed {
		t.Fatal("validate admitted a Pod without BotBox")
	}
	if resp.Result == nil || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, "spec.initContainers") {
		t.Errorf("result %+v, want 403 naming spec.initContainers", resp.Result)
	}
}

// TestValidateUpdate: testdata/update-pod.json is an UPDATE of an injected
// Pod that swaps BotBox's image (an agent allowed to update Pods trying to
// run its own code as UID 1337); it is denied, and the same UPDATE without
// the change is admitted. -update regenerates the file from create-pod.json.
func TestValidateUpdate(t *testing.T) {
	srv := newTestServer(t, testOptions())
	const file = "testdata/update-pod.json"
	if *update {
		rev, patched := mutateCreate(t, srv)
		pod := strictPod(t, patched)
		pod.Name = "agent-7d9c6b5f4-q2x8z"
		pod.UID = "8c1d7c55-3c8e-4a87-9f0e-2a5b0f6e9d42"
		old, _ := json.Marshal(pod)
		pod.Spec.InitContainers[2].Image = "attacker.example/botbox:latest"
		obj, _ := json.Marshal(pod)
		r := *rev
		req := *rev.Request
		req.UID = "f3a9c0de-1b2c-4d5e-8f90-a1b2c3d4e5f6"
		req.Name = pod.Name
		req.Operation = admissionv1.Update
		req.Object.Raw, req.OldObject.Raw = obj, old
		req.Options.Raw = []byte(`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}`)
		req.UserInfo.Username = "system:serviceaccount:agents:agent"
		r.Request = &req
		out, _ := json.MarshalIndent(&r, "", "  ")
		if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rev, body := readReview(t, file)
	if rev.Request.Operation != admissionv1.Update || rev.Request.OldObject.Raw == nil {
		t.Fatalf("%s is not an UPDATE with oldObject", file)
	}
	resp := post(t, srv, PathValidate, body)
	if resp.Allowed {
		t.Fatal("validate admitted an update swapping BotBox's image")
	}
	if !strings.Contains(resp.Result.Message, `"botbox"`) {
		t.Errorf("message %q does not name the botbox container", resp.Result.Message)
	}
	unchanged := withObject(t, rev, admissionv1.Update, rev.Request.OldObject.Raw, rev.Request.OldObject.Raw)
	if resp := post(t, srv, PathValidate, unchanged); !resp.Allowed {
		t.Errorf("an update changing nothing was denied: %+v", resp.Result)
	}
}

// TestAdmissionRefusals: Pods that would escape are denied by both
// endpoints, with the container and the field named.
func TestAdmissionRefusals(t *testing.T) {
	srv := newTestServer(t, testOptions())
	rev, _ := readReview(t, "testdata/create-pod.json")
	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   string
	}{
		{"app as 1337", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsUser = new(int64(1337)) }, `container "agent" runs as UID 1337`},
		{"pod default 1337", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = new(int64(1337)) }, "default runAsUser is 1337"},
		{"NET_RAW", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}
		}, `container "agent" adds NET_RAW`},
		{"privileged init", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		}, `container "fetch" is privileged`},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "hostNetwork"},
		{"reads the credential Secret", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: inject.DefaultSecret}}}}
		}, `container "agent": envFrom.secretRef reads Secret "botbox-secrets"`},
		{"fake botbox sidecar as 1337", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "botbox", Image: "attacker/botbox",
				SecurityContext: &corev1.SecurityContext{RunAsUser: new(int64(1337))}})
		}, `container "botbox": the name is reserved`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := strictPod(t, rev.Request.Object.Raw)
			tc.mutate(pod)
			raw, _ := json.Marshal(pod)
			for _, path := range []string{PathMutate, PathValidate} {
				resp := post(t, srv, path, withObject(t, rev, admissionv1.Create, raw, nil))
				if resp.Allowed {
					t.Fatalf("%s admitted it", path)
				}
				if resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, tc.want) {
					t.Errorf("%s: %d %q, want 403 containing %q", path, resp.Result.Code, resp.Result.Message, tc.want)
				}
			}
		})
	}
}

// TestRequestErrors: what is not an AdmissionReview for a Pod never gets
// "allowed" (the API server then applies failurePolicy: Fail).
func TestRequestErrors(t *testing.T) {
	srv := newTestServer(t, testOptions())
	_, good := readReview(t, "testdata/create-pod.json")
	do := func(method, ctype string, body []byte) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+PathMutate, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		name, method, ctype string
		body                []byte
		want                int
	}{
		{"GET", http.MethodGet, "application/json", nil, http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "text/plain", good, http.StatusUnsupportedMediaType},
		{"too large", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxBody+1), http.StatusRequestEntityTooLarge},
		{"garbage", http.MethodPost, "application/json", []byte("{"), http.StatusBadRequest},
		{"v1beta1", http.MethodPost, "application/json", bytes.Replace(good, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := do(tc.method, tc.ctype, tc.body); resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	// A Deployment sent here by a wrong configuration is denied, not waved through.
	rev, _ := readReview(t, "testdata/create-pod.json")
	rev.Request.Kind.Group, rev.Request.Kind.Kind, rev.Request.Resource.Resource = "apps", "Deployment", "deployments"
	b, _ := json.Marshal(rev)
	if resp := post(t, srv, PathValidate, b); resp.Allowed {
		t.Error("a Deployment review was allowed")
	}
	// A field a newer API server adds to the envelope is tolerated (it
	// cannot change the Pod); a Pod field this build does not know is
	// refused, not dropped.
	if resp := post(t, srv, PathMutate, bytes.Replace(good, []byte(`"dryRun"`), []byte(`"someNewField": {"a": 1}, "dryRun"`), 1)); !resp.Allowed {
		t.Errorf("an unknown envelope field was refused: %+v", resp.Result)
	}
	withUnknown := bytes.Replace(good, []byte(`"enableServiceLinks": true`), []byte(`"enableServiceLinks": true, "hostSomethingNew": true`), 1)
	if resp := post(t, srv, PathMutate, withUnknown); resp.Allowed || !strings.Contains(resp.Result.Message, "hostSomethingNew") {
		t.Errorf("unknown Pod field: allowed %v, %+v", resp.Allowed, resp.Result)
	}
}

// TestUpdateWithoutSpecChange: an update that changes only metadata (here
// a finalizer removed, as the Job controller does) passes both endpoints
// without a patch, even for a Pod injected with other options (an older
// BotBox image): a patch would hit immutable fields and the Pod would hang.
func TestUpdateWithoutSpecChange(t *testing.T) {
	srv := newTestServer(t, testOptions())
	rev, _ := readReview(t, "testdata/update-pod.json")
	old := strictPod(t, rev.Request.OldObject.Raw)
	for i := range old.Spec.InitContainers[:3] {
		old.Spec.InitContainers[i].Image = "registry.example/botbox:0.9.0"
	}
	old.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
	oldRaw, _ := json.Marshal(old)
	old.Finalizers = nil
	newRaw, _ := json.Marshal(old)
	body := withObject(t, rev, admissionv1.Update, newRaw, oldRaw)
	for _, path := range []string{PathMutate, PathValidate} {
		if resp := post(t, srv, path, body); !resp.Allowed || len(resp.Patch) != 0 {
			t.Errorf("%s: allowed %v, patch %s, %+v; want allowed without a patch", path, resp.Allowed, resp.Patch, resp.Result)
		}
	}
	// The same Pod with a spec change is held to the current options.
	old.Spec.Containers[0].Image = "python:3.14-slim"
	changed, _ := json.Marshal(old)
	if resp := post(t, srv, PathValidate, withObject(t, rev, admissionv1.Update, changed, oldRaw)); resp.Allowed {
		t.Error("a spec change to a Pod injected with other options was admitted")
	}
}
