// Package webhook is `botbox webhook`: a Kubernetes admission webhook
// (AdmissionReview v1 over HTTPS) that does for every Pod of a selected
// namespace what `botbox inject` does (POST /mutate, a JSON patch) and
// rejects a Pod that is not exactly what the injector makes of it or that
// breaks the containment invariants (POST /validate), on CREATE and UPDATE,
// so an agent allowed to create or update Pods cannot create an uncontained
// one. Which namespaces are selected is the webhook configurations' job
// (the chart's namespaceSelector botbox.dev/inject=enabled); inside them
// there is no per-Pod opt-out.
//
// The certificate is read from files and reloaded when they change
// (cert-manager renews it in place); /healthz answers on both listeners and
// Prometheus metrics on the plain one.
package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/inject"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Outcomes of one review, the values of the result label and log field.
const (
	ResultAllowed = "allowed"
	ResultPatched = "patched"
	ResultDenied  = "denied"
	ResultInvalid = "invalid" // the request itself could not be understood
)

// PatchOp is one RFC 6902 operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// decision is what one review decided, for the response, the log line and
// the metrics.
type decision struct {
	result  string
	message string
	patch   []PatchOp
}

// decodeReview reads an AdmissionReview v1 request. The envelope is read
// leniently: a field a newer API server adds to it cannot change the Pod,
// and refusing it would stop every Pod of the selected namespaces after a
// cluster upgrade (failurePolicy: Fail). The Pod itself is strict
// (decodePod).
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var rev admissionv1.AdmissionReview
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&rev); err != nil {
		return nil, fmt.Errorf("decoding AdmissionReview: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decoding AdmissionReview: trailing data")
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("want admission.k8s.io/v1 AdmissionReview, got %s %s", rev.APIVersion, rev.Kind)
	}
	if rev.Request == nil {
		return nil, errors.New("AdmissionReview has no request")
	}
	return &rev, nil
}

// decodePod decodes the request's Pod strictly: a field this build's
// k8s.io/api does not know could change what the Pod may do, so it is
// refused rather than ignored (upgrade the webhook with the cluster).
func decodePod(raw []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pod); err != nil {
		return nil, fmt.Errorf("decoding the Pod: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decoding the Pod: trailing data")
	}
	return &pod, nil
}

// review decides one request. mutate selects /mutate (a patch making the
// Pod what inject makes of it) over /validate (the Pod must already be it).
func review(req *admissionv1.AdmissionRequest, mutate bool, o inject.Options) decision {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	case admissionv1.Connect:
		if mutate {
			return decision{result: ResultAllowed}
		}
		return reviewConnect(req)
	default:
		return decision{result: ResultAllowed}
	}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Resource.Resource != "pods" {
		return decision{result: ResultDenied, message: fmt.Sprintf("botbox webhook handles Pods only, got %s %s (check the webhook configuration's rules)", req.Kind.Kind, req.Resource.Resource)}
	}
	switch req.SubResource {
	case "", "ephemeralcontainers":
	default:
		return decision{result: ResultAllowed}
	}
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return decision{result: ResultDenied, message: err.Error()}
	}
	if req.Operation == admissionv1.Update {
		old, err := decodePod(req.OldObject.Raw)
		if err != nil {
			return decision{result: ResultDenied, message: "oldObject: " + err.Error()}
		}
		if msg := updateChangesBotBox(old, pod); msg != "" {
			return decision{result: ResultDenied, message: "botbox: " + msg}
		}
		// An update that leaves the spec alone (labels, annotations,
		// finalizers: the Job controller removing its tracking finalizer)
		// cannot change what runs, and must pass even for a Pod injected
		// with other options (an older BotBox image): a patch there would
		// touch immutable fields and fail the update, leaving the Pod stuck.
		if equality.Semantic.DeepEqual(old.Spec, pod.Spec) {
			return decision{result: ResultAllowed}
		}
	}
	orig := pod.DeepCopy()
	if err := inject.Pod(&pod.ObjectMeta, &pod.Spec, o); err != nil {
		return decision{result: ResultDenied, message: "botbox: " + err.Error()}
	}
	if mutate {
		patch, err := diffPatch(orig, pod)
		if err != nil {
			return decision{result: ResultDenied, message: err.Error()}
		}
		// Through pods/ephemeralcontainers the API server keeps only the
		// ephemeral containers of the patched Pod: a patch of anything
		// else would be dropped unseen, so such a Pod is refused here.
		if req.SubResource == "ephemeralcontainers" {
			for _, op := range patch {
				if op.Path != "/spec/ephemeralContainers" {
					return decision{result: ResultDenied, message: "botbox: the Pod is not injected as `botbox inject` with this webhook's options makes it (" + strings.TrimPrefix(op.Path, "/") + " differs); no ephemeral container is added to it"}
				}
			}
		}
		if len(patch) == 0 {
			return decision{result: ResultAllowed}
		}
		return decision{result: ResultPatched, patch: patch}
	}
	if where := specDiff(&orig.Spec, &pod.Spec); where != "" {
		return decision{result: ResultDenied, message: "botbox: the Pod is not injected as `botbox inject` with this webhook's options makes it (" + where + " differs); it would not be contained"}
	}
	return decision{result: ResultAllowed}
}

