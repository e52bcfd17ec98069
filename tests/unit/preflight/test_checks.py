"""Check evaluation: the real H200 passes the GPU checks and fails the RDMA checks; every fault variant of the
fake fleet fails exactly its named check; each rule's edge cases."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from inferplane.manifest import load_release
from inferplane.node import gpu_checks, host_checks, ibv, nvidia_smi, nvlink, rdma_checks, sysinfo, topo, topology_checks
from inferplane.node.checks import FAIL, OK, WARN

from .conftest import FIXTURES, fake_tool

REPO = Path(__file__).resolve().parents[3]
VARIANTS = {k: v for k, v in json.loads((FIXTURES / "variants.json").read_text()).items() if not k.startswith("_")}
RAILS = {i: f"mlx5_{i}" for i in range(8)}


def release_expect(count: int, nvlinks: int) -> gpu_checks.GpuExpect:
    stack = load_release(REPO / "releases" / "2026.11.0.yaml").gpu_stack
    return gpu_checks.GpuExpect(
        count=count,
        model=stack.gpu_model,
        memory_mib=stack.gpu_memory_mib,
        driver_version=stack.driver_version,
        cuda_version=stack.cuda_version,
        nvlinks_per_gpu=nvlinks,
    )


def by_name(checks: list) -> dict:
    return {c["name"]: c for c in checks}


# --------------------------------------------------------------------------- the real H200


def test_real_h200_passes_every_gpu_check(h200: Path):
    log = nvidia_smi.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())
    links = nvlink.parse_nvlink_status((h200 / "nvlink-s.txt").read_text())
    checks, skipped = gpu_checks.evaluate(release_expect(count=1, nvlinks=0), log, nvlink=links, xids=[], fabric_manager=None)
    assert skipped == []
    assert [c["name"] for c in checks] == list(gpu_checks.NAMES)
    assert {c["name"]: c["status"] for c in checks} == dict.fromkeys(gpu_checks.NAMES, OK)
    lines = by_name(checks)
    assert lines["gpu_model"]["observed"] == "1x NVIDIA H200"
    assert lines["gpu_driver"]["observed"] == "580.159.04" and "release gpu_stack.driver_version" in lines["gpu_driver"]["expected"]


def test_real_h200_fails_the_rdma_checks_because_it_has_no_hca(h200: Path):
    # rdma.txt: "bash: line 1: ibv_devinfo: command not found", lsmod too.
    assert sysinfo.command_missing((h200 / "rdma.txt").read_text())
    release = (h200 / "system.txt").read_text().split()[2]
    checks, skipped, facts = rdma_checks.evaluate(
        rdma_checks.RdmaExpect(mtu=4096, gid_index=3),
        None,
        devinfo_error="ibv_devinfo: command not found",
        modules=None,
        nvidia_version=None,
        kernel_release=release,
        memlock_kib=rdma_checks.UNLIMITED,
    )
    lines = by_name(checks)
    assert lines["rdma_devices"]["status"] == FAIL
    assert lines["rdma_devices"]["observed"] == "ibv_devinfo unusable: ibv_devinfo: command not found"
    assert "MLNX_OFED" in lines["rdma_devices"]["hint"] and "disaggregated" in lines["rdma_devices"]["hint"]
    assert {s["name"] for s in skipped} == set(rdma_checks.PORT_CHECKS)
    assert all("rdma_devices" in s["reason"] for s in skipped)
    assert lines["rdma_peermem"]["status"] == FAIL and "nvidia_peermem" in lines["rdma_peermem"]["hint"]
    assert lines["rdma_memlock"]["status"] == OK
    assert facts["gpudirect_method"] is None


def test_real_h200_topology_has_no_nic_for_gpudirect(h200: Path):
    checks, _, facts = topology_checks.evaluate(topology_checks.TopologyExpect(), topo.parse_topo((h200 / "topo.txt").read_text()))
    lines = by_name(checks)
    assert lines["topo_gpu_numa"]["status"] == OK and lines["topo_gpu_numa"]["observed"] == "GPU0:0"
    assert lines["topo_gpu_nic"]["status"] == FAIL and lines["topo_gpu_nic"]["observed"] == "no RDMA NIC in `nvidia-smi topo -m`"
    assert facts["gpu_map"] == {"0": {"numa": 0, "nic": None, "link": None}}


def test_real_h200_against_an_hgx_site_fails_count_and_nvlink_only(h200: Path):
    log = nvidia_smi.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())
    checks, _ = gpu_checks.evaluate(release_expect(count=8, nvlinks=18), log, nvlink={}, xids=[])
    assert {c["name"] for c in checks if c["status"] == FAIL} == {"gpu_count", "gpu_nvlink"}
    assert by_name(checks)["gpu_nvlink"]["observed"] == "GPU0 0/18 up"


# --------------------------------------------------------------------------- the fault matrix, tool by tool


def node_checks(variant: str) -> list:
    model = fake_tool.node_model(variant)
    smi = nvidia_smi.parse_query_xml(fake_tool.render_xml(model))
    gpu, _ = gpu_checks.evaluate(
        dataclasses.replace(release_expect(count=8, nvlinks=18), nvswitch=True),
        smi,
        nvlink=nvlink.parse_nvlink_status(fake_tool.render_nvlink(model)),
        xids=sysinfo.parse_xids(fake_tool.render_dmesg(model)),
        fabric_manager=model["fabricmanager"],
    )
    top, _, _ = topology_checks.evaluate(
        topology_checks.TopologyExpect(gpu_numa={i: i // 4 for i in range(8)}, gpu_nic=RAILS), topo.parse_topo(fake_tool.render_topo(model))
    )
    rdma, _, _ = rdma_checks.evaluate(
        rdma_checks.RdmaExpect(mtu=4096, gid_index=3, devices=list(RAILS.values())),
        ibv.parse_ibv_devinfo(fake_tool.render_ibv_devinfo(model, verbose=True)),
        modules=sysinfo.parse_modules(fake_tool.render_lsmod(model)),
        kernel_release="6.8.0-60-generic",
        memlock_kib=rdma_checks.UNLIMITED,
    )
    return gpu + top + rdma


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_fails_exactly_its_node_check(variant: str):
    checks = node_checks(variant)
    node_side = {n for n in VARIANTS[variant]["expect_fail"] if n.split("_")[0] in ("gpu", "topo", "rdma")}
    assert {c["name"] for c in checks if c["status"] == FAIL} == node_side
    assert [c["name"] for c in checks if c["status"] == WARN] == []


def test_fault_lines_name_what_is_wrong():
    observed = {v: {c["name"]: c["observed"] for c in node_checks(v)} for v in VARIANTS}
    assert observed["gpu-missing"]["gpu_count"] == "7"
    assert "GPU0 NVIDIA H100 80GB HBM3" in observed["wrong-model"]["gpu_model"]
    assert observed["driver-mismatch"]["gpu_driver"] == "580.95.05"
    assert observed["ecc"]["gpu_ecc"] == "GPU4 1 volatile uncorrectable"
    assert observed["nvlink-down"]["gpu_nvlink"] == "GPU2 17/18 up (inactive: 5)"
    assert observed["nic-sys"]["topo_gpu_nic"] == "GPU3-mlx5_3 SYS"
    assert observed["port-down"]["rdma_port_state"] == "mlx5_6 port 1 PORT_DOWN"
    assert observed["mtu-mismatch"]["rdma_mtu"] == "mlx5_1 port 1 active_mtu 1024"
    assert observed["no-peermem"]["rdma_peermem"].startswith("nvidia_peermem not loaded")


# --------------------------------------------------------------------------- GPU rules


def healthy_log() -> nvidia_smi.SmiLog:
    return nvidia_smi.parse_query_xml(fake_tool.render_xml(fake_tool.node_model("healthy")))


def evaluate_gpu(log: nvidia_smi.SmiLog, **kw) -> dict:
    expect = dataclasses.replace(release_expect(count=len(log.gpus), nvlinks=0), **kw.pop("expect", {}))
    checks, skipped = gpu_checks.evaluate(expect, log, nvlink={}, xids=kw.pop("xids", []), **kw)
    return {**by_name(checks), "_skipped": skipped}


def test_gpu_ecc_rules():
    log = healthy_log()
    log.gpus[1].ecc_aggregate_uncorrectable = 3
    assert evaluate_gpu(log)["gpu_ecc"]["status"] == WARN
    log.gpus[2].ecc_current = "Disabled"
    line = evaluate_gpu(log)["gpu_ecc"]
    assert line["status"] == FAIL and "GPU2 ECC disabled" in line["observed"] and "nvidia-smi -e 1" in line["hint"]


def test_gpu_remapping_and_retirement_rules():
    log = healthy_log()
    log.gpus[5].remapped_rows_pending = True
    log.gpus[6].remapped_rows_failure = True
    log.gpus[7].retired_pages_pending = True
    line = evaluate_gpu(log)["gpu_remapped_rows"]
    assert line["status"] == FAIL
    assert line["observed"] == "GPU5 row remap pending, GPU6 row remapping failed, GPU7 page retirement pending"


def test_gpu_throttle_mig_persistence_rules():
    log = healthy_log()
    log.gpus[0].clock_event_reasons_active = ["sw_power_cap"]
    log.gpus[1].persistence_mode = "Disabled"
    lines = evaluate_gpu(log)
    assert lines["gpu_throttle"]["status"] == WARN and lines["gpu_persistence"]["status"] == WARN
    log.gpus[3].clock_event_reasons_active = ["hw_thermal_slowdown"]
    assert evaluate_gpu(log)["gpu_throttle"]["status"] == FAIL
    assert evaluate_gpu(log, expect={"mig_enabled": True})["gpu_mig"]["status"] == FAIL
    log.gpus[0].mig_pending = "Enabled"
    assert evaluate_gpu(log)["gpu_mig"]["status"] == WARN


def test_gpu_fabric_manager_and_xid_rules():
    log = healthy_log()
    assert evaluate_gpu(log, expect={"nvswitch": True}, fabric_manager="inactive")["gpu_fabric_manager"]["status"] == FAIL
    assert evaluate_gpu(log, expect={"nvswitch": True}, fabric_manager="active")["gpu_fabric_manager"]["status"] == OK
    xids = sysinfo.parse_xids("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    line = evaluate_gpu(log, xids=xids)["gpu_xid"]
    assert line["status"] == FAIL and line["observed"] == "Xid 79 on 0000:18:00 x1 (GPU has fallen off the bus)"
    assert evaluate_gpu(log, xids=sysinfo.parse_xids("NVRM: Xid (PCI:0000:18:00): 13, pid=1, x\n"))["gpu_xid"]["status"] == WARN
    unreadable = gpu_checks.evaluate(release_expect(8, 0), log, nvlink={}, xids=None, kernel_log_error="dmesg: read kernel buffer failed")[
        0
    ]
    assert by_name(unreadable)["gpu_xid"]["status"] == WARN and "become" in by_name(unreadable)["gpu_xid"]["hint"]


def test_gpu_memory_is_not_compared_across_models():
    log = nvidia_smi.parse_query_xml(fake_tool.render_xml(fake_tool.node_model("wrong-model")))
    lines = evaluate_gpu(log)
    assert "gpu_memory" not in lines and lines["_skipped"][0]["name"] == "gpu_memory"


def test_nvidia_smi_missing_is_one_line_not_thirteen():
    checks, skipped = gpu_checks.evaluate(release_expect(8, 18), None, smi_error="nvidia-smi: command not found")
    assert [c["name"] for c in checks] == ["gpu_count"] and len(skipped) == len(gpu_checks.NAMES) - 1
    assert checks[0]["observed"] == "0 (nvidia-smi unusable: nvidia-smi: command not found)"


def test_not_xml_is_a_parse_error():
    with pytest.raises(nvidia_smi.SmiParseError, match="NVIDIA-SMI has failed"):
        nvidia_smi.parse_query_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


# --------------------------------------------------------------------------- RDMA and topology rules


def healthy_hcas() -> list:
    return ibv.parse_ibv_devinfo(fake_tool.render_ibv_devinfo(fake_tool.node_model("healthy"), verbose=True))


def test_rdma_gid_type_and_infiniband():
    hcas = healthy_hcas()
    hcas[2].ports[0].gids[3].type = "RoCE v1"
    checks, _, _ = rdma_checks.evaluate(rdma_checks.RdmaExpect(mtu=4096, gid_index=3, devices=["mlx5_2"]), hcas, memlock_kib=-1)
    assert by_name(checks)["rdma_gid"]["observed"] == "mlx5_2 GID[3] is RoCE v1"
    checks, _, _ = rdma_checks.evaluate(rdma_checks.RdmaExpect(mtu=4096, gid_index=7, devices=["mlx5_0"]), hcas, memlock_kib=-1)
    assert by_name(checks)["rdma_gid"]["observed"] == "mlx5_0 port 1 has no GID[7]"
    checks, _, _ = rdma_checks.evaluate(rdma_checks.RdmaExpect(mtu=4096, gid_index=None, link_layer="InfiniBand"), hcas, memlock_kib=-1)
    lines = by_name(checks)
    assert lines["rdma_gid"]["status"] == OK and lines["rdma_link_layer"]["status"] == FAIL


def test_rdma_devices_memlock_and_dmabuf():
    expect = rdma_checks.RdmaExpect(mtu=4096, gid_index=3, devices=["mlx5_0", "mlx5_11"], memlock_min_kib=rdma_checks.UNLIMITED)
    checks, _, facts = rdma_checks.evaluate(
        expect,
        healthy_hcas(),
        modules={"nvidia", "mlx5_ib"},
        nvidia_version="NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
        kernel_release="6.8.0-60-generic",
        memlock_kib=8192,
    )
    lines = by_name(checks)
    assert lines["rdma_devices"]["status"] == FAIL and lines["rdma_devices"]["observed"].startswith("missing mlx5_11")
    assert lines["rdma_memlock"]["status"] == FAIL and lines["rdma_memlock"]["observed"] == "8192 KiB"
    assert lines["rdma_peermem"]["status"] == OK and facts["gpudirect_method"] == "dmabuf"
    checks, _, _ = rdma_checks.evaluate(expect, [], memlock_kib=-1)
    assert by_name(checks)["rdma_devices"]["observed"] == "no RDMA device (ibv_devinfo: No IB devices found)"


def test_topology_tolerated_links_warn_and_missing_nic_fails():
    t = topo.parse_topo(fake_tool.render_topo(fake_tool.node_model("healthy")))
    checks, _, _ = topology_checks.evaluate(topology_checks.TopologyExpect(gpu_nic={0: "mlx5_1", 1: "mlx5_1", 2: "mlx5_12"}), t)
    line = by_name(checks)["topo_gpu_nic"]
    assert line["status"] == FAIL and line["observed"] == "GPU2: mlx5_12 not in topology, GPU0-mlx5_1 NODE"
    checks, _, _ = topology_checks.evaluate(topology_checks.TopologyExpect(gpu_numa={0: 1}), t)
    assert by_name(checks)["topo_gpu_numa"]["observed"] == "GPU0 on NUMA 0, expected 1"


# --------------------------------------------------------------------------- host rules


def test_host_rules():
    gib = 1 << 30
    expect = host_checks.HostExpect(
        shm_min_gib=16,
        cache_dir="/var/lib/inferplane/models",
        cache_min_free_gib=100,
        hugepages_min=8,
        kernel_prefix="6.8.",
        ofed_version="25.07-0.9.7.0",
    )
    checks, _ = host_checks.evaluate(
        expect,
        shm_bytes=64 << 20,
        meminfo={"HugePages_Total": 4, "Hugepagesize": 2048},
        cache_free_bytes=20 * gib,
        cache_measured_at="/var/lib",
        kernel_release="6.18.44-fc-v657-gpu",
        ofed_text=None,
        ofed_error="ofed_info: command not found",
    )
    lines = by_name(checks)
    assert {n: c["status"] for n, c in lines.items()} == dict.fromkeys(host_checks.NAMES, FAIL)
    assert lines["host_shm"]["observed"] == "/dev/shm 0.1 GiB"
    assert lines["host_cache_disk"]["observed"] == "20.0 GiB free on /var/lib/inferplane/models (absent; measured /var/lib)"
    assert lines["host_ofed"]["observed"] == "not installed (ofed_info: command not found)"
    checks, _ = host_checks.evaluate(
        dataclasses.replace(expect, kernel_prefix=None, ofed_version=None, hugepages_min=0),
        shm_bytes=128 * gib,
        meminfo={},
        cache_free_bytes=200 * gib,
        cache_measured_at="/var/lib/inferplane/models",
        kernel_release="6.8.0-60-generic",
        ofed_text="MLNX_OFED_LINUX-24.10-1.1.4.0:",
    )
    assert all(c["status"] == OK for c in checks)
