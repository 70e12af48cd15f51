package inject

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/botbox/botbox/internal/netfilter"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The injected Pod's fixed layout. The user's config.yaml (key config.yaml
// of the ConfigMap) must agree with it: default listen ports, secrets_dir
// at its default, and with interception ca_cert_path CACertPath and
// ca_key_path CAKeyPath (docs/deploy.md, "botbox inject").
const (
	// BinaryPath is the BotBox binary in the image (deploy/Containerfile).
	BinaryPath = "/botbox"

	ExemptUID        = 1337
	ProxyPort        = 8080
	InterceptionPort = 8443
	MetricsPort      = 9090
	DNSGuardPort     = 8053

	ConfigDir    = "/etc/botbox"
	ConfigFile   = ConfigDir + "/config.yaml"
	SecretsDir   = "/var/run/secrets/botbox"
	CACertDir    = "/etc/botbox-ca"
	CAKeyDir     = "/etc/botbox-ca-key"
	CACertPath   = CACertDir + "/ca.crt"
	CAKeyPath    = CAKeyDir + "/ca.key"
	CABundlePath = CACertDir + "/" + CABundleFile
	// CABundleFile is the trust bundle ca-init writes next to the CA
	// certificate (`botbox ca new --bundle-out`): the embedded system roots
	// and the Pod's CA, which every TrustEnv variable of an app names.
	CABundleFile = "ca-bundle.crt"
	RunDir       = "/run/botbox"
	ProbeKeyFile = RunDir + "/probe.key"
	// DefaultPlaceholdersDir is where app containers find the placeholder
	// credentials BotBox publishes (--placeholders).
	DefaultPlaceholdersDir = "/var/run/botbox/placeholders"

	// EnvProbeKeyFile is where BotBox writes its per-start probe key.
	EnvProbeKeyFile = "BOTBOX_PROBE_KEY_FILE"
	// EnvMetricsListenAddr sets metrics_listen_addr (issue 14 part 5); the
	// injector gives it the Pod IP so Prometheus can scrape the sidecar.
	EnvMetricsListenAddr = "BOTBOX_METRICS_LISTEN_ADDR"

	DefaultImage     = "localhost/botbox:dev"
	DefaultConfigMap = "botbox-config"
	DefaultSecret    = "botbox-secrets"

	// shutdownDeadline is shutdown_timeout_seconds' default.
	shutdownDeadline = 25 * time.Second
)

// Volumes the injector owns; a workload's own volume of the same name is
// replaced.
const (
	VolConfig       = "botbox-config"
	VolSecrets      = "botbox-secrets"
	VolCACert       = "botbox-ca-cert"
	VolCAKey        = "botbox-ca-key"
	VolRun          = "botbox-run"
	VolPlaceholders = "botbox-placeholders"
)

var ownedVolumes = []string{VolConfig, VolSecrets, VolCACert, VolCAKey, VolRun, VolPlaceholders}

// Scrape annotations the injector sets on the Pod.
const (
	AnnotationScrape = "prometheus.io/scrape"
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
	// AnnotationDefaultContainer makes kubectl logs/exec pick the app.
	AnnotationDefaultContainer = "kubectl.kubernetes.io/default-container"
	// LabelInjected marks an injected Pod: the chart's PodMonitor selects
	// the sidecars to scrape by it (charts/botbox values podMonitor.selector).
	LabelInjected = "botbox.dev/injected"
)

// Options are the choices of `botbox inject` and `botbox webhook`.
type Options struct {
	Image        string // BotBox image for ca-init, iptables-init and botbox
	ConfigMap    string // holds config.yaml
	Secret       string // the credentials BotBox injects
	Interception bool   // HTTPS interception: CA init, 443 redirect, app trust
	IPv6         bool   // BOTBOX_ENABLE_IPV6=1
	DNSGuard     bool   // port 53 redirected to BotBox's DNS guard
	// PlaceholdersDir, when not empty, is an emptyDir BotBox writes and
	// every app container mounts read-only there.
	PlaceholdersDir string
	// DNSServers is BOTBOX_DNS_SERVERS of the init step (comma-separated
	// IP addresses; "" leaves it unset).
	DNSServers string
	// AllowedImageRegistries, when not empty, are the registry hosts
	// (host or host:port, "docker.io" for names without one) every
	// container image must come from; BotBox's own image is always allowed.
	AllowedImageRegistries []string
	// AllowedCSIDrivers are the inline CSI drivers, and the volume
	// populators (Kind.apiGroup of a dataSourceRef), a Pod may use.
	AllowedCSIDrivers []string
}

