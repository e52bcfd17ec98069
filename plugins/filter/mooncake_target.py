"""Filters: the Mooncake HA control plane of a platform, as one dict the mooncake_* roles share."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def mooncake_local_target(state: dict[str, Any], state_dir: str) -> dict[str, Any]:
    """From the local platform's state.json: endpoints, masters and the process names to act on."""
    try:
        mc = state["endpoints"]["mooncake"]
        endpoints = list(state["endpoints"]["etcd"]["endpoints"])
        procs = state["processes"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"{state_dir}/state.json lacks {exc}: is it a local platform state file?") from None
    by_port = {str(p["ports"].get("client")): p["name"] for p in procs.values() if p.get("kind") == "etcd"}
    members = []
    for ep in endpoints:
        name = by_port.get(ep.rsplit(":", 1)[-1])
        if name is None:
            raise AnsibleFilterError(f"{state_dir}/state.json: no etcd process listens on {ep}")
        members.append({"name": name, "endpoint": ep})
    masters = [{"name": m["name"], "rpc_address": m["rpc_address"], "metrics_url": m["metrics_url"]} for m in mc["masters"]]
    missing = [m["name"] for m in masters if m["name"] not in procs]
    if missing:
        raise AnsibleFilterError(f"{state_dir}/state.json: masters {missing} have no process entry")
    return {
        "backend": "local",
        "state_dir": state_dir,
        "cluster_id": mc["cluster_id"],
        "master_address": mc["master_address"],
        "metadata_server": mc.get("metadata_url", "P2PHANDSHAKE"),
        "etcd_endpoints": endpoints,
        "etcd_members": members,
        "masters": masters,
    }


def mooncake_k8s_target(
    spec: dict[str, Any],
    namespace: str,
    *,
    context: str = "",
    master_statefulset: str = "mooncake-master",
    etcd_statefulset: str = "etcd",
    etcd_members: int = 3,
    etcd_client_port: int = 2379,
) -> dict[str, Any]:
    """From the stack's mooncake spec: pod names are the StatefulSets' ordinals, addresses their headless DNS."""
    if not spec or spec.get("mode") != "ha":
        raise AnsibleFilterError(
            f"mooncake.mode is {spec.get('mode') if spec else 'unset'}: failover needs mode: ha (two or more masters on etcd)"
        )
    if not namespace:
        raise AnsibleFilterError("kube_namespace is empty: set it in the inventory")
    rpc, metrics = int(spec.get("rpc_port", 50051)), int(spec.get("metrics_port", 9003))
    masters = []
    for i in range(int(spec.get("masters", 2))):
        host = f"{master_statefulset}-{i}.{master_statefulset}.{namespace}.svc"
        masters.append(
            {"name": f"{master_statefulset}-{i}", "rpc_address": f"{host}:{rpc}", "metrics_url": f"http://{host}:{metrics}/metrics"}
        )
    external = list(spec.get("etcd_endpoints") or [])
    if external:
        # etcd outside the cluster: it can be diagnosed but not acted on as pods.
        members = [{"name": "", "endpoint": ep} for ep in external]
    else:
        members = [
            {"name": f"{etcd_statefulset}-{i}", "endpoint": f"{etcd_statefulset}-{i}.{etcd_statefulset}.{namespace}.svc:{etcd_client_port}"}
            for i in range(etcd_members)
        ]
    endpoints = [m["endpoint"] for m in members]
    return {
        "backend": "kubernetes",
        "namespace": namespace,
        "kube_context": context,
        "cluster_id": spec.get("cluster_id", "mooncake_cluster"),
        "master_address": "etcd://" + ";".join(endpoints),
        "metadata_server": spec.get("metadata_server") or "P2PHANDSHAKE",
        "etcd_endpoints": endpoints,
        "etcd_members": members,
        "masters": masters,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"mooncake_local_target": mooncake_local_target, "mooncake_k8s_target": mooncake_k8s_target}
