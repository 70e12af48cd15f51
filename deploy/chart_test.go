package deploy_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/inject"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// The chart under test and the Helm that renders it. .ci/run pins the same
// version and passes its build in BOTBOX_HELM.
const (
	chartDir        = "../charts/botbox"
	helmVersion     = "v3.22.0"
	chartNamespace  = "botbox-system"
	chartRelease    = "botbox"
	injectLabel     = "botbox.dev/inject"
	injectLabelOn   = "enabled"
	webhookTLSMount = "/tls"
	exemptUID       = 1337
	// kubeVersion is the cluster version rendered for (helm template
	// otherwise assumes one older than the chart's kubeVersion allows).
	kubeVersion = "1.33.0"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns BOTBOX_HELM, or builds the pinned Helm once into the
// user cache (go install; the Go build cache makes later builds cheap).
// Without Go module access the test fails under CI and skips elsewhere.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("BOTBOX_HELM"); p != "" {
			helmPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			helmErr = err
			return
		}
		dir := filepath.Join(cache, "botbox", "helm-"+helmVersion)
		helmPath = filepath.Join(dir, "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("building helm %s: %w\n%s", helmVersion, err, out)
		}
	})
	if helmErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(helmErr)
		}
		t.Skip(helmErr)
	}
	return helmPath
}

// certManagerIssuer and certManagerCertificate are the parts of
// cert-manager's types the chart uses (cert-manager.io/v1), decoded
// strictly like the kustomization: a field the chart adds must be added
// here, with its real spelling (cert-manager's API reference).
type certManagerIssuer struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type certManagerCertificate struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// chartRender is every object of one `helm template`, decoded.
type chartRender struct {
	ServiceAccounts []*corev1.ServiceAccount
	Services        []*corev1.Service
	Secrets         []*corev1.Secret
	ConfigMaps      []*corev1.ConfigMap
	Deployments     []*appsv1.Deployment
	PDBs            []*policyv1.PodDisruptionBudget
	Mutating        []*admissionv1.MutatingWebhookConfiguration
	Validating      []*admissionv1.ValidatingWebhookConfiguration
	Issuers         []*certManagerIssuer
	Certificates    []*certManagerCertificate
	PodMonitors     []*monitoringv1.PodMonitor
	NetworkPolicies []*networkingv1.NetworkPolicy
}

func (r *chartRender) decodeDocument(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("reading apiVersion/kind: %w", err)
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ServiceAccount":
		return decodeInto(doc, &r.ServiceAccounts)
	case "v1 Service":
		return decodeInto(doc, &r.Services)
	case "v1 Secret":
		return decodeInto(doc, &r.Secrets)
	case "v1 ConfigMap":
		return decodeInto(doc, &r.ConfigMaps)
	case "apps/v1 Deployment":
		return decodeInto(doc, &r.Deployments)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(doc, &r.PDBs)
	case "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration":
		return decodeInto(doc, &r.Mutating)
	case "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration":
		return decodeInto(doc, &r.Validating)
	case "cert-manager.io/v1 Issuer":
		return decodeInto(doc, &r.Issuers)
	case "cert-manager.io/v1 Certificate":
		return decodeInto(doc, &r.Certificates)
	case "monitoring.coreos.com/v1 PodMonitor":
		return decodeInto(doc, &r.PodMonitors)
	case "networking.k8s.io/v1 NetworkPolicy":
		return decodeInto(doc, &r.NetworkPolicies)
	default:
		// RBAC objects included: the webhook needs none (serviceaccount.yaml).
		return fmt.Errorf("unexpected object %q %q (add its type to chartRender and an invariant for it)", tm.APIVersion, tm.Kind)
	}
}

// renderChart runs `helm template` with args and decodes the output.
func renderChart(t *testing.T, args ...string) *chartRender {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRender(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return r
}

func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", chartRelease, chartDir, "--namespace", chartNamespace, "--kube-version", kubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func decodeRender(out []byte) (*chartRender, error) {
	r := &chartRender{}
	for i, doc := range docSeparator.Split(string(out), -1) {
		if isBlankYAML(doc) {
			continue
		}
		if err := r.decodeDocument([]byte(doc)); err != nil {
			return nil, fmt.Errorf("rendered document %d: %w", i+1, err)
		}
	}
	return r, nil
}

// chartInvariant is one property every rendering keeps.
type chartInvariant struct {
	name  string
	check func(r *chartRender) error
}

var chartInvariants = []chartInvariant{
	{"webhook-deployment", checkWebhookDeployment},
	{"webhook-hardening", checkWebhookHardening},
	{"webhook-args", checkWebhookArgs},
	{"webhook-configurations", checkWebhookConfigurations},
	{"webhook-certificates", checkWebhookCertificates},
	{"no-api-access", checkNoAPIAccess},
	{"default-policy", checkDefaultPolicy},
	{"pod-monitor", checkPodMonitor},
	{"network-policy", checkChartNetworkPolicy},
}