// DefaultOptions are the flags' defaults: the DNS guard and the IPv6
// rules on, so that a Pod injected without options has no port-53 path
// and no IPv6 path around BotBox (TestDefaultOptionsContain).
func DefaultOptions() Options {
	return Options{Image: DefaultImage, ConfigMap: DefaultConfigMap, Secret: DefaultSecret, IPv6: true, DNSGuard: true}
}

// Validate reports options that cannot make a valid Pod.
func (o Options) Validate() error {
	var errs []error
	if o.Image == "" {
		errs = append(errs, errors.New("--image must not be empty"))
	}
	if o.ConfigMap == "" {
		errs = append(errs, errors.New("--config-map must not be empty"))
	}
	if o.Secret == "" {
		errs = append(errs, errors.New("--secret must not be empty"))
	}
	if d := o.PlaceholdersDir; d != "" && (!path.IsAbs(d) || path.Clean(d) != d || d == "/") {
		errs = append(errs, fmt.Errorf("--placeholders-dir %q must be a clean absolute path", d))
	}
	if o.DNSServers != "" && o.DNSGuard {
		errs = append(errs, errors.New("--dns-servers needs --dns-guard=false: with the DNS guard every port-53 packet goes to BotBox; name its resolvers in dns_guard.upstream instead"))
	} else if o.DNSServers != "" {
		if _, err := netfilter.ParseDNSServers(o.DNSServers); err != nil {
			errs = append(errs, fmt.Errorf("--dns-servers %q: %w", o.DNSServers, err))
		}
	}
	for _, r := range o.AllowedImageRegistries {
		if !validRegistryHost(r) {
			errs = append(errs, fmt.Errorf("--allowed-image-registries: %q is not a registry host (host or host:port, e.g. docker.io, ghcr.io, registry.example:5000)", r))
		}
	}
	for _, d := range o.AllowedCSIDrivers {
		if strings.TrimSpace(d) == "" || strings.ContainsAny(d, " \t/") {
			errs = append(errs, fmt.Errorf("--allowed-csi-drivers: %q is not a CSI driver or populator name", d))
		}
	}
	return errors.Join(errs...)
}

// Weaknesses names each option that leaves a path around BotBox open,
// for `botbox inject` and `botbox webhook` to warn about at start
// (TestWeaknesses); none with the defaults but the image allowlist.
func (o Options) Weaknesses() []string {
	var w []string
	if !o.DNSGuard && o.DNSServers == "" {
		w = append(w, "--dns-guard=false without --dns-servers: the injected Pods may send UDP and TCP to port 53 of any host")
	}
	if !o.IPv6 {
		w = append(w, "--ipv6=false: the injected Pods' IPv6 traffic is not controlled")
	}
	if len(o.AllowedImageRegistries) == 0 {
		w = append(w, "no --allowed-image-registries: whoever may create or patch Pods chooses image names the node pulls from any registry")
	}
	return w
}

// Layout is what the injected Pod requires of BotBox's config.
func (o Options) Layout() *Layout {
	return &Layout{
		ListenPort: ProxyPort, MetricsPort: MetricsPort,
		Interception: o.Interception, InterceptionPort: InterceptionPort,
		CACertPath: CACertPath, CAKeyPath: CAKeyPath, SecretsDir: SecretsDir,
		Shutdown: shutdownDeadline,
	}
}

// RefusedError is a workload the injector will not contain: each problem
// names the container and the field.
type RefusedError struct{ Problems []error }

