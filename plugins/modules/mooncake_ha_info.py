#!/usr/bin/python
"""Ansible module: diagnose Mooncake master HA on etcd (read-only)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mooncake_ha import assess, render_text, snapshot

DOCUMENTATION = r"""
module: mooncake_ha_info
short_description: Diagnose Mooncake master HA on etcd and return one verdict
description:
  - Probes every etcd endpoint (v3 gRPC gateway status, health, members, alarms), the
    C(mooncake-store/<cluster_id>/master_view) key and its lease, and every master's admin
    C(/health) and C(/metrics); returns the raw snapshot, a verdict
    (healthy, degraded, down, split-brain-suspected), the reasons and the next step.
  - Read-only; safe in check mode.
options:
  etcd_endpoints: {type: list, elements: str, required: true, description: "host:port of every etcd member."}
  masters:
    type: list
    elements: dict
    required: true
    description: Masters, each with name, rpc_address and metrics_url (or health_url).
  cluster_id: {type: str, required: true, description: The masters' --cluster_id.}
  workers: {type: list, elements: dict, default: [], description: "Engines (name, url) whose /server_info is searched for their Mooncake settings."}
  expected_masters: {type: int, default: 2, description: Masters the inventory runs.}
  expected_etcd_members: {type: int, default: 3, description: etcd members the inventory runs.}
  max_standby_lag: {type: int, default: 0, description: Oplog entries a standby may lag before the verdict is degraded.}
  timeout: {type: float, default: 1.0, description: Seconds per probe (a SIGSTOPped process never answers).}
"""

RETURN = r"""
verdict: {type: str, returned: always, description: healthy, degraded, down or split-brain-suspected.}
next_step: {type: str, returned: always, description: What to do next.}
assessment: {type: dict, returned: always, description: Leader, standbys, view, etcd quorum and the reasons.}
snapshot: {type: dict, returned: always, description: Every probe's raw answer.}
text: {type: str, returned: always, description: The report for humans.}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "etcd_endpoints": {"type": "list", "elements": "str", "required": True},
            "masters": {"type": "list", "elements": "dict", "required": True},
            "cluster_id": {"type": "str", "required": True},
            "workers": {"type": "list", "elements": "dict", "default": []},
            "expected_masters": {"type": "int", "default": 2},
            "expected_etcd_members": {"type": "int", "default": 3},
            "max_standby_lag": {"type": "int", "default": 0},
            "timeout": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    for i, m in enumerate(p["masters"]):
        if not m.get("name") or not (m.get("metrics_url") or m.get("health_url")):
            module.fail_json(msg=f"masters[{i}]: needs name and metrics_url (or health_url); got {sorted(m)}")
    if not p["etcd_endpoints"]:
        module.fail_json(msg="etcd_endpoints is empty: list every etcd member's host:port")
    snap = snapshot(p["etcd_endpoints"], p["masters"], p["cluster_id"], workers=p["workers"], timeout=p["timeout"])
    result = assess(
        snap, expected_masters=p["expected_masters"], expected_etcd_members=p["expected_etcd_members"], max_standby_lag=p["max_standby_lag"]
    )
    module.exit_json(
        changed=False,
        verdict=result["verdict"],
        next_step=result["next_step"],
        assessment=result,
        snapshot=snap,
        text=render_text(snap, result),
    )


if __name__ == "__main__":
    main()
