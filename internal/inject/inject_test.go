package inject

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenCases are the option sets the golden files hold.
var goldenCases = []struct {
	name string
	opts func(o *Options)
}{
	{"defaults", func(o *Options) {}},
	{"plain", func(o *Options) { o.IPv6, o.DNSGuard = false, false }},
	{"interception-ipv6-dnsguard-placeholders", func(o *Options) {
		o.Interception, o.IPv6, o.DNSGuard = true, true, true
		o.PlaceholdersDir = DefaultPlaceholdersDir
		o.Image, o.ConfigMap, o.Secret = "registry.example/botbox:1.2.3", "agent-policy", "agent-keys"
	}},
}

func options(f func(*Options)) Options {
	o := DefaultOptions()
	f(&o)
	return o
}

func injectYAML(t *testing.T, in []byte, o Options) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := YAML(bytes.NewReader(in), &out, o, ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestInjectGolden: testdata/workloads.yaml injected with each option set
// is testdata/workloads.<case>.golden (-update rewrites them).
func TestInjectGolden(t *testing.T) {
	in, err := os.ReadFile("testdata/workloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			got := injectYAML(t, in, options(tc.opts))
			golden := filepath.Join("testdata", "workloads."+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), string(got)); d != "" {
				t.Errorf("inject output differs from %s (-want +got):\n%s", golden, d)
			}
		})
	}
}

// TestInjectIdempotent: injecting the injector's output changes nothing,
// byte for byte, for every option set; so does injecting with other
// options and then back (stale parts are removed, not accumulated).
func TestInjectIdempotent(t *testing.T) {
	in, err := os.ReadFile("testdata/workloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			o := options(tc.opts)
			once := injectYAML(t, in, o)
			twice := injectYAML(t, once, o)
			if d := cmp.Diff(string(once), string(twice)); d != "" {
				t.Errorf("second injection changed the output (-once +twice):\n%s", d)
			}
			for _, other := range goldenCases {
				back := injectYAML(t, injectYAML(t, once, options(other.opts)), o)
				if d := cmp.Diff(string(once), string(back)); d != "" {
					t.Errorf("via %s and back: output changed (-once +back):\n%s", other.name, d)
				}
			}
		})
	}
}

// TestInjectedPodsKeepInvariants: every Pod the injector writes passes the
// Admission invariants, decoded strictly from the YAML it wrote.
func TestInjectedPodsKeepInvariants(t *testing.T) {
	in, err := os.ReadFile("testdata/workloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range goldenCases {
		o := options(tc.opts)
		out := injectYAML(t, in, o)
		for i, doc := range strings.Split(string(out), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatal(err)
			}
			for _, wl := range workloads {
				if wl.kind != tm.Kind {
					continue
				}
				obj := wl.new()
				if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
					t.Fatalf("%s document %d: %v", tc.name, i, err)
				}
				_, spec := wl.pod(obj)
				for _, err := range CheckPod(spec, o.Layout(), nil, Admission) {
					t.Errorf("%s document %d (%s): %v", tc.name, i, tm.Kind, err)
				}
			}
		}
	}
}

func testPod() (*metav1.ObjectMeta, *corev1.PodSpec) {
	return &metav1.ObjectMeta{Name: "p"}, &corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: new(int64(1000))},
		Containers:      []corev1.Container{{Name: "app", Image: "busybox"}},
	}
}

