#!/usr/bin/python
"""Ansible module: wait until the Mooncake master has forgotten store clients that are gone."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_metrics import MetricsError, fetch
from ansible.module_utils.smg_api import http

DOCUMENTATION = r"""
module: mooncake_settle
short_description: Wait until the Mooncake master counts no more store clients than are alive
description:
  - A recreated engine's previous store client keeps its segment registered until the master's
    client_ttl (10 s) expires, unless it unmounted on the way out. A put the master places on that
    segment fails, which looks like a broken KV path. This waits until the serving leader's
    C(master_active_clients) is at most C(expected_clients).
options:
  masters: {type: list, elements: dict, required: true, description: "Every master: {name, metrics_url, health_url}."}
  expected_clients: {type: int, required: true, description: Store clients that are alive (one per prefill/decode engine).}
  timeout_s: {type: float, default: 60.0, description: Give up after this long.}
"""

RETURN = r"""
active_clients: {description: The leader's master_active_clients at the end., type: int, returned: always}
waited_s: {description: Seconds waited., type: float, returned: always}
leader: {description: The serving leader's name., type: str, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "masters": {"type": "list", "elements": "dict", "required": True},
            "expected_clients": {"type": "int", "required": True},
            "timeout_s": {"type": "float", "default": 60.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    t0 = time.monotonic()
    active, leader = -1, ""
    while True:
        for master in p["masters"]:
            status, body = http("GET", master["health_url"], timeout=3)
            if status == 200 and isinstance(body, dict) and body.get("role") == "leader" and body.get("ha_state") == "serving":
                leader = master["name"]
                try:
                    active = int(fetch(master["metrics_url"]).get("master_active_clients", -1))
                except MetricsError:
                    active = -1
                break
        if 0 <= active <= p["expected_clients"]:
            module.exit_json(changed=False, active_clients=active, waited_s=time.monotonic() - t0, leader=leader)
        if time.monotonic() - t0 > p["timeout_s"]:
            module.fail_json(
                msg=f"the Mooncake master {leader or '(no serving leader)'} still counts {active} store clients after {p['timeout_s']:g}s, "
                f"{p['expected_clients']} are alive; a stale segment would fail KV puts",
                active_clients=active,
                waited_s=time.monotonic() - t0,
                leader=leader,
            )
        time.sleep(0.5)


if __name__ == "__main__":
    main()
