#!/usr/bin/env bash
# Local stand-ins for the public images that Dockerfile, Dockerfile.cuda and k8s/ name, for a
# machine with podman but no image registry. Each is made under the exact public name, so the
# Dockerfiles build unchanged with `podman build --pull=never`. Idempotent: an image that exists
# is skipped (FORCE=1 remakes them all).
#
#   scripts/containers/standins.sh            # all of them
#   scripts/containers/standins.sh cpu        # what Dockerfile and the nats StatefulSet need
#   scripts/containers/standins.sh cuda       # what Dockerfile.cuda needs
#
# What each stand-in is:
#   debian:bookworm-slim     debootstrap --variant=minbase bookworm from deb.debian.org, docs and
#                            apt lists removed like the official slim image.
#   rust:<V>-slim-bookworm   that base + gcc, libc6-dev, ca-certificates and this machine's Rust
#                            toolchain (rustc, cargo, std) in /usr/local/cargo/bin, as the official
#                            image lays it out. <V> is the host toolchain's version; build.sh passes
#                            it as RUST_VERSION.
#   nats:2.10.24-alpine      that base + Debian's nats-server package (2.9.x), `nats-server` on PATH.
#   ubuntu:24.04             debootstrap --variant=minbase noble from archive.ubuntu.com.
#   nvidia/cuda:13.0.2-devel-ubuntu24.04
#                            ubuntu:24.04 + CUDA 13.0.2's nvcc, headers and libraries from PyPI
#                            wheels (scripts/cuda-toolkit.sh) at /usr/local/cuda, with the libcuda
#                            stub in lib64/stubs and the image's ENV as NVIDIA sets it; plus this
#                            machine's Rust toolchain in /usr/local/cargo/bin (no rustup server is
#                            reachable here; Dockerfile.cuda skips rustup when cargo is new enough).
#   nvidia/cuda:13.0.2-runtime-ubuntu24.04
#                            ubuntu:24.04 + the runtime libraries (cudart, cublas, cublasLt,
#                            curand) from the devel stand-in, in /usr/local/cuda/lib64 on ld.so's path.
# Every stand-in trusts this machine's extra CA certificates (/usr/local/share/ca-certificates):
# HTTPS leaves here through a TLS-inspecting proxy, and cargo and pip inside a build need it.
set -euo pipefail
# shellcheck source=scripts/containers/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

what=${1:-all}
force=${FORCE:-0}
debian_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ubuntu_mirror=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
work=${STANDIN_WORK:-/var/tmp/caprl-standins}
mkdir -p "$work"

toolchain=$(rustc --print sysroot)

need() {
  if [ "$force" != 1 ] && has_image "$1"; then
    echo "standins: $1 exists, skipped"
    return 1
  fi
  echo "standins: $(stamp) making $1"
  return 0
}

# A debootstrapped root filesystem imported as an image. $1 image, $2 suite, $3 mirror,
# $4 debootstrap's suite script ("" for the suite's own), $5.. debootstrap options.
debootstrap_image() {
  local image=$1 suite=$2 mirror=$3 script=$4
  shift 4
  command -v debootstrap >/dev/null || { echo "standins: apt-get install debootstrap" >&2; exit 1; }
  local root=$work/rootfs-$suite start=$SECONDS
  rm -rf "$root"
  nice -n "$NICE" debootstrap --variant=minbase "$@" "$suite" "$root" "$mirror" ${script:+"$script"} >"$work/debootstrap-$suite.log" 2>&1 || {
    tail -n 20 "$work/debootstrap-$suite.log" >&2
    echo "standins: debootstrap $suite failed; the full log is $work/debootstrap-$suite.log" >&2
    exit 1
  }
  # Slim: no docs, man pages, locales or package lists (as the official slim images).
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
  # ca-certificates (which the Dockerfiles install) adds these to the bundle cargo and curl read.
  mkdir -p "$root/usr/local/share/ca-certificates"
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Acquire::Languages "none";
APT
  echo "$suite-standin" >"$root/etc/hostname"
  : >"$root/etc/resolv.conf"
  tar -C "$root" -c . | podman import --change 'CMD ["bash"]' \
    --change "LABEL org.opencontainers.image.description=\"stand-in: debootstrap $suite from $mirror\"" \
    - "$image" >/dev/null 2>&1
  rm -rf "$root"
  echo "standins: $image made in $((SECONDS - start)) s"
}

