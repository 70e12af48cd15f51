package webhook

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/botbox/botbox/internal/inject"
	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzReview: no request body makes the webhook panic, and whatever it
// admits satisfies the invariants: a /mutate answer, its patch applied with
// an independent JSON-patch library, and a /validate "allowed" for a Pod,
// both decode strictly into a Pod that passes inject.CheckPod.
func FuzzReview(f *testing.F) {
	for _, p := range []string{"testdata/create-pod.json", "testdata/update-pod.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"kind":"Pod","version":"v1"},"resource":{"resource":"pods","version":"v1"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"a","securityContext":{"runAsUser":1337}}]}}}}`))
	for _, sub := range []string{"exec", "attach", "portforward"} {
		f.Add(connectReview(sub, `"container": "botbox", "ports": [8080]`))
	}
	o := testOptions()
	f.Fuzz(func(t *testing.T, body []byte) {
		rev, err := decodeReview(body)
		if err != nil {
			return
		}
		for _, mutate := range []bool{true, false} {
			d := review(rev.Request, mutate, o)
			resp, err := response(rev.Request, d)
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Response.Allowed {
				continue
			}
			op := rev.Request.Operation
			if op == admissionv1.Connect && !mutate {
				// An admitted CONNECT never reaches BotBox's containers
				// or ports, and a port-forward names its ports.
				var opts struct {
					Container string  `json:"container"`
					Ports     []int32 `json:"ports"`
				}
				json.Unmarshal(rev.Request.Object.Raw, &opts)
				if slices.Contains(botboxRoles, opts.Container) {
					t.Fatalf("admitted CONNECT %s into %q", rev.Request.SubResource, opts.Container)
				}
				if rev.Request.SubResource == "portforward" {
					if len(opts.Ports) == 0 {
						t.Fatal("admitted a port-forward naming no ports")
					}
					for _, p := range opts.Ports {
						if slices.Contains(botboxPorts, int(p)) {
							t.Fatalf("admitted a port-forward to %d", p)
						}
					}
				}
			}
			if (op != admissionv1.Create && op != admissionv1.Update) || (rev.Request.SubResource != "" && rev.Request.SubResource != "ephemeralcontainers") {
				continue
			}
			if op == admissionv1.Update {
				// An update leaving the spec alone is admitted whatever the
				// Pod (it changes nothing that runs): the property is about
				// what an admitted create or spec change brings in.
				oldPod, err1 := decodePod(rev.Request.OldObject.Raw)
				newPod, err2 := decodePod(rev.Request.Object.Raw)
				if err1 == nil && err2 == nil && equality.Semantic.DeepEqual(oldPod.Spec, newPod.Spec) {
					continue
				}
			}
			obj := rev.Request.Object.Raw
			if len(resp.Response.Patch) > 0 {
				p, err := jsonpatch.DecodePatch(resp.Response.Patch)
				if err != nil {
					t.Fatalf("undecodable patch: %v", err)
				}
				if obj, err = p.Apply(obj); err != nil {
					t.Fatalf("patch does not apply: %v\n%s", err, resp.Response.Patch)
				}
			}
			var pod corev1.Pod
			dec := json.NewDecoder(bytes.NewReader(obj))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&pod); err != nil {
				t.Fatalf("admitted object does not decode strictly: %v", err)
			}
			if errs := inject.CheckPod(&pod.Spec, o.Layout(), nil, inject.Admission); len(errs) > 0 {
				t.Fatalf("admitted (mutate=%v) a Pod breaking invariants: %v", mutate, errs)
			}
		}
	})
}