// checkChartNetworkPolicy: each NetworkPolicy the chart renders selects
// exactly the injected Pods by the label the webhook keeps on them
// (botbox.dev/injected=true, which an UPDATE may not remove), restricts
// egress, and lets TCP 443 out to public addresses only.
func checkChartNetworkPolicy(r *chartRender) error {
	var errs []error
	for _, np := range r.NetworkPolicies {
		at := np.Namespace + "/" + np.Name
		if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, map[string]string{inject.LabelInjected: "true"}) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
			errs = append(errs, fmt.Errorf("NetworkPolicy %s selects %v, want exactly %s=true", at, np.Spec.PodSelector, inject.LabelInjected))
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			errs = append(errs, fmt.Errorf("NetworkPolicy %s does not restrict egress", at))
		}
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if b := peer.IPBlock; b != nil && (b.CIDR == "0.0.0.0/0" && !slices.Contains(b.Except, "169.254.0.0/16") || b.CIDR == "::/0" && !slices.Contains(b.Except, "fe80::/10")) {
					errs = append(errs, fmt.Errorf("NetworkPolicy %s lets egress reach link-local (metadata) addresses", at))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func checkChart(r *chartRender) error {
	var errs []error
	for _, inv := range chartInvariants {
		if err := inv.check(r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", inv.name, err))
		}
	}
	return errors.Join(errs...)
}

// The renderings every invariant must hold for: certificates from the chart
// and from cert-manager (detected or forced), and every optional object on.
var chartVariants = []struct {
	name string
	args []string
}{
	{"defaults", nil},
	{"cert-manager detected", []string{"--api-versions", "cert-manager.io/v1"}},
	{"cert-manager present, helm forced", []string{"--api-versions", "cert-manager.io/v1", "--set", "certificates.source=helm"}},
	{"cert-manager forced", []string{"--set", "certificates.source=cert-manager"}},
	{"everything on", []string{"--api-versions", "cert-manager.io/v1", "--set", "defaultPolicy.enabled=true",
		"--set", "defaultPolicy.namespaces={agents,agents-2}", "--set", "podMonitor.enabled=true",
		"--set", "inject.placeholders=true", "--set", "image.digest=sha256:" + strings.Repeat("a", 64),
		"--set", "webhook.allowedImageRegistries={registry.example,docker.io}", "--set", "webhook.allowedCSIDrivers={secrets-store.csi.k8s.io}",
		"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.monitoringNamespace=monitoring"}},
	{"guard off, DNS servers", []string{"--set", "defaultPolicy.enabled=true", "--set", "defaultPolicy.namespaces={agents}",
		"--set", "inject.dnsGuard=false", "--set", "inject.dnsServers=10.96.0.10", "--set-string", "defaultPolicy.config=" + guardOffPolicy}},
}

// guardOffPolicy is a default policy without the DNS guard, for a chart
// rendered with inject.dnsGuard=false.
const guardOffPolicy = `listen_port: 8080
metrics_port: 9090
metrics_listen_addr: "0.0.0.0"
egress_policy:
  default_action: deny
  rules:
    - host: api.openai.com
      action: allow
https_interception:
  enabled: true
  listen_port: 8443
  ca_cert_path: /etc/botbox-ca/ca.crt
  ca_key_path: /etc/botbox-ca-key/ca.key
`

// TestChartSafeDefaults: the chart's defaults are the binary's. Rendered
// without values it passes no flag that weakens inject.DefaultOptions (IPv6
// and the DNS guard off, a port-53 allowlist), its values equal those
// defaults, and the default policy runs the guard where the init step
// redirects DNS.
func TestChartSafeDefaults(t *testing.T) {
	t.Parallel()
	r := renderChart(t, "--set", "defaultPolicy.enabled=true", "--set", "defaultPolicy.namespaces={agents}")
	_, c, err := webhookDeployment(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Args {
		for _, weak := range []string{"--ipv6=false", "--dns-guard=false", "--dns-servers"} {
			if strings.HasPrefix(a, weak) {
				t.Errorf("the default rendering passes %q", a)
			}
		}
	}
	flags, err := parseWebhookArgs(c)
	if err != nil {
		t.Fatal(err)
	}
	d := inject.DefaultOptions()
	if flags["--ipv6"] != strconv.FormatBool(d.IPv6) || flags["--dns-guard"] != strconv.FormatBool(d.DNSGuard) || !d.IPv6 || !d.DNSGuard {
		t.Errorf("webhook runs with --ipv6 %s --dns-guard %s; the binary's defaults are %v, %v and must be on", flags["--ipv6"], flags["--dns-guard"], d.IPv6, d.DNSGuard)
	}
	if err := checkDefaultPolicy(r); err != nil {
		t.Error(err)
	}
	if _, err := helmTemplate(t, "--set", "inject.dnsServers=10.96.0.10"); err == nil || !strings.Contains(err.Error(), "inject.dnsServers needs inject.dnsGuard=false") {
		t.Errorf("dnsServers with the guard on: %v, want a rendering error", err)
	}
}

func TestChartRendersValidObjects(t *testing.T) {
	t.Parallel()
	for _, v := range chartVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, v.args...)
			if err := checkChart(r); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChartCertificateSource: auto picks cert-manager exactly when its API
// is installed.
func TestChartCertificateSource(t *testing.T) {
	t.Parallel()
	if r := renderChart(t); len(r.Certificates) != 0 || len(r.Secrets) != 1 {
		t.Errorf("without cert-manager: %d Certificates, %d Secrets; want 0 and 1", len(r.Certificates), len(r.Secrets))
	}
	if r := renderChart(t, "--api-versions", "cert-manager.io/v1"); len(r.Certificates) != 2 || len(r.Issuers) != 2 || len(r.Secrets) != 0 {
		t.Errorf("with cert-manager: %d Certificates, %d Issuers, %d Secrets; want 2, 2, 0", len(r.Certificates), len(r.Issuers), len(r.Secrets))
	}
	r := renderChart(t, "--set", "podMonitor.enabled=true", "--set", "defaultPolicy.enabled=true", "--set", "defaultPolicy.namespaces={agents}")
	if len(r.PodMonitors) != 1 || len(r.ConfigMaps) != 1 {
		t.Errorf("optional objects: %d PodMonitors, %d ConfigMaps; want 1 and 1", len(r.PodMonitors), len(r.ConfigMaps))
	}
}

// TestChartRefusesBadValues: values that would break an invariant stop the
// rendering with a message naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "webhook.timeoutSeconds=10"}, "webhook.timeoutSeconds must be 1-5"},
		{[]string{"--set", "certificates.source=vault"}, "certificates.source must be auto, cert-manager or helm"},
		{[]string{"--set", "defaultPolicy.enabled=true"}, "defaultPolicy.enabled needs defaultPolicy.namespaces"},
	} {
		_, err := helmTemplate(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func webhookDeployment(r *chartRender) (*appsv1.Deployment, *corev1.Container, error) {
	if len(r.Deployments) != 1 {
		return nil, nil, fmt.Errorf("%d Deployments, want 1", len(r.Deployments))
	}
	d := r.Deployments[0]
	if len(d.Spec.Template.Spec.Containers) != 1 || len(d.Spec.Template.Spec.InitContainers) != 0 {
		return nil, nil, errors.New("the webhook Pod must have exactly one container and no init containers")
	}
	return d, &d.Spec.Template.Spec.Containers[0], nil
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

func checkWebhookDeployment(r *chartRender) error {
	d, c, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	var errs []error
	podLabels := d.Spec.Template.Labels
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		errs = append(errs, errors.New("replicas must be at least 2 (failurePolicy Fail: one replica down blocks every Pod)"))
	}
	if !selects(d.Spec.Selector, podLabels) {
		errs = append(errs, errors.New("the Deployment's selector does not match its Pod"))
	}
	if d.Namespace != chartNamespace {
		errs = append(errs, fmt.Errorf("Deployment in namespace %q, want the release namespace", d.Namespace))
	}
	anti := d.Spec.Template.Spec.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)+len(anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		errs = append(errs, errors.New("no pod anti-affinity: both replicas may land on one node"))
	} else {
		for _, w := range anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if !selects(w.PodAffinityTerm.LabelSelector, podLabels) || w.PodAffinityTerm.TopologyKey == "" {
				errs = append(errs, errors.New("anti-affinity term does not select the webhook's own Pods by a topology key"))
			}
		}
	}
	if len(r.PDBs) != 1 {
		errs = append(errs, fmt.Errorf("%d PodDisruptionBudgets, want 1", len(r.PDBs)))
	} else {
		pdb := r.PDBs[0]
		if !selects(pdb.Spec.Selector, podLabels) {
			errs = append(errs, errors.New("the PodDisruptionBudget does not select the webhook Pods"))
		}
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || d.Spec.Replicas != nil && pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
			errs = append(errs, errors.New("PodDisruptionBudget minAvailable must be at least 1 and below replicas (or nodes can never drain)"))
		}
	}
	if len(r.Services) != 1 {
		errs = append(errs, fmt.Errorf("%d Services, want 1", len(r.Services)))
	} else {
		svc := r.Services[0]
		if !selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, podLabels) {
			errs = append(errs, errors.New("the Service does not select the webhook Pods"))
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || !declaresPort(c, svc.Spec.Ports[0].TargetPort.IntValue(), svc.Spec.Ports[0].TargetPort.String()) {
			errs = append(errs, errors.New("the Service must expose 443 on a port the webhook container declares"))
		}
	}
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			errs = append(errs, fmt.Errorf("%s probe must be an HTTPS GET of /healthz", kind))
		}
	}
	return errors.Join(errs...)
}

