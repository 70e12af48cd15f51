package deploy_test

import (
	"errors"
	"fmt"
	"slices"

	"github.com/botbox/botbox/internal/inject"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Container roles, as the shared invariants recognise them.
const (
	nameCAInit       = inject.NameCAInit
	nameIPTablesInit = inject.NameInit
	nameBotBox       = inject.NameBotBox
)

// invariant is one property of the manifests a user relies on.
type invariant struct {
	id    string
	what  string
	check func(v *podView) error
}

// invariants is the list documented in docs/deploy.md ("What the tests
// guarantee"): the Pod-level ones are internal/inject's, the same code
// `botbox-admission inject` and `botbox-admission webhook` enforce (profile Manifest adds the
// hardening the example promises); the ones here need the other objects of
// the bundle (Namespace, ConfigMap, Secret, NetworkPolicy).
func invariants() []invariant {
	invs := []invariant{
		{"namespace", "one Namespace, one Deployment whose selector matches its Pod, every object in that namespace", checkNamespace},
	}
	for _, inv := range inject.Invariants() {
		id := inv.ID
		invs = append(invs, invariant{id, inv.What, func(v *podView) error { return v.podErrs[id] }})
	}
	return append(invs,
		invariant{"secrets-wiring", "the Secret is mounted (without subPath) at secrets_dir and holds every secret_ref", checkSecretsWiring},
		invariant{"config-parses", "the ConfigMap's config.yaml, found through botbox's --config and mounts, parses and validates without warnings", checkConfigParses},
		invariant{"config-matches-netfilter", "config and init environment agree: interception switch, ports, dual-stack listeners when IPv6 rules are on, the DNS guard on both sides (or BOTBOX_DNS_SERVERS: no port 53 to any host)", checkConfigMatchesNetfilter},
		invariant{"network-policy", "a NetworkPolicy with Egress selects the Pod", checkNetworkPolicy},
	)
}

// checkAll runs every invariant; each error starts with the invariant's id.
func checkAll(b *bundle) []error {
	v := newPodView(b)
	var errs []error
	for _, inv := range invariants() {
		if err := inv.check(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", inv.id, err))
		}
	}
	return errs
}

// ---- the invariants that need more than the Pod ----------------------------

func checkNamespace(v *podView) error {
	b := v.b
	if len(b.Namespaces) != 1 {
		return fmt.Errorf("%d Namespace objects, want 1", len(b.Namespaces))
	}
	if len(b.Deployments) != 1 {
		return fmt.Errorf("%d Deployments, want 1", len(b.Deployments))
	}
	ns := b.Namespaces[0].Name
	var errs []error
	metas := []*metav1.ObjectMeta{&b.Deployments[0].ObjectMeta}
	for _, o := range b.Secrets {
		metas = append(metas, &o.ObjectMeta)
	}
	for _, o := range b.ConfigMaps {
		metas = append(metas, &o.ObjectMeta)
	}
	for _, o := range b.NetworkPolicies {
		metas = append(metas, &o.ObjectMeta)
	}
	for _, m := range metas {
		if m.Namespace != ns {
			errs = append(errs, fmt.Errorf("%q is in namespace %q, want %q", m.Name, m.Namespace, ns))
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(v.dep.Spec.Selector)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("deployment selector: %w", err))
	case sel.Empty() || !sel.Matches(labels.Set(v.dep.Spec.Template.Labels)):
		errs = append(errs, fmt.Errorf("deployment selector %q does not match the Pod labels %v", sel, v.dep.Spec.Template.Labels))
	}
	return errors.Join(errs...)
}

func checkSecretsWiring(v *podView) error {
	vol, err := inject.SecretsVolume(v.spec, v.layout, v.cfgErr)
	if err != nil {
		return err
	}
	var errs []error
	var secret *corev1.Secret
	for _, s := range v.b.Secrets {
		if s.Name == vol.Secret.SecretName {
			secret = s
		}
	}
	if secret == nil {
		return errors.Join(append(errs, fmt.Errorf("no Secret %q in the manifests", vol.Secret.SecretName))...)
	}
	keys := map[string]bool{}
	for k := range secret.StringData {
		keys[k] = true
	}
	for k := range secret.Data {
		keys[k] = true
	}
	if len(vol.Secret.Items) > 0 {
		projected := map[string]bool{}
		for _, it := range vol.Secret.Items {
			if keys[it.Key] {
				projected[it.Path] = true
			}
		}
		keys = projected
	}
	for _, ref := range v.cfg.RequiredSecretRefs() {
		if !keys[ref] {
			errs = append(errs, fmt.Errorf("secret_ref %q is not a file of Secret %q as mounted: /healthz would stay 503", ref, secret.Name))
		}
	}
	return errors.Join(errs...)
}

func checkConfigParses(v *podView) error {
	if v.cfgErr != nil {
		return v.cfgErr
	}
	var errs []error
	for _, w := range v.cfg.Warnings {
		errs = append(errs, fmt.Errorf("config warning %s: %s", w.Path, w.Message))
	}
	return errors.Join(errs...)
}

func checkConfigMatchesNetfilter(v *podView) error {
	if v.cfg == nil {
		return fmt.Errorf("config: %w", v.cfgErr)
	}
	if v.netfilterErr != nil {
		return fmt.Errorf("iptables-init environment: %w", v.netfilterErr)
	}
	cfg, nf := v.cfg, v.netfilter
	var errs []error
	switch {
	case cfg.Interception.Enabled && !nf.HTTPSInterception:
		errs = append(errs, errors.New("https_interception.enabled but BOTBOX_ENABLE_HTTPS_INTERCEPTION is not \"1\": port 443 is dropped, not redirected"))
	case !cfg.Interception.Enabled && nf.HTTPSInterception:
		errs = append(errs, errors.New("BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 but https_interception is not enabled: redirected HTTPS finds no listener"))
	}
	if nf.ProxyPort != cfg.ListenPort {
		errs = append(errs, fmt.Errorf("BOTBOX_PROXY_PORT %d != listen_port %d", nf.ProxyPort, cfg.ListenPort))
	}
	if nf.MetricsPort != cfg.MetricsPort {
		errs = append(errs, fmt.Errorf("BOTBOX_METRICS_PORT %d != metrics_port %d: the port-squat rules would guard the wrong port", nf.MetricsPort, cfg.MetricsPort))
	}
	if cfg.Interception.Enabled && nf.HTTPSInterceptionPort != cfg.Interception.ListenPort {
		errs = append(errs, fmt.Errorf("BOTBOX_HTTPS_INTERCEPTION_PORT %d != https_interception.listen_port %d", nf.HTTPSInterceptionPort, cfg.Interception.ListenPort))
	}
	switch {
	case nf.DNSGuardPort != 0 && !cfg.DNSGuard.Enabled:
		errs = append(errs, fmt.Errorf("BOTBOX_DNS_GUARD_PORT=%d but dns_guard is not enabled: every DNS query of the app is dropped", nf.DNSGuardPort))
	case nf.DNSGuardPort != 0 && nf.DNSGuardPort != cfg.DNSGuard.ListenPort:
		errs = append(errs, fmt.Errorf("BOTBOX_DNS_GUARD_PORT %d != dns_guard.listen_port %d", nf.DNSGuardPort, cfg.DNSGuard.ListenPort))
	case nf.DNSGuardPort == 0 && cfg.DNSGuard.Enabled:
		errs = append(errs, errors.New("dns_guard is enabled but BOTBOX_DNS_GUARD_PORT is not set: the app's DNS never reaches the guard"))
	case nf.DNSGuardPort == 0 && len(nf.DNSServers) == 0:
		errs = append(errs, errors.New("neither BOTBOX_DNS_GUARD_PORT nor BOTBOX_DNS_SERVERS: the app may send UDP and TCP to port 53 of any host"))
	}
	if nf.IPv6 {
		if cfg.ListenAddrExplicit {
			errs = append(errs, fmt.Errorf("BOTBOX_ENABLE_IPV6=1 but listen_addr is set (%s): leave it at the default so BotBox also listens on ::1, where ip6tables redirects", cfg.ListenAddr))
		}
		if cfg.Interception.Enabled && cfg.Interception.ListenAddrExplicit {
			errs = append(errs, fmt.Errorf("BOTBOX_ENABLE_IPV6=1 but https_interception.listen_addr is set (%s): leave it at the default", cfg.Interception.ListenAddr))
		}
	}
	return errors.Join(errs...)
}

func checkNetworkPolicy(v *podView) error {
	if v.dep == nil {
		return errors.New("no Deployment")
	}
	podLabels := labels.Set(v.dep.Spec.Template.Labels)
	for _, np := range v.b.NetworkPolicies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		if slices.Contains(np.Spec.PolicyTypes, "Egress") {
			return nil
		}
	}
	return errors.New("no NetworkPolicy with policyTypes Egress selects the Pod (second layer, also covering the exempt UID)")
}
