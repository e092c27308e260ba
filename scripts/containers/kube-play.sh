#!/usr/bin/env bash
# `podman kube play` on the rendered dev overlay (kubectl kustomize k8s/overlays/dev), twice:
#   1. as rendered, not started: which kinds podman creates and which it skips;
#   2. rewritten by kube_adapt.py into what podman runs (StatefulSets and Deployments as Pods
#      named after their Services / pods, volumeClaimTemplates as PVCs), started on one network:
#      the pods' state, the learner's last lines and its /healthz /readyz /metrics after WAIT_S.
# Then `podman kube down`. Needs caprl:dev and the nats stand-in (standins.sh, build.sh cpu).
#
#   scripts/containers/kube-play.sh          # WAIT_S=90 seconds of the adapted run
set -euo pipefail
# shellcheck source=scripts/containers/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

work=${KUBE_WORK:-/var/tmp/caprl-kube}
net=caprl-kube
wait_s=${WAIT_S:-90}
command -v kubectl >/dev/null || { echo "kube-play: kubectl is missing (scripts/ci/install-k8s-tools.sh)" >&2; exit 1; }
for image in "$cpu_image" "$nats_image"; do
  has_image "$image" || { echo "kube-play: $image is missing; run standins.sh and build.sh cpu" >&2; exit 1; }
done

down() {
  local f
  for f in "$work/dev.yaml" "$work/dev-podman.yaml"; do
    if [ -f "$f" ]; then podman kube down "$f" >/dev/null 2>&1 || true; fi
  done
  podman pod ls --filter "network=$net" --format '{{.Name}}' | xargs -r podman pod rm -f -t 2 >/dev/null 2>&1 || true
  # podman makes named volumes of the PVCs, the emptyDirs and the ConfigMaps; kube down leaves them.
  local v
  for v in $(podman volume ls --format '{{.Name}}' | grep -E '^(state-learner-0|data-nats-0|data|tmp|caprl-config-.*|nats-config-.*|(actor|reward-worker)-[0-9]+-(data|tmp)|learner-(data|tmp))$'); do
    podman volume rm -f "$v" >/dev/null 2>&1 || true
  done
  podman network rm -f "$net" >/dev/null 2>&1 || true
}
down
rm -rf "$work" && mkdir -p "$work"
podman network create "$net" >/dev/null

kubectl kustomize "$repo/k8s/overlays/dev" >"$work/dev.yaml"
echo "kube-play: the rendered dev overlay ($work/dev.yaml):"
grep '^kind:' "$work/dev.yaml" | sort | uniq -c | sed 's/^/    /'

echo "kube-play: $(stamp) 1. podman kube play --start=false, as rendered:"
podman kube play --start=false --network "$net" "$work/dev.yaml" 2>&1 | sed 's/^/    /' || true
echo "kube-play: what podman made of it:"
podman pod ls --format '    pod {{.Name}}: {{.NumberOfContainers}} containers' | sort
podman volume ls --format '    volume {{.Name}}' | grep -v -E 'caprl-e2e' || true
podman pod ls --filter "network=$net" --format '{{.Name}}' | xargs -r podman pod rm -f -t 2 >/dev/null 2>&1 || true
podman volume ls --format '{{.Name}}' | grep -E '^(data|tmp|caprl-config-.*|nats-config-.*)$' \
  | xargs -r podman volume rm -f >/dev/null 2>&1 || true

echo "kube-play: $(stamp) 2. rewritten by kube_adapt.py, started:"
python3 "$containers_dir/kube_adapt.py" "$work/dev.yaml" >"$work/dev-podman.yaml" 2>"$work/dropped.txt"
sed 's/^/    /' "$work/dropped.txt"
podman kube play --network "$net" "$work/dev-podman.yaml" 2>&1 | grep -v -E '^(Trying|Getting|Copying|Writing|Storing)' \
  | sed 's/^/    /' || true
sleep "$wait_s"
echo "kube-play: $(stamp) after ${wait_s} s:"
podman ps -a --filter "network=$net" --format '    {{.Names}}: {{.Status}}' | sort
ip_of() {
  local infra
  infra=$(podman pod inspect --format '{{.InfraContainerID}}' "$1")
  podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$infra"
}
learner_ip=$(ip_of learner)
for path in healthz readyz; do
  echo "kube-play: learner /$path: $(curl -s -m 5 -w ' (HTTP %{http_code})' "http://$learner_ip:9100/$path" | tr -d '\n' || true)"
done
echo "kube-play: learner /metrics: $(curl -s -m 5 "http://$learner_ip:9100/metrics" | grep -c '^caprl_' || true) caprl_ samples"
echo "kube-play: nats /healthz: $(curl -s -m 5 "http://$(ip_of nats):8222/healthz?js-enabled-only=true" || true)"
echo "kube-play: learner's last lines:"
podman logs learner-learner 2>&1 | tail -n 6 | sed 's/^/    /'
echo "kube-play: actor-0's last line: $(podman logs actor-0-actor 2>&1 | tail -n 1)"
down
echo "kube-play: $(stamp) done (podman kube down)"