debian_base() {
  need "$debian_image" || return 0
  debootstrap_image "$debian_image" bookworm "$debian_mirror" ""
  # debootstrap writes only the main suite; add updates and security as the official image has.
  apt_sources "$debian_image" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
}

ubuntu_base() {
  need "$ubuntu_image" || return 0
  # Debian's debootstrap has no noble script or Ubuntu keyring: gutsy's script serves every Ubuntu
  # release, and the Release file goes unchecked (the image's own apt checks what it installs
  # later with the ubuntu-keyring that debootstrap puts in it).
  debootstrap_image "$ubuntu_image" noble "$ubuntu_mirror" /usr/share/debootstrap/scripts/gutsy \
    --no-check-gpg --components=main,universe
  apt_sources "$ubuntu_image" \
    "deb $ubuntu_mirror noble main universe" \
    "deb $ubuntu_mirror noble-updates main universe" \
    "deb $ubuntu_mirror noble-security main universe"
}

# $1 image, then the lines of its /etc/apt/sources.list: written inside and committed.
apt_sources() {
  local image=$1 c
  shift
  c=$(podman run -d "$image" sleep 600)
  printf '%s\n' "$@" | podman exec -i "$c" sh -c 'cat >/etc/apt/sources.list'
  podman commit -q "$c" "$image" >/dev/null
  podman rm -f -t 0 "$c" >/dev/null
}

# $1 image to make, $2 its Containerfile, then build args.
build_standin() {
  local image=$1 file=$2 start=$SECONDS
  shift 2
  nice -n "$NICE" podman build --pull=never -q -f "$containers_dir/$file" "$@" -t "$image" "$containers_dir" >/dev/null
  echo "standins: $image made in $((SECONDS - start)) s"
}

rust_builder() {
  need "$rust_image" || return 0
  build_standin "$rust_image" rust.Containerfile --build-arg "BASE=$debian_image" \
    --build-arg "RUST_VERSION=$(rustc --version | awk '{print $2}')" -v "$toolchain:/toolchain:ro"
}

nats() {
  need "$nats_image" || return 0
  build_standin "$nats_image" nats.Containerfile --build-arg "BASE=$debian_image"
}

cuda_devel() {
  need "$cuda_devel_image" || return 0
  local toolkit=${CAPRL_CUDA_TOOLKIT_SH:-$repo/scripts/cuda-toolkit.sh}
  [ -f "$toolkit" ] || { echo "standins: no toolkit.sh (set CAPRL_CUDA_TOOLKIT_SH)" >&2; exit 1; }
  # toolkit.sh makes the libcuda stub from cudarc's symbol list: give it the locked cudarc's source.
  (cd "$repo" && cargo fetch --locked >/dev/null)
  local cudarc
  cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19* | sort -V | tail -n 1)
  local ctx=$work/cuda-context
  rm -rf "$ctx" && mkdir -p "$ctx/cargo/registry/src/index/$(basename "$cudarc")/src/driver/sys"
  cp "$cudarc/src/driver/sys/mod.rs" "$ctx/cargo/registry/src/index/$(basename "$cudarc")/src/driver/sys/"
  cp "$toolkit" "$ctx/toolkit.sh"
  local start=$SECONDS
  nice -n "$NICE" podman build --pull=never -q -f "$containers_dir/cuda-devel.Containerfile" \
    --build-arg "BASE=$ubuntu_image" --build-arg "CUDA_VERSION=$cuda_version" \
    --build-arg "RUST_VERSION=$(rustc --version | awk '{print $2}')" \
    -v "$toolchain:/toolchain:ro" -t "$cuda_devel_image" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "standins: $cuda_devel_image made in $((SECONDS - start)) s"
}

cuda_runtime() {
  need "$cuda_runtime_image" || return 0
  build_standin "$cuda_runtime_image" cuda-runtime.Containerfile --build-arg "BASE=$ubuntu_image" \
    --build-arg "DEVEL=$cuda_devel_image" --build-arg "CUDA_VERSION=$cuda_version"
}

case $what in
  cpu) debian_base; rust_builder; nats ;;
  cuda) ubuntu_base; cuda_devel; cuda_runtime ;;
  all) debian_base; rust_builder; nats; ubuntu_base; cuda_devel; cuda_runtime ;;
  *) echo "usage: $0 [all|cpu|cuda]" >&2; exit 2 ;;
esac
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
  | grep -E 'library/(debian|ubuntu|rust|nats)|nvidia/cuda' || true