func checkWebhookHardening(r *chartRender) error {
	d, c, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	var errs []error
	ps := d.Spec.Template.Spec
	if ps.HostNetwork || ps.HostPID || ps.HostIPC || (ps.ShareProcessNamespace != nil && *ps.ShareProcessNamespace) {
		errs = append(errs, errors.New("host namespaces or a shared PID namespace"))
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		errs = append(errs, errors.New("automountServiceAccountToken must be false: the webhook calls no API"))
	}
	if ps.SecurityContext == nil || ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, errors.New("Pod seccompProfile must be RuntimeDefault"))
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		errs = append(errs, errors.New("webhook container has no securityContext"))
	default:
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			errs = append(errs, errors.New("runAsNonRoot must be true"))
		}
		if sc.RunAsUser == nil || *sc.RunAsUser == 0 || *sc.RunAsUser == exemptUID {
			errs = append(errs, fmt.Errorf("runAsUser must be set, not root and not BotBox's exempt UID %d", exemptUID))
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			errs = append(errs, errors.New("readOnlyRootFilesystem must be true"))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			errs = append(errs, errors.New("allowPrivilegeEscalation must be false"))
		}
		if sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, errors.New("privileged"))
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			errs = append(errs, errors.New("capabilities must drop ALL and add none"))
		}
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			errs = append(errs, fmt.Errorf("no %s request", res))
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			errs = append(errs, fmt.Errorf("no %s limit", res))
		}
	}
	return errors.Join(errs...)
}

// webhookFlags are the options of `botbox-admission webhook`; value flags take the
// next argument.
var webhookFlags = map[string]bool{
	"--listen": true, "--tls-cert": true, "--tls-key": true, "--config-map": true, "--secret": true, "--image": true,
	"--dns-servers": true, "--allowed-image-registries": true, "--allowed-csi-drivers": true,
	"--interception": false, "--ipv6": false, "--dns-guard": false, "--placeholders": false,
}

