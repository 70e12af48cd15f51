// Package deploy holds what a user deploys: the container image
// (Containerfile, FROM scratch, built by image.sh; one image for the init
// container, the sidecar and ca-init) and the Kubernetes manifests under
// kubernetes/ (kustomize), described in docs/deploy.md.
//
// The package has no code of its own. Its tests are the guarantee behind the
// files: every manifest decodes strictly into k8s.io/api types (an unknown,
// misspelled or mis-cased field fails), the kustomization lists every file,
// the Pod keeps the invariants a user relies on (the app never runs as the
// UID the egress rules exempt, the CA key reaches only BotBox, IPv6 is
// decided explicitly, NET_ADMIN stays in the init container, BotBox is a
// native sidecar started after the rules, probes are exec, the embedded
// config parses and agrees with the init container's environment), every
// BotBox role runs the one image, and the Containerfile keeps its invariants
// (one stage FROM scratch, nothing pulled, no shell, UID 1337). No cluster is
// needed. image_test.go builds the image with image.sh and runs it with
// rootful podman (files, version stamps, check, netfilter print, ca new,
// /healthz as UID 1337), and image_pod_test.go runs it as init container and
// sidecar in a podman pod with an app container; they need root, podman,
// runc and catatonit, fail without them under CI and skip elsewhere.
//
// The Pod-level invariants are internal/inject's (Invariants, CheckPod): the
// same code `botbox-admission inject` and `botbox-admission webhook` enforce, run here with the
// stricter Manifest profile; the checks that need the other objects of the
// manifests (Namespace, ConfigMap, Secret, NetworkPolicy) live here.
//
// It is a module of its own (go.mod here, test-only, replace => ..): run
// `go test ./...` in this directory (.ci/run does). It imports the product's
// internal/config, internal/netfilter and internal/inject, which Go allows
// because the internal rule is by import path and this one is under
// github.com/botbox/botbox.
package deploy
