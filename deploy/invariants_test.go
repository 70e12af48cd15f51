package deploy_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/botbox/botbox/internal/netfilter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Container roles are recognised by name.
const (
	nameCAInit       = "ca-init"
	nameIPTablesInit = "iptables-init"
	nameBotBox       = "botbox"
)

// Kubernetes defaults.
const (
	defaultGracePeriod = 30 * time.Second
	defaultSecretMode  = 0o644
	// defaultMetricsPort and defaultProxyPort stand in when the config does not parse.
	defaultMetricsPort = 9090
	defaultProxyPort   = 8080
)

// netfilterEnv is every variable `botbox netfilter install` reads.
var netfilterEnv = []string{
	netfilter.EnvUID, netfilter.EnvProxyPort, netfilter.EnvRedirectFromPort,
	netfilter.EnvHTTPSInterception, netfilter.EnvHTTPSInterceptionPort, netfilter.EnvIPv6,
	netfilter.EnvNATChain, netfilter.EnvFilterChain, netfilter.EnvWaitSeconds,
	netfilter.EnvDNSServers, netfilter.EnvDropICMP, netfilter.EnvMetricsPort, netfilter.EnvReject,
	netfilter.EnvDNSGuardPort,
}

// trustEnv are the variables through which common runtimes trust an extra CA
// file (docs/deploy.md, "App-side trust").
var trustEnv = []string{"CURL_CA_BUNDLE", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE"}

// invariant is one property of the Pod a user relies on.
type invariant struct {
	id    string
	what  string
	check func(v *podView) error
}

// invariants is the list documented in docs/deploy.md ("What the tests guarantee").
func invariants() []invariant {
	return []invariant{
		{"namespace", "one Namespace, one Deployment whose selector matches its Pod, every object in that namespace", checkNamespace},
		{"pod-isolation", "no host namespaces, no shared PID namespace, no service account token", checkPodIsolation},
		{"init-order", "iptables-init runs to completion before BotBox, which is a native sidecar (restartPolicy Always); no sidecar starts before the rules", checkInitOrder},
		{"app-uid", "no container other than BotBox's own runs as the exempt UID; the Pod default is not it; apps are non-root", checkAppUID},
		{"exempt-uid", "BotBox runs as BOTBOX_UID, and only containers of the BotBox image do", checkExemptUID},
		{"capabilities", "NET_ADMIN/NET_RAW only on iptables-init (NET_RAW anywhere else is a complete bypass); every container drops ALL, is unprivileged, cannot escalate", checkCapabilities},
		{"botbox-hardening", "BotBox containers: read-only root filesystem, runAsNonRoot", checkBotBoxHardening},
		{"ipv6-decided", "BOTBOX_ENABLE_IPV6 is set literally to 0 or 1 on iptables-init", checkIPv6Decided},
		{"netfilter-env", "iptables-init's BOTBOX_* variables are known, literal, valid and not in conflict", checkNetfilterEnv},
		{"ca-key-isolation", "the CA key is on its own tmpfs/Secret volume, mounted only into BotBox and ca-init, where ca-init writes it", checkCAKeyIsolation},
		{"ca-readonly", "CA volumes are read-only everywhere except in ca-init", checkCAReadOnly},
		{"app-trusts-ca", "with interception, every app container mounts the CA certificate and a trust variable points at it", checkAppTrustsCA},
		{"secrets-isolation", "the credential Secret is mounted only into BotBox, readable by its UID", checkSecretsIsolation},
		{"secrets-wiring", "the Secret is mounted (without subPath) at secrets_dir and holds every secret_ref", checkSecretsWiring},
		{"probe-key", "BotBox has BOTBOX_PROBE_KEY_FILE on a writable emptyDir mounted into no other container, so its probes authenticate BotBox and a port squatter never passes", checkProbeKey},
		{"probes", "BotBox has exec startup and readiness probes on the loopback health port; no httpGet/tcpSocket/grpc probe targets a loopback-only port", checkProbes},
		{"config-parses", "the ConfigMap's config.yaml, found through botbox's --config and mounts, parses and validates without warnings", checkConfigParses},
		{"config-matches-netfilter", "config and init environment agree: interception switch, ports, dual-stack listeners when IPv6 rules are on", checkConfigMatchesNetfilter},
		{"grace-period", "terminationGracePeriodSeconds exceeds BotBox's shutdown deadline", checkGracePeriod},
		{"network-policy", "a NetworkPolicy with Egress selects the Pod", checkNetworkPolicy},
	}
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

// ---- the invariants --------------------------------------------------------

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

func checkPodIsolation(v *podView) error {
	s := v.spec
	var errs []error
	if s.HostNetwork {
		errs = append(errs, errors.New("hostNetwork: the init step would rewrite the node's netfilter rules and the app would share the node's network"))
	}
	if s.HostPID || s.HostIPC {
		errs = append(errs, errors.New("hostPID/hostIPC must be false"))
	}
	if isTrue(s.ShareProcessNamespace) {
		errs = append(errs, errors.New("shareProcessNamespace: the app would see BotBox's processes"))
	}
	if !isFalse(s.AutomountServiceAccountToken) {
		errs = append(errs, errors.New("automountServiceAccountToken must be false: the agent gets no Kubernetes API credential"))
	}
	return errors.Join(errs...)
}

func checkInitOrder(v *podView) error {
	idx := map[string]int{}
	for i, c := range v.spec.InitContainers {
		idx[c.Name] = i
	}
	ipt, ok := idx[nameIPTablesInit]
	if !ok {
		return errors.New("no iptables-init init container: nothing installs the egress rules")
	}
	var errs []error
	if v.spec.InitContainers[ipt].RestartPolicy != nil {
		errs = append(errs, errors.New("iptables-init must run to completion (no restartPolicy)"))
	}
	for i, c := range v.spec.InitContainers[:ipt] {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			errs = append(errs, fmt.Errorf("sidecar %q (init container %d) starts before iptables-init installs the rules", c.Name, i))
		}
	}
	bb, ok := idx[nameBotBox]
	switch {
	case !ok && slices.ContainsFunc(v.spec.Containers, func(c corev1.Container) bool { return c.Name == nameBotBox }):
		errs = append(errs, errors.New("botbox is a regular container; make it a native sidecar (an init container with restartPolicy: Always) so it starts before the app and stops after it"))
	case !ok:
		errs = append(errs, errors.New("no botbox container"))
	default:
		c := v.spec.InitContainers[bb]
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			errs = append(errs, errors.New("botbox init container needs restartPolicy: Always (native sidecar), or the Pod never starts its app"))
		}
		if bb < ipt {
			errs = append(errs, errors.New("botbox starts before iptables-init"))
		}
		if ca, ok := idx[nameCAInit]; ok {
			if ca > bb {
				errs = append(errs, errors.New("ca-init runs after botbox, which needs the CA at start"))
			}
			if v.spec.InitContainers[ca].RestartPolicy != nil {
				errs = append(errs, errors.New("ca-init must run to completion (no restartPolicy)"))
			}
		}
	}
	return errors.Join(errs...)
}