func (e *RefusedError) Error() string {
	return "refused: " + errors.Join(e.Problems...).Error()
}

// Pod injects BotBox into a Pod's metadata and spec, in place. It is
// idempotent: injecting its own output changes nothing (TestInjectIdempotent),
// which is also how the webhook's validation recognises a correctly injected
// Pod. It refuses (*RefusedError) a Pod the invariants (Admission profile)
// reject after injection: host network, the exempt UID outside BotBox's
// containers, added capabilities or privilege on an app container, an app
// UID left to the image. On refusal meta and spec may be partly changed.
func Pod(meta *metav1.ObjectMeta, spec *corev1.PodSpec, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	var pre []error
	for i := range spec.Containers {
		if isRoleName(spec.Containers[i].Name) {
			pre = append(pre, fmt.Errorf("container %q: the name is reserved for BotBox's init containers", spec.Containers[i].Name))
		}
	}
	var ours []string
	if o.Interception {
		ours = append(ours, CACertDir)
	}
	if o.PlaceholdersDir != "" {
		ours = append(ours, o.PlaceholdersDir)
	}
	for _, c := range appContainers(spec) {
		for _, m := range c.VolumeMounts {
			if !slices.Contains(ownedVolumes, m.Name) && slices.Contains(ours, path.Clean(m.MountPath)) {
				pre = append(pre, fmt.Errorf("container %q: volumeMounts %q at %s, where botbox inject mounts its own volume", c.Name, m.Name, m.MountPath))
			}
		}
	}
	pre = append(pre, credentialLeaks(spec, o.Secret)...)
	if len(pre) > 0 {
		return &RefusedError{Problems: pre}
	}

	// BotBox's init containers first, in order: nothing else runs before
	// the rules exist. Other init containers keep their order after them.
	// Each keeps the service-account token mount the ServiceAccount
	// admission plugin adds when it runs again after /mutate's patch
	// (reinvocationPolicy IfNeeded), and only in exactly that form.
	inits := []corev1.Container{}
	if o.Interception {
		inits = append(inits, caInitContainer(o))
	}
	inits = append(inits, initContainer(o), sidecarContainer(o))
	for i := range inits {
		keepTokenMount(&inits[i], spec)
	}
	for _, c := range spec.InitContainers {
		if !isRoleName(c.Name) {
			inits = append(inits, c)
		}
	}
	spec.InitContainers = inits

	// Volumes: ours, in their fixed order, where the first of them was
	// (appended when there was none); the ones these options do not use
	// are gone.
	at := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return slices.Contains(ownedVolumes, v.Name) })
	vols := slices.DeleteFunc(slices.Clone(spec.Volumes), func(v corev1.Volume) bool { return slices.Contains(ownedVolumes, v.Name) })
	if at < 0 || at > len(vols) {
		at = len(vols)
	}
	spec.Volumes = slices.Insert(vols, at, volumes(o)...)

	for _, c := range appContainers(spec) {
		injectApp(c, o)
	}
	for i := range spec.EphemeralContainers {
		c := (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)
		noEscalation(c)
		dropAllCapabilities(c)
	}

	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[LabelInjected] = "true"
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[AnnotationScrape] = "true"
	meta.Annotations[AnnotationPort] = strconv.Itoa(MetricsPort)
	meta.Annotations[AnnotationPath] = "/metrics"
	if _, ok := meta.Annotations[AnnotationDefaultContainer]; !ok && len(spec.Containers) > 0 {
		meta.Annotations[AnnotationDefaultContainer] = spec.Containers[0].Name
	}

	errs := CheckPodObject(meta, spec, o.Layout(), nil, Admission)
	errs = append(errs, nodeFetches(spec, o)...)
	if len(errs) > 0 {
		return &RefusedError{Problems: errs}
	}
	return nil
}

