#!/usr/bin/env bash
# End to end in containers: nats-server, the learner, 2 actors and 2 reward workers from
# caprl:dev on one podman network, each as the manifests run it (k8s/base: uid 10001, read-only
# root filesystem, all capabilities dropped, no privilege escalation, writable only where the
# manifests mount a volume: /tmp, the learner's /var/lib/caprl, the data set's /data). A short
# sync SCST run (the tiny run of tests/support's `sets`) must end with the same final weights as
# `caprl local --actors 2 --reward-workers 2` on this machine with the same config and data.
# While the run is on it reads /healthz, /readyz and /metrics from the containers.
#
#   scripts/containers/e2e.sh        # needs caprl:dev and the nats stand-in (build.sh, standins.sh)
#
# HOST_CAPRL is the host binary for the `caprl local` run (default target/release/caprl, built
# with nice if missing). E2E_WORK (default /var/tmp/caprl-e2e) holds the config and the local run.
set -Eeuo pipefail
# shellcheck source=scripts/containers/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

work=${E2E_WORK:-/var/tmp/caprl-e2e}
host_caprl=${HOST_CAPRL:-$repo/target/release/caprl}
net=caprl-e2e
p=caprl-e2e # container and volume name prefix
# The dev overlay's fixed passwords (k8s/overlays/dev/kustomization.yaml).
declare -A password=([learner]=dev-learner [actor]=dev-actor [reward-worker]=dev-reward-worker)
# Host ports the containers' metrics port 9100 (and nats' monitor port) are published on.
declare -A port=([learner]=19100 [actor-0]=19101 [actor-1]=19102 [reward-worker-0]=19103
  [reward-worker-1]=19104 [nats]=18222)

for image in "$cpu_image" "$nats_image"; do
  has_image "$image" || { echo "e2e: $image is missing; run standins.sh and build.sh cpu" >&2; exit 1; }
done
if [ ! -x "$host_caprl" ]; then
  echo "e2e: $host_caprl is missing; building it (cargo build --release)"
  (cd "$repo" && nice -n "$NICE" cargo build --release --locked --bin caprl)
fi

containers() { podman ps -a --format '{{.Names}}' | grep "^$p-" || true; }
cleanup() {
  local c
  for c in $(containers); do podman rm -f -t 2 "$c" >/dev/null; done
  podman network rm -f "$net" >/dev/null 2>&1 || true
  for v in data state nats; do podman volume rm -f "$p-$v" >/dev/null 2>&1 || true; done
}
cleanup
trap 'echo "e2e: failed; logs: podman logs <name> for $(containers | tr "\n" " ")" >&2' ERR

rm -rf "$work" && mkdir -p "$work/config"
# The tiny run of tests/support's `sets` (as tests/runtime_transport.rs compares the in-process
# bus with NATS), SCST, sync mode: with a fixed seed the weights are a function of the config only.
cat >"$work/config/caprl.toml" <<'TOML'
seed = 42
device = "cpu"
run_dir = "/var/lib/caprl/run"

[data]
dir = "/data/synth"

[model]
embed = 32
hidden = 32

[train]
objective = "scst"
xe_epochs = 1
rl_epochs = 1
batch_size = 16
eval_images = 8

[reward]
spec = "cider=1"

[runtime]
mode = "sync"
run_id = "default"
tasks_in_flight = 4
images_per_task = 4
ack_wait_secs = 60

[nats]
url = "nats://nats:4222"
max_message_bytes = 8388608

[checkpoint]
every_steps = 1000
TOML
chmod -R a+rX "$work"

podman network create "$net" >/dev/null
for v in data state nats; do podman volume create "$p-$v" >/dev/null; done

# What every caprl container shares with the manifests' pod and container securityContext.
hardened=(--user 10001:10001 --read-only --read-only-tmpfs=false --cap-drop ALL
  --security-opt no-new-privileges -v "$work/config:/etc/caprl:ro")

echo "e2e: $(stamp) the data set: caprl data synth in a container (the manifests' initContainer)"
podman run --rm --name "$p-synth" "${hardened[@]}" -v "$p-data:/data:U" "$cpu_image" \
  data synth --out /data/synth --seed 42 \
  --train 64 --val 16 --test 16 --quiet

echo "e2e: $(stamp) nats-server (k8s/base/nats.conf, uid 1000, read-only root, JetStream on /data)"
podman run -d --name "$p-nats" --network "$net" --network-alias nats \
  --user 1000:1000 --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges \
  -v "$repo/k8s/base/nats.conf:/etc/nats/nats.conf:ro" -v "$p-nats:/data:U" \
  -e CAPRL_NATS_LEARNER_PASSWORD=dev-learner -e CAPRL_NATS_ACTOR_PASSWORD=dev-actor \
  -e CAPRL_NATS_REWARD_WORKER_PASSWORD=dev-reward-worker \
  -p "127.0.0.1:${port[nats]}:8222" --entrypoint nats-server "$nats_image" \
  --config /etc/nats/nats.conf >/dev/null
for _ in $(seq 60); do
  curl -fsS "http://127.0.0.1:${port[nats]}/healthz?js-enabled-only=true" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "e2e: nats /healthz?js-enabled-only=true: $(curl -sS "http://127.0.0.1:${port[nats]}/healthz?js-enabled-only=true")"

