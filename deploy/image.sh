#!/usr/bin/env bash
# deploy/image.sh [TAG]: builds BotBox's container image (deploy/Containerfile)
# without pulling anything from a registry. Default TAG: localhost/botbox:dev.
#
#   deploy/image.sh                          # podman if installed, else docker
#   CONTAINER_ENGINE=docker deploy/image.sh  # choose the engine
#   GOARCH=arm64 deploy/image.sh REGISTRY/botbox:TAG-arm64   # cross-build
#
# Two steps: `go build` of cmd/botbox and cmd/botbox-admission on this
# machine (static: CGO_ENABLED=0; -trimpath;
# -s -w; version and commit from git through -X, since the build context has
# no .git), then the engine builds FROM scratch out of a temporary context
# holding the binary, deploy/config.yaml and an empty rootfs/tmp. The only
# thing this needs besides Go is podman or docker (with BuildKit, for
# COPY --chmod); deploy/image_test.go builds through this script and runs the
# result.
set -euo pipefail

tag="${1:-localhost/botbox:dev}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

engine="${CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then
    engine=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    echo "image.sh: no container engine: install podman (apt-get install podman runc) or start docker" >&2
    exit 1
  fi
fi

goos=linux
goarch="${GOARCH:-$(go env GOARCH)}"
version="$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)"
commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || true)"
pkg=github.com/botbox/botbox/internal/buildinfo

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
(
  cd "$root"
  for cmd in botbox botbox-admission; do
    CGO_ENABLED=0 GOOS="$goos" GOARCH="$goarch" go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X $pkg.version=$version -X $pkg.commit=$commit" \
      -o "$ctx/$cmd" "./cmd/$cmd"
  done
)
cp "$root/deploy/config.yaml" "$ctx/config.yaml"
mkdir -p "$ctx/rootfs/tmp"

build=(build -f "$root/deploy/Containerfile" -t "$tag" --platform "$goos/$goarch"
  --label "org.opencontainers.image.version=$version"
  --label "org.opencontainers.image.revision=$commit")
case "$engine" in
  *podman*) build+=(--pull=never) ;;
  *docker*) export DOCKER_BUILDKIT=1 ;;
esac
"$engine" "${build[@]}" "$ctx"
echo "image.sh: built $tag ($version, $goos/$goarch) with $engine"