// parseWebhookArgs returns the flags the webhook runs with: the bool
// flags the binary defaults to on (inject.DefaultOptions) start "true",
// and --name=false turns one off.
func parseWebhookArgs(c *corev1.Container) (map[string]string, error) {
	if !slices.Equal(c.Command, []string{"/botbox-admission"}) || len(c.Args) == 0 || c.Args[0] != "webhook" {
		return nil, fmt.Errorf("command %q args %q: want [/botbox-admission] with `webhook ...`", c.Command, c.Args)
	}
	d := inject.DefaultOptions()
	flags := map[string]string{"--ipv6": strconv.FormatBool(d.IPv6), "--dns-guard": strconv.FormatBool(d.DNSGuard)}
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		name, val, hasVal := strings.Cut(a, "=")
		takesValue, ok := webhookFlags[name]
		if !ok {
			return nil, fmt.Errorf("unknown webhook argument %q", a)
		}
		if hasVal {
			if !takesValue && val != "true" && val != "false" {
				return nil, fmt.Errorf("%s: want true or false", a)
			}
			flags[name] = val
			continue
		}
		if takesValue {
			if i+1 >= len(c.Args) {
				return nil, fmt.Errorf("%s without a value", a)
			}
			i++
			flags[a] = c.Args[i]
		} else {
			flags[a] = "true"
		}
	}
	return flags, nil
}

