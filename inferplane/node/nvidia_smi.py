"""Parse ``nvidia-smi -q -x`` (XML) and ``nvidia-smi --query-gpu=... --format=csv``.

The XML is the authoritative source: it carries everything preflight checks (model, memory,
driver/CUDA, ECC, retired pages / remapped rows, persistence, MIG, clock event reasons) in one
call. Field names moved between driver branches (``clocks_throttle_reasons`` became
``clocks_event_reasons`` in 535; ECC counters were ``single_bit/double_bit`` before Ampere), so the
readers below accept both spellings and report ``None`` for what a GPU does not expose ("N/A").

GPU indices are the order of ``<gpu>`` elements, which is PCI bus order: the order nvidia-smi and
``nvidia-smi topo -m`` number GPUs in.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)")
# Reasons that mean the GPU runs slower than it should because something is wrong with it or its
# cooling/power, as opposed to idling or an administrator's clock setting.
HW_SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SOFT_SLOWDOWN_REASONS = ("sw_thermal_slowdown", "sw_power_cap")


class SmiParseError(ValueError):
    """nvidia-smi printed something that is not the XML we asked for."""


@dataclass
class Gpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_mib: int | None
    persistence_mode: str | None
    mig_current: str | None
    mig_pending: str | None
    ecc_current: str | None
    ecc_pending: str | None
    ecc_volatile_uncorrectable: int | None
    ecc_aggregate_uncorrectable: int | None
    retired_pages_pending: bool | None
    retired_pages_count: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    remapped_rows_uncorrectable: int | None
    clock_event_reasons_active: list[str] = field(default_factory=list)
    fabric_state: str | None = None
    fabric_status: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SmiLog:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int
    gpus: list[Gpu]

    def to_dict(self) -> dict:
        return {
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "attached_gpus": self.attached_gpus,
            "gpus": [g.to_dict() for g in self.gpus],
        }


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if not value or value in ("N/A", "Not Supported", "[N/A]", "Unknown Error", "Requested functionality has been deprecated"):
        return None
    return value


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    match = _NUMBER.match(value)
    return int(float(match.group(1))) if match else None


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("yes", "true", "enabled", "1")


def _sum_counters(node: ET.Element | None, wanted: tuple[str, ...]) -> int | None:
    """Sum the integer counters under ``node`` whose tag says they count uncorrectable errors."""
    if node is None:
        return None
    total, seen = 0, False
    for child in node.iter():
        if child is node or len(child):
            continue
        tag = child.tag.lower()
        if not any(w in tag for w in wanted):
            continue
        value = _int(child.text.strip() if child.text else None)
        if value is not None:
            total += value
            seen = True
    return total if seen else None


def _uncorrectable(ecc: ET.Element | None, scope: str) -> int | None:
    if ecc is None:
        return None
    block = ecc.find(scope)
    if block is None:
        return None
    # Hopper+: sram_uncorrectable_parity, sram_uncorrectable_secded, dram_uncorrectable.
    modern = _sum_counters(block, ("uncorrectable",))
    if modern is not None:
        return modern
    # Volta/older: <double_bit><total>.
    double = block.find("double_bit")
    if double is not None:
        return _int(_text(double, "total"))
    return None


def _clock_reasons(gpu: ET.Element) -> list[str]:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if block is None:
        return []
    active = []
    for child in block:
        if (child.text or "").strip().lower() == "active":
            active.append(child.tag[len(prefix) :] if child.tag.startswith(prefix) else child.tag)
    return active


def _gpu(index: int, node: ET.Element) -> Gpu:
    ecc = node.find("ecc_errors")
    retired = node.find("retired_pages")
    remap = node.find("remapped_rows")
    retired_count = None
    if retired is not None:
        counts = [_int(_text(retired, f"{kind}/retired_count")) for kind in ("multiple_single_bit_retirement", "double_bit_retirement")]
        known = [c for c in counts if c is not None]
        retired_count = sum(known) if known else None
    return Gpu(
        index=index,
        name=_text(node, "product_name") or "unknown",
        uuid=_text(node, "uuid") or "",
        pci_bus_id=node.get("id") or _text(node, "pci/pci_bus_id") or "",
        memory_total_mib=_int(_text(node, "fb_memory_usage/total")),
        persistence_mode=_text(node, "persistence_mode"),
        mig_current=_text(node, "mig_mode/current_mig"),
        mig_pending=_text(node, "mig_mode/pending_mig"),
        ecc_current=_text(node, "ecc_mode/current_ecc"),
        ecc_pending=_text(node, "ecc_mode/pending_ecc"),
        ecc_volatile_uncorrectable=_uncorrectable(ecc, "volatile"),
        ecc_aggregate_uncorrectable=_uncorrectable(ecc, "aggregate"),
        retired_pages_pending=_yes(_text(retired, "pending_retirement")) if retired is not None else None,
        retired_pages_count=retired_count,
        remapped_rows_pending=_yes(_text(remap, "remapped_row_pending")) if remap is not None else None,
        remapped_rows_failure=_yes(_text(remap, "remapped_row_failure")) if remap is not None else None,
        remapped_rows_uncorrectable=_int(_text(remap, "remapped_row_unc")) if remap is not None else None,
        clock_event_reasons_active=_clock_reasons(node),
        fabric_state=_text(node, "fabric/state"),
        fabric_status=_text(node, "fabric/status"),
    )


def parse_query_xml(text: str) -> SmiLog:
    """``nvidia-smi -q -x`` -> SmiLog. Raises SmiParseError on anything that is not that XML."""
    # The DOCTYPE names a DTD file nvidia-smi does not ship; expat ignores external DTDs.
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        first = text.strip().splitlines()[0] if text.strip() else "(empty output)"
        raise SmiParseError(f"nvidia-smi -q -x did not print XML ({exc}); it said: {first[:200]}") from exc
    if root.tag != "nvidia_smi_log":
        raise SmiParseError(f"nvidia-smi -q -x printed <{root.tag}>, expected <nvidia_smi_log>")
    gpus = [_gpu(i, g) for i, g in enumerate(root.findall("gpu"))]
    attached = _int(_text(root, "attached_gpus"))
    return SmiLog(
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        attached_gpus=attached if attached is not None else len(gpus),
        gpus=gpus,
    )


def parse_query_csv(text: str) -> list[dict[str, str]]:
    """``--query-gpu=a,b,c --format=csv`` -> one dict per GPU keyed by the field name without its unit.

    ``memory.total [MiB]`` becomes ``memory.total`` and ``143771 MiB`` stays a string: callers
    convert what they use (``to_int``), because the CSV does not say which fields are numbers.
    """
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    out = []
    for row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise SmiParseError(f"nvidia-smi CSV row has {len(row)} fields, header has {len(header)}: {row}")
        out.append({h: c.strip() for h, c in zip(header, row, strict=True)})
    return out


def to_int(value: str | None) -> int | None:
    """``'143771 MiB'`` -> 143771; ``'[N/A]'`` -> None."""
    return _int(value) if value and "N/A" not in value else None
