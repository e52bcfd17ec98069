"""Outputs captured by our own preflight run on a real H200 (docs/hardware/h200-preflight.md).

The shared fixtures had the terminal escapes stripped; the real `nvidia-smi topo -m` underlines its
header even when stdout is a pipe, which made the first real run report an unreadable topology.
"""

from __future__ import annotations

from pathlib import Path

from inferplane.node.topo import parse_topo

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "preflight" / "h200-real" / "topo-m.txt"


def test_real_topo_output_keeps_its_escape_codes_in_the_fixture() -> None:
    assert "\x1b[4m" in CAPTURE.read_text(), "the capture must stay byte for byte as nvidia-smi printed it"


def test_real_topo_output_with_escape_codes_parses() -> None:
    topo = parse_topo(CAPTURE.read_text())
    assert topo.gpus == [0]
    assert topo.numa(0) == 0
    assert topo.cpu_affinity["GPU0"] == "0-15"
    assert topo.nics == []
