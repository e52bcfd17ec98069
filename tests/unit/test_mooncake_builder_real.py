"""The Mooncake builder's flags and ConfigMap against the real mooncake_master (and real etcd for HA).

The stack's ports are swapped for free ones and cluster DNS names for 127.0.0.1; everything else
(flags, cluster id, the ConfigMap's addresses as a store client reads them) is what the builder emits.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from inferplane.builders import mooncake
from inferplane.spec import PlatformSpec, load_stack_and_release

BIN = Path(sys.executable).parent
MASTER = BIN / "mooncake_master"
ETCD = shutil.which("etcd")
pytestmark = pytest.mark.skipif(not MASTER.exists(), reason="mooncake_master (mooncake-transfer-engine-non-cuda) is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local(spec: PlatformSpec, **mooncake_overrides: object) -> PlatformSpec:
    mc = spec.mooncake.model_copy(
        update={"rpc_port": free_port(), "metrics_port": free_port(), "metadata_port": free_port(), "protocol": "tcp", **mooncake_overrides}
    )
    return spec.model_copy(update={"mooncake": mc})


def to_loopback(value: str, spec: PlatformSpec) -> str:
    return value.replace(f"mooncake-master.{spec.namespace}.svc", "127.0.0.1")


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"{url} never answered: {log.read_text()[-2000:]}")


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        p.kill()
        p.wait(10)


STORE_CLIENT = textwrap.dedent(
    """
    import os, sys
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", os.environ["MOONCAKE_TE_META_DATA_SERVER"], 16 << 20, 16 << 20,
                 os.environ["MOONCAKE_PROTOCOL"], "", os.environ["MOONCAKE_MASTER"])
    assert rc == 0, f"setup rc={rc}"
    assert s.put("inferplane-key", b"kv-bytes") == 0
    assert s.get("inferplane-key") == b"kv-bytes"
    print("STORE-OK", flush=True)
    os._exit(0)  # an HA client's close() waits ~30 s on its etcd watch; the process exit is what matters here
    """
)


def store_round_trip(config_map_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **config_map_env}
    return subprocess.run([sys.executable, "-c", STORE_CLIENT], capture_output=True, text=True, env=env, timeout=90, check=False)


def test_poc_master_serves_rpc_metadata_and_health_on_the_configmaps_addresses(tmp_path: Path) -> None:
    cfg, _ = load_stack_and_release("poc")
    spec = local(cfg.platform)
    proc = start([str(MASTER), *mooncake.master_args(spec)], tmp_path / "master.log")
    try:
        wait_for(f"http://127.0.0.1:{spec.mooncake.metrics_port}/health", proc, tmp_path / "master.log")
        health = get_json(f"http://127.0.0.1:{spec.mooncake.metrics_port}/health")
        assert health["role"] == "leader" and health["service_ready"] is True
        data = {k: to_loopback(v, spec) for k, v in mooncake.env_config_map(spec)["data"].items()}
        meta = data["MOONCAKE_TE_META_DATA_SERVER"]
        with urllib.request.urlopen(meta.removesuffix("/metadata") + "/health", timeout=2) as resp:
            assert resp.read() == b"OK"
        done = store_round_trip(data)
        assert "STORE-OK" in done.stdout, done.stdout + done.stderr
    finally:
        stop(proc)


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (scripts/install-deps.sh)")
def test_ha_master_leads_under_the_cluster_id_clients_look_up(tmp_path: Path) -> None:
    assert ETCD is not None
    client, peer = free_port(), free_port()
    etcd = start(
        [
            ETCD,
            "--data-dir",
            str(tmp_path / "etcd"),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{peer}",
        ],
        tmp_path / "etcd.log",
    )
    master = None
    try:
        wait_for(f"http://127.0.0.1:{client}/health", etcd, tmp_path / "etcd.log")
        cfg, _ = load_stack_and_release("prod")
        spec = local(cfg.platform, etcd_endpoints=(f"127.0.0.1:{client}",))
        args = mooncake.master_args(spec, rpc_address="127.0.0.1")
        assert "--enable_ha=true" in args and "--enable_oplog=true" in args
        master = start([str(MASTER), *args], tmp_path / "master.log")
        url = f"http://127.0.0.1:{spec.mooncake.metrics_port}/health"
        wait_for(url, master, tmp_path / "master.log")
        for _ in range(100):
            if get_json(url).get("role") == "leader":
                break
            time.sleep(0.1)
        assert get_json(url)["leader_address"] == f"127.0.0.1:{spec.mooncake.rpc_port}"
        data = mooncake.env_config_map(spec)["data"]
        assert data["MOONCAKE_MASTER"] == f"etcd://127.0.0.1:{client}"
        assert data["MC_STORE_CLUSTER_ID"] == "inferplane_prod"
        # The leader key lives under the cluster id the ConfigMap hands to clients.
        key = subprocess.run(
            [
                "etcdctl",
                "--endpoints",
                f"127.0.0.1:{client}",
                "get",
                "--print-value-only",
                f"mooncake-store/{data['MC_STORE_CLUSTER_ID']}/master_view",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "ETCDCTL_API": "3"},
            timeout=30,
            check=False,
        )
        assert f"127.0.0.1:{spec.mooncake.rpc_port}" in key.stdout, key.stdout + key.stderr
        done = store_round_trip(data)
        assert "STORE-OK" in done.stdout, done.stdout + done.stderr
        # And a client with the wrong cluster id finds no leader: the ConfigMap's value is what makes it work.
        wrong = store_round_trip({**data, "MC_STORE_CLUSTER_ID": "someone_else"})
        assert "STORE-OK" not in wrong.stdout
    finally:
        stop(*(p for p in (master, etcd) if p is not None))
