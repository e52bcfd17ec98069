"""A complete temporary serving set for a blue/green switch on Kubernetes (docs/adr/0090).

SMG pairs any registered prefill with any registered decode, so a set on another model or engine
version must never share a gateway with the serving one. The temporary set (``green``) is the
stack's own pools and gateway rendered by the same builders Pulumi runs, for the target release,
under other names: LWS ``<role>-<set>`` with their headless Services, and an SMG Deployment
``smg-<set>`` whose workers are only those groups. Its SMG pods keep ``app.kubernetes.io/name:
smg`` (the NetworkPolicies admit them like the stack's) and differ in
``app.kubernetes.io/component: gateway-<set>``, which is what the front Service's selector
switches on:

- ``{name: smg, component: gateway}``: the stack's gateway only (Pulumi's selector);
- ``{name: smg}``: both gateways, new connections split by pod count (the canary share);
- ``{name: smg, component: gateway-<set>}``: the temporary set only.

Every leader URL and encoder URL of the stack is rewritten to the set's names, so nothing in the
set points at a blue group.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from inferplane import endpoints
from inferplane.builders.common import selector
from inferplane.builders.gateway import COMPONENT as GATEWAY_COMPONENT
from inferplane.builders.gateway import NAME as GATEWAY_NAME
from inferplane.builders.gateway import deployment
from inferplane.builders.pools import LWS_NAME_LABEL, headless_service, leader_worker_set
from inferplane.launch_worker import ENV_CONFIG, worker_config
from inferplane.manifest import ReleaseManifest
from inferplane.spec import PlatformSpec, parse_platform

SET_LABEL = "inferplane.io/serving-set"
SET_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")


def set_component(set_name: str) -> str:
    return f"{GATEWAY_COMPONENT}-{set_name}"


def front_selectors(set_name: str) -> dict[str, dict[str, str]]:
    """The front Service's selector for each phase of a switch."""
    return {
        "blue": selector(GATEWAY_NAME, GATEWAY_COMPONENT),
        "canary": {"app.kubernetes.io/name": GATEWAY_NAME},
        "green": selector(GATEWAY_NAME, set_component(set_name)),
    }


def _renames(spec: PlatformSpec, set_name: str) -> dict[str, str]:
    """Every stack leader URL -> the same group of the set."""
    out: dict[str, str] = {}
    for role, pool in spec.pools.items():
        for i in range(pool.groups):
            blue = endpoints.leader_url(spec, role, i)
            name = f"{endpoints.pool_name(role)}-{set_name}"
            out[blue] = f"http://{name}-{i}.{name}.{spec.namespace}:{pool.port}"
    return out


def _rewrite(text: str, renames: dict[str, str]) -> str:
    # Longest first: prefill-1 must not be rewritten inside prefill-10.
    for old in sorted(renames, key=len, reverse=True):
        text = re.sub(re.escape(old) + r"(?![0-9])", renames[old], text)
    return text


def set_objects(platform: dict[str, Any], release: ReleaseManifest, set_name: str) -> list[dict[str, Any]]:
    """Headless Services, LWS per role and the set's own SMG Deployment, for ``release``."""
    if not SET_NAME.match(set_name):
        raise ValueError(f"set name '{set_name}': 1-12 lowercase letters and digits, starting with a letter")
    spec = parse_platform(platform)
    renames = _renames(spec, set_name)
    objects: list[dict[str, Any]] = []
    for role, pool in spec.pools.items():
        name = f"{endpoints.pool_name(role)}-{set_name}"
        svc = headless_service(spec, role, pool)
        svc["metadata"]["name"] = name
        svc["metadata"]["labels"][SET_LABEL] = set_name
        svc["spec"]["selector"] = {LWS_NAME_LABEL: name}
        lws = leader_worker_set(spec, role, pool, worker_config(role, spec, release), release.effective(role).sglang_image)
        lws["metadata"]["name"] = name
        lws["metadata"]["labels"][SET_LABEL] = set_name
        template = lws["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            pod = template[key]
            pod["metadata"]["labels"][SET_LABEL] = set_name
            for container in pod["spec"]["containers"]:
                for env in container.get("env", []):
                    if env["name"] == ENV_CONFIG:
                        # Encoder URLs (EPD) live in the WorkerConfig JSON: point them at the set's encoders.
                        env["value"] = json.dumps(json.loads(_rewrite(env["value"], renames)), separators=(",", ":"))
        # A new object: the rollout partition starts at 0 (the whole set is new anyway).
        objects += [svc, lws]
    smg = copy.deepcopy(deployment(spec, release.runtime.smg_image))
    component = set_component(set_name)
    smg["metadata"]["name"] = f"{GATEWAY_NAME}-{set_name}"
    for meta in (smg["metadata"], smg["spec"]["template"]["metadata"]):
        meta["labels"]["app.kubernetes.io/component"] = component
        meta["labels"][SET_LABEL] = set_name
    smg["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = component
    pod_spec = smg["spec"]["template"]["spec"]
    for constraint in pod_spec.get("topologySpreadConstraints", []):
        constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] = component
    for container in pod_spec["containers"]:
        container["args"] = [_rewrite(a, renames) for a in container["args"]]
    objects.append(smg)
    return objects


def set_groups(platform: dict[str, Any], set_name: str) -> list[dict[str, Any]]:
    """The set's groups as pool_target describes groups (SMG URL, role, index, bootstrap port)."""
    spec = parse_platform(platform)
    out = []
    for role, pool in spec.pools.items():
        name = f"{endpoints.pool_name(role)}-{set_name}"
        for i in range(pool.groups):
            out.append(
                {
                    "name": f"{name}-{i}",
                    "role": role,
                    "index": i,
                    "lws": name,
                    "url": f"http://{name}-{i}.{name}.{spec.namespace}:{pool.port}",
                    "bootstrap_port": pool.bootstrap_port if role == "prefill" else None,
                }
            )
    return out
