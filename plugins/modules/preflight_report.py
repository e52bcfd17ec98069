#!/usr/bin/python
"""Ansible module: assemble per-node reports, the fleet summary and node labels (runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_report
short_description: Combine every node's check results into node reports, a fleet summary and node labels.
description:
  - Attributes each failing fabric pair to a node, sets every node's status (pass, warn, fail), and renders the
    summary as JSON and Markdown. Pure computation (the role writes the files); supports check mode.
options:
  names: {description: inventory names of the GPU nodes., type: list, elements: str, required: true}
  racks: {description: each node's rack, in the order of names., type: list, elements: raw, required: true}
  results:
    description: "per node, in the order of names: {gpu, topology, rdma, host, fabric} with each role's preflight_<area>_results, null where it did not run."
    type: list
    elements: dict
    required: true
  plan: {description: the fabric plan (null when the fabric tests did not run)., type: dict}
  floors: {description: per fabric test kind, its floor (Gb/s for ib_write_bw, GB/s for the KV test)., type: dict, default: {}}
  kinds: {description: the fabric test kinds that ran., type: list, elements: str, default: []}
  label_prefix: {description: node label prefix., type: str, default: inferplane.io}
  release: {description: release name, for the reports and a node label., type: str}
  dest: {description: report directory., type: path, required: true}
  labels: {description: "whether the labels are applied and why: {applied, reason}.", type: dict, default: {}}
"""

RETURN = r"""
files: {description: paths written., type: list, returned: always}
summary: {description: fleet summary document., type: dict, returned: always}
markdown: {description: fleet summary as Markdown., type: str, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.report import assemble  # noqa: E402

AREAS = ("gpu", "topology", "rdma", "host", "fabric")


def main():
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "racks": {"type": "list", "elements": "raw", "required": True},
            "results": {"type": "list", "elements": "dict", "required": True},
            "plan": {"type": "dict"},
            "floors": {"type": "dict", "default": {}},
            "kinds": {"type": "list", "elements": "str", "default": []},
            "label_prefix": {"type": "str", "default": "inferplane.io"},
            "release": {"type": "str"},
            "dest": {"type": "path", "required": True},
            "labels": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not len(p["names"]) == len(p["racks"]) == len(p["results"]):
        module.fail_json(msg="names, racks and results must have one entry per node, in the same order")
    nodes = []
    for name, rack, per_area in zip(p["names"], p["racks"], p["results"], strict=True):
        # A node that ran no role at all (unreachable, failed early) has no results: the report says so.
        results = {area: value for area, value in per_area.items() if area in AREAS and isinstance(value, dict)}
        nodes.append({"name": name, "rack": rack, "results": results or None})
    floors = {k: float(v) for k, v in (p["floors"] or {}).items()}
    out = assemble(nodes, p["plan"], floors, p["kinds"], p["label_prefix"], p["release"])
    summary = dict(out["summary"], labels=p["labels"])
    reason = (p["labels"] or {}).get("reason")
    documents = {os.path.join("nodes", f"{name}.json"): _json(doc) for name, doc in out["nodes"].items()}
    documents["summary.json"] = _json(summary)
    documents["summary.md"] = out["markdown"] + (f"\nNode labels: {reason}.\n" if reason else "")
    changed = False
    for rel, text in documents.items():
        changed |= _write(os.path.join(p["dest"], rel), text)
    module.exit_json(changed=changed, summary=summary, files=sorted(documents))


def _json(doc):
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _write(path, text):
    """Write ``text`` to ``path`` unless it is already there; True when the file changed."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True


if __name__ == "__main__":
    main()
