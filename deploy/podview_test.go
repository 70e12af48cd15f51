package deploy_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/inject"
	"github.com/botbox/botbox/internal/netfilter"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// podView is the Deployment's Pod with the facts the bundle-level
// invariants share, and the results of the Pod-level ones (internal/inject).
type podView struct {
	b    *bundle
	dep  *appsv1.Deployment // nil when there is no Deployment
	spec *corev1.PodSpec    // never nil

	botbox       *corev1.Container // the botbox init container; nil when absent
	netfilter    netfilter.Settings
	netfilterErr error

	// cfg is BotBox's configuration from the ConfigMap; cfgErr says why
	// not. layout is what the shared invariants need of it.
	cfg    *config.Config
	cfgErr error
	layout *inject.Layout

	// podErrs are inject.CheckPod's findings by invariant id.
	podErrs map[string]error
}

func newPodView(b *bundle) *podView {
	v := &podView{b: b, spec: &corev1.PodSpec{}, podErrs: map[string]error{}}
	if len(b.Deployments) > 0 {
		v.dep = b.Deployments[0]
		v.spec = &v.dep.Spec.Template.Spec
	}
	env := map[string]string{}
	for i := range v.spec.InitContainers {
		c := &v.spec.InitContainers[i]
		switch c.Name {
		case nameBotBox:
			v.botbox = c
		case nameIPTablesInit:
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					env[e.Name] = e.Value
				}
			}
		}
	}
	v.netfilter, _, v.netfilterErr = netfilter.ParseEnv(func(name string) string { return env[name] })
	v.cfg, v.cfgErr = v.loadConfig()
	if v.cfg != nil {
		v.layout = &inject.Layout{
			ListenPort: int(v.cfg.ListenPort), MetricsPort: int(v.cfg.MetricsPort),
			Interception: v.cfg.Interception.Enabled, InterceptionPort: int(v.cfg.Interception.ListenPort),
			CACertPath: v.cfg.Interception.CACertPath, CAKeyPath: v.cfg.Interception.CAKeyPath,
			SecretsDir: v.cfg.SecretsDir, Shutdown: v.cfg.Timeouts.Shutdown,
		}
	}
	for _, err := range inject.CheckPod(v.spec, v.layout, v.cfgErr, inject.Manifest) {
		id, msg, _ := strings.Cut(err.Error(), ": ")
		v.podErrs[id] = errors.Join(v.podErrs[id], errors.New(msg))
	}
	return v
}

func (v *podView) volume(name string) *corev1.Volume {
	for i := range v.spec.Volumes {
		if v.spec.Volumes[i].Name == name {
			return &v.spec.Volumes[i]
		}
	}
	return nil
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
	p, ok := inject.FlagValue(argv, "config", "c")
	if !ok || p == "" {
		return nil, fmt.Errorf("botbox command %q: no --config PATH (BotBox would read config.yaml in its working directory)", argv)
	}
	m, rel, ok := inject.MountFor(v.botbox, p)
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
