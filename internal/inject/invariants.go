package inject

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/botbox/botbox/internal/netfilter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Container roles are recognised by name, among the init containers only.
const (
	NameCAInit = "ca-init"
	NameInit   = "iptables-init"
	NameBotBox = "botbox"
)

// NetfilterEnv is every variable `botbox netfilter install` reads; any
// other BOTBOX_* name on the init container is a typo (invariant netfilter-env).
var NetfilterEnv = []string{
	netfilter.EnvUID, netfilter.EnvProxyPort, netfilter.EnvRedirectFromPort,
	netfilter.EnvHTTPSInterception, netfilter.EnvHTTPSInterceptionPort, netfilter.EnvIPv6,
	netfilter.EnvNATChain, netfilter.EnvFilterChain, netfilter.EnvWaitSeconds,
	netfilter.EnvDNSServers, netfilter.EnvDropICMP, netfilter.EnvMetricsPort, netfilter.EnvReject,
	netfilter.EnvBackend, netfilter.EnvDNSGuardPort,
}

// TrustEnv are the variables through which common runtimes trust an extra
// CA file (docs/deploy.md, "App-side trust"); the injector sets them all.
var TrustEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// Kubernetes defaults.
const (
	defaultGracePeriod = 30 * time.Second
	defaultSecretMode  = 0o644
	defaultMetricsPort = 9090
	defaultProxyPort   = 8080
)

// Layout is what the invariants need from BotBox's configuration: taken
// from the parsed ConfigMap by the deploy tests, and from what the injector
// requires of the user's config (Options.Layout) by inject and the webhook,
// which never see the ConfigMap.
type Layout struct {
	ListenPort       int
	MetricsPort      int
	Interception     bool // https_interception.enabled
	InterceptionPort int
	CACertPath       string
	CAKeyPath        string
	SecretsDir       string
	Shutdown         time.Duration // shutdown_timeout_seconds
}

// Profile selects how strict the invariants are about the app containers.
type Profile int

const (
	// Admission is what inject and the webhook enforce on any workload:
	// every rule that keeps the app inside the egress rules and away from
	// BotBox's key material. An app container must have a UID the manifest
	// shows (not the exempt one), must not gain privileges, and must not add
	// capabilities; a root app must drop ALL capabilities (with CAP_SETUID
	// it could become the exempt UID).
	Admission Profile = iota
	// Manifest adds the hardening the shipped manifests promise on top:
	// apps non-root, every container drops ALL, no service-account token,
	// a grace period above BotBox's shutdown deadline.
	Manifest
)

// Invariant is one property of the Pod a user relies on.
type Invariant struct {
	ID   string
	What string
	// Manifest: checked only with the Manifest profile.
	Manifest bool
	check    func(v *podView) error
}

// Invariants is the list documented in docs/deploy.md ("What the tests
// guarantee"), the Pod-level part; the deploy tests add the checks that need
// the other objects of a bundle (Namespace, ConfigMap, Secret, NetworkPolicy).
func Invariants() []Invariant {
	return []Invariant{
		{"pod-isolation", "no host namespaces, no shared PID namespace (no debug container targeting BotBox's), only volume types of Pod Security restricted (no hostPath, nfs, gitRepo, ...); no service account token (Manifest)", false, checkPodIsolation},
		{"init-order", "iptables-init runs to completion before BotBox, which is a native sidecar (restartPolicy Always); no sidecar starts before the rules", false, checkInitOrder},
		{"app-uid", "no container other than BotBox's own runs as the exempt UID; the Pod default is not it; apps set their UID (and, Manifest, are non-root)", false, checkAppUID},
		{"exempt-uid", "BotBox runs as BOTBOX_UID, and only containers of the BotBox image do", false, checkExemptUID},
		{"capabilities", "NET_ADMIN/NET_RAW only on iptables-init (NET_RAW anywhere else is a complete bypass); no container is privileged or can escalate; every container (init, sidecar, ephemeral) drops ALL", false, checkCapabilities},
		{"pod-security", "the Pod without iptables-init meets Kubernetes' Pod Security baseline (latest): no hostPort, probe or lifecycle host, Unconfined seccomp/AppArmor, custom SELinux type, Unmasked procMount, unsafe sysctl or hostProcess; BotBox's containers pin seccomp RuntimeDefault", false, checkPodSecurity},
		{"botbox-hardening", "BotBox containers: read-only root filesystem, runAsNonRoot", false, checkBotBoxHardening},
		{"ipv6-decided", "BOTBOX_ENABLE_IPV6 is set literally to 0 or 1 on iptables-init", false, checkIPv6Decided},
		{"netfilter-env", "iptables-init's BOTBOX_* variables are known, literal, valid and not in conflict", false, checkNetfilterEnv},
		{"ca-key-isolation", "the CA key is on its own tmpfs/Secret volume, mounted only into BotBox and ca-init, where ca-init writes it", false, checkCAKeyIsolation},
		{"ca-readonly", "CA volumes are read-only everywhere except in ca-init", false, checkCAReadOnly},
		{"app-trusts-ca", "with interception, every app container mounts the CA certificate and a trust variable points at it", false, checkAppTrustsCA},
		{"secrets-isolation", "the credential Secret is mounted only into BotBox, readable by its UID", false, checkSecretsIsolation},
		{"probe-key", "BotBox has BOTBOX_PROBE_KEY_FILE on a writable emptyDir mounted into no other container, so its probes authenticate BotBox and a port squatter never passes", false, checkProbeKey},
		{"probes", "BotBox has exec startup and readiness probes on the loopback health port; no httpGet/tcpSocket/grpc probe or lifecycle handler targets a loopback-only port or sets host (the kubelet would connect there from the node)", false, checkProbes},
		{"grace-period", "terminationGracePeriodSeconds exceeds BotBox's shutdown deadline", true, checkGracePeriod},
	}
}