// updateChangesBotBox refuses an UPDATE that removes or changes the
// botbox.dev/injected label (the shipped NetworkPolicy selects on it) or,
// on an injected Pod, the scrape annotations inject set (annotation-based
// Prometheus jobs read the port and path from them); that adds, changes
// or removes a legacy AppArmor annotation; or that changes the image of
// one of BotBox's containers (/mutate would restore it without a word);
// "" when none.
func updateChangesBotBox(old, pod *corev1.Pod) string {
	if v, ok := old.Labels[inject.LabelInjected]; ok && pod.Labels[inject.LabelInjected] != v {
		return fmt.Sprintf("the update removes or changes label %s=%s, which the NetworkPolicy and the PodMonitor select on; an injected Pod keeps it", inject.LabelInjected, v)
	}
	if _, injected := old.Labels[inject.LabelInjected]; injected {
		for _, k := range []string{inject.AnnotationScrape, inject.AnnotationPort, inject.AnnotationPath} {
			if ov, ok := old.Annotations[k]; ok && pod.Annotations[k] != ov {
				return fmt.Sprintf("the update changes annotation %s from %q to %q: it tells Prometheus where BotBox's metrics are, and another port or path would let the app serve forged ones; an injected Pod keeps it", k, ov, pod.Annotations[k])
			}
		}
	}
	if k := changedAppArmorAnnotation(old.Annotations, pod.Annotations); k != "" {
		return fmt.Sprintf("the update adds, changes or removes annotation %s, which sets a container's AppArmor profile when it (re)starts; set appArmorProfile in the Pod's spec and recreate the Pod", k)
	}
	for _, oc := range old.Spec.InitContainers {
		if oc.Name != inject.NameBotBox && oc.Name != inject.NameInit && oc.Name != inject.NameCAInit {
			continue
		}
		for _, nc := range pod.Spec.InitContainers {
			if nc.Name == oc.Name && nc.Image != oc.Image {
				return fmt.Sprintf("the update changes the image of BotBox's container %q from %q to %q; BotBox's image is the webhook's --image (upgrade the chart, then restart the Pod)", oc.Name, oc.Image, nc.Image)
			}
		}
	}
	return ""
}

// appArmorAnnotationPrefix is the legacy per-container AppArmor
// annotation, which kubelets still read when they start a container.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// changedAppArmorAnnotation names the first legacy AppArmor annotation
// that differs between old and cur ("" when none): a spec-only review
// would let an UPDATE of metadata alone unconfine a container at its next
// restart. The API server refuses such updates too; this holds where it
// would not (TestUpdateCases "AppArmor annotation").
func changedAppArmorAnnotation(old, cur map[string]string) string {
	for _, m := range []map[string]string{old, cur} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ov, inOld := old[k]
			cv, inCur := cur[k]
			if strings.HasPrefix(k, appArmorAnnotationPrefix) && (inOld != inCur || ov != cv) {
				return k
			}
		}
	}
	return ""
}

