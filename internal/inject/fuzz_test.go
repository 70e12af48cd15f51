package inject

import (
	"bytes"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// FuzzYAML: no input makes inject panic; what it writes is idempotent
// (injecting it again changes nothing) and every workload in it passes the
// Admission invariants.
func FuzzYAML(f *testing.F) {
	b, err := os.ReadFile("testdata/workloads.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	f.Add(b, true)
	f.Add([]byte("apiVersion: v1\nkind: Pod\nspec:\n  securityContext: {runAsUser: 1337}\n  containers: [{name: a}]\n"), true)
	f.Add([]byte("---\n---\n# only a comment\n"), false)
	f.Fuzz(func(t *testing.T, in []byte, interception bool) {
		o := DefaultOptions()
		o.Interception = interception
		var out bytes.Buffer
		if err := YAML(bytes.NewReader(in), &out, o, ReadOptions{}); err != nil {
			return
		}
		var again bytes.Buffer
		if err := YAML(bytes.NewReader(out.Bytes()), &again, o, ReadOptions{}); err != nil {
			t.Fatalf("re-injecting the output failed: %v\n%s", err, out.Bytes())
		}
		if !bytes.Equal(out.Bytes(), again.Bytes()) {
			t.Fatalf("not idempotent:\n%s\n----\n%s", out.Bytes(), again.Bytes())
		}
		for _, doc := range strings.Split(out.String(), "\n---\n") {
			var tm metav1.TypeMeta
			if yaml.Unmarshal([]byte(doc), &tm) != nil {
				continue
			}
			for _, wl := range workloads {
				if wl.kind != tm.Kind || wl.apiVersion != tm.APIVersion {
					continue
				}
				obj := wl.new()
				if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
					t.Fatalf("output does not decode strictly: %v", err)
				}
				_, spec := wl.pod(obj)
				if errs := CheckPod(spec, o.Layout(), nil, Admission); len(errs) > 0 {
					t.Fatalf("wrote a %s breaking invariants: %v", tm.Kind, errs)
				}
			}
		}
	})
}