func checkAppUID(v *podView) error {
	exempt := v.exemptUID()
	var errs []error
	if v.spec.SecurityContext != nil && v.spec.SecurityContext.RunAsUser != nil && *v.spec.SecurityContext.RunAsUser == exempt {
		errs = append(errs, fmt.Errorf("the Pod's default runAsUser is %d, the UID the egress rules exempt", exempt))
	}
	for _, c := range v.containers() {
		if isBotBoxRole(c) {
			continue
		}
		uid := v.effectiveUID(c)
		switch {
		case uid == nil:
			errs = append(errs, fmt.Errorf("container %q: runAsUser not set (the image's USER would decide; it must never be %d)", c.Name, exempt))
		case *uid == exempt:
			errs = append(errs, fmt.Errorf("container %q runs as UID %d, which the egress rules exempt: its traffic bypasses BotBox", c.Name, exempt))
		case c.Name != nameIPTablesInit && *uid == 0:
			errs = append(errs, fmt.Errorf("container %q runs as root", c.Name))
		}
		if c.Name != nameIPTablesInit && !v.effectiveNonRoot(c) {
			errs = append(errs, fmt.Errorf("container %q: runAsNonRoot must be true", c.Name))
		}
	}
	return errors.Join(errs...)
}

func checkExemptUID(v *podView) error {
	exempt := v.exemptUID()
	if v.botbox == nil {
		return errors.New("no botbox container")
	}
	var errs []error
	if uid := v.effectiveUID(v.botbox); uid == nil || *uid != exempt {
		errs = append(errs, fmt.Errorf("botbox must run as BOTBOX_UID %d, or its own upstream connections are redirected back to itself and dropped", exempt))
	}
	for _, c := range v.containers() {
		if uid := v.effectiveUID(c); uid != nil && *uid == exempt && (!isBotBoxRole(c) || c.Image != v.botbox.Image) {
			errs = append(errs, fmt.Errorf("container %q (image %q) runs as the exempt UID %d; only BotBox's own image may", c.Name, c.Image, exempt))
		}
	}
	return errors.Join(errs...)
}