// CheckPod runs every Pod-level invariant of the profile on spec; each
// error starts with the invariant's id. layout nil means BotBox's
// configuration is unknown (layoutErr says why): the invariants that need it
// report that error.
func CheckPod(spec *corev1.PodSpec, layout *Layout, layoutErr error, p Profile) []error {
	return CheckPodObject(nil, spec, layout, layoutErr, p)
}

// CheckPodObject is CheckPod with the Pod's metadata, which Pod Security
// also reads (the legacy AppArmor annotations); meta may be nil.
func CheckPodObject(meta *metav1.ObjectMeta, spec *corev1.PodSpec, layout *Layout, layoutErr error, p Profile) []error {
	if layout == nil && layoutErr == nil {
		layoutErr = errors.New("unknown")
	}
	v := newPodView(spec, layout, layoutErr, p)
	v.meta = meta
	var errs []error
	for _, inv := range Invariants() {
		if inv.Manifest && p != Manifest {
			continue
		}
		if err := inv.check(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", inv.ID, err))
		}
	}
	return errs
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
	for _, e := range s.EphemeralContainers {
		if t := e.TargetContainerName; t == NameBotBox || t == NameInit || t == NameCAInit {
			errs = append(errs, fmt.Errorf("ephemeral container %q: targetContainerName %q joins BotBox's process namespace; target the app container", e.Name, t))
		}
	}
	// The namespaces BotBox runs in admit its root init container, so Pod
	// Security (which would refuse hostPath at the baseline level) is set to
	// privileged there: this check is what stands between an app and the node.
	for _, vol := range s.Volumes {
		switch kind := volumeKind(vol.VolumeSource); {
		case vol.HostPath != nil:
			errs = append(errs, fmt.Errorf("volume %q is a hostPath (spec.volumes[].hostPath): the node's filesystem (its container runtime socket, its netfilter tools) is a way out of the Pod", vol.Name))
		case !slices.Contains(podVolumeKinds, kind):
			errs = append(errs, fmt.Errorf("volume %q is of type %s (spec.volumes[].%s): the node mounts or fetches it over its own network, outside the Pod's egress rules; allowed: %v", vol.Name, kind, kind, podVolumeKinds))
		}
	}
	if v.profile == Manifest && !isFalse(s.AutomountServiceAccountToken) {
		errs = append(errs, errors.New("automountServiceAccountToken must be false: the agent gets no Kubernetes API credential"))
	}
	return errors.Join(errs...)
}

// podVolumeKinds are the volume types Pod Security's restricted level
// allows: none of them makes the node reach a server the workload names
// (nfs, iscsi, gitRepo, image and the like do, with the node's network).
var podVolumeKinds = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

// volumeKind is the JSON name of the source set in vs ("" when none is):
// found by reflection so that a volume type added to k8s.io/api later is
// refused until it is listed, never let through unseen.
func volumeKind(vs corev1.VolumeSource) string {
	rv := reflect.ValueOf(vs)
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}

