package deploy_test

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/netfilter"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// podView is the Deployment's Pod with the facts the invariants share.
type podView struct {
	b    *bundle
	dep  *appsv1.Deployment // nil when there is no Deployment
	spec *corev1.PodSpec    // never nil

	// The containers by role; nil when absent.
	caInit, iptablesInit, botbox *corev1.Container

	// env is iptables-init's literal environment; netfilter is what
	// `botbox netfilter install` makes of it (netfilterErr when it refuses).
	env          map[string]string
	netfilter    netfilter.Settings
	netfilterErr error

	// cfg is BotBox's configuration from the ConfigMap; cfgErr says why not.
	cfg    *config.Config
	cfgErr error
}

func newPodView(b *bundle) *podView {
	v := &podView{b: b, spec: &corev1.PodSpec{}, env: map[string]string{}}
	if len(b.Deployments) > 0 {
		v.dep = b.Deployments[0]
		v.spec = &v.dep.Spec.Template.Spec
	}
	for _, c := range v.containers() {
		switch c.Name {
		case nameCAInit:
			v.caInit = c
		case nameIPTablesInit:
			v.iptablesInit = c
		case nameBotBox:
			v.botbox = c
		}
	}
	if v.iptablesInit != nil {
		for _, e := range v.iptablesInit.Env {
			if e.ValueFrom == nil {
				v.env[e.Name] = e.Value
			}
		}
	}
	v.netfilter, _, v.netfilterErr = netfilter.ParseEnv(func(name string) string { return v.env[name] })
	v.cfg, v.cfgErr = v.loadConfig()
	return v
}

// containers returns every init and regular container of the Pod.
func (v *podView) containers() []*corev1.Container {
	var cs []*corev1.Container
	for i := range v.spec.InitContainers {
		cs = append(cs, &v.spec.InitContainers[i])
	}
	for i := range v.spec.Containers {
		cs = append(cs, &v.spec.Containers[i])
	}
	return cs
}

// isBotBoxRole reports whether c is one of the two containers that run
// BotBox's own binary as the exempt UID.
func isBotBoxRole(c *corev1.Container) bool {
	return c.Name == nameBotBox || c.Name == nameCAInit
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

// mountFor finds the mount of c that holds file p and p's path inside the
// volume ("" when p is the mount point itself).
func mountFor(c *corev1.Container, p string) (m corev1.VolumeMount, rel string, ok bool) {
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

// flagValue returns the value of --name (or -name, --name=v) in args.
func flagValue(args []string, names ...string) (string, bool) {
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

// loadConfig follows botbox's --config argument through its mounts to the
// ConfigMap key and parses it with the proxy's own parser.
func (v *podView) loadConfig() (*config.Config, error) {
	if v.botbox == nil {
		return nil, errors.New("no botbox container")
	}
	argv := append(slices.Clone(v.botbox.Command), v.botbox.Args...)
	if len(argv) == 0 {
		argv = []string{"--config", imageConfigPath} // the image's CMD
	}
	p, ok := flagValue(argv, "config", "c")
	if !ok || p == "" {
		return nil, fmt.Errorf("botbox command %q: no --config PATH (BotBox would read config.yaml in its working directory)", argv)
	}
	m, rel, ok := mountFor(v.botbox, p)
	if !ok {
		return nil, fmt.Errorf("--config %s is on no volume mounted into botbox", p)
	}
	vol := v.volume(m.Name)
	if vol == nil || vol.ConfigMap == nil {
		return nil, fmt.Errorf("--config %s: volume %q is not a ConfigMap volume", p, m.Name)
	}
	key := rel
	for _, it := range vol.ConfigMap.Items {
		if it.Path == rel {
			key = it.Key
		}
	}
	for _, cm := range v.b.ConfigMaps {
		if cm.Name != vol.ConfigMap.Name {
			continue
		}
		data, ok := cm.Data[key]
		if !ok {
			return nil, fmt.Errorf("--config %s: ConfigMap %q has no key %q", p, cm.Name, key)
		}
		cfg, err := config.Parse([]byte(data))
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %q key %q: %w", cm.Name, key, err)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("--config %s: no ConfigMap %q in the manifests", p, vol.ConfigMap.Name)
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