func normCap(c corev1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

func checkCapabilities(v *podView) error {
	var errs []error
	for _, c := range v.containers() {
		sc := c.SecurityContext
		if sc == nil {
			errs = append(errs, fmt.Errorf("container %q has no securityContext", c.Name))
			continue
		}
		if isTrue(sc.Privileged) {
			errs = append(errs, fmt.Errorf("container %q is privileged", c.Name))
		}
		if !isFalse(sc.AllowPrivilegeEscalation) {
			errs = append(errs, fmt.Errorf("container %q: allowPrivilegeEscalation must be false", c.Name))
		}
		var drop, add []string
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				drop = append(drop, normCap(d))
			}
			for _, a := range sc.Capabilities.Add {
				add = append(add, normCap(a))
			}
		}
		if !slices.Contains(drop, "ALL") {
			errs = append(errs, fmt.Errorf("container %q must drop ALL capabilities", c.Name))
		}
		if c.Name == nameIPTablesInit {
			if !slices.Contains(add, "NET_ADMIN") {
				errs = append(errs, errors.New("iptables-init needs NET_ADMIN"))
			}
			for _, a := range add {
				if a != "NET_ADMIN" && a != "NET_RAW" {
					errs = append(errs, fmt.Errorf("iptables-init adds %s; only NET_ADMIN and NET_RAW are needed", a))
				}
			}
		} else if slices.Contains(add, "NET_RAW") {
			errs = append(errs, fmt.Errorf("container %q adds NET_RAW: AF_PACKET frames skip netfilter, a complete bypass of the egress rules; only iptables-init may", c.Name))
		} else if len(add) > 0 {
			errs = append(errs, fmt.Errorf("container %q adds capabilities %v; only iptables-init may (NET_ADMIN lets a process rewrite the egress rules)", c.Name, add))
		}
	}
	return errors.Join(errs...)
}

func checkBotBoxHardening(v *podView) error {
	var errs []error
	for _, c := range []*corev1.Container{v.botbox, v.caInit} {
		if c == nil {
			continue
		}
		if c.SecurityContext == nil || !isTrue(c.SecurityContext.ReadOnlyRootFilesystem) {
			errs = append(errs, fmt.Errorf("container %q: readOnlyRootFilesystem must be true", c.Name))
		}
		if !v.effectiveNonRoot(c) {
			errs = append(errs, fmt.Errorf("container %q: runAsNonRoot must be true", c.Name))
		}
	}
	if v.botbox == nil {
		errs = append(errs, errors.New("no botbox container"))
	}
	return errors.Join(errs...)
}

// checkProbeKey: `botbox probe` proves BotBox answered with the per-start
// key BotBox writes at start; the key must be writable by BotBox under a
// read-only root filesystem and readable by no other container.
func checkProbeKey(v *podView) error {
	if v.botbox == nil {
		return errors.New("no botbox container")
	}
	var file string
	for _, e := range v.botbox.Env {
		if e.Name == "BOTBOX_PROBE_KEY_FILE" {
			if e.ValueFrom != nil {
				return errors.New("BOTBOX_PROBE_KEY_FILE must be a literal value")
			}
			file = e.Value
		}
	}
	if file == "" || !path.IsAbs(file) {
		return fmt.Errorf("botbox: BOTBOX_PROBE_KEY_FILE must be an absolute path (got %q): the default /tmp is not writable under readOnlyRootFilesystem", file)
	}
	m, rel, ok := mountFor(v.botbox, file)
	if !ok || rel == "" {
		return fmt.Errorf("botbox: BOTBOX_PROBE_KEY_FILE %q is on no volume of the botbox container", file)
	}
	if m.ReadOnly {
		return fmt.Errorf("botbox: the volume %q holding the probe key is mounted read-only", m.Name)
	}
	vol := v.volume(m.Name)
	if vol == nil || vol.EmptyDir == nil {
		return fmt.Errorf("botbox: the probe key volume %q must be an emptyDir (per Pod, never shared with another workload)", m.Name)
	}
	for c := range v.mountsOf(m.Name) {
		if c != v.botbox {
			return fmt.Errorf("container %q mounts the probe key volume %q: only botbox may read the key", c.Name, m.Name)
		}
	}
	return nil
}

