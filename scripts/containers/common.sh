# Shared by the scripts in scripts/containers/: podman with this folder's containers.conf,
# the repository root, and the names of the public images the Dockerfiles and manifests use.
# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
containers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$containers_dir/../.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$containers_dir/containers.conf}
# Builds share the machine: run them at low priority (NICE=0 to turn off).
NICE=${NICE:-15}

if ! command -v podman >/dev/null 2>&1; then
  echo "$(basename "$0"): podman is not installed; on Debian: apt-get install podman runc" >&2
  exit 1
fi

# The images the Dockerfiles start FROM and the manifests run, fully qualified as podman stores them.
debian_image=docker.io/library/debian:bookworm-slim
ubuntu_image=docker.io/library/ubuntu:24.04
cuda_version=13.0.2
cuda_devel_image=docker.io/nvidia/cuda:${cuda_version}-devel-ubuntu24.04
cuda_runtime_image=docker.io/nvidia/cuda:${cuda_version}-runtime-ubuntu24.04
nats_image=docker.io/library/nats:2.10.24-alpine
cpu_image=localhost/caprl:dev
# The names k8s/README.md builds (the manifests' `caprl` and `caprl-cuda`).
cuda_image=localhost/caprl-cuda:dev

has_image() { podman image exists "$1"; }
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# The Rust stand-in carries this machine's toolchain; its tag is that toolchain's version.
rust_version=$(rustc --version | awk '{print $2}' | cut -d. -f1,2)
rust_image=docker.io/library/rust:${rust_version}-slim-bookworm