// nodeFetches finds what the node (or a controller) would fetch for the
// Pod over its own network, outside the Pod's egress rules: an image from
// a registry not in --allowed-image-registries, an inline CSI volume of a
// driver, or a generic ephemeral volume with a data source, not in
// --allowed-csi-drivers, or a generic ephemeral volume whose claim
// carries annotations (importers such as CDI fetch what they name). Every container is checked, BotBox's own image
// excepted (TestNodeFetches).
func nodeFetches(spec *corev1.PodSpec, o Options) []error {
	var errs []error
	for _, c := range newPodView(spec, nil, nil, Admission).containers() {
		if err := imageAllowed(c.Image, o); err != nil {
			errs = append(errs, fmt.Errorf("image: container %q: %w", c.Name, err))
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.CSI != nil && !slices.Contains(o.AllowedCSIDrivers, v.CSI.Driver):
			errs = append(errs, fmt.Errorf("csi: volume %q: inline CSI driver %q is not in --allowed-csi-drivers %v: the node mounts what the Pod's volumeAttributes name, over its own network", v.Name, v.CSI.Driver, o.AllowedCSIDrivers))
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			for _, k := range slices.Sorted(maps.Keys(v.Ephemeral.VolumeClaimTemplate.Annotations)) {
				errs = append(errs, fmt.Errorf("csi: volume %q: ephemeral claim annotation %s: controllers act on a claim's annotations (CDI's cdi.kubevirt.io/storage.import.endpoint fetches the URL it names), outside the Pod; an ephemeral claim carries none", v.Name, k))
			}
			ps := v.Ephemeral.VolumeClaimTemplate.Spec
			for _, ref := range []*corev1.TypedLocalObjectReference{ps.DataSource, typedRef(ps.DataSourceRef)} {
				if ref == nil || inClusterDataSource(ref) {
					continue
				}
				if name := populatorName(ref); !slices.Contains(o.AllowedCSIDrivers, name) {
					errs = append(errs, fmt.Errorf("csi: volume %q: ephemeral claim data source %s is not in --allowed-csi-drivers %v: a volume populator fetches what the Pod names, outside the Pod", v.Name, name, o.AllowedCSIDrivers))
				}
			}
		}
	}
	return errs
}

func typedRef(r *corev1.TypedObjectReference) *corev1.TypedLocalObjectReference {
	if r == nil {
		return nil
	}
	return &corev1.TypedLocalObjectReference{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
}

// populatorName is how --allowed-csi-drivers names a data source:
// Kind.apiGroup (VolumeImportSource.cdi.kubevirt.io), Kind for the core group.
func populatorName(r *corev1.TypedLocalObjectReference) string {
	if r.APIGroup == nil || *r.APIGroup == "" {
		return r.Kind
	}
	return r.Kind + "." + *r.APIGroup
}

// inClusterDataSource: a clone of a PersistentVolumeClaim or a restore of
// a VolumeSnapshot copies storage the namespace already has; nothing is
// fetched from a place the Pod names.
func inClusterDataSource(r *corev1.TypedLocalObjectReference) bool {
	n := populatorName(r)
	return n == "PersistentVolumeClaim" || n == "VolumeSnapshot.snapshot.storage.k8s.io"
}

// ServiceAccountTokenDir is where the ServiceAccount admission plugin
// mounts the Pod's API token into every container.
const ServiceAccountTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// keepTokenMount copies into c (a BotBox container being rebuilt) the
// token mount the same-named container of spec has, when it is exactly
// what the ServiceAccount admission plugin writes: read-only at
// ServiceAccountTokenDir, no subPath or propagation, of a
// kube-api-access-* volume that is the plugin's projected token volume.
// Any other extra mount is dropped (and so refused by /validate).
func keepTokenMount(c *corev1.Container, spec *corev1.PodSpec) {
	i := slices.IndexFunc(spec.InitContainers, func(x corev1.Container) bool { return x.Name == c.Name })
	if i < 0 {
		return
	}
	for _, m := range spec.InitContainers[i].VolumeMounts {
		if isTokenMount(m, spec) {
			c.VolumeMounts = append(c.VolumeMounts, m)
			return
		}
	}
}

func isTokenMount(m corev1.VolumeMount, spec *corev1.PodSpec) bool {
	if !strings.HasPrefix(m.Name, "kube-api-access-") || m.MountPath != ServiceAccountTokenDir || !m.ReadOnly ||
		m.SubPath != "" || m.SubPathExpr != "" || m.MountPropagation != nil || m.RecursiveReadOnly != nil {
		return false
	}
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if vi < 0 || spec.Volumes[vi].Projected == nil {
		return false
	}
	token := false
	for _, src := range spec.Volumes[vi].Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == "" && src.ServiceAccountToken.Path == "token":
			token = true
		case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt":
		case src.DownwardAPI != nil && !slices.ContainsFunc(src.DownwardAPI.Items, func(it corev1.DownwardAPIVolumeFile) bool {
			return it.FieldRef == nil || it.FieldRef.FieldPath != "metadata.namespace"
		}):
		default:
			return false
		}
	}
	return token
}