// botboxRoles are the containers exec, attach and port-forward must not
// reach: a process started there runs as the exempt UID (or as root with
// NET_ADMIN) and can read BotBox's Secret.
var botboxRoles = []string{inject.NameBotBox, inject.NameInit, inject.NameCAInit}

// reviewConnect decides CONNECT on pods/exec, pods/attach and
// pods/portforward: exec and attach into BotBox's containers, and
// port-forwards to BotBox's ports (or to unnamed ports, which may be
// them), are refused; the app's containers are admitted.
func reviewConnect(req *admissionv1.AdmissionRequest) decision {
	if req.Resource.Group != "" || req.Resource.Resource != "pods" {
		return decision{result: ResultDenied, message: fmt.Sprintf("botbox webhook handles Pods only, got CONNECT %s/%s (check the webhook configuration's rules)", req.Resource.Resource, req.SubResource)}
	}
	deny := func(format string, a ...any) decision {
		return decision{result: ResultDenied, message: "botbox: " + fmt.Sprintf(format, a...)}
	}
	switch req.SubResource {
	case "exec", "attach":
		var opts struct {
			Kind      string `json:"kind"`
			Container string `json:"container"`
		}
		if err := json.Unmarshal(req.Object.Raw, &opts); err != nil {
			return deny("decoding the %s options: %v", req.SubResource, err)
		}
		if want := map[string]string{"exec": "PodExecOptions", "attach": "PodAttachOptions"}[req.SubResource]; opts.Kind != want && opts.Kind != "" {
			return deny("pods/%s: want %s, got kind %q", req.SubResource, want, opts.Kind)
		}
		// An empty container is resolved by the API server to the Pod's
		// only regular container, never to an init container.
		if slices.Contains(botboxRoles, opts.Container) {
			return deny("%s into BotBox's container %q is refused: a process there runs outside the egress rules and can read BotBox's credentials; %s into the app container instead", req.SubResource, opts.Container, req.SubResource)
		}
		return decision{result: ResultAllowed}
	case "portforward":
		var opts struct {
			Kind  string  `json:"kind"`
			Ports []int32 `json:"ports"`
		}
		if err := json.Unmarshal(req.Object.Raw, &opts); err != nil {
			return deny("decoding the port-forward options: %v", err)
		}
		if opts.Kind != "PodPortForwardOptions" && opts.Kind != "" {
			return deny("pods/portforward: want PodPortForwardOptions, got kind %q", opts.Kind)
		}
		if len(opts.Ports) == 0 {
			return deny("port-forward without a ports list can reach any port of the Pod, BotBox's included; name the ports (kubectl 1.31 and later sends them)")
		}
		for _, p := range opts.Ports {
			if slices.Contains(botboxPorts, int(p)) {
				return deny("port-forward to port %d is refused: it is BotBox's (proxy %d, interception %d, metrics %d, DNS guard %d), which would act for whoever connects", p, inject.ProxyPort, inject.InterceptionPort, inject.MetricsPort, inject.DNSGuardPort)
			}
		}
		return decision{result: ResultAllowed}
	default:
		return deny("CONNECT on pods/%s is not handled (check the webhook configuration's rules)", req.SubResource)
	}
}

// botboxPorts are the ports BotBox listens on in an injected Pod.
var botboxPorts = []int{inject.ProxyPort, inject.InterceptionPort, inject.MetricsPort, inject.DNSGuardPort}

