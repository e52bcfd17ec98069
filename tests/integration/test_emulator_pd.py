"""PD through the real SMG 1.13 to emulator processes, KV through a real mooncake_master.

Started here (free ports, killed at the end): mooncake_master with its HTTP metadata server, one
prefill, one decode and one unified `inferplane emulator`, and `smg launch --pd-disaggregation`
with the argv inferplane.gateway_args.smg_argv builds for every deployment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferplane.gateway_args import prefill_url, smg_argv
from inferplane.spec import Gateway
from tests.emulator_support import RELEASE, REPO, MooncakeMaster, binary, emulator_env, free_port, mooncake_master

pytestmark = pytest.mark.integration

PROMPT = {"text": "Route me through the gateway, please.", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
CHAT = {"model": "emu-tiny", "messages": [{"role": "user", "content": "Hello over PD"}], "max_tokens": 8, "temperature": 0}


def call(url: str, body: Any = None, method: str | None = None, timeout: float = 30) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read().decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def wait_until(what: str, ok: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def counter(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == name for s in f.samples if s.name == name + "_total")


@dataclass
class Platform:
    master: MooncakeMaster
    prefill: str
    decode: str
    unified: str
    gateway: str


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    logs = tmp_path_factory.mktemp("emulator-pd")
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, argv: list[str]) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it until killed
        procs.append(subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=emulator_env()))

    with mooncake_master(logs) as master:
        try:
            p_port, p_boot, d_port, u_port, g_port, g_metrics = (free_port() for _ in range(6))
            emulator = [sys.executable, "-m", "inferplane.cli", "emulator", "--release", str(RELEASE), "--drain-poll-s", "0.2"]
            kv = ["--mooncake-master", master.rpc_address, "--mooncake-metadata", master.metadata_url, "--waiting-timeout-s", "20"]
            start("prefill", [*emulator, "--role", "prefill", "--port", str(p_port), "--bootstrap-port", str(p_boot), *kv])
            start("decode", [*emulator, "--role", "decode", "--port", str(d_port), *kv])
            start("unified", [*emulator, "--role", "unified", "--port", str(u_port)])
            urls = {name: f"http://127.0.0.1:{port}" for name, port in (("prefill", p_port), ("decode", d_port), ("unified", u_port))}
            for name, url in urls.items():
                wait_until(f"{name} emulator /health", lambda url=url: call(url + "/health")[0] == 200)
            for name in ("prefill", "decode"):
                wait_until(
                    f"{name} store client",
                    lambda name=name: call(urls[name] + "/server_info")[1]["emulator"]["kv_store"]["status"] == "ready",
                )
            gateway = Gateway(prefill_policy="round_robin", decode_policy="round_robin", health_check_interval_secs=2, drain_settle_secs=5)
            argv = smg_argv(
                gateway,
                [(prefill_url("127.0.0.1", p_port), p_boot)],
                [urls["decode"]],
                host="127.0.0.1",
                port=g_port,
                metrics_host="127.0.0.1",
                metrics_port=g_metrics,
                worker_startup_timeout_secs=30,
                worker_startup_check_interval_secs=1,
                program=binary("smg"),
            )
            start("smg", argv)
            g_url = f"http://127.0.0.1:{g_port}"
            wait_until("SMG readiness with both workers", lambda: call(g_url + "/readiness")[0] == 200)
            yield Platform(master, urls["prefill"], urls["decode"], urls["unified"], g_url)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_pd_through_smg_equals_unified_and_moves_kv_through_the_store(platform: Platform) -> None:
    puts = platform.master.metric("master_put_start_requests_total")
    gets = platform.master.metric("master_get_replica_list_requests_total")
    status, via_gateway = call(platform.gateway + "/generate", PROMPT)
    assert status == 200, via_gateway
    _, unified = call(platform.unified + "/generate", PROMPT)
    assert via_gateway["output_ids"] == unified["output_ids"] and via_gateway["text"] == unified["text"]
    assert via_gateway["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
    status, chat = call(platform.gateway + "/v1/chat/completions", CHAT)
    assert (
        status == 200
        and chat["choices"][0]["message"]["content"]
        == call(platform.unified + "/v1/chat/completions", CHAT)[1]["choices"][0]["message"]["content"]
    )
    assert platform.master.metric("master_put_start_requests_total") >= puts + 2
    assert platform.master.metric("master_get_replica_list_requests_total") >= gets + 2
    store = call(platform.decode + "/server_info")[1]["emulator"]["kv_store"]
    assert store["gets"] >= 2 and store["failures"] == 0
    assert counter(platform.prefill, "sglang:num_requests") >= 2


def test_smg_registered_the_workers_from_their_own_info(platform: Platform) -> None:
    status, listing = call(platform.gateway + "/workers")
    assert status == 200 and listing["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}
    kinds = {w["url"]: w["worker_type"] for w in listing["workers"]}
    assert kinds == {platform.prefill: "prefill", platform.decode: "decode"}
    assert all(w["model_id"] == "emu-tiny" for w in listing["workers"])


def test_bootstrap_fields_are_required_by_pd_engines(platform: Platform) -> None:
    status, err = call(platform.decode + "/generate", PROMPT | {"rid": "direct"})
    assert status == 400
    assert err["error"]["message"] == "Invalid request: Disaggregated request received without bootstrap room id. req.rid='direct'"


def test_kv_transfer_fault_fails_requests_and_counts(platform: Platform) -> None:
    before = counter(platform.decode, "sglang:num_transfer_failed_reqs")
    call(platform.decode + "/emulator/faults", {"kv_transfer_fail": True})
    try:
        status, err = call(platform.gateway + "/generate", PROMPT)
        assert status == 500 and err["error"]["code"] == "decode_internal_error"
        assert "Decode transfer failed" in err["error"]["message"]
        assert counter(platform.decode, "sglang:num_transfer_failed_reqs") >= before + 1
    finally:
        call(platform.decode + "/emulator/faults", method="DELETE")
    status, _ = call(platform.gateway + "/generate", PROMPT)
    assert status == 200