func checkIPv6Decided(v *podView) error {
	if v.iptablesInit == nil {
		return errors.New("no iptables-init container")
	}
	for _, e := range v.iptablesInit.Env {
		if e.Name != "BOTBOX_ENABLE_IPV6" {
			continue
		}
		if e.ValueFrom != nil {
			return errors.New("BOTBOX_ENABLE_IPV6 must be a literal value, visible in the manifest")
		}
		if e.Value != "0" && e.Value != "1" {
			return fmt.Errorf("BOTBOX_ENABLE_IPV6=%q, want \"0\" or \"1\"", e.Value)
		}
		return nil
	}
	return errors.New("BOTBOX_ENABLE_IPV6 is not set on iptables-init (required; \"1\" on dual-stack clusters)")
}

func checkNetfilterEnv(v *podView) error {
	c := v.iptablesInit
	if c == nil {
		return errors.New("no iptables-init container")
	}
	var errs []error
	if len(c.EnvFrom) > 0 {
		errs = append(errs, errors.New("iptables-init uses envFrom: its rules would depend on values no review sees"))
	}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "BOTBOX_") {
			continue
		}
		if !slices.Contains(netfilterEnv, e.Name) {
			errs = append(errs, fmt.Errorf("unknown variable %s (a typo leaves the default in force)", e.Name))
		}
		if e.ValueFrom != nil {
			errs = append(errs, fmt.Errorf("%s must be a literal value", e.Name))
		}
	}
	// The parser `botbox netfilter install` itself runs: every value valid,
	// the interception/443 conflict refused, as the init container would.
	if v.netfilterErr != nil {
		errs = append(errs, fmt.Errorf("botbox netfilter install would refuse this environment: %w", v.netfilterErr))
	} else if v.netfilter.UID == 0 {
		errs = append(errs, errors.New("BOTBOX_UID=0 exempts every root process"))
	}
	return errors.Join(errs...)
}

// caVolumes returns the volumes holding the CA key and certificate, as
// BotBox mounts them, and the files' paths inside those volumes.
func (v *podView) caVolumes() (keyVol, keyRel, certVol, certRel string, err error) {
	if v.cfg == nil {
		return "", "", "", "", fmt.Errorf("config: %w", v.cfgErr)
	}
	if v.botbox == nil {
		return "", "", "", "", errors.New("no botbox container")
	}
	km, keyRel, ok := mountFor(v.botbox, v.cfg.Interception.CAKeyPath)
	if !ok {
		return "", "", "", "", fmt.Errorf("ca_key_path %s is on no volume mounted into botbox", v.cfg.Interception.CAKeyPath)
	}
	cm, certRel, ok := mountFor(v.botbox, v.cfg.Interception.CACertPath)
	if !ok {
		return "", "", "", "", fmt.Errorf("ca_cert_path %s is on no volume mounted into botbox", v.cfg.Interception.CACertPath)
	}
	return km.Name, keyRel, cm.Name, certRel, nil
}

func checkCAKeyIsolation(v *podView) error {
	if v.cfg != nil && !v.cfg.Interception.Enabled {
		return nil
	}
	keyVol, keyRel, certVol, certRel, err := v.caVolumes()
	if err != nil {
		return err
	}
	var errs []error
	if keyVol == certVol {
		errs = append(errs, fmt.Errorf("CA key and certificate share volume %q: whoever gets the certificate gets the key", keyVol))
	}
	for c := range v.mountsOf(keyVol) {
		if !isBotBoxRole(c) {
			errs = append(errs, fmt.Errorf("container %q mounts the CA key volume %q", c.Name, keyVol))
		}
	}
	switch vol := v.volume(keyVol); {
	case vol == nil:
		errs = append(errs, fmt.Errorf("no volume %q", keyVol))
	case vol.Secret != nil:
	case vol.EmptyDir != nil && vol.EmptyDir.Medium == corev1.StorageMediumMemory:
	default:
		errs = append(errs, fmt.Errorf("CA key volume %q must be an emptyDir with medium Memory (the key never reaches the node's disk) or a Secret", keyVol))
	}
	if c := v.caInit; c != nil {
		for _, f := range []struct{ flag, vol, rel string }{{"key-out", keyVol, keyRel}, {"cert-out", certVol, certRel}} {
			p, ok := flagValue(c.Args, f.flag)
			if !ok {
				errs = append(errs, fmt.Errorf("ca-init args %q: no --%s", c.Args, f.flag))
				continue
			}
			m, rel, ok := mountFor(c, p)
			if !ok || m.Name != f.vol || rel != f.rel {
				errs = append(errs, fmt.Errorf("ca-init --%s %s is not where botbox reads it (volume %q, file %q)", f.flag, p, f.vol, f.rel))
			}
		}
	}
	return errors.Join(errs...)
}