// TestInjectRefuses: each workload that would escape is refused, and the
// message names the container and the field.
func TestInjectRefuses(t *testing.T) {
	sc := func(s *corev1.PodSpec) *corev1.SecurityContext {
		if s.Containers[0].SecurityContext == nil {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{}
		}
		return s.Containers[0].SecurityContext
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *corev1.PodSpec)
		want   []string
	}{
		{"pod runs as 1337", func(s *corev1.PodSpec) { s.SecurityContext.RunAsUser = new(int64(1337)) }, []string{"Pod's default runAsUser is 1337"}},
		{"container runs as 1337", func(s *corev1.PodSpec) { sc(s).RunAsUser = new(int64(1337)) }, []string{`container "app" runs as UID 1337`}},
		{"ephemeral container as 1337", func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: new(int64(1337))}}}}
		}, []string{`container "debug" runs as UID 1337`}},
		{"user init container as 1337", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: new(int64(1337))}}}
		}, []string{`container "setup" runs as UID 1337`}},
		{"UID left to the image", func(s *corev1.PodSpec) { s.SecurityContext = nil }, []string{`container "app": runAsUser not set`}},
		{"NET_ADMIN", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		}, []string{`container "app" adds capabilities [NET_ADMIN]`}},
		{"NET_RAW", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CAP_NET_RAW"}}
		}, []string{`container "app" adds NET_RAW`}},
		{"SYS_ADMIN", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		}, []string{`container "app" adds capabilities [SYS_ADMIN]`}},
		{"privileged", func(s *corev1.PodSpec) { sc(s).Privileged = new(true) }, []string{`container "app" is privileged`}},
		{"escalation allowed", func(s *corev1.PodSpec) { sc(s).AllowPrivilegeEscalation = new(true) }, []string{`container "app": allowPrivilegeEscalation must be false`}},
		{"hostNetwork", func(s *corev1.PodSpec) { s.HostNetwork = true }, []string{"hostNetwork"}},
		{"hostPID", func(s *corev1.PodSpec) { s.HostPID = true }, []string{"hostPID"}},
		{"hostPath", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "sock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/containerd"}}})
		}, []string{`volume "sock" is a hostPath`}},
		{"mount where the CA goes", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "certs", MountPath: CACertDir + "/"}}
		}, []string{`container "app": volumeMounts "certs" at /etc/botbox-ca/, where botbox inject mounts its own volume`}},
		{"credential Secret as a volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: DefaultSecret}}})
		}, []string{`volume "keys": spec.volumes reads Secret "botbox-secrets"`}},
		{"credential Secret projected", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: DefaultSecret}}}}}}})
		}, []string{`volume "p": spec.volumes reads Secret "botbox-secrets"`}},
		{"credential Secret in env", func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: DefaultSecret}, Key: "openai"}}}}
		}, []string{`container "app": env KEY valueFrom.secretKeyRef reads Secret "botbox-secrets"`}},
		{"credential Secret envFrom", func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: DefaultSecret}}}}
		}, []string{`container "app": envFrom.secretRef reads Secret "botbox-secrets"`}},
		{"nfs volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "exfil", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "203.0.113.9", Path: "/"}}})
		}, []string{`volume "exfil" is of type nfs (spec.volumes[].nfs)`}},
		{"gitRepo volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "g", VolumeSource: corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://attacker.example/x"}}})
		}, []string{`volume "g" is of type gitRepo`}},
		{"app named botbox", func(s *corev1.PodSpec) { s.Containers[0].Name = NameBotBox }, []string{`container "botbox": the name is reserved`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta, spec := testPod()
			tc.mutate(spec)
			o := DefaultOptions()
			o.Interception = true
			err := Pod(meta, spec, o)
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("Pod() = %v, want a refusal", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// The same Pod without the change is accepted: the cases fail for their
	// own reason.
	meta, spec := testPod()
	if err := Pod(meta, spec, DefaultOptions()); err != nil {
		t.Fatalf("baseline Pod refused: %v", err)
	}
	// A root app that drops ALL cannot become the exempt UID: accepted.
	meta, spec = testPod()
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: new(int64(0)),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	if err := Pod(meta, spec, DefaultOptions()); err != nil {
		t.Fatalf("root app dropping ALL refused: %v", err)
	}
}

// TestInjectKeepsUserInitContainersAfterRules: a workload's own init
// containers run after the rules and BotBox, in their order.
func TestInjectKeepsUserInitContainersAfterRules(t *testing.T) {
	meta, spec := testPod()
	spec.InitContainers = []corev1.Container{{Name: "a", Image: "x"}, {Name: NameBotBox, Image: "evil"}, {Name: "b", Image: "x"}}
	if err := Pod(meta, spec, DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name+"="+c.Image)
	}
	want := []string{NameInit + "=" + DefaultImage, NameBotBox + "=" + DefaultImage, "a=x", "b=x"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("init containers (-want +got):\n%s", d)
	}
}

func TestYAMLErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containerz: []\n", `unknown field "containerz"`},
		{"duplicate field", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nmetadata: {name: y}\n", "document 1"},
		{"refusal names the object", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  hostNetwork: true\n  securityContext: {runAsUser: 1}\n  containers: [{name: a, image: b}]\n", `Pod "x": refused`},
		{"not an object", "- a\n- b\n", "document 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := YAML(strings.NewReader(tc.in), &out, DefaultOptions(), ReadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("YAML() = %v, want an error containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q on error", out.String())
			}
		})
	}
}

// TestYAMLPassThrough: other kinds and other API versions are copied unchanged.
func TestYAMLPassThrough(t *testing.T) {
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: \"1\"}   # comment kept\n---\napiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: old}\n"
	got := string(injectYAML(t, []byte(in), DefaultOptions()))
	if got != in {
		t.Errorf("got %q, want the input unchanged", got)
	}
}

// TestYAMLList: the items of a v1 List (kubectl get -o yaml) are injected
// like documents of their own.
func TestYAMLList(t *testing.T) {
	in := "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    securityContext: {runAsUser: 1000}\n    containers: [{name: app, image: x}]\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s}\n"
	out := injectYAML(t, []byte(in), DefaultOptions())
	var l struct {
		Items []corev1.Pod `json:"items"`
	}
	if err := yaml.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 2 || len(l.Items[0].Spec.InitContainers) != 2 || l.Items[1].Kind != "Service" {
		t.Fatalf("List not injected item by item:\n%s", out)
	}
	if again := injectYAML(t, out, DefaultOptions()); !bytes.Equal(again, out) {
		t.Errorf("List injection not idempotent:\n%s\n---\n%s", out, again)
	}
	if err := YAML(strings.NewReader("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: bad}\n  spec: {hostNetwork: true, containers: [{name: a}]}\n"), io.Discard, DefaultOptions(), ReadOptions{}); err == nil || !strings.Contains(err.Error(), "item 0 of the List") {
		t.Errorf("refusal inside a List: %v", err)
	}
}
