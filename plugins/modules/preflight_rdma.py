#!/usr/bin/python
"""Ansible module: basic RDMA checks on one node (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_rdma
short_description: Check RDMA devices, ports, link layer, RoCE v2 GID, MTU, GPUDirect support and memlock.
description:
  - Runs C(ibv_devinfo -v), reads the loaded modules (lsmod, else /proc/modules), /proc/driver/nvidia/version
    and the memlock limit of the session, and returns one check line per property.
  - Changes nothing; supports check mode.
options:
  mtu: {description: active_mtu every port must have (stack rdma.mtu)., type: int, required: true}
  gid_index: {description: RoCE v2 GID index (stack rdma.gid_index); null on InfiniBand., type: int}
  link_layer: {description: Ethernet (RoCE) or InfiniBand., type: str, default: Ethernet, choices: [Ethernet, InfiniBand]}
  devices: {description: "RDMA devices that must be present (the rail NICs); empty: any.", type: list, elements: str, default: []}
  gpudirect: {description: whether GPUDirect RDMA is required (stack rdma.gpudirect)., type: bool, default: true}
  memlock_min_kib: {description: "minimum RLIMIT_MEMLOCK in KiB; -1 requires unlimited.", type: int, default: -1}
"""

RETURN = r"""
checks: {description: check lines., type: list, returned: always}
skipped: {description: checks not evaluated., type: list, returned: always}
facts: {description: "hcas (parsed ibv_devinfo) and gpudirect_method (peermem, dmabuf or null).", type: dict, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
import os  # noqa: E402
import resource  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.ibv import NO_DEVICES, parse_ibv_devinfo  # noqa: E402
from ansible.module_utils.probe import read_file, run_tool  # noqa: E402
from ansible.module_utils.rdma_checks import UNLIMITED, RdmaExpect, evaluate  # noqa: E402
from ansible.module_utils.sysinfo import parse_modules  # noqa: E402


def hcas(module):
    text, error = run_tool(module, ["ibv_devinfo", "-v"], ok_rcs=(0, 1, 255))
    if text is None:
        return None, error
    if NO_DEVICES in text:
        return [], None
    return parse_ibv_devinfo(text), None


def modules_loaded(module):
    text, _ = run_tool(module, ["lsmod"])
    if text is None:
        text, _ = read_file("/proc/modules")
    return parse_modules(text) if text is not None else None


def memlock_kib():
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft // 1024


def main():
    module = AnsibleModule(
        argument_spec={
            "mtu": {"type": "int", "required": True},
            "gid_index": {"type": "int"},
            "link_layer": {"type": "str", "default": "Ethernet", "choices": ["Ethernet", "InfiniBand"]},
            "devices": {"type": "list", "elements": "str", "default": []},
            "gpudirect": {"type": "bool", "default": True},
            "memlock_min_kib": {"type": "int", "default": UNLIMITED},
        },
        supports_check_mode=True,
    )
    p = module.params
    found, error = hcas(module)
    version, _ = read_file("/proc/driver/nvidia/version")
    expect = RdmaExpect(
        mtu=p["mtu"],
        gid_index=p["gid_index"],
        link_layer=p["link_layer"],
        devices=list(p["devices"]),
        gpudirect=p["gpudirect"],
        memlock_min_kib=p["memlock_min_kib"],
    )
    checks, skipped, facts = evaluate(
        expect,
        found,
        devinfo_error=error,
        modules=modules_loaded(module),
        nvidia_version=version,
        kernel_release=os.uname().release,
        memlock_kib=memlock_kib(),
    )
    module.exit_json(changed=False, checks=checks, skipped=skipped, facts=facts)


if __name__ == "__main__":
    main()
