#!/usr/bin/env bash
# test/cluster/build.sh: builds the single-node cluster the suite in this
# directory runs (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl, containerd with its shim and ctr, the CNI
# plugins) from the Go module proxy into a cache keyed by their versions,
# and prints that directory. What is there already is not built again: a cold
# build costs about 35 CPU-minutes, a cached one nothing.
#
#   test/cluster/build.sh            # builds, then prints the directory
#   test/cluster/build.sh --dir      # prints the directory only
#   test/cluster/build.sh --complete # prints it only when nothing is left to build
#
# The Kubernetes and etcd versions are the ones this module's go.mod pins
# (tools.go); containerd and the CNI plugins are installed at the versions
# below with their own go.mod, as `go install` does. runc is the system's
# (apt-get install runc).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

kube_version=v1.37.2
containerd_version=v2.4.2
cni_version=v1.10.0
dir="${BOTBOX_CLUSTER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/botbox/cluster-k8s-$kube_version-containerd-$containerd_version-cni-$cni_version}"
binaries=(kube-apiserver etcd kubectl kube-controller-manager kube-scheduler kubelet kube-proxy
  containerd containerd-shim-runc-v2 ctr cni/ptp cni/host-local cni/loopback)
case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  --complete)
    for b in "${binaries[@]}"; do [ -x "$dir/$b" ] || exit 0; done
    echo "$dir"; exit 0 ;;
esac
mkdir -p "$dir/cni"

# The version stamps kubernetes' hack/lib/version.sh sets: without them
# /version says v0.0.0-master and Helm refuses the chart's kubeVersion.
major=${kube_version#v}; major=${major%%.*}
minor=${kube_version#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done

export CGO_ENABLED=0
built() { [ -x "$dir/$1" ]; }
# Each binary is written beside its final name and renamed, so an
# interrupted build never leaves a truncated binary that counts as built.
build() { # name package
  built "$1" && return 0
  echo "cluster build: $1" >&2
  (cd "$here" && GOFLAGS=-mod=mod go build -ldflags "$ldflags" -o "$dir/$1.part" "$2")
  mv "$dir/$1.part" "$dir/$1"
}
install() { # dest-subdir tags module@version packages...
  local sub=$1 tags=$2 version=$3; shift 3
  local missing=() pkg
  for pkg in "$@"; do built "$sub${pkg##*/}" || missing+=("$pkg@$version"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  echo "cluster build: ${missing[*]}" >&2
  local tmpbin; tmpbin="$(mktemp -d "$dir/.install.XXXXXX")"
  GOFLAGS= GOBIN="$tmpbin" go install -trimpath ${tags:+-tags "$tags"} -ldflags "-s -w" "${missing[@]}"
  mv "$tmpbin"/* "$dir/$sub"
  rmdir "$tmpbin"
}

# The API server first: it is most of the cost and every later build reuses
# its packages from the build cache.
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build etcd go.etcd.io/etcd/server/v3
build kubectl k8s.io/kubernetes/cmd/kubectl
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubelet k8s.io/kubernetes/cmd/kubelet
build kube-proxy k8s.io/kubernetes/cmd/kube-proxy
install "" no_btrfs "$containerd_version" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
install cni/ "" "$cni_version" \
  github.com/containernetworking/plugins/plugins/main/ptp \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback
for b in "${binaries[@]}"; do
  [ -x "$dir/$b" ] || { echo "cluster build: $b missing after the build" >&2; exit 1; }
done
echo "$dir"
