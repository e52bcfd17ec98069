"""smg_argv against the real SMG 1.13: its own parser, and the real binary started with our argv."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferplane.gateway_args import ControlPlaneKey, smg_argv
from inferplane.spec import Gateway

SMG = Path(sys.executable).parent / "smg"
if not SMG.exists():
    SMG = Path(shutil.which("smg") or "smg")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def workers(n: int) -> list[str]:
    # Nothing listens there: SMG keeps retrying registration, which is all these tests need.
    return [f"http://127.0.0.1:{free_port()}" for _ in range(n)]


GATEWAY = Gateway(
    prefill_policy="cache_aware",
    decode_policy="power_of_two",
    health_check_interval_secs=7,
    health_failure_threshold=4,
    cb_failure_threshold=9,
    cb_timeout_duration_secs=45,
    retry_max_retries=3,
    request_timeout_secs=1200,
    drain_settle_secs=600,
)
ADMIN = ControlPlaneKey("ops", "Operators", "admin", "adm1n-key")
READER = ControlPlaneKey("mon", "Monitoring", "user", "read-key")


def test_argv_parses_with_smgs_own_parser_and_keeps_every_value() -> None:
    smg_router = pytest.importorskip("smg.launch_router")
    prefills = [("http://p-0.p.ns:30000", 8998), ("http://p-1.p.ns:30000", 8999)]
    decodes = ["http://d-0.d.ns:30000", "http://d-1.d.ns:30000"]
    argv = smg_argv(GATEWAY, prefills, decodes, port=31000, metrics_port=29100, control_plane_keys=[ADMIN, READER])
    assert argv[:2] == ["smg", "launch"]
    ra = smg_router.parse_router_args(argv[2:])
    assert ra.pd_disaggregation is True
    assert ra.prefill_urls == prefills
    assert ra.decode_urls == decodes
    assert (ra.prefill_policy, ra.decode_policy) == ("cache_aware", "power_of_two")
    assert (ra.port, ra.prometheus_port) == (31000, 29100)
    assert ra.health_check_interval_secs == 7
    assert ra.health_failure_threshold == 4
    assert ra.cb_failure_threshold == 9
    assert ra.cb_timeout_duration_secs == 45
    assert ra.retry_max_retries == 3
    assert ra.request_timeout_secs == 1200
    assert ra.health_check_endpoint == "/health"
    assert ra.control_plane_api_keys == [("ops", "Operators", "adm1n-key", "admin"), ("mon", "Monitoring", "read-key", "user")]


def test_kubernetes_env_reference_survives_as_the_key_field() -> None:
    smg_router = pytest.importorskip("smg.launch_router")
    key = ControlPlaneKey("ops", "Operators", "admin", "$(SMG_CONTROL_PLANE_ADMIN_KEY)")
    argv = smg_argv(GATEWAY, [("http://p:30000", 8998), ("http://q:30000", 8998)], workers(2), control_plane_keys=[key])
    ra = smg_router.parse_router_args(argv[2:])
    assert ra.control_plane_api_keys == [("ops", "Operators", "$(SMG_CONTROL_PLANE_ADMIN_KEY)", "admin")]


@pytest.fixture
def smg_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    port, metrics = free_port(), free_port()
    argv = smg_argv(
        GATEWAY,
        [(u, 8998 + i) for i, u in enumerate(workers(2))],
        workers(2),
        host="127.0.0.1",
        port=port,
        metrics_host="127.0.0.1",
        metrics_port=metrics,
        control_plane_keys=[ADMIN],
        program=str(SMG),
    )
    log = (tmp_path / "smg.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc, port, metrics
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_live(proc: subprocess.Popen[bytes], port: int) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            pytest.fail(f"smg exited with {proc.returncode} for our argv")
        try:
            if _get(f"http://127.0.0.1:{port}/liveness")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail("smg never answered /liveness")


@pytest.mark.skipif(not SMG.exists(), reason="the smg binary (requirements/base.txt: smg==1.13.0) is not installed")
def test_real_smg_starts_with_our_argv_and_enforces_the_control_plane_key(smg_process) -> None:  # type: ignore[no-untyped-def]
    proc, port, metrics = smg_process
    _wait_live(proc, port)
    status, body = _get(f"http://127.0.0.1:{metrics}/metrics")
    assert status == 200 and "# TYPE smg_" in body
    assert _get(f"http://127.0.0.1:{port}/workers")[0] == 401
    status, body = _get(f"http://127.0.0.1:{port}/workers", ADMIN.key)
    assert status == 200 and '"workers"' in body


@pytest.mark.skipif(not SMG.exists(), reason="the smg binary (requirements/base.txt: smg==1.13.0) is not installed")
def test_real_smg_refuses_power_of_two_with_one_worker_as_smg_argv_does(tmp_path: Path) -> None:
    one_decode = workers(1)
    with pytest.raises(ValueError, match=r"gateway.decode_policy: power_of_two needs at least 2 decode"):
        smg_argv(GATEWAY, [("http://p:30000", 8998)], one_decode)
    # Build what we would have passed and hand it to the binary: it must refuse too, or our
    # check would be turning away a configuration SMG accepts.
    argv = smg_argv(
        GATEWAY.model_copy(update={"decode_policy": "round_robin"}),
        [(workers(1)[0], 8998)],
        one_decode,
        host="127.0.0.1",
        port=free_port(),
        metrics_host="127.0.0.1",
        metrics_port=free_port(),
        program=str(SMG),
    )
    argv[argv.index("--decode-policy") + 1] = "power_of_two"
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert b"Power-of-two policy for decode requires at least 2 decode workers" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("prefills", "decodes", "message"),
    [
        ([], ["http://d:1"], "no prefill workers"),
        ([("http://p:1", 8998)], [], "no decode workers"),
        ([("http://p:1", None)], ["http://d:1"], "no bootstrap port"),
        ([("http://p:1", 8998), ("http://p:1", 8998)], ["http://d:1"], "listed twice"),
        ([("http://p:1", 8998)], ["http://p:1"], "also a prefill"),
        ([("p:1", 8998)], ["http://d:1"], "expected http"),
        ([("http://p:1", 8998)], ["http://d:1/"], "trailing slash"),
    ],
)
def test_bad_worker_lists_are_refused_with_the_fix(prefills, decodes, message) -> None:  # type: ignore[no-untyped-def]
    gw = Gateway(prefill_policy="round_robin", decode_policy="round_robin")
    with pytest.raises(ValueError, match=message):
        smg_argv(gw, prefills, decodes)


@pytest.mark.parametrize(
    "key",
    [ControlPlaneKey("a:b", "n", "admin", "k"), ControlPlaneKey("a", "", "admin", "k"), ControlPlaneKey("a", "n", "root", "k")],  # type: ignore[arg-type]
)
def test_malformed_control_plane_keys_are_refused(key: ControlPlaneKey) -> None:
    gw = Gateway(prefill_policy="round_robin", decode_policy="round_robin")
    with pytest.raises(ValueError, match="control-plane key"):
        smg_argv(gw, [("http://p:1", 8998)], ["http://d:1"], control_plane_keys=[key])
