#!/usr/bin/python
"""Ansible module: golden prompts through one pinned prefill/decode pair, against a per-revision baseline."""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pd_probe import Decode, Prefill, baseline_document, compare_golden, run_golden

DOCUMENTATION = r"""
module: pd_golden
short_description: Run deterministic golden prompts through a pinned P/D pair and compare with the model revision's baseline
description:
  - Sends each prompt (temperature 0) to the prefill and the decode at once with explicit bootstrap
    fields, as SMG does, and compares content, token ids, token counts and finish_reason with the
    baseline recorded for the model revision. An HTTP 200 with an error body fails.
  - C(mode=record) writes the baseline when it is missing (from a known-good pair, before anything is
    changed); C(mode=compare) fails on any difference or when there is no baseline.
options:
  mode: {type: str, required: true, choices: [record, compare], description: Record a missing baseline, or compare with it.}
  baseline_file: {type: path, required: true, description: "JSON baseline of this model revision."}
  model: {type: str, required: true, description: Model name (recorded in the baseline).}
  revision: {type: str, required: true, description: Model revision the baseline belongs to.}
  prompts: {type: list, elements: dict, required: true, description: "{name, text, max_new_tokens} each."}
  prefill: {type: dict, required: true, description: "{name, url, bootstrap_port}."}
  decode: {type: dict, required: true, description: "{name, url}."}
  timeout_s: {type: float, default: 60.0, description: Per request.}
"""

RETURN = r"""
recorded: {description: True when this run wrote the baseline., type: bool, returned: always}
problems: {description: One line per difference., type: list, returned: always}
results: {description: Per prompt the pair's answer., type: dict, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "required": True, "choices": ["record", "compare"]},
            "baseline_file": {"type": "path", "required": True},
            "model": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "prompts": {"type": "list", "elements": "dict", "required": True},
            "prefill": {"type": "dict", "required": True},
            "decode": {"type": "dict", "required": True},
            "timeout_s": {"type": "float", "default": 60.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["baseline_file"]
    exists = os.path.isfile(path)
    if p["mode"] == "record" and exists:
        module.exit_json(changed=False, recorded=False, problems=[], results={}, baseline_file=path)
    if p["mode"] == "compare" and not exists:
        module.fail_json(
            msg=f"no golden baseline for revision {p['revision']} at {path}; record it on a known-good set (mode=record) first"
        )
    if module.check_mode:
        module.exit_json(changed=p["mode"] == "record", recorded=False, problems=[], results={})
    prefill = Prefill(p["prefill"]["name"], p["prefill"]["url"], int(p["prefill"]["bootstrap_port"]))
    decode = Decode(p["decode"]["name"], p["decode"]["url"])
    results = run_golden(p["prompts"], prefill, decode, p["timeout_s"])
    shown = {name: r.as_dict() for name, r in results.items()}
    if p["mode"] == "record":
        failed = [f"{n}: {'; '.join(r.errors)}" for n, r in results.items() if not r.ok]
        if failed:
            module.fail_json(
                msg=f"cannot record the golden baseline through {prefill.name}->{decode.name}: {' | '.join(failed)}", results=shown
            )
        doc = baseline_document(p["prompts"], results, p["model"], p["revision"], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path + ".tmp", "w") as fh:
            fh.write(json.dumps(doc, indent=2) + "\n")
        os.replace(path + ".tmp", path)
        module.exit_json(changed=True, recorded=True, problems=[], results=shown, baseline_file=path)
    with open(path) as fh:
        baseline = json.load(fh)
    if baseline.get("revision") != p["revision"]:
        module.fail_json(msg=f"{path} is the baseline of revision {baseline.get('revision')}, not {p['revision']}")
    problems = compare_golden(baseline, p["prompts"], results)
    if problems:
        module.fail_json(msg=" | ".join(problems), problems=problems, results=shown)
    module.exit_json(changed=False, recorded=False, problems=[], results=shown)


if __name__ == "__main__":
    main()
