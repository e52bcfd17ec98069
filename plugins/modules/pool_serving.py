#!/usr/bin/python
"""Ansible module: which engine groups serve right now (ready on every gateway and healthy)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.smg_api import Gateway, SmgError, http, workers

DOCUMENTATION = r"""
module: pool_serving
short_description: Report which engine groups are ready on every SMG replica and answer /health
description:
  - Lists the workers of every gateway and probes each group's /health in parallel. A group serves
    when every gateway lists it C(ready) and its own /health answers 200. Read-only.
options:
  gateways: {type: list, elements: dict, required: true, description: "Every SMG replica: {name, url, headers}."}
  groups: {type: list, elements: dict, required: true, description: "Groups to judge: {name, url (as SMG knows it), direct_url}."}
  timeout_s: {type: float, default: 10.0, description: Seconds per probe.}
"""

RETURN = r"""
serving: {description: Names of the groups that serve., type: list, returned: always}
ready_everywhere: {description: URLs ready on every gateway., type: list, returned: always}
groups: {description: "Per group: {name, ready_on, healthy, serving}.", type: list, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gateways": {"type": "list", "elements": "dict", "required": True},
            "groups": {"type": "list", "elements": "dict", "required": True},
            "timeout_s": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    gateways = [Gateway(str(g["url"]).rstrip("/"), dict(g.get("headers") or {}), str(g.get("name") or g["url"])) for g in p["gateways"]]
    try:
        ready = {gw.label: {str(w.get("url", "")).rstrip("/") for w in workers(gw) if w.get("status") == "ready"} for gw in gateways}
    except SmgError as exc:
        module.fail_json(msg=str(exc))
    everywhere = set.intersection(*ready.values()) if ready else set()

    def healthy(group: dict) -> bool:
        status, _ = http("GET", str(group["direct_url"]).rstrip("/") + "/health", timeout=p["timeout_s"])
        return status == 200

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(p["groups"])))) as pool:
        health = list(pool.map(healthy, p["groups"]))
    out = []
    for group, ok in zip(p["groups"], health, strict=True):
        url = str(group["url"]).rstrip("/")
        out.append(
            {
                "name": group["name"],
                "ready_on": sorted(n for n, urls in ready.items() if url in urls),
                "healthy": ok,
                "serving": ok and url in everywhere,
            }
        )
    module.exit_json(changed=False, serving=[g["name"] for g in out if g["serving"]], ready_everywhere=sorted(everywhere), groups=out)


if __name__ == "__main__":
    main()
