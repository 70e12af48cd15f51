package inject

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const uid1337Pod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"agent"},"spec":{"securityContext":{"runAsUser":1337},"containers":[{"name":"app","image":"busybox"}]}}`

const goodPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"agent"},"spec":{"securityContext":{"runAsUser":1000},"containers":[{"name":"app","image":"busybox"}]}}`

// TestYAMLInputCases: the report's E cases. What kubectl would apply is
// either injected or refused; nothing uninjected is copied with success.
func TestYAMLInputCases(t *testing.T) {
	rollout := "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: agent}\nspec:\n  template:\n    spec:\n      containers: [{name: app, image: busybox}]\n"
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the error; none = success
		injected int      // Pods/templates expected injected on success
	}{
		{"E01 Argo Rollout", rollout, []string{"argoproj.io/v1alpha1 Rollout carries a Pod template (spec.template)", "--pass-unknown"}, 0},
		{"E02 Knative Service", "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: agent}\nspec:\n  template:\n    spec:\n      containers: [{image: busybox}]\n", []string{"serving.knative.dev/v1 Service carries a Pod template"}, 0},
		{"E03 DeploymentList", "apiVersion: apps/v1\nkind: DeploymentList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: agent}\n  spec:\n    selector: {matchLabels: {a: b}}\n    template:\n      metadata: {labels: {a: b}}\n      spec:\n        securityContext: {runAsUser: 1337}\n        containers: [{name: app, image: busybox}]\n", []string{"item 0 of the DeploymentList", "runs as UID 1337"}, 0},
		{"E04 PodTemplate", "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: agent}\ntemplate:\n  spec:\n    securityContext: {runAsUser: 1337}\n    containers: [{name: app, image: busybox}]\n", []string{"v1 PodTemplate carries a Pod template (template)"}, 0},
		{"E05 JSON stream ConfigMap then Pod 1337", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cover"}}` + uid1337Pod, []string{"document 2", "Pod \"agent\"", "runs as UID 1337"}, 0},
		{"E14 batch/v1beta1 CronJob", "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: agent}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: app, image: busybox}]\n", []string{"batch/v1beta1 CronJob carries a Pod template (spec.jobTemplate)"}, 0},
		{"CRD with nested containers", "apiVersion: example.dev/v1\nkind: Sandbox\nmetadata: {name: s}\nspec:\n  runner:\n    pod:\n      initContainers: [{name: x, image: y}]\n", []string{"spec.runner.pod.initContainers"}, 0},
		{"every refusal at once", rollout + "---\n" + "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  hostNetwork: true\n  securityContext: {runAsUser: 1}\n  containers: [{name: a, image: b}]\n", []string{"document 1: argoproj.io", "document 2: Pod \"bad\""}, 0},
		{"JSON stream of Pods injected", goodPod + "\n" + goodPod, nil, 2},
		{"JSON then YAML", goodPod + "\n---\n" + strings.ReplaceAll(goodPod, `"name":"agent"`, `"name":"two"`), nil, 2},
		{"any *List", "apiVersion: v1\nkind: PodList\nitems:\n- " + goodPod + "\n", nil, 1},
		{"nested lists", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: PodList\n  items:\n  - " + goodPod + "\n", nil, 1},
		// The spellings where another reader could see another object
		// (kubectl's decoders match keys case-sensitively; encoding/json,
		// under inject's TypeMeta, folds them, Unicode folds included):
		// each is read as a Pod and refused, refused as a duplicate, or
		// refused by the Pod-shape search; none is copied unchanged. A
		// folded spec field kubectl would drop is read by inject: stricter.
		{"byte order mark before YAML", "\ufeffapiVersion: v1\nkind: Pod\nmetadata: {name: agent}\nspec:\n  securityContext: {runAsUser: 1337}\n  containers: [{name: app, image: busybox}]\n", []string{"runs as UID 1337"}, 0},
		{"byte order mark before JSON", "\ufeff" + uid1337Pod, []string{"runs as UID 1337"}, 0},
		{"kind folded to a harmless kind", "apiVersion: v1\nkind: Pod\nKind: ConfigMap\nmetadata: {name: agent}\nspec:\n  securityContext: {runAsUser: 1337}\n  containers: [{name: app, image: busybox}]\n", []string{"runs as UID 1337"}, 0},
		{"kind folded in JSON", `{"apiVersion":"v1","kind":"Pod","KIND":"ConfigMap","metadata":{"name":"agent"},"spec":{"securityContext":{"runAsUser":1337},"containers":[{"name":"app","image":"busybox"}]}}`, []string{"runs as UID 1337"}, 0},
		// U+212A KELVIN SIGN folds to K for encoding/json and sorts after
		// "kind": inject's TypeMeta reads ConfigMap where kubectl reads
		// Pod; the Pod-shape search, which reads keys as kubectl does,
		// refuses it.
		{"kind folded through the Kelvin sign", "apiVersion: v1\nkind: Pod\n\u212aind: ConfigMap\nmetadata: {name: agent}\nspec:\n  containers: [{name: app, image: busybox}]\n", []string{"v1 ConfigMap carries a Pod template (spec.containers)"}, 0},
		{"apiVersion folded through the long s", "apiVersion: v1\napiVer\u017fion: example.dev/v1\nkind: Pod\nmetadata: {name: agent}\nspec:\n  containers: [{name: app, image: busybox}]\n", []string{"example.dev/v1 Pod carries a Pod template (spec.containers)"}, 0},
		{"duplicate kind key", "apiVersion: v1\nkind: ConfigMap\nkind: Pod\nmetadata: {name: agent}\nspec:\n  containers: [{name: app, image: busybox}]\n", []string{"Pod: error converting YAML to JSON"}, 0},
		{"duplicate securityContext in a Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: agent}\nspec:\n  securityContext: {runAsUser: 1000}\n  securityContext: {runAsUser: 1337}\n  containers: [{name: app, image: busybox}]\n", []string{"Pod: error converting YAML to JSON"}, 0},
		{"folded spec field in a Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: agent}\nspec:\n  HostNetwork: true\n  securityContext: {runAsUser: 1000}\n  containers: [{name: app, image: busybox}]\n", []string{"hostNetwork: the init step"}, 0},
		{"items folded through the long s", "apiVersion: v1\nkind: List\nitems:\n- " + uid1337Pod + "\nitem\u017f: not-a-list\n", []string{"v1 List carries a Pod template (items[0].spec.containers)"}, 0},
		{"binary-tagged kind", "apiVersion: v1\nkind: !!binary UG9k\nmetadata: {name: agent}\nspec:\n  securityContext: {runAsUser: 1337}\n  containers: [{name: app, image: busybox}]\n", []string{"runs as UID 1337"}, 0},
		{"merge key carrying the spec", "base: &b\n  securityContext: {runAsUser: 1337}\n  containers: [{name: app, image: busybox}]\napiVersion: v1\nkind: Pod\nmetadata: {name: agent}\nspec:\n  <<: *b\n", []string{`unknown field "base"`}, 0},
		{"ConfigMap passes", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {containers: \"[]\"}\n", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := YAML(strings.NewReader(tc.in), &out, DefaultOptions(), ReadOptions{})
			if len(tc.want) > 0 {
				if err == nil {
					t.Fatalf("YAML() succeeded, want a refusal:\n%s", out.String())
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if out.Len() != 0 {
					t.Errorf("wrote output on error:\n%s", out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out.String(), "name: "+NameInit); n != tc.injected {
				t.Errorf("%d injected iptables-init containers, want %d:\n%s", n, tc.injected, out.String())
			}
			var v any
			for _, doc := range strings.Split(out.String(), "\n---\n") {
				if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
					t.Errorf("output document does not parse: %v\n%s", err, doc)
				}
			}
		})
	}
}

// TestYAMLPassUnknown: with --pass-unknown an unknown Pod template is
// copied unchanged, and a warning names it.
func TestYAMLPassUnknown(t *testing.T) {
	in := "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: agent}\nspec:\n  template:\n    spec:\n      containers: [{name: app, image: busybox}]\n"
	var out, warn bytes.Buffer
	if err := YAML(strings.NewReader(in), &out, DefaultOptions(), ReadOptions{PassUnknown: true, Warn: &warn}); err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Errorf("output %q, want the input unchanged", out.String())
	}
	if !strings.Contains(warn.String(), "warning: argoproj.io/v1alpha1 Rollout carries a Pod template") {
		t.Errorf("warning %q", warn.String())
	}
}

// TestYAMLSplitsAsKubectl: splitDocuments agrees with kubectl's decoder on
// where documents start (the JSON→YAML fallback after one object included).
func TestYAMLSplitsAsKubectl(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{"a":1}{"b":2}`, 2},
		{"{\"a\":1}\n{\"b\":2}\n", 2},
		{"{\"a\":1}\n---\nb: 2\n", 2},
		{"{a: 1}\n---\nb: 2\n", 2},
		{"a: 1\n---\nb: 2\n", 2},
		{"  \n{\"a\":1}   \n", 1},
	} {
		docs, err := splitDocuments([]byte(tc.in))
		if err != nil || len(docs) != tc.want {
			t.Errorf("splitDocuments(%q) = %d docs, %v; want %d", tc.in, len(docs), err, tc.want)
		}
	}
	if _, err := splitDocuments([]byte(`{"a":1}{"b":2}{"c":`)); err == nil {
		t.Error("a broken third JSON object is not an error (kubectl does not fall back after two)")
	}
}