func checkWebhookArgs(r *chartRender) error {
	d, c, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	flags, err := parseWebhookArgs(c)
	if err != nil {
		return err
	}
	var errs []error
	if len(c.Ports) != 1 || flags["--listen"] != fmt.Sprintf(":%d", c.Ports[0].ContainerPort) {
		errs = append(errs, fmt.Errorf("--listen %q does not match the declared container port", flags["--listen"]))
	}
	for _, f := range []string{"--config-map", "--secret", "--image"} {
		if flags[f] == "" {
			errs = append(errs, fmt.Errorf("%s missing", f))
		}
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == webhookTLSMount {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		return errors.Join(append(errs, fmt.Errorf("no read-only mount at %s", webhookTLSMount))...)
	}
	for _, f := range []string{"--tls-cert", "--tls-key"} {
		if filepath.Dir(flags[f]) != webhookTLSMount {
			errs = append(errs, fmt.Errorf("%s %q is not in the TLS mount %s", f, flags[f], webhookTLSMount))
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.Secret == nil || v.Secret.SecretName == "" {
			errs = append(errs, errors.New("the TLS volume is not a Secret"))
			continue
		}
		var paths []string
		for _, it := range v.Secret.Items {
			paths = append(paths, filepath.Join(webhookTLSMount, it.Path))
		}
		if !slices.Contains(paths, flags["--tls-cert"]) || !slices.Contains(paths, flags["--tls-key"]) || len(paths) != 2 {
			errs = append(errs, fmt.Errorf("the TLS volume mounts %v; want exactly --tls-cert and --tls-key", paths))
		}
	}
	return errors.Join(errs...)
}

// webhookCommon is what both kinds of webhook share.
type webhookCommon struct {
	kind, name       string
	versions         []string
	sideEffects      *admissionv1.SideEffectClass
	failurePolicy    *admissionv1.FailurePolicyType
	timeout          *int32
	nsSelector       *metav1.LabelSelector
	objSelector      *metav1.LabelSelector
	rules            []admissionv1.RuleWithOperations
	client           admissionv1.WebhookClientConfig
	annotations      map[string]string
	wantPath         string
	wantSubresources []string
}

func webhooks(r *chartRender) []webhookCommon {
	var out []webhookCommon
	for _, m := range r.Mutating {
		for _, w := range m.Webhooks {
			out = append(out, webhookCommon{"MutatingWebhookConfiguration", w.Name, w.AdmissionReviewVersions, w.SideEffects, w.FailurePolicy,
				w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector, w.Rules, w.ClientConfig, m.Annotations, "/mutate", []string{"pods", "pods/ephemeralcontainers"}})
		}
	}
	for _, v := range r.Validating {
		for _, w := range v.Webhooks {
			out = append(out, webhookCommon{"ValidatingWebhookConfiguration", w.Name, w.AdmissionReviewVersions, w.SideEffects, w.FailurePolicy,
				w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector, w.Rules, w.ClientConfig, v.Annotations, "/validate", []string{"pods", "pods/ephemeralcontainers"}})
		}
	}
	return out
}

func checkWebhookConfigurations(r *chartRender) error {
	if len(r.Mutating) != 1 || len(r.Validating) != 1 {
		return fmt.Errorf("%d Mutating and %d Validating WebhookConfigurations, want one of each", len(r.Mutating), len(r.Validating))
	}
	if len(r.Mutating[0].Webhooks) != 1 || len(r.Validating[0].Webhooks) != 1 {
		return errors.New("each configuration must hold exactly one webhook")
	}
	var errs []error
	var svc *corev1.Service
	if len(r.Services) == 1 {
		svc = r.Services[0]
	}
	labelled := map[string]string{injectLabel: injectLabelOn, "kubernetes.io/metadata.name": "agents"}
	if p := r.Mutating[0].Webhooks[0].ReinvocationPolicy; p == nil || *p != admissionv1.IfNeededReinvocationPolicy {
		errs = append(errs, errors.New("the mutating webhook needs reinvocationPolicy: IfNeeded (the ServiceAccount plugin and other webhooks change the Pod after the patch)"))
	}
	var connect []string
	for _, rule := range r.Validating[0].Webhooks[0].Rules {
		if slices.Contains(rule.Operations, admissionv1.Connect) {
			connect = append(connect, rule.Resources...)
		}
	}
	for _, want := range []string{"pods/exec", "pods/attach", "pods/portforward"} {
		if !slices.Contains(connect, want) {
			errs = append(errs, fmt.Errorf("the validating webhook does not see CONNECT on %s: exec, attach or port-forward would reach BotBox's containers", want))
		}
	}
	for _, w := range webhooks(r) {
		at := w.kind + " " + w.name
		if !slices.Equal(w.versions, []string{"v1"}) {
			errs = append(errs, fmt.Errorf("%s: admissionReviewVersions %v, want [v1]", at, w.versions))
		}
		if w.sideEffects == nil || *w.sideEffects != admissionv1.SideEffectClassNone {
			errs = append(errs, fmt.Errorf("%s: sideEffects must be None", at))
		}
		if w.failurePolicy == nil || *w.failurePolicy != admissionv1.Fail {
			errs = append(errs, fmt.Errorf("%s: failurePolicy must be Fail (an unreachable webhook must not let Pods through uncontained)", at))
		}
		if w.timeout == nil || *w.timeout < 1 || *w.timeout > 5 {
			errs = append(errs, fmt.Errorf("%s: timeoutSeconds must be 1-5", at))
		}
		if w.objSelector != nil && (len(w.objSelector.MatchLabels) > 0 || len(w.objSelector.MatchExpressions) > 0) {
			errs = append(errs, fmt.Errorf("%s: an objectSelector would be a per-Pod opt-out", at))
		}
		if !selects(w.nsSelector, labelled) {
			errs = append(errs, fmt.Errorf("%s: namespaceSelector does not select a namespace labelled %s=%s", at, injectLabel, injectLabelOn))
		}
		if selects(w.nsSelector, map[string]string{"kubernetes.io/metadata.name": "agents"}) {
			errs = append(errs, fmt.Errorf("%s: namespaceSelector selects an unlabelled namespace", at))
		}
		if selects(w.nsSelector, map[string]string{injectLabel: injectLabelOn, "kubernetes.io/metadata.name": chartNamespace}) {
			errs = append(errs, fmt.Errorf("%s: namespaceSelector selects the webhook's own namespace (its Pods would wait for themselves)", at))
		}
		var create, update bool
		var resources []string
		for _, rule := range w.rules {
			if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.APIVersions, []string{"v1"}) {
				errs = append(errs, fmt.Errorf("%s: rule for groups %v versions %v, want core v1", at, rule.APIGroups, rule.APIVersions))
			}
			create = create || slices.Contains(rule.Operations, admissionv1.Create)
			update = update || slices.Contains(rule.Operations, admissionv1.Update)
			resources = append(resources, rule.Resources...)
		}
		if !create || !update {
			errs = append(errs, fmt.Errorf("%s: rules must cover CREATE and UPDATE", at))
		}
		for _, want := range w.wantSubresources {
			if !slices.Contains(resources, want) {
				errs = append(errs, fmt.Errorf("%s: rules do not cover %s", at, want))
			}
		}
		s := w.client.Service
		switch {
		case w.client.URL != nil:
			errs = append(errs, fmt.Errorf("%s: clientConfig.url: the webhook must be called through its Service", at))
		case s == nil || svc == nil:
			errs = append(errs, fmt.Errorf("%s: no clientConfig.service", at))
		case s.Name != svc.Name || s.Namespace != svc.Namespace || s.Path == nil || *s.Path != w.wantPath || s.Port == nil || *s.Port != svc.Spec.Ports[0].Port:
			errs = append(errs, fmt.Errorf("%s: clientConfig.service %s/%s path %v port %v, want %s/%s %s on the Service port", at, s.Namespace, s.Name, s.Path, s.Port, svc.Namespace, svc.Name, w.wantPath))
		}
	}
	return errors.Join(errs...)
}

// checkWebhookCertificates: the serving certificate the webhook mounts is
// the one the API server trusts through the caBundles, for the Service's
// DNS name — from cert-manager (Certificate + cainjector annotation) or from
// the chart (a Secret whose tls.crt verifies against the caBundle).
func checkWebhookCertificates(r *chartRender) error {
	d, _, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	var secretName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	host := fmt.Sprintf("%s.%s.svc", chartRelease, chartNamespace)
	var errs []error
	whs := webhooks(r)
	if len(r.Certificates) > 0 {
		var serving *certManagerCertificate
		for _, c := range r.Certificates {
			if c.Spec.SecretName == secretName {
				serving = c
			}
		}
		if serving == nil {
			return fmt.Errorf("no cert-manager Certificate writes the mounted Secret %q", secretName)
		}
		if serving.Spec.IsCA || !slices.Contains(serving.Spec.DNSNames, host) {
			errs = append(errs, fmt.Errorf("serving Certificate: isCA %v, dnsNames %v; want a leaf for %s", serving.Spec.IsCA, serving.Spec.DNSNames, host))
		}
		issuers := map[string]*certManagerIssuer{}
		for _, is := range r.Issuers {
			issuers[is.Metadata.Name] = is
		}
		if iss := issuers[serving.Spec.IssuerRef.Name]; serving.Spec.IssuerRef.Kind != "Issuer" || iss == nil || iss.Spec.CA == nil {
			errs = append(errs, errors.New("the serving Certificate must be issued by the chart's CA Issuer"))
		}
		want := serving.Metadata.Namespace + "/" + serving.Metadata.Name
		for _, w := range whs {
			if got := w.annotations["cert-manager.io/inject-ca-from"]; got != want {
				errs = append(errs, fmt.Errorf("%s: cert-manager.io/inject-ca-from %q, want %q", w.kind, got, want))
			}
			if len(w.client.CABundle) != 0 {
				errs = append(errs, fmt.Errorf("%s: a caBundle next to cainjector would be overwritten", w.kind))
			}
		}
		if len(r.Secrets) != 0 {
			errs = append(errs, errors.New("with cert-manager the chart must not render its own certificate Secret"))
		}
		return errors.Join(errs...)
	}
	var sec *corev1.Secret
	for _, s := range r.Secrets {
		if s.Name == secretName {
			sec = s
		}
	}
	if sec == nil {
		return fmt.Errorf("neither a cert-manager Certificate nor a Secret %q for the mounted certificate", secretName)
	}
	if sec.Type != corev1.SecretTypeTLS {
		errs = append(errs, fmt.Errorf("Secret %q has type %q, want kubernetes.io/tls", sec.Name, sec.Type))
	}
	pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("tls.crt and tls.key: %w", err))...)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		errs = append(errs, errors.New("ca.crt holds no certificate"))
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		errs = append(errs, fmt.Errorf("the serving certificate does not verify for %s against ca.crt: %w", host, err))
	}
	for _, w := range whs {
		if !bytes.Equal(w.client.CABundle, sec.Data["ca.crt"]) {
			errs = append(errs, fmt.Errorf("%s: caBundle is not the CA that signed the serving certificate", w.kind))
		}
		if _, ok := w.annotations["cert-manager.io/inject-ca-from"]; ok {
			errs = append(errs, fmt.Errorf("%s: cainjector annotation without cert-manager", w.kind))
		}
	}
	if block, _ := pem.Decode(sec.Data["ca.crt"]); block == nil || bytes.Contains(sec.Data["ca.crt"], []byte("PRIVATE KEY")) {
		errs = append(errs, errors.New("ca.crt must be a certificate and nothing else (no CA key in the cluster)"))
	}
	return errors.Join(errs...)
}

