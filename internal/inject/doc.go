// Package inject puts BotBox into Kubernetes workloads, for `botbox inject`
// (offline, YAML in and out) and `botbox webhook` (admission): the CA init,
// the init container that installs the egress rules, the native sidecar,
// their volumes, and for the app containers no privilege escalation, the CA
// trust bundle and the placeholder directory.
//
// It also holds the containment invariants (Invariants, CheckPod), the one
// list of them: the injector refuses a Pod its own output would not satisfy,
// the webhook rejects a Pod that is not exactly what the injector makes of
// it, and the deploy module's tests run the shipped manifests through the
// same checks (profile Manifest, which adds hardening the examples promise).
package inject