// credentialLeaks finds every way the workload itself reads the Secret
// holding BotBox's credentials: a volume of its own (secret, projected, or
// a CSI volume's nodePublishSecretRef, which the kubelet hands to the driver),
// an env valueFrom or envFrom of an app or ephemeral container. Anyone who
// may create Pods in a namespace may read its Secrets this way, so the
// injector and the webhook refuse it; only the botbox container mounts it.
func credentialLeaks(spec *corev1.PodSpec, secret string) []error {
	var errs []error
	for _, v := range spec.Volumes {
		if v.Name == VolSecrets {
			continue
		}
		leak := v.Secret != nil && v.Secret.SecretName == secret ||
			v.CSI != nil && v.CSI.NodePublishSecretRef != nil && v.CSI.NodePublishSecretRef.Name == secret
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				leak = leak || src.Secret != nil && src.Secret.Name == secret
			}
		}
		if leak {
			errs = append(errs, fmt.Errorf("volume %q: spec.volumes reads Secret %q, which holds BotBox's credentials; only the botbox container may", v.Name, secret))
		}
	}
	cs := appContainers(spec)
	for i := range spec.EphemeralContainers {
		cs = append(cs, (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for _, c := range cs {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret {
				errs = append(errs, fmt.Errorf("container %q: env %s valueFrom.secretKeyRef reads Secret %q, which holds BotBox's credentials", c.Name, e.Name, secret))
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name == secret {
				errs = append(errs, fmt.Errorf("container %q: envFrom.secretRef reads Secret %q, which holds BotBox's credentials", c.Name, secret))
			}
		}
	}
	return errs
}

// appContainers are the workload's own regular and init containers.
func appContainers(spec *corev1.PodSpec) []*corev1.Container {
	var cs []*corev1.Container
	for i := range spec.InitContainers {
		if !isRoleName(spec.InitContainers[i].Name) {
			cs = append(cs, &spec.InitContainers[i])
		}
	}
	for i := range spec.Containers {
		cs = append(cs, &spec.Containers[i])
	}
	return cs
}

func isRoleName(n string) bool { return n == NameCAInit || n == NameInit || n == NameBotBox }

// noEscalation sets allowPrivilegeEscalation: false where the container
// leaves it unset: no setuid binary of the app image may switch to the
// exempt UID. An explicit true is left for the invariants to refuse.
func noEscalation(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.AllowPrivilegeEscalation == nil {
		c.SecurityContext.AllowPrivilegeEscalation = new(false)
	}
}

// dropAllCapabilities adds ALL to capabilities.drop where it is missing:
// the runtime otherwise grants its default set (containerd's holds
// NET_RAW), which an entrypoint with a file capability keeps despite
// allowPrivilegeEscalation: false. Explicit adds stay for the
// invariants to refuse.
func dropAllCapabilities(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	if !dropsAll(c) {
		c.SecurityContext.Capabilities.Drop = append(c.SecurityContext.Capabilities.Drop, "ALL")
	}
}

// injectApp gives an app container what it needs: no privilege
// escalation, no capability, the CA trust with interception, the
// placeholder directory. Our entries are replaced in place or appended;
// stale ones are removed.
func injectApp(c *corev1.Container, o Options) {
	noEscalation(c)
	dropAllCapabilities(c)
	// Trust variables are set in place where present, appended otherwise,
	// so a variable another webhook added after ours keeps its position.
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		return !o.Interception && slices.Contains(TrustEnv, e.Name) && e.Value == CABundlePath && e.ValueFrom == nil
	})
	if o.Interception {
		for _, n := range TrustEnv {
			e := corev1.EnvVar{Name: n, Value: CABundlePath}
			if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == n }); i >= 0 {
				c.Env[i] = e
			} else {
				c.Env = append(c.Env, e)
			}
		}
	}
	if len(c.Env) == 0 {
		c.Env = nil
	}

	wantMounts := map[string]corev1.VolumeMount{}
	if o.Interception {
		wantMounts[VolCACert] = corev1.VolumeMount{Name: VolCACert, MountPath: CACertDir, ReadOnly: true}
	}
	if o.PlaceholdersDir != "" {
		wantMounts[VolPlaceholders] = corev1.VolumeMount{Name: VolPlaceholders, MountPath: o.PlaceholdersDir, ReadOnly: true}
	}
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if !slices.Contains(ownedVolumes, m.Name) {
			mounts = append(mounts, m)
			continue
		}
		if w, ok := wantMounts[m.Name]; ok {
			mounts = append(mounts, w)
			delete(wantMounts, m.Name)
		}
	}
	for _, n := range []string{VolCACert, VolPlaceholders} {
		if w, ok := wantMounts[n]; ok {
			mounts = append(mounts, w)
		}
	}
	c.VolumeMounts = mounts
}

