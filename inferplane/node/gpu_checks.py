"""GPU checks: count, model, memory, driver, CUDA, ECC, remapped rows, persistence, MIG, clock
slowdowns, NVLink, fabric manager, XIDs.

Expected model/memory/driver/CUDA come from the release manifest's ``gpu_stack``; the count, the
NVLink links per GPU and whether the baseboard has NVSwitches are site facts from the inventory.
When nvidia-smi itself is unusable there is one failing line (``gpu_count``, with nvidia-smi's
own error) and every other GPU check is skipped, because they would all say the same thing.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .checks import FAIL, OK, WARN, Check, Skip, check, join_limited, skip
from .nvidia_smi import HW_SLOWDOWN_REASONS, SOFT_SLOWDOWN_REASONS, SmiLog
from .nvlink import GpuLinks
from .sysinfo import FATAL_XIDS, XID_MEANING, Xid

AREA = "gpu"
NAMES = (
    "gpu_count",
    "gpu_model",
    "gpu_memory",
    "gpu_driver",
    "gpu_cuda",
    "gpu_ecc",
    "gpu_remapped_rows",
    "gpu_persistence",
    "gpu_mig",
    "gpu_throttle",
    "gpu_nvlink",
    "gpu_fabric_manager",
    "gpu_xid",
)


@dataclass
class GpuExpect:
    count: int
    model: str
    memory_mib: int
    driver_version: str
    cuda_version: str
    mig_enabled: bool = False
    nvlinks_per_gpu: int = 0
    nvswitch: bool = False
    fatal_xids: frozenset[int] = field(default_factory=lambda: FATAL_XIDS)


def _summary(values: list[str]) -> str:
    """``8x NVIDIA H200`` or ``7x NVIDIA H200, 1x NVIDIA H100 80GB HBM3``."""
    counts = Counter(values)
    return ", ".join(f"{n}x {v}" for v, n in counts.most_common())


def evaluate(
    expect: GpuExpect,
    smi: SmiLog | None,
    smi_error: str | None = None,
    nvlink: dict[int, GpuLinks] | None = None,
    nvlink_error: str | None = None,
    xids: list[Xid] | None = None,
    kernel_log_error: str | None = None,
    fabric_manager: str | None = None,
) -> tuple[list[Check], list[Skip]]:
    checks: list[Check] = []
    skipped: list[Skip] = []
    if smi is None:
        checks.append(
            check(
                AREA,
                "gpu_count",
                FAIL,
                f"0 (nvidia-smi unusable: {smi_error or 'no output'})",
                expect.count,
                f"install/load NVIDIA driver {expect.driver_version} (release gpu_stack.driver_version) and make sure "
                "`nvidia-smi -q -x` runs on this node; then rerun preflight",
            )
        )
        skipped += [skip(AREA, n, "nvidia-smi is unusable (see gpu_count)") for n in NAMES if n != "gpu_count"]
        return checks, skipped
    gpus = smi.gpus
    checks.append(_count(expect, smi))
    checks.append(_model(expect, smi))
    memory = _memory(expect, smi)
    if memory is None:
        skipped.append(skip(AREA, "gpu_memory", f"no GPU is a {expect.model} (see gpu_model); memory is compared per model"))
    else:
        checks.append(memory)
    checks.append(_version(expect, "gpu_driver", smi.driver_version, expect.driver_version, "gpu_stack.driver_version"))
    checks.append(_version(expect, "gpu_cuda", smi.cuda_version, expect.cuda_version, "gpu_stack.cuda_version"))
    checks.append(_ecc(smi))
    checks.append(_remapped(smi))
    off = [f"GPU{g.index}" for g in gpus if (g.persistence_mode or "").lower() != "enabled"]
    checks.append(
        check(
            AREA,
            "gpu_persistence",
            WARN if off else OK,
            f"disabled on {join_limited(off)}" if off else f"enabled on {len(gpus)} GPUs",
            "enabled",
            "run nvidia-persistenced (systemctl enable --now nvidia-persistenced) so the driver stays initialised between jobs",
        )
    )
    checks.append(_mig(expect, smi))
    checks.append(_throttle(smi))
    checks.append(_nvlink(expect, smi, nvlink, nvlink_error))
    checks.append(_fabric_manager(expect, smi, fabric_manager))
    checks.append(_xid(expect, xids, kernel_log_error))
    return checks, skipped


def _count(expect: GpuExpect, smi: SmiLog) -> Check:
    n = len(smi.gpus)
    status = OK if n == expect.count else FAIL
    hint = (
        "a GPU is missing from the PCI bus or the driver did not bind it: compare `lspci -d 10de:` with `nvidia-smi -L`, "
        "look for Xid 79 in dmesg, reseat/RMA the GPU, or fix preflight_gpu_count if the node really has this many"
    )
    return check(AREA, "gpu_count", status, n, expect.count, hint)


def _model(expect: GpuExpect, smi: SmiLog) -> Check:
    wrong = [f"GPU{g.index} {g.name}" for g in smi.gpus if g.name != expect.model]
    return check(
        AREA,
        "gpu_model",
        FAIL if wrong else OK,
        _summary([g.name for g in smi.gpus]) + (f" ({join_limited(wrong)})" if wrong else ""),
        f"{expect.model} (release gpu_stack.gpu_model)",
        "this node has GPUs of another model than the release pins: move it to an inventory group for its own release, or replace the board",
    )


def _memory(expect: GpuExpect, smi: SmiLog) -> Check | None:
    mine = [g for g in smi.gpus if g.name == expect.model]
    if not mine:
        return None
    wrong = [f"GPU{g.index} {g.memory_total_mib} MiB" for g in mine if g.memory_total_mib != expect.memory_mib]
    observed = _summary([f"{g.memory_total_mib} MiB" for g in mine])
    return check(
        AREA,
        "gpu_memory",
        FAIL if wrong else OK,
        observed + (f" ({join_limited(wrong)})" if wrong else ""),
        f"{expect.memory_mib} MiB per GPU (release gpu_stack.gpu_memory_mib)",
        "memory.total differs from the SKU's: a different board revision, an ECC mode change or a partly failed HBM stack; "
        "check `nvidia-smi -q -d MEMORY,ECC` and open an RMA if ECC and remapping are clean",
    )


def _version(expect: GpuExpect, name: str, observed: str | None, expected: str, field_path: str) -> Check:
    what = "driver" if name == "gpu_driver" else "CUDA version the driver supports"
    return check(
        AREA,
        name,
        OK if observed == expected else FAIL,
        observed or "unknown",
        f"{expected} (release {field_path})",
        f"the node's {what} is not the release's: install driver {expect.driver_version} "
        "(or let the GPU operator manage it), reboot, rerun preflight",
    )


def _ecc(smi: SmiLog) -> Check:
    fail, warn, notes = [], [], []
    for g in smi.gpus:
        if (g.ecc_current or "").lower() == "disabled":
            fail.append(f"GPU{g.index} ECC disabled")
        if g.ecc_volatile_uncorrectable:
            fail.append(f"GPU{g.index} {g.ecc_volatile_uncorrectable} volatile uncorrectable")
        elif g.ecc_aggregate_uncorrectable:
            warn.append(f"GPU{g.index} {g.ecc_aggregate_uncorrectable} aggregate uncorrectable")
        if g.ecc_pending and g.ecc_current and g.ecc_pending != g.ecc_current:
            warn.append(f"GPU{g.index} ECC mode change pending ({g.ecc_current} -> {g.ecc_pending})")
    if not fail and not warn:
        notes.append(f"ECC enabled, 0 uncorrectable (volatile and aggregate) on {len(smi.gpus)} GPUs")
    status = FAIL if fail else (WARN if warn else OK)
    hint = (
        "uncorrectable ECC errors since the last reset: drain the node, reset the GPU (nvidia-smi -r) or reboot, "
        "and RMA the GPU if they return; with ECC disabled, enable it (nvidia-smi -e 1) and reboot"
        if fail
        else "historic uncorrectable errors were recorded: the GPU works now, watch DCGM_FI_DEV_ECC_DBE_AGG_TOTAL and row remapping"
    )
    return check(AREA, "gpu_ecc", status, join_limited(fail + warn) or notes[0], "ECC enabled, 0 volatile uncorrectable", hint)


def _remapped(smi: SmiLog) -> Check:
    bad = []
    total_unc = 0
    for g in smi.gpus:
        if g.remapped_rows_failure:
            bad.append(f"GPU{g.index} row remapping failed")
        if g.remapped_rows_pending:
            bad.append(f"GPU{g.index} row remap pending")
        if g.retired_pages_pending:
            bad.append(f"GPU{g.index} page retirement pending")
        total_unc += g.remapped_rows_uncorrectable or 0
    observed = join_limited(bad) if bad else f"no pending or failed remapping ({total_unc} rows remapped for uncorrectable errors)"
    return check(
        AREA,
        "gpu_remapped_rows",
        FAIL if bad else OK,
        observed,
        "no pending remap/retirement, no remap failure",
        "a pending remap needs a GPU reset to take effect (drain, nvidia-smi -r or reboot); a remap failure means the GPU is out of "
        "spare rows: RMA it",
    )


def _mig(expect: GpuExpect, smi: SmiLog) -> Check:
    want = "Enabled" if expect.mig_enabled else "Disabled"
    wrong = [f"GPU{g.index} {g.mig_current}" for g in smi.gpus if g.mig_current is not None and g.mig_current != want]
    pending = [
        f"GPU{g.index} pending {g.mig_pending}" for g in smi.gpus if g.mig_pending and g.mig_current and g.mig_pending != g.mig_current
    ]
    status = FAIL if wrong else (WARN if pending else OK)
    observed = join_limited(wrong + pending) if (wrong or pending) else f"{want.lower()} on {len(smi.gpus)} GPUs"
    return check(
        AREA,
        "gpu_mig",
        status,
        observed,
        f"MIG {want.lower()} (stack gpu_operator.mig_strategy)",
        f"set MIG to {want.lower()} (nvidia-smi -mig {1 if expect.mig_enabled else 0}, or the GPU operator's mig-manager label) and reset the GPUs",
    )


def _throttle(smi: SmiLog) -> Check:
    hard, soft = [], []
    for g in smi.gpus:
        for reason in g.clock_event_reasons_active:
            if reason in HW_SLOWDOWN_REASONS:
                hard.append(f"GPU{g.index} {reason}")
            elif reason in SOFT_SLOWDOWN_REASONS:
                soft.append(f"GPU{g.index} {reason}")
    status = FAIL if hard else (WARN if soft else OK)
    return check(
        AREA,
        "gpu_throttle",
        status,
        join_limited(hard + soft) if (hard or soft) else "no slowdown reason active",
        "no HW slowdown, thermal or power-brake reason active",
        "the GPU runs below its clocks: check cooling and PSU/power capping (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE) "
        "and the BMC's event log before putting load on it",
    )


def _nvlink(expect: GpuExpect, smi: SmiLog, nvlink: dict[int, GpuLinks] | None, error: str | None) -> Check:
    want = expect.nvlinks_per_gpu
    if nvlink is None:
        if want == 0:
            return check(AREA, "gpu_nvlink", OK, f"not read ({error})", "no NVLink expected")
        return check(
            AREA,
            "gpu_nvlink",
            FAIL,
            f"`nvidia-smi nvlink -s` failed: {error}",
            f"{want} active links per GPU",
            "run `nvidia-smi nvlink -s` by hand",
        )
    problems = []
    for g in smi.gpus:
        links = nvlink.get(g.index)
        active = len(links.active) if links else 0
        if active != want:
            down = f" (inactive: {', '.join(str(i) for i in links.inactive)})" if links and links.inactive else ""
            problems.append(f"GPU{g.index} {active}/{want} up{down}")
    if want == 0 and not problems:
        return check(AREA, "gpu_nvlink", OK, "no NVLink links", "no NVLink expected (preflight_gpu_nvlinks_per_gpu: 0)")
    return check(
        AREA,
        "gpu_nvlink",
        FAIL if problems else OK,
        join_limited(problems) if problems else f"{want}/{want} links up on {len(smi.gpus)} GPUs",
        f"{want} active links per GPU (preflight_gpu_nvlinks_per_gpu)",
        "an NVLink is down: check `nvidia-smi nvlink -e` error counters and Xid 74 in dmesg, restart nvidia-fabricmanager, "
        "reset the GPUs; a link that stays down needs the baseboard serviced",
    )


def _fabric_manager(expect: GpuExpect, smi: SmiLog, state: str | None) -> Check:
    # Blackwell and later report the NVLink fabric per GPU in the XML; Hopper HGX boards need the
    # fabric manager service running before any GPU can use NVLink.
    not_done = [
        f"GPU{g.index} fabric {g.fabric_state}/{g.fabric_status}" for g in smi.gpus if g.fabric_state and g.fabric_state != "Completed"
    ]
    if not expect.nvswitch and not not_done:
        return check(AREA, "gpu_fabric_manager", OK, "no NVSwitch on this node", "fabric manager only where NVSwitches are")
    problems = list(not_done)
    if expect.nvswitch and state != "active":
        problems.insert(0, f"nvidia-fabricmanager is {state or 'not running'}")
    return check(
        AREA,
        "gpu_fabric_manager",
        FAIL if problems else OK,
        join_limited(problems) if problems else "nvidia-fabricmanager active",
        "nvidia-fabricmanager active (NVSwitch baseboard)",
        "start nvidia-fabricmanager (systemctl enable --now nvidia-fabricmanager; its version must equal the driver's) "
        "and check /var/log/fabricmanager.log",
    )


def _xid(expect: GpuExpect, xids: list[Xid] | None, error: str | None) -> Check:
    if xids is None:
        return check(
            AREA,
            "gpu_xid",
            WARN,
            f"kernel log not readable ({error})",
            "no fatal Xid since boot",
            "run preflight with become (root) so it can read dmesg/journalctl -k",
        )
    fatal = [x for x in xids if x.code in expect.fatal_xids]
    other = [x for x in xids if x.code not in expect.fatal_xids]

    def describe(items: list[Xid]) -> list[str]:
        seen = Counter((x.pci, x.code) for x in items)
        return [f"Xid {code} on {pci} x{n} ({XID_MEANING.get(code, 'see NVIDIA XID catalogue')})" for (pci, code), n in seen.items()]

    status = FAIL if fatal else (WARN if other else OK)
    observed = join_limited(describe(fatal) + describe(other), 4) if xids else "no Xid since boot"
    return check(
        AREA,
        "gpu_xid",
        status,
        observed,
        "no fatal Xid since boot",
        "the GPU reported a hardware/driver fault: follow NVIDIA's XID catalogue for the code (reset, reboot, or RMA), "
        "then reboot to clear the log before rerunning"
        if fatal
        else "application-level Xids since boot: usually a crashed job; confirm with the workload owner",
    )