func checkCAReadOnly(v *podView) error {
	if v.cfg != nil && !v.cfg.Interception.Enabled {
		return nil
	}
	keyVol, _, certVol, _, err := v.caVolumes()
	if err != nil {
		return err
	}
	var errs []error
	for _, vol := range []string{keyVol, certVol} {
		for c, m := range v.mountsOf(vol) {
			if c.Name != nameCAInit && !m.ReadOnly {
				errs = append(errs, fmt.Errorf("container %q mounts CA volume %q writable", c.Name, vol))
			}
		}
	}
	return errors.Join(errs...)
}

func checkAppTrustsCA(v *podView) error {
	if v.cfg != nil && !v.cfg.Interception.Enabled {
		return nil
	}
	_, _, certVol, certRel, err := v.caVolumes()
	if err != nil {
		return err
	}
	var errs []error
	for i := range v.spec.Containers {
		c := &v.spec.Containers[i]
		want := inContainerPath(c, certVol, certRel)
		if want == "" {
			errs = append(errs, fmt.Errorf("app container %q does not mount the CA certificate (volume %q)", c.Name, certVol))
			continue
		}
		found := false
		for _, e := range c.Env {
			if !slices.Contains(trustEnv, e.Name) {
				continue
			}
			if e.Value != want {
				errs = append(errs, fmt.Errorf("app container %q: %s=%q, but the CA certificate is at %s", c.Name, e.Name, e.Value, want))
				continue
			}
			found = true
		}
		if !found {
			errs = append(errs, fmt.Errorf("app container %q sets none of %v to %s", c.Name, trustEnv, want))
		}
	}
	return errors.Join(errs...)
}

// secretsVolume is the volume BotBox's secrets_dir is mounted from.
func (v *podView) secretsVolume() (*corev1.Volume, error) {
	if v.cfg == nil {
		return nil, fmt.Errorf("config: %w", v.cfgErr)
	}
	if v.botbox == nil {
		return nil, errors.New("no botbox container")
	}
	m, rel, ok := mountFor(v.botbox, v.cfg.SecretsDir)
	if ok && m.SubPath != "" {
		return nil, errors.New("secrets are mounted with subPath, which never receives updates: rotation would need a restart")
	}
	if !ok || rel != "" {
		return nil, fmt.Errorf("secrets_dir %s is not a volume mount point in botbox", v.cfg.SecretsDir)
	}
	vol := v.volume(m.Name)
	if vol == nil || vol.Secret == nil {
		return nil, fmt.Errorf("secrets_dir %s: volume %q is not a Secret volume", v.cfg.SecretsDir, m.Name)
	}
	return vol, nil
}

func checkSecretsIsolation(v *podView) error {
	vol, err := v.secretsVolume()
	if err != nil {
		return err
	}
	var errs []error
	for c := range v.mountsOf(vol.Name) {
		if c.Name != nameBotBox {
			errs = append(errs, fmt.Errorf("container %q mounts the credential Secret volume %q", c.Name, vol.Name))
		}
	}
	// Secret files are owned by root. Without an fsGroup, UID 1337 reads them
	// only through the "other" bits (with one, kubelet adds group read).
	hasFSGroup := v.spec.SecurityContext != nil && v.spec.SecurityContext.FSGroup != nil
	mode := int32(defaultSecretMode)
	if vol.Secret.DefaultMode != nil {
		mode = *vol.Secret.DefaultMode
	}
	modes := []int32{mode}
	for _, it := range vol.Secret.Items {
		if it.Mode != nil {
			modes = append(modes, *it.Mode)
		}
	}
	for _, m := range modes {
		if m&0o004 == 0 && !hasFSGroup {
			errs = append(errs, fmt.Errorf("Secret volume %q: mode %#o without a Pod fsGroup leaves the root-owned files unreadable for UID %d; BotBox would never become ready", vol.Name, m, v.exemptUID()))
		}
	}
	return errors.Join(errs...)
}

