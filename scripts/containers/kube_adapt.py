#!/usr/bin/env python3
"""Rewrites a rendered overlay (kubectl kustomize) into what `podman kube play` can run.

    kube_adapt.py RENDERED.yaml > PODMAN.yaml     # the dropped kinds are listed on stderr

podman (4.3) plays Pod, Deployment, PersistentVolumeClaim, ConfigMap and Secret documents and
skips the rest. Without Services a Deployment's pods (named <deployment>-pod-<i>) cannot be
reached under the Service names the roles dial (nats://nats:4222), so every workload becomes
plain Pods named as Kubernetes would name the StatefulSet's or Deployment's pods:

- a StatefulSet with a Service of its own name (`learner`) becomes the Pod `learner`, a
  StatefulSet behind a headless Service (`nats`, serviceName nats-headless) the Pod named after
  the client Service that selects it; its volumeClaimTemplates become PersistentVolumeClaims
  <claim>-<statefulset>-0 (podman volumes), mounted where the template mounted them;
- a Deployment with N replicas becomes the Pods <deployment>-0 .. <deployment>-(N-1), so
  `fieldRef: metadata.name` (the roles' --id) is unique as in a cluster;
- pods on one podman network resolve each other by pod name: the Pod `nats` answers to `nats`;
- an emptyDir volume becomes <pod>-<volume>: podman 4.3 makes an emptyDir a named volume of the
  volume's name, shared by every pod that names it (the second pod's synth then finds /data/synth
  already written and fails);
- init containers are of podman's type "always" (annotation
  io.podman.annotations.init.container.type): they run again whenever a container of the pod
  restarts, as Kubernetes reruns them after a sandbox restart, and `caprl data synth` leaves a
  directory that already holds its data set as it is. podman 4.3's default for kube play,
  "once", fails to remove the finished init container here ("cannot remove container") and
  stops the play;
- the pods come in dependency order (nats, the learner, then the workers): podman creates and
  starts them one by one and stops at the first that fails;
- containers lose `ports` and their probes: podman 4.3 publishes every containerPort on the host
  under the same number (the learner's and each actor's 9100 collide, nats' 4222 collides with
  any nats-server on the host), and turns probes into healthchecks that need systemd timers; the
  script reads the probe endpoints itself from the pod IPs;
- env from a Secret (secretKeyRef) becomes the literal value: podman 4.3 turns the Secret into a
  podman secret and then fails to read it ("secret nats-credentials is not valid JSON");
- the NATS StatefulSet (a 3-node cluster) becomes one Pod, so that Pod runs `nats.conf` (the
  users and permissions) without `nats-cluster.conf`'s routes, and the run config asks that
  single server for `nats.replicas = 1`; the 3-node cluster itself is proven with real servers
  on loopback (tests/runtime_cluster.rs);
- Service, NetworkPolicy, PodDisruptionBudget and Namespace are dropped (nothing to map to),
  and so are ConfigMaps no pod mounts (the Grafana dashboard, the Prometheus rules).
"""
import base64
import copy
import re
import sys

import yaml


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def main(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    services = [d for d in docs if d["kind"] == "Service"]
    secrets = {}
    for d in docs:
        if d["kind"] == "Secret":
            values = {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
            values.update(d.get("stringData") or {})
            secrets[d["metadata"]["name"]] = values
    mounted = {
        v["configMap"]["name"]
        for d in docs
        if d["kind"] in ("StatefulSet", "Deployment")
        for v in d["spec"]["template"]["spec"].get("volumes", [])
        if "configMap" in v
    }
    out, dropped = [], {}

    def literal_secrets(spec):
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    e.pop("valueFrom")
                    e["value"] = secrets[ref["name"]][ref["key"]]

    def own_empty_dirs(name, spec):
        renamed = {}
        for v in spec.get("volumes", []):
            if "emptyDir" in v:
                renamed[v["name"]] = v["name"] = f"{name}-{v['name']}"
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for m in c.get("volumeMounts", []):
                m["name"] = renamed.get(m["name"], m["name"])

    def no_ports_or_probes(spec):
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            for k in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
                c.pop(k, None)

    def pod(name, template, extra_volumes=()):
        spec = copy.deepcopy(template["spec"])
        literal_secrets(spec)
        no_ports_or_probes(spec)
        own_empty_dirs(name, spec)
        spec.setdefault("volumes", []).extend(extra_volumes)
        spec["restartPolicy"] = "OnFailure" if name.startswith("learner") else "Always"
        meta = copy.deepcopy(template.get("metadata", {}))
        meta["name"] = name
        meta.setdefault("annotations", {})["io.podman.annotations.init.container.type"] = "always"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def single_nats_server(d):
        for c in d["spec"]["template"]["spec"]["containers"]:
            c["command"] = [a.replace("nats-cluster.conf", "nats.conf") for a in c.get("command", [])]
        return d

    def one_replica(d):
        for key, text in (d.get("data") or {}).items():
            if key.endswith(".toml"):
                d["data"][key] = re.sub(r"(?m)^replicas = \d+.*$", "replicas = 1  # one nats Pod under podman kube play", text)
        return d

    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind == "StatefulSet" and name == "nats":
            d = single_nats_server(d)
        if kind == "ConfigMap":
            d = one_replica(d)
        if kind == "ConfigMap" and name in mounted or kind == "PersistentVolumeClaim":
            out.append(d)
        elif kind == "StatefulSet":
            labels = d["spec"]["template"]["metadata"]["labels"]
            # The client Service that selects these pods: the name the other roles dial.
            svc = [
                s["metadata"]["name"]
                for s in services
                if s["spec"].get("clusterIP") != "None" and labels_match(s["spec"].get("selector"), labels)
            ]
            extra = []
            for t in d["spec"].get("volumeClaimTemplates", []):
                claim = f"{t['metadata']['name']}-{name}-0"
                out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": claim}, "spec": t["spec"]})
                extra.append({"name": t["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim}})
            out.append(pod(svc[0] if svc else name, d["spec"]["template"], extra))
        elif kind == "Deployment":
            for i in range(d["spec"].get("replicas", 1)):
                out.append(pod(f"{name}-{i}", d["spec"]["template"]))
        else:
            dropped.setdefault(kind, []).append(name)
    order = {"nats": 0, "learner": 1}
    out.sort(key=lambda d: 0 if d["kind"] != "Pod" else 1 + order.get(d["metadata"]["name"], 2))
    for kind, names in sorted(dropped.items()):
        print(f"kube_adapt: dropped {kind}: {', '.join(names)}", file=sys.stderr)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


def block_strings(dumper, text):
    """Multi-line strings (the ConfigMaps' files) as literal blocks, as kubectl writes them."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


yaml.SafeDumper.add_representer(str, block_strings)

if __name__ == "__main__":
    main(sys.argv[1])
