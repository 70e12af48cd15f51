package inject

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// MaxInput bounds what YAML reads (one document and the whole stream).
const MaxInput = 16 << 20

// workload is a kind that carries a Pod template (or is a Pod).
type workload struct {
	apiVersion, kind string
	new              func() any
	pod              func(obj any) (*metav1.ObjectMeta, *corev1.PodSpec)
}

var workloads = []workload{
	{"v1", "Pod", func() any { return &corev1.Pod{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		p := o.(*corev1.Pod)
		return &p.ObjectMeta, &p.Spec
	}},
	{"apps/v1", "Deployment", func() any { return &appsv1.Deployment{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*appsv1.Deployment).Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
	{"apps/v1", "StatefulSet", func() any { return &appsv1.StatefulSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*appsv1.StatefulSet).Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
	{"apps/v1", "DaemonSet", func() any { return &appsv1.DaemonSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*appsv1.DaemonSet).Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
	{"apps/v1", "ReplicaSet", func() any { return &appsv1.ReplicaSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*appsv1.ReplicaSet).Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
	{"batch/v1", "Job", func() any { return &batchv1.Job{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*batchv1.Job).Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
	{"batch/v1", "CronJob", func() any { return &batchv1.CronJob{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		t := &o.(*batchv1.CronJob).Spec.JobTemplate.Spec.Template
		return &t.ObjectMeta, &t.Spec
	}},
}

// YAML reads a stream of YAML documents from r and writes them to w, each
// workload with a Pod template injected (Pod), also inside a v1 List; every
// other document is copied unchanged, byte for byte. Workloads are decoded strictly into the
// k8s.io/api types: an unknown or duplicate field is an error, as kubectl
// apply --validate=strict would make it. Errors name the document (1-based)
// and the object; nothing is written for a stream with an error.
func YAML(r io.Reader, w io.Writer, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(io.LimitReader(r, MaxInput+1)))
	var out bytes.Buffer
	total := 0
	for n := 1; ; n++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if total += len(doc); total > MaxInput {
			return fmt.Errorf("input larger than %d bytes", MaxInput)
		}
		res, err := document(doc, o)
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(res)) == 0 {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(res)
		if !bytes.HasSuffix(res, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}

// document injects one YAML document, or returns it unchanged.
func document(doc []byte, o Options) ([]byte, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		if isBlank(doc) {
			return nil, nil
		}
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.APIVersion == "v1" && tm.Kind == "List" {
		return list(doc, o)
	}
	var wl *workload
	for i := range workloads {
		if workloads[i].apiVersion == tm.APIVersion && workloads[i].kind == tm.Kind {
			wl = &workloads[i]
		}
	}
	if wl == nil {
		return doc, nil
	}
	obj := wl.new()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	meta, spec := wl.pod(obj)
	if err := Pod(meta, spec, o); err != nil {
		return nil, fmt.Errorf("%s %q: %w", tm.Kind, objectName(obj), err)
	}
	return marshalClean(obj)
}

// list injects every item of a v1 List (what `kubectl get -o yaml` prints).
func list(doc []byte, o Options) ([]byte, error) {
	var l struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   json.RawMessage   `json:"metadata,omitempty"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := yaml.UnmarshalStrict(doc, &l); err != nil {
		return nil, fmt.Errorf("kind List: %w", err)
	}
	for i, it := range l.Items {
		out, err := document(it, o)
		if err != nil {
			return nil, fmt.Errorf("item %d of the List: %w", i, err)
		}
		if l.Items[i], err = yaml.YAMLToJSON(out); err != nil {
			return nil, fmt.Errorf("item %d of the List: %w", i, err)
		}
	}
	return yaml.Marshal(&l)
}

func objectName(obj any) string {
	if m, ok := obj.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

// isBlank reports whether doc holds only comments and whitespace.
func isBlank(doc []byte) bool {
	var v any
	return yaml.Unmarshal(doc, &v) == nil && v == nil
}

// marshalClean marshals obj as YAML without the empty fields the typed
// structs always emit (creationTimestamp: null, status: {}), so the output
// holds what the input held plus what the injector added.
func marshalClean(obj any) ([]byte, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	prune(m)
	if s, ok := m["status"].(map[string]any); ok && len(s) == 0 {
		delete(m, "status")
	}
	return yaml.Marshal(m)
}

// prune drops every creationTimestamp: null and the empty metadata,
// resources, status, strategy and updateStrategy maps the typed structs
// emit; an empty map anywhere else (emptyDir: {}) means something and stays.
func prune(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for k, c := range t {
			prune(c)
			if cm, ok := c.(map[string]any); ok && len(cm) == 0 && (k == "metadata" || k == "resources" || k == "status" || k == "strategy" || k == "updateStrategy") {
				delete(t, k)
			}
		}
	case []any:
		for _, c := range t {
			prune(c)
		}
	}
}