// checkNoAPIAccess: the webhook's ServiceAccount exists, mounts no token,
// and is the one the Pod uses (no Role or binding is rendered at all:
// decodeDocument refuses RBAC kinds).
func checkNoAPIAccess(r *chartRender) error {
	d, _, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	if len(r.ServiceAccounts) != 1 {
		return fmt.Errorf("%d ServiceAccounts, want 1", len(r.ServiceAccounts))
	}
	sa := r.ServiceAccounts[0]
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		return errors.New("ServiceAccount must set automountServiceAccountToken: false")
	}
	if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
		return fmt.Errorf("the webhook Pod runs as ServiceAccount %q, not the chart's %q", d.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	return nil
}

// checkDefaultPolicy: each default policy ConfigMap is the one the webhook
// injects (--config-map) and parses with BotBox's own parser, without
// warnings, with the admin port scrapable.
func checkDefaultPolicy(r *chartRender) error {
	_, c, err := webhookDeployment(r)
	if err != nil {
		return err
	}
	flags, err := parseWebhookArgs(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, cm := range r.ConfigMaps {
		if cm.Name != flags["--config-map"] {
			errs = append(errs, fmt.Errorf("ConfigMap %q is not the injected --config-map %q", cm.Name, flags["--config-map"]))
		}
		cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
		if err != nil {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err))
			continue
		}
		if len(cfg.Warnings) > 0 {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: config warnings %v", cm.Namespace, cm.Name, cfg.Warnings))
		}
		if cfg.MetricsListenAddr.IsLoopback() {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: metrics_listen_addr is loopback, the PodMonitor could not scrape it", cm.Namespace, cm.Name))
		}
		if cfg.Interception.Enabled != (flags["--interception"] == "true") {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: https_interception.enabled %v but --interception %q", cm.Namespace, cm.Name, cfg.Interception.Enabled, flags["--interception"]))
		}
		if guard := flags["--dns-guard"] == "true"; cfg.DNSGuard.Enabled != guard || guard && cfg.DNSGuard.ListenPort != inject.DNSGuardPort {
			errs = append(errs, fmt.Errorf("ConfigMap %s/%s: dns_guard enabled %v on port %d, but the webhook's --dns-guard is %q (port %d)", cm.Namespace, cm.Name, cfg.DNSGuard.Enabled, cfg.DNSGuard.ListenPort, flags["--dns-guard"], inject.DNSGuardPort))
		}
	}
	return errors.Join(errs...)
}

func checkPodMonitor(r *chartRender) error {
	var errs []error
	for _, pm := range r.PodMonitors {
		if !pm.Spec.NamespaceSelector.Any {
			errs = append(errs, errors.New("PodMonitor must look in every namespace (injected Pods live in the labelled ones)"))
		}
		if s, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector); err != nil || s.Empty() {
			errs = append(errs, errors.New("PodMonitor selector must not be empty (it would scrape every Pod)"))
		}
		if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
			errs = append(errs, errors.New("PodMonitor must scrape /metrics"))
			continue
		}
		if pm.Spec.PodMetricsEndpoints[0].PortNumber == nil {
			errs = append(errs, errors.New("PodMonitor must scrape a port number (the sidecar declares no named port)"))
			continue
		}
		port := *pm.Spec.PodMetricsEndpoints[0].PortNumber
		for _, cm := range r.ConfigMaps {
			if cfg, err := config.Parse([]byte(cm.Data["config.yaml"])); err == nil && int32(cfg.MetricsPort) != port {
				errs = append(errs, fmt.Errorf("PodMonitor scrapes port %d, the default policy's metrics_port is %d", port, cfg.MetricsPort))
			}
		}
	}
	return errors.Join(errs...)
}