func mi(s string) resource.Quantity { return resource.MustParse(s) }

func resources(cpuReq, memReq, cpuLim, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: mi(cpuReq), corev1.ResourceMemory: mi(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: mi(cpuLim), corev1.ResourceMemory: mi(memLim)},
	}
}

// botboxSecurity is UID 1337, read-only root, nothing to escalate, no
// capability, the runtime's default seccomp profile: each set on the
// container, so no Pod-level setting the workload chooses applies to it.
func botboxSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser: new(int64(ExemptUID)), RunAsGroup: new(int64(ExemptUID)), RunAsNonRoot: new(true),
		ReadOnlyRootFilesystem: new(true), AllowPrivilegeEscalation: new(false),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: runtimeDefaultSeccomp(),
	}
}

func runtimeDefaultSeccomp() *corev1.SeccompProfile {
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}

// container fills the fields the API server would default, so that a
// Pod the webhook admitted compares equal to its re-injection.
func container(name string, o Options) corev1.Container {
	return corev1.Container{
		Name: name, Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:                  []string{BinaryPath},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

func caInitContainer(o Options) corev1.Container {
	c := container(NameCAInit, o)
	c.Args = []string{"ca", "new", "--cert-out", "/ca-cert/ca.crt", "--key-out", "/ca-key/ca.key",
		"--days", "365", "--if-missing", "--bundle-out", "/ca-cert/" + CABundleFile}
	c.SecurityContext = botboxSecurity()
	c.Resources = resources("10m", "16Mi", "100m", "32Mi")
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: VolCACert, MountPath: "/ca-cert"},
		{Name: VolCAKey, MountPath: "/ca-key"},
	}
	return c
}

