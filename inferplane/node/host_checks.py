"""Host checks: /dev/shm size, hugepages (when the site uses them), free space for the model cache,
kernel and OFED versions against the release manifest.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import FAIL, OK, Check, Skip, check
from .sysinfo import parse_ofed_version, same_version

AREA = "host"
NAMES = ("host_shm", "host_hugepages", "host_cache_disk", "host_kernel", "host_ofed")
GIB = 1 << 30


@dataclass
class HostExpect:
    shm_min_gib: float
    cache_dir: str
    cache_min_free_gib: float
    hugepages_min: int = 0
    kernel_prefix: str | None = None
    ofed_version: str | None = None


def gib(n: float | None) -> str:
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


def evaluate(
    expect: HostExpect,
    shm_bytes: int | None,
    meminfo: dict[str, int],
    cache_free_bytes: int | None,
    cache_measured_at: str | None,
    kernel_release: str,
    ofed_text: str | None,
    ofed_error: str | None = None,
) -> tuple[list[Check], list[Skip]]:
    checks = [
        check(
            AREA,
            "host_shm",
            OK if shm_bytes is not None and shm_bytes >= expect.shm_min_gib * GIB else FAIL,
            f"/dev/shm {gib(shm_bytes)}",
            f">= {expect.shm_min_gib:g} GiB (preflight_host_shm_min_gib)",
            "NCCL and the engines' IPC buffers live in /dev/shm: remount it larger "
            "(`mount -o remount,size=<N>G /dev/shm`, persist in /etc/fstab) or fix preflight_host_shm_min_gib",
        ),
        _hugepages(expect, meminfo),
        _cache(expect, cache_free_bytes, cache_measured_at),
        _kernel(expect, kernel_release),
        _ofed(expect, ofed_text, ofed_error),
    ]
    return checks, []


def _hugepages(expect: HostExpect, meminfo: dict[str, int]) -> Check:
    total = meminfo.get("HugePages_Total")
    size_kib = meminfo.get("Hugepagesize")
    observed = f"{total} x {size_kib} KiB" if total is not None else "no hugepage support"
    if expect.hugepages_min <= 0:
        return check(AREA, "host_hugepages", OK, observed, "not required (preflight_host_hugepages_min: 0)")
    return check(
        AREA,
        "host_hugepages",
        OK if (total or 0) >= expect.hugepages_min else FAIL,
        observed,
        f">= {expect.hugepages_min} pages (preflight_host_hugepages_min)",
        "reserve hugepages at boot (kernel cmdline hugepages=<N>, or vm.nr_hugepages) and reboot",
    )


def _cache(expect: HostExpect, free: int | None, measured_at: str | None) -> Check:
    where = expect.cache_dir if measured_at in (None, expect.cache_dir) else f"{expect.cache_dir} (absent; measured {measured_at})"
    return check(
        AREA,
        "host_cache_disk",
        OK if free is not None and free >= expect.cache_min_free_gib * GIB else FAIL,
        f"{gib(free)} free on {where}",
        f">= {expect.cache_min_free_gib:g} GiB free (preflight_host_cache_min_free_gib)",
        "the model cache will not fit: free space (old model revisions under the cache dir), mount the NVMe array there, "
        "or point the cache dir (stack model_cache.node_cache_dir) at a larger filesystem",
    )


def _kernel(expect: HostExpect, release: str) -> Check:
    if not expect.kernel_prefix:
        return check(AREA, "host_kernel", OK, release, "any (release pins no gpu_stack.kernel_version_prefix)")
    return check(
        AREA,
        "host_kernel",
        OK if release.startswith(expect.kernel_prefix) else FAIL,
        release,
        f"{expect.kernel_prefix}* (release gpu_stack.kernel_version_prefix)",
        "the kernel is not the series the GPU/OFED stack was qualified on: boot the pinned kernel (DKMS modules are built per kernel) "
        "or qualify this kernel and bump the release",
    )


def _ofed(expect: HostExpect, text: str | None, error: str | None) -> Check:
    observed = parse_ofed_version(text or "") if text else None
    shown = observed or (f"not installed ({error})" if error else "unknown")
    if not expect.ofed_version:
        return check(AREA, "host_ofed", OK, shown, "any (release pins no gpu_stack.ofed_version)")
    return check(
        AREA,
        "host_ofed",
        OK if observed and same_version(observed, expect.ofed_version) else FAIL,
        shown,
        f"{expect.ofed_version} (release gpu_stack.ofed_version)",
        "install the pinned MLNX_OFED/DOCA-OFED (`ofed_info -s` must print it), rebuild nvidia_peermem against it, reboot",
    )
