"""Parse the small host outputs preflight reads: kernel log XIDs, loaded modules, meminfo,
``ofed_info -s``, ``/proc/driver/nvidia/version`` and kernel release strings.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+),\s*(.*)$")

# XIDs that mean the GPU, its memory or its links are broken until a reset or repair; the rest
# (13 graphics engine exception, 31 MMU fault, 43 reset channel...) are usually the application's.
FATAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 143, 144, 145, 149, 150, 151, 154})
XID_MEANING = {
    13: "graphics engine exception (usually the application)",
    31: "GPU memory page fault (usually the application)",
    43: "GPU stopped processing (usually the application)",
    45: "preemptive cleanup after a fault",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row-remapping event",
    64: "ECC page retirement or row-remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    140: "unrecovered ECC error",
    143: "GPU initialization failure",
    144: "NVLink error (SAW)",
    145: "NVLink error (RLW)",
    149: "NVLink error (NETIR)",
    150: "NVLink error (MSE)",
    151: "key rotation error",
    154: "GPU recovery action required (reset or reboot)",
}


@dataclass
class Xid:
    pci: str
    code: int
    message: str
    line: str

    @property
    def fatal(self) -> bool:
        return self.code in FATAL_XIDS


def parse_xids(text: str) -> list[Xid]:
    out = []
    for line in text.splitlines():
        match = _XID.search(line)
        if match:
            out.append(Xid(match.group(1).lower(), int(match.group(2)), match.group(3).strip(), line.strip()))
    return out


def parse_modules(text: str) -> set[str]:
    """Module names from ``lsmod`` or ``/proc/modules`` (first column either way)."""
    names = set()
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] != "Module":
            names.add(parts[0])
    return names


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {key: value}; kB values stay kB, counts stay counts."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out


_OFED = re.compile(r"(\d+\.\d+-[0-9][0-9.]*[0-9])")


def parse_ofed_version(text: str) -> str | None:
    """``MLNX_OFED_LINUX-24.10-1.1.4.0:`` or ``OFED-internal-25.07-0.9.7:`` -> ``24.10-1.1.4.0``."""
    match = _OFED.search(text or "")
    return match.group(1) if match else None


def same_version(observed: str, expected: str) -> bool:
    """Versions equal up to trailing ``.0`` components (DOCA prints 25.07-0.9.7 for 25.07-0.9.7.0)."""

    def norm(v: str) -> list[str]:
        parts = re.split(r"[.-]", v.strip())
        while len(parts) > 1 and parts[-1] == "0":
            parts.pop()
        return parts

    return norm(observed) == norm(expected)


def is_open_kernel_module(nvidia_version_text: str | None) -> bool:
    """``/proc/driver/nvidia/version`` names the open GPU kernel modules, which export dma-buf."""
    return bool(nvidia_version_text) and "Open Kernel Module" in (nvidia_version_text or "")


def kernel_at_least(release: str, major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", release or "")
    if not match:
        return False
    return (int(match.group(1)), int(match.group(2))) >= (major, minor)


def command_missing(text: str) -> bool:
    """A shell's 'command not found', as in the single-H200 capture's rdma.txt."""
    return "command not found" in (text or "") or "No such file or directory" in (text or "")