func checkSecretsWiring(v *podView) error {
	vol, err := v.secretsVolume()
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

// loopbackPorts are BotBox's listeners; none is reachable from the kubelet.
func (v *podView) loopbackPorts() map[int]string {
	ports := map[int]string{defaultProxyPort: "listen_port", defaultMetricsPort: "metrics_port"}
	if v.cfg != nil {
		ports = map[int]string{int(v.cfg.ListenPort): "listen_port", int(v.cfg.MetricsPort): "metrics_port"}
		if v.cfg.Interception.Enabled {
			ports[int(v.cfg.Interception.ListenPort)] = "https_interception.listen_port"
		}
	}
	return ports
}

func checkProbes(v *podView) error {
	var errs []error
	loopback := v.loopbackPorts()
	for _, c := range v.containers() {
		for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil {
				continue
			}
			var port *int
			switch {
			case p.HTTPGet != nil:
				port = resolvePort(c, p.HTTPGet.Port.IntValue(), p.HTTPGet.Port.String())
			case p.TCPSocket != nil:
				port = resolvePort(c, p.TCPSocket.Port.IntValue(), p.TCPSocket.Port.String())
			case p.GRPC != nil:
				n := int(p.GRPC.Port)
				port = &n
			}
			if port == nil {
				continue
			}
			if what, ok := loopback[*port]; ok {
				errs = append(errs, fmt.Errorf("container %q: %s probe targets port %d (%s), which is loopback-only: the kubelet probes the Pod IP; use exec", c.Name, kind, *port, what))
			}
		}
	}
	if v.botbox == nil {
		return errors.Join(append(errs, errors.New("no botbox container"))...)
	}
	metricsPort := defaultMetricsPort
	if v.cfg != nil {
		metricsPort = int(v.cfg.MetricsPort)
	}
	for kind, p := range map[string]*corev1.Probe{"startup": v.botbox.StartupProbe, "readiness": v.botbox.ReadinessProbe} {
		if err := checkHealthProbe(p, metricsPort); err != nil {
			errs = append(errs, fmt.Errorf("botbox %s probe: %w", kind, err))
		}
	}
	if p := v.botbox.LivenessProbe; p != nil && p.Exec == nil {
		errs = append(errs, errors.New("botbox liveness probe must be exec"))
	}
	return errors.Join(errs...)
}

// resolvePort returns a probe's numeric port, resolving a named port
// through the container's ports; nil when it cannot be resolved.
func resolvePort(c *corev1.Container, n int, name string) *int {
	if n != 0 {
		return &n
	}
	for _, p := range c.Ports {
		if p.Name == name {
			n := int(p.ContainerPort)
			return &n
		}
	}
	return nil
}

// checkHealthProbe requires exec ["/botbox", "probe", "http://<loopback>:<metrics_port>/healthz"].
func checkHealthProbe(p *corev1.Probe, metricsPort int) error {
	if p == nil {
		return errors.New("missing")
	}
	if p.Exec == nil {
		return errors.New("must be exec: BotBox's health port is loopback-only")
	}
	cmd := p.Exec.Command
	if len(cmd) != 3 || cmd[0] != "/botbox" || cmd[1] != "probe" {
		return fmt.Errorf("command %q, want [/botbox probe URL]", cmd)
	}
	u, err := url.Parse(cmd[2])
	if err != nil {
		return fmt.Errorf("probe URL: %w", err)
	}
	ip := net.ParseIP(u.Hostname())
	if u.Scheme != "http" || ip == nil || !ip.IsLoopback() || u.Port() != strconv.Itoa(metricsPort) || u.Path != "/healthz" {
		return fmt.Errorf("probe URL %q, want http://127.0.0.1:%d/healthz", cmd[2], metricsPort)
	}
	return nil
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

func checkGracePeriod(v *podView) error {
	if v.cfg == nil {
		return fmt.Errorf("config: %w", v.cfgErr)
	}
	grace := defaultGracePeriod
	if g := v.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace <= v.cfg.Timeouts.Shutdown {
		return fmt.Errorf("terminationGracePeriodSeconds %v <= shutdown_timeout_seconds %v: the kubelet kills BotBox mid-drain", grace, v.cfg.Timeouts.Shutdown)
	}
	return nil
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
