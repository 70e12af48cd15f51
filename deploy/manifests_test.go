package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifestDir is the kustomize directory under test.
const manifestDir = "kubernetes"

// kustomization is the part of kustomize's Kustomization type these
// manifests use. It is decoded strictly too: a key not listed here fails the
// test, so extend the struct when the kustomization grows.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// bundle is every object of the manifest directory, decoded.
type bundle struct {
	Kustomization   kustomization
	Files           []string // *.yaml files other than kustomization.yaml, sorted
	Namespaces      []*corev1.Namespace
	Secrets         []*corev1.Secret
	ConfigMaps      []*corev1.ConfigMap
	Deployments     []*appsv1.Deployment
	NetworkPolicies []*networkingv1.NetworkPolicy
}

// loadBundle reads and strictly decodes the manifest directory. Every call
// returns fresh objects, so tests may mutate them.
func loadBundle(t *testing.T) *bundle {
	t.Helper()
	b, err := readBundle(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readBundle(dir string) (*bundle, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading manifest directory: %w", err)
	}
	b := &bundle{}
	sawKustomization := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading manifest: %w", err)
		}
		if name == "kustomization.yaml" {
			if err := decodeStrict(data, &b.Kustomization); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			sawKustomization = true
			continue
		}
		b.Files = append(b.Files, name)
		if err := b.decodeFile(name, data); err != nil {
			return nil, err
		}
	}
	if !sawKustomization {
		return nil, fmt.Errorf("%s: no kustomization.yaml", dir)
	}
	sort.Strings(b.Files)
	return b, nil
}

// docSeparator splits a multi-document YAML file.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeFile decodes every document of one manifest file into its k8s.io/api
// type, chosen by apiVersion and kind.
func (b *bundle) decodeFile(name string, data []byte) error {
	docs := 0
	for i, doc := range docSeparator.Split(string(data), -1) {
		if isBlankYAML(doc) {
			continue
		}
		docs++
		if err := b.decodeDocument([]byte(doc)); err != nil {
			return fmt.Errorf("%s: document %d: %w", name, i+1, err)
		}
	}
	if docs == 0 {
		return fmt.Errorf("%s: no documents", name)
	}
	return nil
}

func (b *bundle) decodeDocument(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("reading apiVersion/kind: %w", err)
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return decodeInto(doc, &b.Namespaces)
	case "v1 Secret":
		return decodeInto(doc, &b.Secrets)
	case "v1 ConfigMap":
		return decodeInto(doc, &b.ConfigMaps)
	case "apps/v1 Deployment":
		return decodeInto(doc, &b.Deployments)
	case "networking.k8s.io/v1 NetworkPolicy":
		return decodeInto(doc, &b.NetworkPolicies)
	default:
		return fmt.Errorf("unsupported object %q %q (add its type to decodeDocument)", tm.APIVersion, tm.Kind)
	}
}

// decodeInto strictly decodes doc into a new T and appends it to list.
func decodeInto[T any](doc []byte, list *[]*T) error {
	o := new(T)
	if err := decodeStrict(doc, o); err != nil {
		return err
	}
	*list = append(*list, o)
	return nil
}

// decodeStrict decodes YAML into o and fails on anything the Kubernetes API
// server would refuse or silently drop:
//   - duplicate keys and unknown fields (sigs.k8s.io/yaml.UnmarshalStrict);
//   - mis-cased field names, which encoding/json would otherwise accept
//     ("RunAsUser" for "runAsUser"): the decoded object is encoded again and
//     every field of the input must come back, with the same spelling and value.
func decodeStrict(data []byte, o any) error {
	if err := yaml.UnmarshalStrict(data, o); err != nil {
		return err
	}
	in, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	var want any
	if err := json.Unmarshal(in, &want); err != nil {
		return err
	}
	out, err := json.Marshal(o)
	if err != nil {
		return err
	}
	var got any
	if err := json.Unmarshal(out, &got); err != nil {
		return err
	}
	if path, ok := containedIn(want, got, ""); !ok {
		return fmt.Errorf("field %s is not kept by %T (unknown, mis-cased, or an invalid value)", path, o)
	}
	return nil
}

// containedIn reports whether every field of want is in got with an equal
// value (got may have more fields: zero values the types always encode).
// On failure it returns the path of the first difference.
func containedIn(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return path + "." + k, false
			}
			if p, ok := containedIn(w[k], gv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := containedIn(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(want, got) {
			return path, false
		}
		return "", true
	}
}

