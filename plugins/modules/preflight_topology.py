#!/usr/bin/python
"""Ansible module: GPU/NIC topology checks on one node (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_topology
short_description: Check each GPU's NUMA node and its NIC's PCIe distance from nvidia-smi topo -m.
description:
  - Parses C(nvidia-smi topo -m); every GPU must sit on its declared NUMA node and reach its declared NIC at
    PIX/PXB (never SYS). Returns the observed GPU -> NUMA/NIC map for the node labels.
  - Changes nothing; supports check mode.
options:
  gpu_numa: {description: "GPU index -> NUMA node; empty: only require that every GPU has one.", type: dict, default: {}}
  gpu_nic: {description: "GPU index -> RDMA device (mlx5_0); empty: use each GPU's closest NIC.", type: dict, default: {}}
  allowed_links: {description: link types that pass., type: list, elements: str, default: [PIX, PXB]}
  tolerated_links: {description: link types that warn., type: list, elements: str, default: [PHB, NODE]}
  nvidia_smi: {description: nvidia-smi command., type: str, default: nvidia-smi}
"""

RETURN = r"""
checks: {description: check lines., type: list, returned: always}
skipped: {description: checks not evaluated., type: list, returned: always}
facts: {description: "gpu_map (GPU -> numa, nic, link) and the NICs in the matrix.", type: dict, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.probe import run_tool  # noqa: E402
from ansible.module_utils.topo import TopoParseError, parse_topo  # noqa: E402
from ansible.module_utils.topology_checks import TopologyExpect, evaluate  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "gpu_numa": {"type": "dict", "default": {}},
            "gpu_nic": {"type": "dict", "default": {}},
            "allowed_links": {"type": "list", "elements": "str", "default": ["PIX", "PXB"]},
            "tolerated_links": {"type": "list", "elements": "str", "default": ["PHB", "NODE"]},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        expect = TopologyExpect(
            gpu_numa={int(k): int(v) for k, v in (p["gpu_numa"] or {}).items()},
            gpu_nic={int(k): str(v) for k, v in (p["gpu_nic"] or {}).items()},
            allowed_links=tuple(p["allowed_links"]),
            tolerated_links=tuple(p["tolerated_links"]),
        )
    except ValueError as exc:
        module.fail_json(msg=f"gpu_numa/gpu_nic: keys must be GPU indices and NUMA values integers ({exc})")
    text, error = run_tool(module, [p["nvidia_smi"], "topo", "-m"])
    topo = None
    if text is not None:
        try:
            topo = parse_topo(text)
        except TopoParseError as exc:
            error = str(exc)
    checks, skipped, facts = evaluate(expect, topo, error)
    module.exit_json(changed=False, checks=checks, skipped=skipped, facts=facts)


if __name__ == "__main__":
    main()