# $1 name (also --id and the network alias), $2 role, then volume options.
role() {
  local name=$1 role=$2
  shift 2
  local id=()
  [ "$role" = learner ] || id=(--id "$name")
  podman run -d --name "$p-$name" --network "$net" --network-alias "$name" "${hardened[@]}" \
    --tmpfs /tmp:rw,mode=1777,size=256m -v "$p-data:/data:ro" "$@" \
    -e "CAPRL_NATS_PASSWORD=${password[$role]}" -p "127.0.0.1:${port[$name]}:9100" "$cpu_image" \
    "$role" --config /etc/caprl/caprl.toml --set "nats.user=$role" --nats-url nats://nats:4222 \
    --metrics-addr 0.0.0.0:9100 "${id[@]}" >/dev/null
  echo "e2e: $(stamp) started $p-$name: $(podman inspect --format \
    'user {{.Config.User}}, read-only root {{.HostConfig.ReadonlyRootfs}}, caps dropped {{.HostConfig.CapDrop}}' \
    "$p-$name")"
}
# Waits until $1's /readyz answers 200 (or its container stops).
ready() {
  for _ in $(seq 240); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${port[$1]}/readyz")" = 200 ] && return 0
    [ "$(podman inspect --format '{{.State.Running}}' "$p-$1")" = true ] || return 0
    sleep 0.5
  done
}
# The probes the manifests declare, read from the host through the published ports.
probe() {
  local base=http://127.0.0.1:${port[$1]} path
  for path in healthz readyz; do
    echo "e2e: $1 /$path: $(curl -s -w ' (HTTP %{http_code})' "$base/$path" | tr -d '\n')"
  done
  local metrics
  metrics=$(curl -s "$base/metrics" | grep '^caprl_' || true)
  echo "e2e: $1 /metrics: $(wc -l <<<"$metrics") caprl_ samples, e.g.:"
  sed -n '1,3s/^/    /p' <<<"$metrics"
}
start=$SECONDS
# The learner creates the run's streams and is ready once it has published its first snapshot
# (after the XE epoch); it is probed then, before the workers start (the tiny run ends seconds
# after they do). In a cluster the workers would be restarted until the learner is up:
# --restart on-failure stands for the Deployments' restarts.
role learner learner -v "$p-state:/var/lib/caprl:U"
ready learner
probe learner
for i in 0 1; do role "actor-$i" actor --restart on-failure; done
for i in 0 1; do role "reward-worker-$i" reward-worker --restart on-failure; done
for name in actor-0 reward-worker-0; do
  ready "$name"
  probe "$name"
done
echo "e2e: actor-0's uid and root filesystem, seen from inside:"
podman exec "$p-actor-0" sh -c 'id; touch /x 2>&1 | sed "s/^/    /"; touch /tmp/x && echo "    /tmp is writable"' \
  || true

learner_rc=$(podman wait "$p-learner")
echo "e2e: $(stamp) learner exited with $learner_rc after $((SECONDS - start)) s; its last lines:"
podman logs "$p-learner" 2>&1 | tail -n 8 | sed 's/^/    /'
for name in actor-0 actor-1 reward-worker-0 reward-worker-1; do
  podman stop -t 20 "$p-$name" >/dev/null
  echo "e2e: $name stopped (SIGTERM), exit $(podman inspect --format '{{.State.ExitCode}}' "$p-$name"):" \
    "$(podman logs "$p-$name" 2>&1 | tail -n 1)"
done
[ "$learner_rc" = 0 ] || { echo "e2e: the learner failed" >&2; exit 1; }

state=$(podman volume inspect --format '{{.Mountpoint}}' "$p-state")
data=$(podman volume inspect --format '{{.Mountpoint}}' "$p-data")
last_ckpt() { find "$1/checkpoints" -maxdepth 1 -name 'ckpt-*' | sort | tail -n 1; }
in_containers=$(last_ckpt "$state/run")/model.safetensors

echo "e2e: $(stamp) the same run with caprl local on the host ($host_caprl), same config and data"
local_start=$SECONDS
"$host_caprl" local --actors 2 --reward-workers 2 --config "$work/config/caprl.toml" \
  --set "data.dir=\"$data/synth\"" --set "run_dir=\"$work/local-run\"" >"$work/local.log" 2>&1 \
  || { tail -n 20 "$work/local.log" >&2; echo "e2e: caprl local failed ($work/local.log)" >&2; exit 1; }
echo "e2e: caprl local finished in $((SECONDS - local_start)) s; its last lines:"
tail -n 4 "$work/local.log" | sed 's/^/    /'
on_host=$(last_ckpt "$work/local-run")/model.safetensors

echo "e2e: final weights, containers: $(sha256sum "$in_containers" | cut -c1-16) ${in_containers#"$state"/}"
echo "e2e: final weights, caprl local: $(sha256sum "$on_host" | cut -c1-16) ${on_host#"$work"/}"
if cmp -s "$in_containers" "$on_host"; then
  echo "e2e: PASS: bit-identical final weights"
  cleanup
else
  echo "e2e: FAIL: the final weights differ (containers and volumes left for a look)" >&2
  exit 1
fi