// TestChartInvariantsCatch breaks each invariant on a copy of a real
// rendering and expects the checker to say so, so that none of them can
// pass vacuously.
func TestChartInvariantsCatch(t *testing.T) {
	t.Parallel()
	helmOut, err := helmTemplate(t, "--set", "defaultPolicy.enabled=true", "--set", "defaultPolicy.namespaces={agents}", "--set", "podMonitor.enabled=true", "--set", "networkPolicy.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	cmOut, err := helmTemplate(t, "--api-versions", "cert-manager.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	pod := func(r *chartRender) *corev1.PodSpec { return &r.Deployments[0].Spec.Template.Spec }
	ctr := func(r *chartRender) *corev1.Container { return &pod(r).Containers[0] }
	for _, tc := range []struct {
		name, want  string
		certManager bool
		mutate      func(r *chartRender)
	}{
		{"one replica", "replicas must be at least 2", false, func(r *chartRender) { one := int32(1); r.Deployments[0].Spec.Replicas = &one }},
		{"no anti-affinity", "no pod anti-affinity", false, func(r *chartRender) { pod(r).Affinity = nil }},
		{"pdb selects nothing", "PodDisruptionBudget does not select", false, func(r *chartRender) {
			r.PDBs[0].Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
		}},
		{"service wrong port", "must expose 443", false, func(r *chartRender) { r.Services[0].Spec.Ports[0].Port = 8443 }},
		{"root", "runAsUser must be set, not root", false, func(r *chartRender) { zero := int64(0); ctr(r).SecurityContext.RunAsUser = &zero }},
		{"exempt uid", "exempt UID", false, func(r *chartRender) { u := int64(exemptUID); ctr(r).SecurityContext.RunAsUser = &u }},
		{"writable root", "readOnlyRootFilesystem", false, func(r *chartRender) { f := false; ctr(r).SecurityContext.ReadOnlyRootFilesystem = &f }},
		{"escalation", "allowPrivilegeEscalation", false, func(r *chartRender) { tr := true; ctr(r).SecurityContext.AllowPrivilegeEscalation = &tr }},
		{"capability", "drop ALL and add none", false, func(r *chartRender) {
			ctr(r).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}},
		{"no limits", "no memory limit", false, func(r *chartRender) { delete(ctr(r).Resources.Limits, corev1.ResourceMemory) }},
		{"token", "automountServiceAccountToken must be false", false, func(r *chartRender) { pod(r).AutomountServiceAccountToken = nil }},
		{"host network", "host namespaces", false, func(r *chartRender) { pod(r).HostNetwork = true }},
		{"unknown flag", "unknown webhook argument", false, func(r *chartRender) { ctr(r).Args = append(ctr(r).Args, "--insecure") }},
		{"listen port", "does not match the declared container port", false, func(r *chartRender) { ctr(r).Ports[0].ContainerPort = 9443 }},
		{"tls key elsewhere", "not in the TLS mount", false, func(r *chartRender) {
			i := slices.Index(ctr(r).Args, "--tls-key")
			ctr(r).Args[i+1] = "/etc/key.pem"
		}},
		{"ignore", "failurePolicy must be Fail", false, func(r *chartRender) {
			ig := admissionv1.Ignore
			r.Validating[0].Webhooks[0].FailurePolicy = &ig
		}},
		{"slow", "timeoutSeconds must be 1-5", false, func(r *chartRender) { ten := int32(10); r.Mutating[0].Webhooks[0].TimeoutSeconds = &ten }},
		{"side effects", "sideEffects must be None", false, func(r *chartRender) {
			s := admissionv1.SideEffectClassSome
			r.Mutating[0].Webhooks[0].SideEffects = &s
		}},
		{"every namespace", "selects an unlabelled namespace", false, func(r *chartRender) {
			r.Validating[0].Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpExists}}}
		}},
		{"own namespace", "webhook's own namespace", false, func(r *chartRender) {
			r.Mutating[0].Webhooks[0].NamespaceSelector.MatchExpressions = nil
		}},
		{"opt-out", "per-Pod opt-out", false, func(r *chartRender) {
			r.Validating[0].Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"botbox.dev/skip": "false"}}
		}},
		{"create only", "CREATE and UPDATE", false, func(r *chartRender) {
			r.Validating[0].Webhooks[0].Rules[0].Operations = []admissionv1.OperationType{admissionv1.Create}
		}},
		{"no ephemeral", "pods/ephemeralcontainers", false, func(r *chartRender) {
			r.Validating[0].Webhooks[0].Rules[0].Resources = []string{"pods"}
		}},
		{"mutate no ephemeral", "MutatingWebhookConfiguration inject.botbox.dev: rules do not cover pods/ephemeralcontainers", false, func(r *chartRender) {
			r.Mutating[0].Webhooks[0].Rules[0].Resources = []string{"pods"}
		}},
		{"no connect", "CONNECT on pods/portforward", false, func(r *chartRender) {
			r.Validating[0].Webhooks[0].Rules = r.Validating[0].Webhooks[0].Rules[:1]
		}},
		{"no reinvocation", "reinvocationPolicy: IfNeeded", false, func(r *chartRender) {
			r.Mutating[0].Webhooks[0].ReinvocationPolicy = nil
		}},
		{"guard off in the policy", "dns_guard enabled false", false, func(r *chartRender) {
			r.ConfigMaps[0].Data["config.yaml"] = strings.Replace(r.ConfigMaps[0].Data["config.yaml"], "enabled: true\n  listen_port: 8053", "enabled: false\n  listen_port: 8053", 1)
		}},
		{"network policy on app label", "want exactly botbox.dev/injected=true", false, func(r *chartRender) {
			r.NetworkPolicies[0].Spec.PodSelector.MatchLabels = map[string]string{"app": "agent"}
		}},
		{"weakening flag", "dns_guard enabled true", false, func(r *chartRender) { ctr(r).Args = append(ctr(r).Args, "--dns-guard=false") }},
		{"wrong path", "path", false, func(r *chartRender) {
			p := "/validate"
			r.Mutating[0].Webhooks[0].ClientConfig.Service.Path = &p
		}},
		{"foreign ca", "caBundle is not the CA", false, func(r *chartRender) {
			r.Mutating[0].Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
		}},
		{"swapped key", "tls.crt and tls.key", false, func(r *chartRender) {
			s := r.Secrets[0]
			s.Data["tls.key"] = bytes.Replace(s.Data["tls.key"], []byte("KEY-----\n"), []byte("KEY-----\nAAAA"), 1)
		}},
		{"policy warns", "config warnings", false, func(r *chartRender) {
			r.ConfigMaps[0].Data["config.yaml"] = strings.Replace(r.ConfigMaps[0].Data["config.yaml"], "default_action: deny", "default_action: allow", 1)
		}},
		{"policy loopback metrics", "metrics_listen_addr is loopback", false, func(r *chartRender) {
			r.ConfigMaps[0].Data["config.yaml"] = strings.Replace(r.ConfigMaps[0].Data["config.yaml"], `metrics_listen_addr: "0.0.0.0"`, "", 1)
		}},
		{"policy other name", "is not the injected --config-map", false, func(r *chartRender) { r.ConfigMaps[0].Name = "other" }},
		{"podmonitor port", "PodMonitor scrapes port", false, func(r *chartRender) {
			p := int32(8080)
			r.PodMonitors[0].Spec.PodMetricsEndpoints[0].PortNumber = &p
		}},
		{"podmonitor any pod", "selector must not be empty", false, func(r *chartRender) { r.PodMonitors[0].Spec.Selector = metav1.LabelSelector{} }},
		{"no cainjector", "inject-ca-from", true, func(r *chartRender) { delete(r.Validating[0].Annotations, "cert-manager.io/inject-ca-from") }},
		{"leaf for another host", "want a leaf for", true, func(r *chartRender) {
			for _, c := range r.Certificates {
				c.Spec.DNSNames = []string{"example.com"}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := helmOut
			if tc.certManager {
				out = cmOut
			}
			r, err := decodeRender(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkChart(r); err != nil {
				t.Fatalf("unmodified rendering fails: %v", err)
			}
			tc.mutate(r)
			err = checkChart(r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// heredoc matches `cat > NAME <<'EOF'` or `kubectl ... apply -f - <<'EOF'`
// blocks in a shell example.
var heredoc = regexp.MustCompile(`(?s)<<'EOF'\n(.*?)\nEOF\n`)

// TestKubernetesDocExamples: the config.yaml that docs/kubernetes.md has
// the reader create parses with BotBox's parser without warnings and with
// the admin port scrapable, and its agent Deployment decodes strictly and
// runs as neither root nor the exempt UID.
func TestKubernetesDocExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := heredoc.FindAllStringSubmatch(string(data), -1)
	if len(blocks) != 2 {
		t.Fatalf("found %d heredoc examples, want 2 (config.yaml and the agent Deployment)", len(blocks))
	}
	cfg, err := config.Parse([]byte(blocks[0][1]))
	if err != nil {
		t.Fatalf("config.yaml example: %v", err)
	}
	if len(cfg.Warnings) > 0 || cfg.MetricsListenAddr.IsLoopback() || !cfg.Interception.Enabled {
		t.Errorf("config.yaml example: warnings %v, metrics_listen_addr %s, interception %v", cfg.Warnings, cfg.MetricsListenAddr, cfg.Interception.Enabled)
	}
	if !cfg.DNSGuard.Enabled || cfg.DNSGuard.ListenPort != inject.DNSGuardPort {
		t.Errorf("config.yaml example: dns_guard enabled %v on %d; the chart redirects port 53 to %d by default", cfg.DNSGuard.Enabled, cfg.DNSGuard.ListenPort, inject.DNSGuardPort)
	}
	var d appsv1.Deployment
	if err := decodeStrict([]byte(blocks[1][1]), &d); err != nil {
		t.Fatalf("agent Deployment example: %v", err)
	}
	psc := d.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 || *psc.RunAsUser == exemptUID {
		t.Error("agent Deployment example: the Pod must set a UID that is neither root nor 1337")
	}
}

// declaresPort reports whether container c declares the Service target port
// given by number n or, when n is 0, by name.
func declaresPort(c *corev1.Container, n int, name string) bool {
	for _, p := range c.Ports {
		if n != 0 && int(p.ContainerPort) == n || n == 0 && p.Name == name {
			return true
		}
	}
	return false
}

// TestChartDefaultPolicyConfigPassesCheck: the config.yaml the chart
// writes for defaultPolicy (values.yaml's defaultPolicy.config, rendered
// into every listed namespace) is what `botbox check` accepts without a
// warning, as the values README promises. The chart itself cannot run
// check on a --set-file value; the README says to run it first.
func TestChartDefaultPolicyConfigPassesCheck(t *testing.T) {
	t.Parallel()
	r := renderChart(t, "--set", "defaultPolicy.enabled=true", "--set", "defaultPolicy.namespaces={agents,agents-2}")
	if len(r.ConfigMaps) != 2 {
		t.Fatalf("%d ConfigMaps, want one per namespace", len(r.ConfigMaps))
	}
	for _, cm := range r.ConfigMaps {
		cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
		if err != nil {
			t.Errorf("%s/%s config.yaml: botbox check fails: %v", cm.Namespace, cm.Name, err)
			continue
		}
		for _, w := range cfg.Warnings {
			t.Errorf("%s/%s config.yaml: warning %s: %s", cm.Namespace, cm.Name, w.Path, w.Message)
		}
	}
}
