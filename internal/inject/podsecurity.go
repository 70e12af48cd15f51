package inject

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// podSecurityEvaluator is Kubernetes' own Pod Security evaluator with its
// default checks, built once: it holds no state between evaluations.
var podSecurityEvaluator = sync.OnceValues(func() (psapolicy.Evaluator, error) {
	return psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
})

// checkPodSecurity runs Pod Security's baseline level, at the latest
// version this build knows, over the Pod without iptables-init (the one
// container BotBox needs privileged: root with NET_ADMIN). The namespaces
// BotBox runs in must be labelled privileged for that container, so this
// is where baseline is enforced for everything else; every violation is
// reported with the evaluator's reason and detail (TestPodSecurityBaseline).
func checkPodSecurity(v *podView) error {
	eval, err := podSecurityEvaluator()
	if err != nil {
		return fmt.Errorf("building the Pod Security evaluator: %w", err)
	}
	spec := *v.spec
	spec.InitContainers = nil
	for _, c := range v.spec.InitContainers {
		if v.init == nil || c.Name != v.init.Name {
			spec.InitContainers = append(spec.InitContainers, c)
		}
	}
	meta := v.meta
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	var forbidden []string
	lv := psaapi.LevelVersion{Level: psaapi.LevelBaseline, Version: psaapi.LatestVersion()}
	for _, r := range eval.EvaluatePod(lv, meta, &spec) {
		if r.Allowed {
			continue
		}
		msg := r.ForbiddenReason
		if r.ForbiddenDetail != "" {
			msg += " (" + r.ForbiddenDetail + ")"
		}
		forbidden = append(forbidden, msg)
	}
	if len(forbidden) == 0 {
		return nil
	}
	return errors.New("Pod Security " + lv.String() + " forbids " + strings.Join(forbidden, "; "))
}
