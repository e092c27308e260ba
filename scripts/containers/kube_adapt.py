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
- Service, NetworkPolicy, PodDisruptionBudget and Namespace are dropped (nothing to map to).
"""
import copy
import sys

import yaml


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def main(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    services = [d for d in docs if d["kind"] == "Service"]
    out, dropped = [], {}

    def pod(name, template, extra_volumes=()):
        spec = copy.deepcopy(template["spec"])
        spec.setdefault("volumes", []).extend(extra_volumes)
        spec["restartPolicy"] = "OnFailure" if name.startswith("learner") else "Always"
        meta = copy.deepcopy(template.get("metadata", {}))
        meta["name"] = name
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind in ("ConfigMap", "Secret", "PersistentVolumeClaim", "Pod"):
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
    for kind, names in sorted(dropped.items()):
        print(f"kube_adapt: dropped {kind}: {', '.join(names)}", file=sys.stderr)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(sys.argv[1])