func isBlankYAML(doc string) bool {
	for line := range strings.Lines(doc) {
		s := strings.TrimSpace(line)
		if s != "" && !strings.HasPrefix(s, "#") {
			return false
		}
	}
	return true
}

func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	b := loadBundle(t)
	if len(b.Deployments) != 1 || len(b.Namespaces) != 1 || len(b.ConfigMaps) != 1 || len(b.Secrets) != 1 || len(b.NetworkPolicies) != 1 {
		t.Errorf("objects: %d Deployment, %d Namespace, %d ConfigMap, %d Secret, %d NetworkPolicy; want one of each",
			len(b.Deployments), len(b.Namespaces), len(b.ConfigMaps), len(b.Secrets), len(b.NetworkPolicies))
	}
}

// TestDecodeStrictRefuses proves the decoder is as strict as claimed, on the
// real deployment.yaml with one edit each.
func TestDecodeStrictRefuses(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile(filepath.Join(manifestDir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string
		wantErr  string
	}{
		{"unknown field", "      automountServiceAccountToken: false\n", "      automountServiceAccountToken: false\n      hostNetwrk: false\n", "unknown field"},
		{"mis-cased field", "            runAsUser: 1000\n", "            RunAsUser: 1000\n", "not kept"},
		{"duplicate key", "      terminationGracePeriodSeconds: 30\n", "      terminationGracePeriodSeconds: 30\n      terminationGracePeriodSeconds: 31\n", "already set"},
		{"wrong type", "      terminationGracePeriodSeconds: 30\n", "      terminationGracePeriodSeconds: thirty\n", "cannot unmarshal"},
		{"restartPolicy misplaced", "          restartPolicy: Always\n", "          restartpolicy: Always\n", "not kept"},
		{"unknown kind", "kind: Deployment\n", "kind: Deploymnt\n", "unsupported object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !bytes.Contains(orig, []byte(tt.old)) {
				t.Fatalf("deployment.yaml no longer contains %q; update the test", tt.old)
			}
			mutated := bytes.Replace(orig, []byte(tt.old), []byte(tt.new), 1)
			err := (&bundle{}).decodeFile("deployment.yaml", mutated)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("decodeFile() error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeFileMultiDocument(t *testing.T) {
	t.Parallel()
	data := "# leading comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: a\n"
	b := &bundle{}
	if err := b.decodeFile("multi.yaml", []byte(data)); err != nil {
		t.Fatal(err)
	}
	if len(b.Namespaces) != 1 || len(b.ConfigMaps) != 1 {
		t.Errorf("got %d namespaces and %d configmaps, want 1 and 1", len(b.Namespaces), len(b.ConfigMaps))
	}
	if err := (&bundle{}).decodeFile("empty.yaml", []byte("# nothing\n---\n")); err == nil {
		t.Error("a file without documents decoded without error")
	}
}

// TestKustomizationListsEveryFile: `kubectl apply -k` applies only what the
// kustomization lists, so a manifest left out silently disappears.
func TestKustomizationListsEveryFile(t *testing.T) {
	t.Parallel()
	b := loadBundle(t)
	if err := checkKustomization(b.Kustomization, b.Files); err != nil {
		t.Error(err)
	}

	tests := []struct {
		name   string
		mutate func(k *kustomization)
	}{
		{"file left out", func(k *kustomization) { k.Resources = k.Resources[1:] }},
		{"missing file listed", func(k *kustomization) { k.Resources = append(k.Resources, "service.yaml") }},
		{"file listed twice", func(k *kustomization) { k.Resources = append(k.Resources, k.Resources[0]) }},
		{"wrong kind", func(k *kustomization) { k.Kind = "Component" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := loadBundle(t).Kustomization
			tt.mutate(&k)
			if err := checkKustomization(k, b.Files); err == nil {
				t.Error("checkKustomization() = nil, want an error")
			}
		})
	}
}

func checkKustomization(k kustomization, files []string) error {
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return fmt.Errorf("kustomization: apiVersion/kind %q %q", k.APIVersion, k.Kind)
	}
	listed := slices.Clone(k.Resources)
	sort.Strings(listed)
	for i := 1; i < len(listed); i++ {
		if listed[i] == listed[i-1] {
			return fmt.Errorf("kustomization lists %q twice", listed[i])
		}
	}
	if !slices.Equal(listed, files) {
		return fmt.Errorf("kustomization resources %q, want exactly the manifest files %q", listed, files)
	}
	return nil
}
