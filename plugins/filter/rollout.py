"""Filters for the upgrade and blue/green runbooks: the platform's engine groups and gateways as
one dict (``pool_target``), the rollout order, the KV-test pairs and the Kubernetes templates.

They run on the controller. The Kubernetes templates come from the same builders Pulumi runs
(inferplane.rollout, inferplane.bluegreen), so a runbook never writes an object Pulumi would render
differently.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

ROLE_ORDER = ("encoder", "prefill", "decode")
LWS_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_HASH = "leaderworkerset.sigs.k8s.io/template-revision-hash"
WORKER_CONFIG_ENV = "INFERPLANE_WORKER_CONFIG"


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def local_rollout_target(state: dict[str, Any], state_dir: str, min_groups: dict[str, int] | None = None) -> dict[str, Any]:
    """Groups and gateways of the local platform from its state.json."""
    try:
        endpoints = state["endpoints"]
        groups = state["groups"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"{state_dir}/state.json lacks {exc}: is it a local platform state file?") from None
    gw = endpoints["gateway"]
    gateways = [
        {"name": "smg", "url": gw["url"], "metrics_url": gw["metrics_url"], "headers": _headers(gw.get("admin_key")), "groups": None}
    ]
    for name, extra in sorted((endpoints.get("gateways") or {}).items()):
        gateways.append(
            {
                "name": name,
                "url": extra["url"],
                "metrics_url": extra["metrics_url"],
                "headers": _headers(extra.get("admin_key")),
                "groups": extra.get("groups"),
            }
        )
    out_groups = []
    for g in groups.values():
        _, _, index = g["name"].rpartition("-")
        out_groups.append(
            {
                "name": g["name"],
                "role": g["role"],
                "index": int(index) if index.isdigit() else 0,
                "url": g["url"],
                "direct_url": g["url"],
                "metrics_url": g["url"] + "/metrics",
                "bootstrap_port": g.get("bootstrap_port"),
                "version": g["version"],
                "release_file": str(Path(g["release"]).resolve()),
                "image": "",
            }
        )
    front = endpoints.get("front") or {}
    masters = [
        {"name": m["name"], "metrics_url": m["metrics_url"], "health_url": m["health_url"]}
        for m in (endpoints.get("mooncake") or {}).get("masters") or []
    ]
    return {
        "backend": "local",
        "state_dir": state_dir,
        "mooncake_masters": masters,
        "gateways": gateways,
        "groups": sorted(out_groups, key=lambda g: (ROLE_ORDER.index(g["role"]), g["index"])),
        "min_groups": {r: int((min_groups or {}).get(r, 1)) for r in ROLE_ORDER},
        "front": {"url": front.get("url", ""), "weights": front.get("weights", {})},
    }


def _ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def k8s_rollout_target(
    lws: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    smg_pods: list[dict[str, Any]],
    platform: dict[str, Any],
    release_file: str,
    admin_key: str,
    namespace: str,
    set_name: str = "",
) -> dict[str, Any]:
    """Groups (one per LWS replica; addressed by SMG through the headless DNS name, by the runbook
    directly through the leader pod's IP) and every SMG replica (each keeps its own registry).
    With ``set_name``, the LWS of a blue/green set (``<role>-<set>``)."""
    pools = platform.get("pools") or {}
    gw_spec = platform.get("gateway") or {}
    gw_port, gw_metrics = int(gw_spec.get("port", 30000)), int(gw_spec.get("metrics_port", 29000))
    gateways = []
    for pod in smg_pods:
        ip = (pod.get("status") or {}).get("podIP")
        if ip and _ready(pod):
            name = pod["metadata"]["name"]
            gateways.append(
                {
                    "name": name,
                    "url": f"http://{ip}:{gw_port}",
                    "metrics_url": f"http://{ip}:{gw_metrics}/metrics",
                    "headers": _headers(admin_key),
                    "groups": None,
                }
            )
    if not gateways:
        raise AnsibleFilterError(f"no Ready SMG pod in namespace {namespace}: the gateway must serve before a rollout")
    leaders = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(LWS_WORKER_INDEX) == "0":
            leaders[(labels.get(LWS_NAME), int(labels.get(LWS_INDEX, -1)))] = pod
    groups = []
    suffix = f"-{set_name}" if set_name else ""
    for obj in lws:
        lws_name = obj["metadata"]["name"]
        role = lws_name[: -len(suffix)] if suffix and lws_name.endswith(suffix) else ("" if suffix else lws_name)
        if role not in pools:
            continue
        port = int(pools[role].get("port", 30000))
        for i in range(int(obj["spec"].get("replicas", 0))):
            pod = leaders.get((lws_name, i), {})
            ip = (pod.get("status") or {}).get("podIP", "")
            container = next(iter((pod.get("spec") or {}).get("containers") or []), {})
            env = {e.get("name"): e.get("value") for e in container.get("env") or []}
            try:
                version = json.loads(env.get(WORKER_CONFIG_ENV) or "{}").get("sglang_version", "")
            except ValueError:
                version = ""
            groups.append(
                {
                    "name": f"{lws_name}-{i}",
                    "role": role,
                    "index": i,
                    "lws": lws_name,
                    "url": f"http://{lws_name}-{i}.{lws_name}.{namespace}:{port}",
                    "direct_url": f"http://{ip}:{port}" if ip else "",
                    "metrics_url": f"http://{ip}:{port}/metrics" if ip else "",
                    "bootstrap_port": int(pools[role].get("bootstrap_port", 8998)) if role == "prefill" else None,
                    "version": version,
                    "release_file": (pod.get("metadata", {}).get("annotations") or {}).get("inferplane.io/release-file") or release_file,
                    "image": container.get("image", ""),
                    "revision_hash": (pod.get("metadata", {}).get("labels") or {}).get(LWS_HASH, ""),
                    "leader_pod": pod.get("metadata", {}).get("name", ""),
                    "ready": bool(pod) and _ready(pod),
                }
            )
    return {
        "backend": "kubernetes",
        "namespace": namespace,
        "gateways": gateways,
        "groups": sorted(groups, key=lambda g: (ROLE_ORDER.index(g["role"]), g["index"])),
        "min_groups": {r: int((pools.get(r) or {}).get("min_groups", 1)) for r in ROLE_ORDER},
        "lws": {
            o["metadata"]["name"]: {"replicas": int(o["spec"].get("replicas", 0)), "generation": o["metadata"].get("generation")}
            for o in lws
        },
    }


def rollout_order(groups: list[dict[str, Any]], roles: list[str], only: str = "") -> list[dict[str, Any]]:
    """Roles in ROLE_ORDER (encoder, prefill, decode: servers of the bootstrap and encode calls
    before their clients), inside a role from the highest index down, as LWS partition stepping
    requires (groups >= partition run the new template)."""
    unknown = [r for r in roles if r not in ROLE_ORDER]
    if unknown:
        raise AnsibleFilterError(f"pool {unknown}: not a role; use prefill, decode or prefill,decode")
    chosen = [g for g in groups if g["role"] in roles and (not only or g["name"] == only)]
    if only and not chosen:
        known = ", ".join(g["name"] for g in groups if g["role"] in roles)
        raise AnsibleFilterError(f"group={only}: not a group of pool {','.join(roles)}; groups: {known}")
    return sorted(chosen, key=lambda g: (ROLE_ORDER.index(g["role"]), -int(g["index"])))


def rollout_plan(groups: list[dict[str, Any]], target: dict[str, Any], release_file: str, ready: list[str]) -> list[dict[str, Any]]:
    """Each group with ``on_target`` (it already runs the target of its role), ``action`` (skip a
    group that is on the target and ready on every gateway, upgrade the rest) and a plan line."""
    want_file = str(Path(release_file).resolve())
    ready_urls = {u.rstrip("/") for u in ready}
    out = []
    for g in groups:
        t = target.get(g["role"]) or {}
        if g.get("image"):
            on_target = bool(t) and g["image"] == t.get("sglang_image") and g.get("version") == t.get("sglang_version")
        else:
            on_target = bool(t) and str(Path(g["release_file"]).resolve()) == want_file and g.get("version") == t.get("sglang_version")
        serving = g["url"].rstrip("/") in ready_urls
        action = "skip" if on_target and serving else "upgrade"
        if action == "skip":
            line = f"{g['name']}: already on {t.get('sglang_version')} ({t.get('release')}) and serving, skipped"
        else:
            line = f"{g['name']}: {g.get('version') or '?'} -> {t.get('sglang_version', '?')} ({t.get('release', '?')})" + (
                "" if serving else ", currently out of traffic"
            )
        out.append({**g, "on_target": on_target, "serving": serving, "action": action, "plan_line": line})
    return out


def kv_pairs(group: dict[str, Any], groups: list[dict[str, Any]], sample: int = 0, seed: str = "") -> list[dict[str, Any]]:
    """The KV-test pairs of a prefill or decode group: with every group of the other role (or a
    reproducible sample of ``sample`` of them on a big pool)."""
    other = {"prefill": "decode", "decode": "prefill"}.get(group["role"])
    if other is None:
        raise AnsibleFilterError(f"{group['name']}: KV transfer runs between prefill and decode groups only")
    peers = [g for g in groups if g["role"] == other and g["name"] != group["name"]]
    if 0 < sample < len(peers):
        peers = sorted(random.Random(seed or group["name"]).sample(peers, sample), key=lambda g: g["index"])

    def prefill(g: dict[str, Any]) -> dict[str, Any]:
        return {"name": g["name"], "url": g["direct_url"], "bootstrap_port": g["bootstrap_port"]}

    def decode(g: dict[str, Any]) -> dict[str, Any]:
        return {"name": g["name"], "url": g["direct_url"]}

    if group["role"] == "prefill":
        return [{"prefill": prefill(group), "decode": decode(p)} for p in peers]
    return [{"prefill": prefill(p), "decode": decode(group)} for p in peers]


def lws_leader(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The leader (worker index 0) among a group's pods, or {}."""
    return next((p for p in pods if (p["metadata"].get("labels") or {}).get(LWS_WORKER_INDEX) == "0"), {})


def lws_group_rebuilt(after: list[dict[str, Any]], before: list[dict[str, Any]], size: int) -> bool:
    """Every pod of the group is new (no uid from before), all carry one template hash that is not
    the old one, and all are Ready: the group runs the new revision."""
    if len(after) != int(size):
        return False
    old_uids = {p["metadata"].get("uid") for p in before}
    old_hashes = {(p["metadata"].get("labels") or {}).get(LWS_HASH) for p in before}
    hashes = {(p["metadata"].get("labels") or {}).get(LWS_HASH) for p in after}
    return (
        not ({p["metadata"].get("uid") for p in after} & old_uids)
        and len(hashes) == 1
        and not (hashes & old_hashes)
        and all(_ready(p) for p in after)
    )


def lws_behind(groups: list[dict[str, Any]], group: dict[str, Any]) -> list[str]:
    """Groups of the same role with a higher index that are not on the target: stepping the
    partition down to ``group`` would rebuild them too."""
    return [
        g["name"] for g in groups if g["role"] == group["role"] and int(g["index"]) > int(group["index"]) and not g.get("on_target", False)
    ]


def engine_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods LWS made (engine groups) among ``pods``."""
    return [p for p in pods if LWS_NAME in (p["metadata"].get("labels") or {})]


def gateway_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SMG pods among ``pods``."""
    return [p for p in pods if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "smg"]


def local_set_names(groups: list[dict[str, Any]], sizes: dict[str, int]) -> list[dict[str, str]]:
    """Names for a new set's local groups: per role, the indices after every existing group's."""
    out = []
    for role in ROLE_ORDER:
        count = int(sizes.get(role, 0))
        start = max((int(g["index"]) for g in groups if g["role"] == role), default=-1) + 1
        out += [{"name": f"{role}-{start + i}", "role": role} for i in range(count)]
    return out


def serving_set_objects(platform: dict[str, Any], release_file: str, set_name: str) -> list[dict[str, Any]]:
    """Kubernetes objects of a blue/green set (inferplane.bluegreen.set_objects)."""
    from inferplane.bluegreen import set_objects
    from inferplane.errors import ConfigError
    from inferplane.manifest import load_release

    try:
        return set_objects(platform, load_release(release_file), set_name)
    except ConfigError as exc:
        raise AnsibleFilterError(exc.render()) from None
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def front_selector(set_name: str, phase: str) -> dict[str, Any]:
    """The gateway Service's selector for a switch phase (blue, canary, green), as a merge patch."""
    from inferplane.bluegreen import front_selectors

    wanted: dict[str, Any] = dict(front_selectors(set_name)[phase])
    # A merge patch removes a key only when it is sent as null.
    if "app.kubernetes.io/component" not in wanted:
        wanted["app.kubernetes.io/component"] = None
    return wanted


def lws_template(platform: dict[str, Any], release_file: str, role: str) -> dict[str, Any]:
    """The LWS ``leaderWorkerTemplate`` Pulumi renders for ``role`` on that release."""
    from inferplane.errors import ConfigError
    from inferplane.manifest import load_release
    from inferplane.rollout import lws_template as build

    try:
        return build(platform, load_release(release_file), role)
    except ConfigError as exc:
        raise AnsibleFilterError(exc.render()) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "local_rollout_target": local_rollout_target,
            "k8s_rollout_target": k8s_rollout_target,
            "rollout_order": rollout_order,
            "kv_pairs": kv_pairs,
            "rollout_plan": rollout_plan,
            "lws_template": lws_template,
            "local_set_names": local_set_names,
            "engine_pods": engine_pods,
            "gateway_pods": gateway_pods,
            "serving_set_objects": serving_set_objects,
            "front_selector": front_selector,
            "lws_leader": lws_leader,
            "lws_group_rebuilt": lws_group_rebuilt,
            "lws_behind": lws_behind,
        }
