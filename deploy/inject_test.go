package deploy_test

import (
	"testing"

	"github.com/botbox/botbox/internal/inject"
)

// TestInjectedExampleKeepsEveryInvariant runs `botbox-admission inject`'s code over
// the example Deployment (its BotBox containers are replaced by the
// injector's) and checks the result with every invariant of this package,
// including the ones only a bundle can check: the injected layout agrees
// with the example's real config.yaml (paths, ports, interception) and
// Secret. So the injector's fixed layout is proven against a config that
// BotBox's own parser accepts, not only against itself.
func TestInjectedExampleKeepsEveryInvariant(t *testing.T) {
	t.Parallel()
	b := loadBundle(t)
	d := b.Deployments[0]
	o := inject.DefaultOptions()
	o.Interception, o.IPv6 = true, true
	o.Image = container(t, b, nameBotBox).Image
	o.ConfigMap = b.ConfigMaps[0].Name
	o.Secret = b.Secrets[0].Name
	// The app as a user would start: without the example's hand-made CA
	// mount, trust variable and BotBox volumes (the injector refuses a mount
	// on its path and a volume of the credential Secret outside botbox).
	a := app(b)
	a.VolumeMounts, a.Env = nil, nil
	d.Spec.Template.Spec.Volumes = nil
	if err := inject.Pod(&d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec, o); err != nil {
		t.Fatal(err)
	}
	if c := container(t, b, nameBotBox); c.VolumeMounts[0].Name != inject.VolConfig {
		t.Fatalf("botbox was not replaced by the injector's: mounts %v", c.VolumeMounts)
	}
	for _, err := range checkAll(b) {
		t.Error(err)
	}
}
