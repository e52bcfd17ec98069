#!/usr/bin/python
"""Ansible module: GPU preflight checks on one node (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_gpu
short_description: Check a node's GPUs against the release manifest and the site's expectations.
description:
  - Runs C(nvidia-smi -q -x), C(nvidia-smi nvlink -s), reads the kernel log (dmesg, else journalctl -k) and the
    fabric manager's state, and returns one check line per property (count, model, memory, driver, CUDA, ECC,
    remapped rows, persistence, MIG, clock slowdowns, NVLink, fabric manager, Xid).
  - Changes nothing; supports check mode.
options:
  count: {description: GPUs the node must have., type: int, required: true}
  model: {description: product name as nvidia-smi prints it (release gpu_stack.gpu_model)., type: str, required: true}
  memory_mib: {description: memory.total per GPU (release gpu_stack.gpu_memory_mib)., type: int, required: true}
  driver_version: {description: release gpu_stack.driver_version., type: str, required: true}
  cuda_version: {description: release gpu_stack.cuda_version., type: str, required: true}
  mig_enabled: {description: whether MIG must be on., type: bool, default: false}
  nvlinks_per_gpu: {description: active NVLink links each GPU must have (0 for none)., type: int, default: 0}
  nvswitch: {description: "NVSwitch baseboard: auto (detect via /proc/driver/nvidia-nvswitch), true or false.", type: str, default: auto}
  nvidia_smi: {description: nvidia-smi command., type: str, default: nvidia-smi}
"""

RETURN = r"""
checks: {description: "check lines {area, name, status, observed, expected, hint}", type: list, returned: always}
skipped: {description: "checks not evaluated {area, name, reason}", type: list, returned: always}
facts: {description: parsed GPU facts (driver, CUDA, per-GPU uuid/bus/model/memory)., type: dict, returned: always}
"""

# Ansible's module layout puts DOCUMENTATION/RETURN before the imports.
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.gpu_checks import GpuExpect, evaluate  # noqa: E402
from ansible.module_utils.nvidia_smi import SmiParseError, parse_query_xml  # noqa: E402
from ansible.module_utils.nvlink import parse_nvlink_status  # noqa: E402
from ansible.module_utils.probe import read_file, run_tool  # noqa: E402
from ansible.module_utils.sysinfo import parse_xids  # noqa: E402

NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"


def kernel_log(module):
    out, err = run_tool(module, ["dmesg"])
    if out is not None:
        return out, None
    # dmesg is restricted to root on Ubuntu (kernel.dmesg_restrict=1); the journal may be readable.
    out2, err2 = run_tool(module, ["journalctl", "-k", "-b", "--no-pager", "-q"])
    return (out2, None) if out2 is not None else (None, f"{err}; {err2}")


def nvswitch_present(setting):
    if setting in ("true", "yes", "True"):
        return True
    if setting in ("false", "no", "False"):
        return False
    return os.path.isdir(NVSWITCH_DIR) and bool(os.listdir(NVSWITCH_DIR))


def fabric_manager_state(module):
    out, _ = run_tool(module, ["systemctl", "is-active", "nvidia-fabricmanager"], ok_rcs=(0, 3, 4))
    if out is not None and out.strip():
        return out.strip().splitlines()[0]
    # No systemd (a container, a minimal host): look for the daemon itself.
    for pid in filter(str.isdigit, os.listdir("/proc")):
        comm, _ = read_file(f"/proc/{pid}/comm")
        if comm and comm.strip() == "nv-fabricmanager":
            return "active"
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "count": {"type": "int", "required": True},
            "model": {"type": "str", "required": True},
            "memory_mib": {"type": "int", "required": True},
            "driver_version": {"type": "str", "required": True},
            "cuda_version": {"type": "str", "required": True},
            "mig_enabled": {"type": "bool", "default": False},
            "nvlinks_per_gpu": {"type": "int", "default": 0},
            "nvswitch": {"type": "str", "default": "auto"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    p = module.params
    smi_bin = p["nvidia_smi"]
    smi, smi_error = None, None
    xml, smi_error = run_tool(module, [smi_bin, "-q", "-x"])
    if xml is not None:
        try:
            smi = parse_query_xml(xml)
        except SmiParseError as exc:
            smi_error = str(exc)
    nvlink, nvlink_error = None, None
    if smi is not None:
        text, nvlink_error = run_tool(module, [smi_bin, "nvlink", "-s"])
        nvlink = parse_nvlink_status(text) if text is not None else None
    log, log_error = kernel_log(module)
    nvswitch = nvswitch_present(p["nvswitch"])
    expect = GpuExpect(
        count=p["count"],
        model=p["model"],
        memory_mib=p["memory_mib"],
        driver_version=p["driver_version"],
        cuda_version=p["cuda_version"],
        mig_enabled=p["mig_enabled"],
        nvlinks_per_gpu=p["nvlinks_per_gpu"],
        nvswitch=nvswitch,
    )
    checks, skipped = evaluate(
        expect,
        smi,
        smi_error=smi_error,
        nvlink=nvlink,
        nvlink_error=nvlink_error,
        xids=parse_xids(log) if log is not None else None,
        kernel_log_error=log_error,
        fabric_manager=fabric_manager_state(module) if nvswitch else None,
    )
    facts = {"nvswitch": nvswitch}
    if smi is not None:
        facts.update(
            driver_version=smi.driver_version,
            cuda_version=smi.cuda_version,
            gpus=[
                {"index": g.index, "name": g.name, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "memory_mib": g.memory_total_mib}
                for g in smi.gpus
            ],
        )
    module.exit_json(changed=False, checks=checks, skipped=skipped, facts=facts)


if __name__ == "__main__":
    main()
