#!/usr/bin/env bash
# Builds the project's images with podman from the unchanged Dockerfiles, against the local
# stand-ins of their base images (standins.sh makes them; --pull=never keeps podman off registries):
#
#   scripts/containers/build.sh          # caprl:dev (Dockerfile), then caprl-cuda:dev (Dockerfile.cuda)
#   scripts/containers/build.sh cpu      # caprl:dev only
#   scripts/containers/build.sh cuda     # caprl-cuda:dev only (CUDA_COMPUTE_CAP, default 90)
#
# Prints each build's wall time and the images' sizes. The cargo registry and target/ are cache
# mounts (as with BuildKit), so a second build recompiles only what changed. No GPU is needed.
set -euo pipefail
# shellcheck source=scripts/containers/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

what=${1:-all}
compute_cap=${CUDA_COMPUTE_CAP:-90}

# $1 image, $2 Dockerfile, then build args.
build() {
  local image=$1 file=$2 start=$SECONDS
  shift 2
  echo "build: $(stamp) podman build -f $file -t $image $*"
  # Docker's image format: the OCI format has no SHELL, and podman would run Dockerfile.cuda's RUN
  # lines with /bin/sh instead of its `bash -o pipefail`.
  (cd "$repo" && nice -n "$NICE" podman build --pull=never --format docker -f "$file" "$@" -t "$image" .)
  echo "build: $image built in $((SECONDS - start)) s"
  echo "build: $image runs as user $(podman image inspect --format '{{.Config.User}}' "$image")"
  # The CUDA binary links libcuda.so.1, the NVIDIA driver's: it starts only on a GPU host.
  if [ "$image" = "$cpu_image" ]; then
    echo "build: $image: $(podman run --rm "$image" --version 2>&1 | head -n 1)"
  fi
}

case $what in
  cpu | all)
    has_image "$rust_image" && has_image "$debian_image" \
      || { echo "build: run scripts/containers/standins.sh cpu first" >&2; exit 1; }
    # The stand-in's tag is this machine's Rust; the Dockerfile's default is the oldest it accepts.
    build "$cpu_image" Dockerfile --build-arg "RUST_VERSION=$rust_version"
    ;;&
  cuda | all)
    has_image "$cuda_devel_image" && has_image "$cuda_runtime_image" \
      || { echo "build: run scripts/containers/standins.sh cuda first" >&2; exit 1; }
    build "$cuda_image" Dockerfile.cuda --build-arg "CUDA_COMPUTE_CAP=$compute_cap"
    ;;
  cpu) ;;
  *) echo "usage: $0 [all|cpu|cuda]" >&2; exit 2 ;;
esac
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'caprl' || true
