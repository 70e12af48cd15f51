// Package deploy holds what a user deploys: the container build
// (Dockerfile, two targets: botbox and iptables-init) and the Kubernetes
// manifests under kubernetes/ (kustomize), described in docs/deploy.md.
//
// The package has no code of its own. Its tests are the guarantee behind the
// files: every manifest decodes strictly into k8s.io/api types (an unknown,
// misspelled or mis-cased field fails), the kustomization lists every file,
// the Pod keeps the invariants a user relies on (the app never runs as the
// UID the egress rules exempt, the CA key reaches only BotBox, IPv6 is
// decided explicitly, NET_ADMIN stays in the init container, BotBox is a
// native sidecar started after the rules, probes are exec, the embedded
// config parses and agrees with the init container's environment), and the
// Dockerfile keeps its build and runtime invariants (including the version
// stamps its build passes to the linker). No container engine or cluster is
// needed.
//
// The Pod-level invariants are internal/inject's (Invariants, CheckPod): the
// same code `botbox inject` and `botbox webhook` enforce, run here with the
// stricter Manifest profile; the checks that need the other objects of the
// manifests (Namespace, ConfigMap, Secret, NetworkPolicy) live here.
//
// It is a module of its own (go.mod here, test-only, replace => ..): run
// `go test ./...` in this directory (.ci/run does). It imports the product's
// internal/config, internal/netfilter and internal/inject, which Go allows
// because the internal rule is by import path and this one is under
// github.com/botbox/botbox.
package deploy
