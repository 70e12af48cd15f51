package inject

import (
	"path"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/netfilter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is a Pod spec with the facts the invariants share.
type podView struct {
	meta    *metav1.ObjectMeta // nil when only the spec is known
	spec    *corev1.PodSpec    // never nil
	layout  *Layout            // nil when BotBox's configuration is unknown
	layErr  error              // why layout is nil
	profile Profile

	// The containers by role; nil when absent.
	caInit, init, botbox *corev1.Container

	// env is the init container's literal environment; netfilter is what
	// `botbox netfilter install` makes of it (netfilterErr when it refuses).
	env          map[string]string
	netfilter    netfilter.Settings
	netfilterErr error
}

func newPodView(spec *corev1.PodSpec, layout *Layout, layErr error, p Profile) *podView {
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	v := &podView{spec: spec, layout: layout, layErr: layErr, profile: p, env: map[string]string{}}
	for _, c := range v.containers() {
		switch c.Name {
		case NameCAInit:
			v.caInit = c
		case NameInit:
			v.init = c
		case NameBotBox:
			v.botbox = c
		}
	}
	// A regular container named like a BotBox role is not one: roles are
	// init containers (init-order reports a misplaced botbox).
	for _, c := range []**corev1.Container{&v.caInit, &v.init, &v.botbox} {
		if *c != nil && !v.isInit(*c) {
			*c = nil
		}
	}
	if v.init != nil {
		for _, e := range v.init.Env {
			if e.ValueFrom == nil {
				v.env[e.Name] = e.Value
			}
		}
	}
	v.netfilter, _, v.netfilterErr = netfilter.ParseEnv(func(name string) string { return v.env[name] })
	return v
}

func (v *podView) isInit(c *corev1.Container) bool {
	for i := range v.spec.InitContainers {
		if &v.spec.InitContainers[i] == c {
			return true
		}
	}
	return false
}

// containers returns every init, regular and ephemeral container of the
// Pod (ephemeral ones as containers: `kubectl debug` adds them to a running
// Pod, with the same network namespace).
func (v *podView) containers() []*corev1.Container {
	var cs []*corev1.Container
	for i := range v.spec.InitContainers {
		cs = append(cs, &v.spec.InitContainers[i])
	}
	for i := range v.spec.Containers {
		cs = append(cs, &v.spec.Containers[i])
	}
	for i := range v.spec.EphemeralContainers {
		c := corev1.Container(v.spec.EphemeralContainers[i].EphemeralContainerCommon)
		cs = append(cs, &c)
	}
	return cs
}

// isBotBoxRole reports whether c is one of the two containers that run
// BotBox's own binary as the exempt UID.
func (v *podView) isBotBoxRole(c *corev1.Container) bool {
	return c != nil && (c == v.botbox || c == v.caInit)
}

func (v *podView) volume(name string) *corev1.Volume {
	for i := range v.spec.Volumes {
		if v.spec.Volumes[i].Name == name {
			return &v.spec.Volumes[i]
		}
	}
	return nil
}

// mountsOf returns the containers that mount the volume, with the mount.
func (v *podView) mountsOf(volume string) map[*corev1.Container]corev1.VolumeMount {
	out := map[*corev1.Container]corev1.VolumeMount{}
	for _, c := range v.containers() {
		for _, m := range c.VolumeMounts {
			if m.Name == volume {
				out[c] = m
			}
		}
	}
	return out
}

// MountFor finds the mount of c that holds file p and p's path inside the
// volume ("" when p is the mount point itself).
func MountFor(c *corev1.Container, p string) (m corev1.VolumeMount, rel string, ok bool) {
	p = path.Clean(p)
	best := -1
	for _, vm := range c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		var r string
		switch {
		case vm.SubPath != "":
			if p != mp {
				continue
			}
			r = vm.SubPath
		case p == mp:
			r = ""
		case strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/"):
			r = strings.TrimPrefix(p, strings.TrimSuffix(mp, "/")+"/")
		default:
			continue
		}
		if len(mp) > best {
			best, m, rel, ok = len(mp), vm, r, true
		}
	}
	return m, rel, ok
}

// FlagValue returns the value of --name (or -name, --name=v) in args.
func FlagValue(args []string, names ...string) (string, bool) {
	for i, a := range args {
		for _, n := range names {
			switch {
			case a == "--"+n || a == "-"+n:
				if i+1 < len(args) {
					return args[i+1], true
				}
				return "", true
			case strings.HasPrefix(a, "--"+n+"="), strings.HasPrefix(a, "-"+n+"="):
				return a[strings.Index(a, "=")+1:], true
			}
		}
	}
	return "", false
}

// exemptUID is the UID the init step exempts from redirection and
// filtering (BOTBOX_UID, default 1337 even when the environment is invalid).
func (v *podView) exemptUID() int64 {
	if v.netfilterErr != nil {
		if n, err := strconv.ParseUint(v.env[netfilter.EnvUID], 10, 32); err == nil {
			return int64(n)
		}
		return int64(netfilter.DefaultSettings().UID)
	}
	return int64(v.netfilter.UID)
}

// effectiveUID is c's runAsUser, else the Pod's; nil when neither sets it
// (the image's USER then decides, which no manifest review can see).
func (v *podView) effectiveUID(c *corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if v.spec.SecurityContext != nil {
		return v.spec.SecurityContext.RunAsUser
	}
	return nil
}

func (v *podView) effectiveNonRoot(c *corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return v.spec.SecurityContext != nil && v.spec.SecurityContext.RunAsNonRoot != nil && *v.spec.SecurityContext.RunAsNonRoot
}

func isTrue(p *bool) bool  { return p != nil && *p }
func isFalse(p *bool) bool { return p != nil && !*p }