func checkInitOrder(v *podView) error {
	idx := map[string]int{}
	for i, c := range v.spec.InitContainers {
		idx[c.Name] = i
	}
	ipt, ok := idx[NameInit]
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
	bb, ok := idx[NameBotBox]
	switch {
	case !ok && slices.ContainsFunc(v.spec.Containers, func(c corev1.Container) bool { return c.Name == NameBotBox }):
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
		if ca, ok := idx[NameCAInit]; ok {
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
		if v.isBotBoxRole(c) {
			continue
		}
		isInit := c == v.init
		uid := v.effectiveUID(c)
		switch {
		case uid == nil:
			errs = append(errs, fmt.Errorf("container %q: runAsUser not set (the image's USER would decide; it must never be %d)", c.Name, exempt))
		case *uid == exempt:
			errs = append(errs, fmt.Errorf("container %q runs as UID %d, which the egress rules exempt: its traffic bypasses BotBox", c.Name, exempt))
		case !isInit && *uid == 0 && v.profile == Manifest:
			errs = append(errs, fmt.Errorf("container %q runs as root", c.Name))
		case !isInit && *uid == 0 && !dropsAll(c):
			errs = append(errs, fmt.Errorf("container %q runs as root without capabilities.drop [ALL]: with CAP_SETUID it can switch to UID %d and bypass BotBox", c.Name, exempt))
		}
		if !isInit && v.profile == Manifest && !v.effectiveNonRoot(c) {
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
		if uid := v.effectiveUID(c); uid != nil && *uid == exempt && (!v.isBotBoxRole(c) || c.Image != v.botbox.Image) {
			errs = append(errs, fmt.Errorf("container %q (image %q) runs as the exempt UID %d; only BotBox's own image may", c.Name, c.Image, exempt))
		}
	}
	return errors.Join(errs...)
}

func normCap(c corev1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

// dropsAll reports whether c's capabilities.drop holds "ALL" spelt
// exactly so, the one spelling every runtime reads as all capabilities:
// containerd and CRI-O compare each entry with "ALL" ignoring case, and
// turn any other entry into "CAP_"+entry, so "CAP_ALL" drops the unknown
// CAP_CAP_ALL and leaves the default set (NET_RAW, SETUID) in place. Any
// other spelling gets "ALL" added by inject and is refused by the
// invariants (TestDropAllSpellings).
func dropsAll(c *corev1.Container) bool {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return false
	}
	return slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL")
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
		var add []string
		if sc.Capabilities != nil {
			for _, a := range sc.Capabilities.Add {
				add = append(add, normCap(a))
			}
		}
		if !dropsAll(c) {
			errs = append(errs, fmt.Errorf("container %q must drop ALL capabilities (capabilities.drop: [ALL]): the runtime's default set holds NET_RAW, which an entrypoint with a file capability keeps, and AF_PACKET frames skip netfilter", c.Name))
		}
		if c == v.init {
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
		if e.Name == EnvProbeKeyFile {
			if e.ValueFrom != nil {
				return errors.New("BOTBOX_PROBE_KEY_FILE must be a literal value")
			}
			file = e.Value
		}
	}
	if file == "" || !path.IsAbs(file) {
		return fmt.Errorf("botbox: BOTBOX_PROBE_KEY_FILE must be an absolute path (got %q): the default /tmp is not writable under readOnlyRootFilesystem", file)
	}
	m, rel, ok := MountFor(v.botbox, file)
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
	if v.init == nil {
		return errors.New("no iptables-init container")
	}
	for _, e := range v.init.Env {
		if e.Name != netfilter.EnvIPv6 {
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
	c := v.init
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
		if !slices.Contains(NetfilterEnv, e.Name) {
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
	if v.layout == nil {
		return "", "", "", "", fmt.Errorf("config: %w", v.layErr)
	}
	if v.botbox == nil {
		return "", "", "", "", errors.New("no botbox container")
	}
	km, keyRel, ok := MountFor(v.botbox, v.layout.CAKeyPath)
	if !ok {
		return "", "", "", "", fmt.Errorf("ca_key_path %s is on no volume mounted into botbox", v.layout.CAKeyPath)
	}
	cm, certRel, ok := MountFor(v.botbox, v.layout.CACertPath)
	if !ok {
		return "", "", "", "", fmt.Errorf("ca_cert_path %s is on no volume mounted into botbox", v.layout.CACertPath)
	}
	return km.Name, keyRel, cm.Name, certRel, nil
}

// interception reports whether the CA invariants apply: when the config
// enables interception, or when it is unknown (fail closed).
func (v *podView) interception() bool {
	return v.layout == nil || v.layout.Interception
}

func checkCAKeyIsolation(v *podView) error {
	if !v.interception() {
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
		if !v.isBotBoxRole(c) {
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
			p, ok := FlagValue(c.Args, f.flag)
			if !ok {
				errs = append(errs, fmt.Errorf("ca-init args %q: no --%s", c.Args, f.flag))
				continue
			}
			m, rel, ok := MountFor(c, p)
			if !ok || m.Name != f.vol || rel != f.rel {
				errs = append(errs, fmt.Errorf("ca-init --%s %s is not where botbox reads it (volume %q, file %q)", f.flag, p, f.vol, f.rel))
			}
		}
	}
	return errors.Join(errs...)
}

func checkCAReadOnly(v *podView) error {
	if !v.interception() {
		return nil
	}
	keyVol, _, certVol, _, err := v.caVolumes()
	if err != nil {
		return err
	}
	var errs []error
	for _, vol := range []string{keyVol, certVol} {
		for c, m := range v.mountsOf(vol) {
			if c != v.caInit && !m.ReadOnly {
				errs = append(errs, fmt.Errorf("container %q mounts CA volume %q writable", c.Name, vol))
			}
		}
	}
	return errors.Join(errs...)
}

// checkAppTrustsCA: every app container mounts the CA certificate's volume
// and a trust variable names a file of that volume as the container sees
// it: the certificate itself, or the bundle `botbox ca new --bundle-out`
// writes next to it (system roots + the CA).
func checkAppTrustsCA(v *podView) error {
	if !v.interception() {
		return nil
	}
	_, _, certVol, certRel, err := v.caVolumes()
	if err != nil {
		return err
	}
	var errs []error
	for i := range v.spec.Containers {
		c := &v.spec.Containers[i]
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == certVol }) {
			errs = append(errs, fmt.Errorf("app container %q does not mount the CA certificate (volume %q)", c.Name, certVol))
			continue
		}
		want := inContainerPath(c, certVol, certRel)
		found := false
		for _, e := range c.Env {
			if !slices.Contains(TrustEnv, e.Name) {
				continue
			}
			m, _, ok := MountFor(c, e.Value)
			if e.ValueFrom != nil || !ok || m.Name != certVol || !path.IsAbs(e.Value) {
				errs = append(errs, fmt.Errorf("app container %q: %s=%q, but the CA certificate is at %s", c.Name, e.Name, e.Value, want))
				continue
			}
			found = true
		}
		if !found {
			errs = append(errs, fmt.Errorf("app container %q sets none of %v to %s", c.Name, TrustEnv, want))
		}
	}
	return errors.Join(errs...)
}

// inContainerPath is where file rel of volume appears inside c ("" if not).
func inContainerPath(c *corev1.Container, volume, rel string) string {
	for _, m := range c.VolumeMounts {
		if m.Name != volume {
			continue
		}
		switch {
		case m.SubPath == rel:
			return m.MountPath
		case m.SubPath == "":
			return path.Join(m.MountPath, rel)
		case strings.HasPrefix(rel, m.SubPath+"/"):
			return path.Join(m.MountPath, strings.TrimPrefix(rel, m.SubPath+"/"))
		}
	}
	return ""
}

// SecretsVolume is the volume BotBox's secrets_dir is mounted from.
func SecretsVolume(spec *corev1.PodSpec, layout *Layout, layoutErr error) (*corev1.Volume, error) {
	return newPodView(spec, layout, layoutErr, Admission).secretsVolume()
}

func (v *podView) secretsVolume() (*corev1.Volume, error) {
	if v.layout == nil {
		return nil, fmt.Errorf("config: %w", v.layErr)
	}
	if v.botbox == nil {
		return nil, errors.New("no botbox container")
	}
	m, rel, ok := MountFor(v.botbox, v.layout.SecretsDir)
	if ok && m.SubPath != "" {
		return nil, errors.New("secrets are mounted with subPath, which never receives updates: rotation would need a restart")
	}
	if !ok || rel != "" {
		return nil, fmt.Errorf("secrets_dir %s is not a volume mount point in botbox", v.layout.SecretsDir)
	}
	vol := v.volume(m.Name)
	if vol == nil || vol.Secret == nil {
		return nil, fmt.Errorf("secrets_dir %s: volume %q is not a Secret volume", v.layout.SecretsDir, m.Name)
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
		if c != v.botbox {
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
			errs = append(errs, fmt.Errorf("the Secret volume %q: mode %#o without a Pod fsGroup leaves the root-owned files unreadable for UID %d; BotBox would never become ready", vol.Name, m, v.exemptUID()))
		}
	}
	return errors.Join(errs...)
}

// loopbackPorts are BotBox's listeners; none is reachable from the kubelet.
func (v *podView) loopbackPorts() map[int]string {
	ports := map[int]string{defaultProxyPort: "listen_port", defaultMetricsPort: "metrics_port"}
	if l := v.layout; l != nil {
		ports = map[int]string{l.ListenPort: "listen_port", l.MetricsPort: "metrics_port"}
		if l.Interception {
			ports[l.InterceptionPort] = "https_interception.listen_port"
		}
	}
	return ports
}

// kubeletHandler is one probe or lifecycle handler: the kubelet runs it
// from the node.
type kubeletHandler struct {
	kind      string
	httpGet   *corev1.HTTPGetAction
	tcpSocket *corev1.TCPSocketAction
	grpc      *corev1.GRPCAction
}

// kubeletHandlers are c's probes and lifecycle hooks.
func kubeletHandlers(c *corev1.Container) []kubeletHandler {
	var hs []kubeletHandler
	for _, kp := range []struct {
		kind string
		p    *corev1.Probe
	}{{"startup probe", c.StartupProbe}, {"readiness probe", c.ReadinessProbe}, {"liveness probe", c.LivenessProbe}} {
		if kp.p != nil {
			hs = append(hs, kubeletHandler{kp.kind, kp.p.HTTPGet, kp.p.TCPSocket, kp.p.GRPC})
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, kh := range []struct {
			kind string
			h    *corev1.LifecycleHandler
		}{{"postStart hook", l.PostStart}, {"preStop hook", l.PreStop}} {
			if kh.h != nil {
				hs = append(hs, kubeletHandler{kind: kh.kind, httpGet: kh.h.HTTPGet, tcpSocket: kh.h.TCPSocket})
			}
		}
	}
	return hs
}

func checkProbes(v *podView) error {
	var errs []error
	loopback := v.loopbackPorts()
	for _, c := range v.containers() {
		for _, h := range kubeletHandlers(c) {
			var port *int
			switch {
			case h.httpGet != nil:
				port = resolvePort(c, h.httpGet.Port.IntValue(), h.httpGet.Port.String())
				if h.httpGet.Host != "" {
					errs = append(errs, fmt.Errorf("container %q: %s httpGet.host %q: the kubelet sends that request from the node, outside the Pod's egress rules", c.Name, h.kind, h.httpGet.Host))
				}
			case h.tcpSocket != nil:
				port = resolvePort(c, h.tcpSocket.Port.IntValue(), h.tcpSocket.Port.String())
				if h.tcpSocket.Host != "" {
					errs = append(errs, fmt.Errorf("container %q: %s tcpSocket.host %q: the kubelet connects there from the node, outside the Pod's egress rules", c.Name, h.kind, h.tcpSocket.Host))
				}
			case h.grpc != nil:
				n := int(h.grpc.Port)
				port = &n
			}
			if port == nil {
				continue
			}
			if what, ok := loopback[*port]; ok {
				errs = append(errs, fmt.Errorf("container %q: %s targets port %d (%s), which is loopback-only by default (metrics_listen_addr) and answers unauthenticated elsewhere: the kubelet probes the Pod IP; use exec with botbox probe", c.Name, h.kind, *port, what))
			}
		}
	}
	if v.botbox == nil {
		return errors.Join(append(errs, errors.New("no botbox container"))...)
	}
	metricsPort := defaultMetricsPort
	if v.layout != nil {
		metricsPort = v.layout.MetricsPort
	}
	for _, kp := range []struct {
		kind string
		p    *corev1.Probe
	}{{"startup", v.botbox.StartupProbe}, {"readiness", v.botbox.ReadinessProbe}} {
		if err := checkHealthProbe(kp.p, metricsPort); err != nil {
			errs = append(errs, fmt.Errorf("botbox %s probe: %w", kp.kind, err))
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
	if len(cmd) != 3 || cmd[0] != BinaryPath || cmd[1] != "probe" {
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

func checkGracePeriod(v *podView) error {
	if v.layout == nil {
		return fmt.Errorf("config: %w", v.layErr)
	}
	grace := defaultGracePeriod
	if g := v.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace <= v.layout.Shutdown {
		return fmt.Errorf("terminationGracePeriodSeconds %v <= shutdown_timeout_seconds %v: the kubelet kills BotBox mid-drain", grace, v.layout.Shutdown)
	}
	return nil
}
