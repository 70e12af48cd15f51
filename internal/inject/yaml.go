package inject

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode"

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

// ReadOptions are how YAML treats what it does not inject.
type ReadOptions struct {
	// PassUnknown copies an object of an unknown kind that carries a Pod
	// template (an Argo Rollout, a Knative Service, a PodTemplate, a CRD)
	// unchanged, with a warning, instead of refusing it.
	PassUnknown bool
	// Warn receives one line per object copied that way (nil: discarded).
	Warn io.Writer
}

// YAML reads a stream of YAML documents, or a JSON stream, from r, split
// as kubectl splits it (utilyaml.NewYAMLOrJSONDecoder: a stream starting
// with "{" is JSON objects, falling back to YAML after at most one), and
// writes them to w, each workload with a Pod template injected (Pod). An
// object with an items array is a list to kubectl (v1 List, DeploymentList,
// any *List): its items are injected one by one. Another object is copied
// unchanged, byte for byte, unless it carries a Pod template, which is
// refused (ReadOptions.PassUnknown copies it, with a warning): inject never
// succeeds having copied a Pod it did not inject. Workloads are decoded
// strictly into the k8s.io/api types: an unknown or duplicate field is an
// error, as kubectl apply --validate=strict would make it. Every document's
// error is reported at once, each naming the document (1-based) and the
// object; nothing is written for a stream with an error.
func YAML(r io.Reader, w io.Writer, o Options, ro ReadOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if len(data) > MaxInput {
		return fmt.Errorf("input larger than %d bytes", MaxInput)
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	var errs []error
	for n, doc := range docs {
		res, err := document(doc, o, ro)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", n+1, err))
			continue
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
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	_, err = w.Write(out.Bytes())
	return err
}

// splitDocuments splits a stream the way utilyaml.YAMLOrJSONDecoder does
// (TestYAMLSplitsAsKubectl): JSON objects while the stream starts with
// "{"; when one fails to parse after at most one object, the rest, from
// the end of the last object and past its line's whitespace, is YAML
// documents split on "---".
func splitDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	rest := data
	if utilyaml.IsJSONBuffer(data) {
		dec := json.NewDecoder(bytes.NewReader(data))
		var consumed int64
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			if err != nil {
				if len(docs) > 1 {
					return nil, fmt.Errorf("document %d: %w", len(docs)+1, err)
				}
				break
			}
			docs = append(docs, raw)
			consumed = dec.InputOffset()
		}
		rest = data[consumed:]
		if i := bytes.IndexFunc(rest, func(r rune) bool { return !unicode.IsSpace(r) || r == '\n' }); i >= 0 && rest[i] == '\n' {
			rest = rest[i+1:]
		} else if i < 0 {
			rest = nil
		}
	}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rest)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		docs = append(docs, doc)
	}
}

// document injects one YAML document, or returns it unchanged.
func document(doc []byte, o Options, ro ReadOptions) ([]byte, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		if isBlank(doc) {
			return nil, nil
		}
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if isList(doc) {
		return list(doc, o, ro)
	}
	var wl *workload
	for i := range workloads {
		if workloads[i].apiVersion == tm.APIVersion && workloads[i].kind == tm.Kind {
			wl = &workloads[i]
		}
	}
	if wl == nil {
		where := podTemplatePath(doc)
		switch {
		case where == "":
			return doc, nil
		case ro.PassUnknown:
			if ro.Warn != nil {
				fmt.Fprintf(ro.Warn, "warning: %s %s carries a Pod template (%s) and is copied without BotBox (--pass-unknown): its Pods are not contained unless the webhook injects them\n", tm.APIVersion, tm.Kind, where)
			}
			return doc, nil
		default:
			return nil, fmt.Errorf("%s %s carries a Pod template (%s), which botbox inject cannot inject: its Pods would run without BotBox; convert it to a kind inject knows (%s), or pass --pass-unknown and rely on the webhook", tm.APIVersion, tm.Kind, where, knownKinds())
		}
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

func knownKinds() string {
	var ks []string
	for _, w := range workloads {
		ks = append(ks, w.apiVersion+" "+w.kind)
	}
	return strings.Join(ks, ", ")
}

// isList reports whether kubectl reads doc as a list: an object whose
// items member is an array (unstructured.Unstructured.IsList).
func isList(doc []byte) bool {
	var l struct {
		Items any `json:"items"`
	}
	if yaml.Unmarshal(doc, &l) != nil {
		return false
	}
	_, ok := l.Items.([]any)
	return ok
}

// podTemplatePath names where an object of a kind inject does not know
// carries Pod-shaped content ("" when nowhere): a containers,
// initContainers or ephemeralContainers array, a jobTemplate, or a
// template with a spec, at any depth (spec.template.spec.containers of a
// Rollout or a Knative Service, template.spec of a PodTemplate,
// spec.jobTemplate of a batch/v1beta1 CronJob, a CRD's own nesting).
func podTemplatePath(doc []byte) string {
	var v any
	if yaml.Unmarshal(doc, &v) != nil {
		return ""
	}
	return findPodShape(v, "")
}

func findPodShape(v any, at string) string {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			p := strings.TrimPrefix(at+"."+k, ".")
			switch c := t[k].(type) {
			case []any:
				if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
					return p
				}
			case map[string]any:
				if k == "jobTemplate" {
					return p
				}
				if _, ok := c["spec"]; ok && k == "template" {
					return p
				}
			}
			if where := findPodShape(t[k], p); where != "" {
				return where
			}
		}
	case []any:
		for i, c := range t {
			if where := findPodShape(c, fmt.Sprintf("%s[%d]", at, i)); where != "" {
				return where
			}
		}
	}
	return ""
}

// list injects every item of a list (what `kubectl get -o yaml` prints),
// recursively.
func list(doc []byte, o Options, ro ReadOptions) ([]byte, error) {
	var l struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   json.RawMessage   `json:"metadata,omitempty"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := yaml.UnmarshalStrict(doc, &l); err != nil {
		return nil, fmt.Errorf("kind %s: %w", l.Kind, err)
	}
	var errs []error
	for i, it := range l.Items {
		out, err := document(it, o, ro)
		if err == nil {
			l.Items[i], err = yaml.YAMLToJSON(out)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d of the %s: %w", i, l.Kind, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
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
