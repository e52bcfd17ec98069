#!/usr/bin/python
"""Ansible module: host checks on one node (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_host
short_description: Check /dev/shm, hugepages, model cache free space, kernel and OFED versions.
description:
  - Measures the filesystems with statvfs, reads /proc/meminfo and C(ofed_info -s), and compares the kernel
    release and OFED version with the release manifest.
  - Changes nothing; supports check mode.
options:
  shm_min_gib: {description: minimum size of /dev/shm in GiB., type: float, required: true}
  cache_dir: {description: model cache directory (measured at its closest existing parent if absent)., type: str, required: true}
  cache_min_free_gib: {description: minimum free space for the cache in GiB., type: float, required: true}
  hugepages_min: {description: minimum HugePages_Total (0 when the site uses none)., type: int, default: 0}
  kernel_prefix: {description: release gpu_stack.kernel_version_prefix; null skips the comparison., type: str}
  ofed_version: {description: release gpu_stack.ofed_version; null skips the comparison., type: str}
  shm_path: {description: the shared-memory mount., type: str, default: /dev/shm}
"""

RETURN = r"""
checks: {description: check lines., type: list, returned: always}
skipped: {description: checks not evaluated., type: list, returned: always}
facts: {description: measured values., type: dict, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.host_checks import HostExpect, evaluate  # noqa: E402
from ansible.module_utils.probe import existing_parent, fs_bytes, read_file, run_tool  # noqa: E402
from ansible.module_utils.sysinfo import parse_meminfo  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "shm_min_gib": {"type": "float", "required": True},
            "cache_dir": {"type": "str", "required": True},
            "cache_min_free_gib": {"type": "float", "required": True},
            "hugepages_min": {"type": "int", "default": 0},
            "kernel_prefix": {"type": "str"},
            "ofed_version": {"type": "str"},
            "shm_path": {"type": "str", "default": "/dev/shm"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        shm_bytes = fs_bytes(p["shm_path"])[0]
    except OSError:
        shm_bytes = None
    measured_at = existing_parent(p["cache_dir"])
    try:
        cache_free = fs_bytes(measured_at)[1]
    except OSError:
        cache_free = None
    meminfo_text, _ = read_file("/proc/meminfo")
    ofed_text, ofed_error = run_tool(module, ["ofed_info", "-s"])
    expect = HostExpect(
        shm_min_gib=p["shm_min_gib"],
        cache_dir=p["cache_dir"],
        cache_min_free_gib=p["cache_min_free_gib"],
        hugepages_min=p["hugepages_min"],
        kernel_prefix=p["kernel_prefix"] or None,
        ofed_version=p["ofed_version"] or None,
    )
    checks, skipped = evaluate(
        expect,
        shm_bytes=shm_bytes,
        meminfo=parse_meminfo(meminfo_text or ""),
        cache_free_bytes=cache_free,
        cache_measured_at=measured_at,
        kernel_release=os.uname().release,
        ofed_text=ofed_text,
        ofed_error=ofed_error,
    )
    facts = {"shm_bytes": shm_bytes, "cache_free_bytes": cache_free, "cache_measured_at": measured_at, "kernel": os.uname().release}
    module.exit_json(changed=False, checks=checks, skipped=skipped, facts=facts)


if __name__ == "__main__":
    main()