func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func initContainer(o Options) corev1.Container {
	c := container(NameInit, o)
	c.Args = []string{"netfilter", "install"}
	c.Env = []corev1.EnvVar{
		{Name: netfilter.EnvUID, Value: strconv.Itoa(ExemptUID)},
		{Name: netfilter.EnvProxyPort, Value: strconv.Itoa(ProxyPort)},
		{Name: netfilter.EnvRedirectFromPort, Value: "80"},
		{Name: netfilter.EnvHTTPSInterception, Value: boolEnv(o.Interception)},
		{Name: netfilter.EnvHTTPSInterceptionPort, Value: strconv.Itoa(InterceptionPort)},
		{Name: netfilter.EnvIPv6, Value: boolEnv(o.IPv6)},
		{Name: netfilter.EnvDropICMP, Value: "1"},
		{Name: netfilter.EnvMetricsPort, Value: strconv.Itoa(MetricsPort)},
		{Name: netfilter.EnvBackend, Value: "nftables"},
	}
	if o.DNSGuard {
		c.Env = append(c.Env, corev1.EnvVar{Name: netfilter.EnvDNSGuardPort, Value: strconv.Itoa(DNSGuardPort)})
	}
	if o.DNSServers != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: netfilter.EnvDNSServers, Value: o.DNSServers})
	}
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser: new(int64(0)), RunAsGroup: new(int64(0)), RunAsNonRoot: new(false),
		ReadOnlyRootFilesystem: new(true), AllowPrivilegeEscalation: new(false),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		SeccompProfile: runtimeDefaultSeccomp(),
	}
	c.Resources = resources("10m", "16Mi", "100m", "64Mi")
	// No volume: the nftables backend talks netlink and needs no lock file
	// (the image has no iptables binaries for another backend to run).
	return c
}

func probe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{BinaryPath, "probe", "http://127.0.0.1:" + strconv.Itoa(MetricsPort) + path}}},
		PeriodSeconds: period, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: failures,
	}
}

func sidecarContainer(o Options) corev1.Container {
	c := container(NameBotBox, o)
	c.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
	c.Args = []string{"--config", ConfigFile}
	c.Env = []corev1.EnvVar{
		{Name: EnvProbeKeyFile, Value: ProbeKeyFile},
		{Name: EnvMetricsListenAddr, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
	}
	// The port the init step redirects DNS to: BotBox checks that its
	// config runs the guard there before it becomes ready.
	if o.DNSGuard {
		c.Env = append(c.Env, corev1.EnvVar{Name: netfilter.EnvDNSGuardPort, Value: strconv.Itoa(DNSGuardPort)})
	}
	c.SecurityContext = botboxSecurity()
	c.StartupProbe = probe("/healthz", 1, 60)
	c.ReadinessProbe = probe("/healthz", 5, 2)
	c.LivenessProbe = probe("/metrics", 10, 3)
	c.Resources = resources("10m", "64Mi", "500m", "256Mi")
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: VolConfig, MountPath: ConfigDir, ReadOnly: true},
		{Name: VolSecrets, MountPath: SecretsDir, ReadOnly: true},
	}
	if o.Interception {
		c.VolumeMounts = append(c.VolumeMounts,
			corev1.VolumeMount{Name: VolCACert, MountPath: CACertDir, ReadOnly: true},
			corev1.VolumeMount{Name: VolCAKey, MountPath: CAKeyDir, ReadOnly: true})
	}
	if o.PlaceholdersDir != "" {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolPlaceholders, MountPath: o.PlaceholdersDir})
	}
	// Never mounted into an app: the probe key must stay BotBox's.
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolRun, MountPath: RunDir})
	return c
}

func memDir() corev1.VolumeSource {
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: new(mi("1Mi"))}}
}

// volumes are the Pod volumes the options need, in a fixed order.
func volumes(o Options) []corev1.Volume {
	vs := []corev1.Volume{
		{Name: VolConfig, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.ConfigMap}, DefaultMode: new(int32(0o644))}}},
		// 0444: root-owned files read by UID 1337 without an fsGroup; only
		// botbox mounts this volume.
		{Name: VolSecrets, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: o.Secret, DefaultMode: new(int32(0o444))}}},
	}
	if o.Interception {
		vs = append(vs, corev1.Volume{Name: VolCACert, VolumeSource: memDir()}, corev1.Volume{Name: VolCAKey, VolumeSource: memDir()})
	}
	vs = append(vs, corev1.Volume{Name: VolRun, VolumeSource: memDir()})
	if o.PlaceholdersDir != "" {
		vs = append(vs, corev1.Volume{Name: VolPlaceholders, VolumeSource: memDir()})
	}
	return vs
}