// specDiff names the first part of the spec that differs ("" when equal).
func specDiff(got, want *corev1.PodSpec) string {
	if equality.Semantic.DeepEqual(got, want) {
		return ""
	}
	for _, p := range []struct {
		name string
		a, b any
	}{
		{"initContainers", got.InitContainers, want.InitContainers},
		{"containers", got.Containers, want.Containers},
		{"ephemeralContainers", got.EphemeralContainers, want.EphemeralContainers},
		{"volumes", got.Volumes, want.Volumes},
	} {
		if !equality.Semantic.DeepEqual(p.a, p.b) {
			return "spec." + p.name + containerDiff(p.a, p.b)
		}
	}
	return "spec"
}

// containerDiff names the first differing container of two lists.
func containerDiff(a, b any) string {
	ca, ok1 := a.([]corev1.Container)
	cb, ok2 := b.([]corev1.Container)
	if !ok1 || !ok2 {
		return ""
	}
	for i := range min(len(ca), len(cb)) {
		if !equality.Semantic.DeepEqual(ca[i], cb[i]) {
			return fmt.Sprintf("[%d] %q", i, ca[i].Name)
		}
	}
	return fmt.Sprintf(" (%d entries, want %d)", len(ca), len(cb))
}

// diffPatch is the JSON patch turning orig into want: one "add" (which
// replaces an existing member) or "remove" per changed top-level field of
// the spec, and per added label and annotation. Coarse on purpose: whole lists are
// replaced, so the patch cannot go wrong on indexes, and the API server
// applies it to exactly the object we decoded.
func diffPatch(orig, want *corev1.Pod) ([]PatchOp, error) {
	a, err := fields(orig.Spec)
	if err != nil {
		return nil, err
	}
	b, err := fields(want.Spec)
	if err != nil {
		return nil, err
	}
	var ops []PatchOp
	for _, k := range []string{"initContainers", "containers", "ephemeralContainers", "volumes"} {
		switch {
		case bytes.Equal(a[k], b[k]):
		case b[k] == nil:
			ops = append(ops, PatchOp{Op: "remove", Path: "/spec/" + k})
		default:
			ops = append(ops, PatchOp{Op: "add", Path: "/spec/" + k, Value: json.RawMessage(b[k])})
		}
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) && !isPatched(k) {
			return nil, fmt.Errorf("botbox: internal error: the injector changed spec.%s, which the patch does not carry", k)
		}
	}
	ops = append(ops, mapPatch("/metadata/annotations", orig.Annotations, want.Annotations)...)
	ops = append(ops, mapPatch("/metadata/labels", orig.Labels, want.Labels)...)
	return ops, nil
}

// mapPatch adds (or replaces) the entries of want that orig lacks or holds
// with another value, in key order; the injector never removes an entry.
func mapPatch(path string, orig, want map[string]string) []PatchOp {
	if orig == nil && len(want) > 0 {
		return []PatchOp{{Op: "add", Path: path, Value: want}}
	}
	var ops []PatchOp
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if ov, ok := orig[k]; !ok || ov != want[k] {
			ops = append(ops, PatchOp{Op: "add", Path: path + "/" + escapePointer(k), Value: want[k]})
		}
	}
	return ops
}

func isPatched(k string) bool {
	return k == "initContainers" || k == "containers" || k == "ephemeralContainers" || k == "volumes"
}

// fields is the spec's JSON members.
func fields(spec corev1.PodSpec) (map[string]json.RawMessage, error) {
	j, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the Pod spec: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("encoding the Pod spec: %w", err)
	}
	return m, nil
}

// escapePointer escapes a JSON-pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// response builds the AdmissionReview answering req.
func response(req *admissionv1.AdmissionRequest, d decision) (*admissionv1.AdmissionReview, error) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: d.result == ResultAllowed || d.result == ResultPatched}
	if !resp.Allowed {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: d.message}
	}
	if len(d.patch) > 0 {
		p, err := json.Marshal(d.patch)
		if err != nil {
			return nil, fmt.Errorf("encoding the patch: %w", err)
		}
		resp.Patch = p
		resp.PatchType = new(admissionv1.PatchTypeJSONPatch)
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	}, nil
}
