#!/usr/bin/python
"""Ansible module: a KV transfer between a group and each peer of the other role, pinned pair by pair."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pd_probe import Decode, Prefill, generate_body, kv_matrix

DOCUMENTATION = r"""
module: pd_kv_test
short_description: Prove KV moves between specific prefill and decode groups
description:
  - For each pair, sends the same greedy request to the prefill and the decode at once with explicit
    bootstrap fields (as SMG does). Every pair must complete, without an error body, and all pairs
    must give the same answer (wrong KV bytes show as a different answer).
options:
  pairs: {type: list, elements: dict, required: true, description: "{prefill: {name, url, bootstrap_port}, decode: {name, url}} each."}
  prompt: {type: str, required: true, description: Prompt text.}
  max_new_tokens: {type: int, default: 8, description: Tokens to generate.}
  timeout_s: {type: float, default: 60.0, description: Per request.}
"""

RETURN = r"""
results: {description: "Per pair: prefill, decode, room, statuses, output, errors.", type: list, returned: always}
problems: {description: One line per failed or disagreeing pair., type: list, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pairs": {"type": "list", "elements": "dict", "required": True},
            "prompt": {"type": "str", "required": True},
            "max_new_tokens": {"type": "int", "default": 8},
            "timeout_s": {"type": "float", "default": 60.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["pairs"]:
        module.fail_json(msg="no prefill/decode pair to test: the new group has no running peer of the other role")
    pairs = [
        (
            Prefill(x["prefill"]["name"], x["prefill"]["url"], int(x["prefill"]["bootstrap_port"])),
            Decode(x["decode"]["name"], x["decode"]["url"]),
        )
        for x in p["pairs"]
    ]
    if module.check_mode:
        module.exit_json(changed=False, results=[], problems=[], pairs=[f"{a.name}->{b.name}" for a, b in pairs])
    results, problems = kv_matrix(pairs, generate_body(p["prompt"], p["max_new_tokens"]), p["timeout_s"])
    shown = [r.as_dict() for r in results]
    if problems:
        module.fail_json(msg=" | ".join(problems), results=shown, problems=problems)
    module.exit_json(changed=False, results=shown, problems=[])


if __name__ == "__main__":
    main()
