#!/usr/bin/python
"""Ansible module: plan the fabric pair tests for the fleet (runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_fabric_plan
short_description: Choose same-rack and cross-rack pairs for each fabric test from racks and earlier check results.
description:
  - Nodes that failed a prerequisite check (RDMA for every test; GPU and topology too for GPUDirect) are left out
    of that test and listed with the reason; the others form rings (see inferplane/node/fabric_checks.py).
  - Pure computation; supports check mode.
options:
  nodes: {description: "{name, rack, address, failing: {area: [check]}, rails or gpu_nic or gpu_map} per node.", type: list, elements: dict, required: true}
  kinds: {description: which tests to plan., type: list, elements: str, required: true}
  base_port: {description: first TCP port for ib_write_bw servers on each node., type: int, default: 18515}
"""

RETURN = r"""
plan: {description: "nodes (serve/run tests per node), edges, excluded and no_peer per test kind.", type: dict, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.fabric_checks import KINDS, plan  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "dict", "required": True},
            "kinds": {"type": "list", "elements": "str", "required": True},
            "base_port": {"type": "int", "default": 18515},
        },
        supports_check_mode=True,
    )
    p = module.params
    unknown = [k for k in p["kinds"] if k not in KINDS]
    if unknown:
        module.fail_json(msg=f"kinds: unknown fabric test(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    missing_rack = [n.get("name", "?") for n in p["nodes"] if not n.get("rack")]
    if missing_rack:
        module.fail_json(msg=f"nodes without a rack: {', '.join(missing_rack)}; set `rack` for them in the inventory")
    result = plan(p["nodes"], p["kinds"], p["base_port"])
    # Names this run's session directory on every node, so two runs never share server logs.
    result["run_id"] = f"{int(time.time())}-{os.getpid()}"
    result["kinds"] = list(p["kinds"])
    module.exit_json(changed=False, plan=result)


if __name__ == "__main__":
    main()
