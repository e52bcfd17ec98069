"""Parsers against the real H200 capture and the derived 8-GPU HGX outputs of the fake tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplane.node import ibv, mooncake_bench, nvidia_smi, nvlink, perftest, sysinfo, topo

from .conftest import FIXTURES, fake_tool

# --------------------------------------------------------------------------- the real H200 capture


def test_real_xml_reads_every_checked_field(h200: Path):
    log = nvidia_smi.parse_query_xml((h200 / "nvidia-smi-q.xml").read_text())
    assert (log.driver_version, log.cuda_version, log.attached_gpus) == ("580.159.04", "13.0", 1)
    gpu = log.gpus[0]
    assert (gpu.index, gpu.name, gpu.pci_bus_id, gpu.memory_total_mib) == (0, "NVIDIA H200", "00000000:00:06.0", 143771)
    assert gpu.uuid == "GPU-8a8e27ba-b3c5-6704-a478-3d7da1654730"
    assert (gpu.persistence_mode, gpu.mig_current, gpu.mig_pending, gpu.ecc_current) == ("Enabled", "Disabled", "Disabled", "Enabled")
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable) == (0, 0)
    # Hopper has row remapping instead of page retirement: the retired pages block is all N/A.
    assert (gpu.retired_pages_pending, gpu.retired_pages_count) == (None, None)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure, gpu.remapped_rows_uncorrectable) == (False, False, 0)
    assert gpu.clock_event_reasons_active == []
    assert gpu.fabric_state is None


def test_real_csv_matches_the_xml(h200: Path):
    rows = nvidia_smi.parse_query_csv((h200 / "query-gpu.csv").read_text())
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == "NVIDIA H200" and row["pci.bus_id"] == "00000000:00:06.0"
    assert nvidia_smi.to_int(row["memory.total"]) == 143771
    assert nvidia_smi.to_int(row["clocks.max.sm"]) == 1980
    assert row["ecc.errors.uncorrected.volatile.total"] == "0"


def test_real_topology_has_one_gpu_and_no_nic(h200: Path):
    t = topo.parse_topo((h200 / "topo.txt").read_text())
    assert t.gpus == [0] and t.nics == []
    assert t.matrix == {"GPU0": {"GPU0": "X"}}
    assert (t.cpu_affinity["GPU0"], t.numa(0), t.gpu_numa_id["GPU0"]) == ("0-15", 0, None)
    assert t.best_nic(0) is None


def test_real_nvlink_status_of_a_single_gpu_is_empty(h200: Path):
    assert nvlink.parse_nvlink_status((h200 / "nvlink-s.txt").read_text()) == {}


def test_real_rdma_capture_says_the_tools_are_missing(h200: Path):
    text = (h200 / "rdma.txt").read_text()
    assert sysinfo.command_missing(text)
    assert ibv.parse_ibv_devinfo(text) == []


def test_real_kernel_release_is_not_the_pinned_series(h200: Path):
    release = (h200 / "system.txt").read_text().split()[2]
    assert release == "6.18.44-fc-v657-gpu"
    assert sysinfo.kernel_at_least(release, 5, 12)


# --------------------------------------------------------------------------- derived 8x H200 HGX


def test_derived_xml_is_eight_h200_on_distinct_buses():
    log = nvidia_smi.parse_query_xml(fake_tool.render_xml(fake_tool.node_model("healthy")))
    assert log.attached_gpus == 8 and len(log.gpus) == 8
    assert {g.name for g in log.gpus} == {"NVIDIA H200"} and {g.memory_total_mib for g in log.gpus} == {143771}
    assert len({g.pci_bus_id for g in log.gpus}) == 8 and len({g.uuid for g in log.gpus}) == 8
    assert [g.index for g in log.gpus] == list(range(8))


def test_derived_topology_pairs_each_gpu_with_its_rail_at_pxb():
    t = topo.parse_topo(fake_tool.render_topo(fake_tool.node_model("healthy")))
    assert t.gpus == list(range(8)) and t.nics == [f"mlx5_{i}" for i in range(10)]
    for gpu in range(8):
        assert t.link(gpu, f"mlx5_{gpu}") == "PXB"
        assert t.best_nic(gpu) == (f"mlx5_{gpu}", "PXB")
        assert t.numa(gpu) == gpu // 4
        assert t.link(gpu, f"NIC{gpu}") == "PXB"
    assert t.link(0, "mlx5_4") == "SYS" and t.link(0, "mlx5_1") == "NODE" and t.matrix["GPU0"]["GPU7"] == "NV18"


def test_derived_topology_with_a_nic_on_the_other_socket():
    t = topo.parse_topo(fake_tool.render_topo(fake_tool.node_model("nic-sys")))
    assert t.link(3, "mlx5_3") == "SYS" and t.link(4, "mlx5_3") == "NODE"


def test_derived_nvlink_has_eighteen_links_per_gpu_and_reads_a_down_link():
    healthy = nvlink.parse_nvlink_status(fake_tool.render_nvlink(fake_tool.node_model("healthy")))
    assert sorted(healthy) == list(range(8))
    assert all(len(g.active) == 18 and g.links[0].speed_gbytes == 26.562 for g in healthy.values())
    down = nvlink.parse_nvlink_status(fake_tool.render_nvlink(fake_tool.node_model("nvlink-down")))
    assert down[2].inactive == [5] and len(down[2].active) == 17 and len(down[3].active) == 18


def test_derived_ibv_devinfo_reads_ports_mtu_and_gids():
    hcas = ibv.parse_ibv_devinfo(fake_tool.render_ibv_devinfo(fake_tool.node_model("healthy"), verbose=True))
    assert [h.name for h in hcas] == [f"mlx5_{i}" for i in range(10)]
    rail = hcas[0]
    assert (rail.transport, rail.fw_ver, rail.vendor_part_id) == ("InfiniBand", "28.39.1002", "4129")
    port = rail.ports[0]
    assert (port.number, port.state, port.active_mtu, port.max_mtu, port.link_layer) == (1, "PORT_ACTIVE", 4096, 4096, "Ethernet")
    assert port.gids[3].type == "RoCE v2" and port.gids[3].gid.startswith("::ffff:10.100.")
    assert port.gids[0].type == "RoCE v1"
    assert hcas[8].ports[0].active_mtu == 1024  # a front-end NIC at MTU 1500
    down = ibv.parse_ibv_devinfo(fake_tool.render_ibv_devinfo(fake_tool.node_model("port-down"), verbose=False))
    assert down[6].ports[0].state == "PORT_DOWN" and not down[6].ports[0].is_active and down[6].ports[0].gids == {}
    assert ibv.parse_ibv_devices(fake_tool.render_ibv_devices(fake_tool.node_model("healthy")))[0][0] == "mlx5_0"


def test_ibv_devinfo_infiniband_port():
    text = (
        "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_INIT (2)\n"
        "\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tInfiniBand\n\t\t\tphys_state:\t\tLINK_UP (5)\n"
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:ba3f:d2ff:fe1c:2a4c\n"
    )
    port = ibv.parse_ibv_devinfo(text)[0].ports[0]
    assert (port.state, port.phys_state, port.link_layer, port.gids[0].type) == ("PORT_INIT", "LINK_UP", "InfiniBand", None)


def test_derived_lsmod_and_dmesg():
    assert "nvidia_peermem" in sysinfo.parse_modules(fake_tool.render_lsmod(fake_tool.node_model("healthy")))
    assert "nvidia_peermem" not in sysinfo.parse_modules(fake_tool.render_lsmod(fake_tool.node_model("no-peermem")))
    assert sysinfo.parse_xids(fake_tool.render_dmesg(fake_tool.node_model("healthy"))) == []


# --------------------------------------------------------------------------- host outputs


def test_xid_lines_with_codes_and_severity():
    log = (
        "[ 1021.331] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
        "[ 1030.002] NVRM: Xid (PCI:0000:2a:00): 13, pid=88, name=python3, Graphics Exception: ESR 0x405840\n"
        "[ 1031.100] NVRM: GPU at PCI:0000:18:00: GPU-8a8e27ba\n"
    )
    xids = sysinfo.parse_xids(log)
    assert [(x.pci, x.code, x.fatal) for x in xids] == [("0000:18:00", 79, True), ("0000:2a:00", 13, False)]


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "24.10-1.1.4.0"),
        ("OFED-internal-25.07-0.9.7:\n", "25.07-0.9.7"),
        ("rdma-core is not OFED\n", None),
    ],
)
def test_ofed_versions(text: str, version: str | None):
    assert sysinfo.parse_ofed_version(text) == version


def test_ofed_versions_compare_up_to_trailing_zeros():
    assert sysinfo.same_version("25.07-0.9.7", "25.07-0.9.7.0")
    assert not sysinfo.same_version("25.07-0.9.6", "25.07-0.9.7.0")


def test_meminfo_and_open_kernel_module():
    info = sysinfo.parse_meminfo("MemTotal:       131981020 kB\nHugePages_Total:      16\nHugepagesize:       2048 kB\n")
    assert info == {"MemTotal": 131981020, "HugePages_Total": 16, "Hugepagesize": 2048}
    assert sysinfo.is_open_kernel_module("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build")
    assert not sysinfo.is_open_kernel_module("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04")


# --------------------------------------------------------------------------- perftest and Mooncake


def test_perftest_bw_in_gbits_and_mibs():
    out = fake_tool_output_bw(392.4)
    r = perftest.parse_bw(out)
    assert (r.ok, r.bw_avg_gbps, r.device, r.link_type, r.mtu, r.gid_index, r.msg_size) == (
        True,
        392.4,
        "mlx5_0",
        "Ethernet",
        4096,
        3,
        1048576,
    )
    mib = out.replace("BW peak[Gb/sec]    BW average[Gb/sec]", "BW peak[MiB/sec]    BW average[MiB/sec]").replace("392.40", "46778.11")
    assert perftest.parse_bw(mib).bw_avg_gbps == pytest.approx(392.4, abs=0.1)


def test_perftest_failures_keep_the_tools_message():
    r = perftest.parse_bw("Couldn't connect to 10.0.0.2:18515\n Unable to init the socket connection\n")
    assert not r.ok and r.error == "Couldn't connect to 10.0.0.2:18515"
    assert perftest.parse_bw("").error.startswith("no result table")


def fake_tool_output_bw(bw: float) -> str:
    return (
        " Dual-port       : OFF\t\tDevice         : mlx5_0\n Mtu             : 4096[B]\n Link type       : Ethernet\n GID index       : 3\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        f" 1048576    231325           {bw + 0.3:.2f}             {bw:.2f}\t\t     0.046778\n"
    )


def test_mooncake_real_tcp_run_is_tcp():
    run = mooncake_bench.parse_te_bench((FIXTURES / "mooncake" / "tcp-initiator.log").read_text())
    assert (run.transport, run.completed, run.throughput_gbytes, run.batches) == ("tcp", True, 1.67, 3186)
    target = mooncake_bench.parse_te_bench((FIXTURES / "mooncake" / "tcp-target.log").read_text())
    assert (target.transport, target.segment, target.completed) == ("tcp", "127.0.0.1:15486", False)


def test_mooncake_real_silent_fallback_and_missing_rnic():
    fallback = mooncake_bench.parse_te_bench((FIXTURES / "mooncake" / "autodiscovery-no-hca-target.log").read_text())
    assert (fallback.transport, fallback.hcas_found) == ("tcp", 0)
    no_rnic = mooncake_bench.parse_te_bench((FIXTURES / "mooncake" / "rdma-no-rnic-target.log").read_text())
    assert no_rnic.transport is None
    assert "RdmaTransport: No available RNIC" in no_rnic.errors


def test_mooncake_rdma_run_names_its_devices():
    run = mooncake_bench.parse_te_bench((FIXTURES / "mooncake" / "rdma-initiator.log").read_text())
    assert (run.transport, run.hcas_found, run.completed, run.throughput_gbytes) == ("rdma", 8, True, 43.71)
    assert run.rdma_devices == [f"mlx5_{i}" for i in range(8)]
