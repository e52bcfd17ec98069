"""Helpers for the emulator tests: configs from the local release, in-process engines, a real mooncake_master."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from inferplane.emulator.config import EngineConfig, EngineRole, model_from_release
from inferplane.emulator.latency import LatencyModel
from inferplane.emulator.server import Emulator
from inferplane.manifest import load_release

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "releases" / "local.yaml"
VENV_BIN = REPO / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(name: str) -> str:
    path = VENV_BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found in .venv/bin or PATH; run `make venv`")
    return found


def make_config(role: EngineRole = "unified", **overrides: Any) -> EngineConfig:
    release = load_release(RELEASE)
    cfg = EngineConfig(
        role=role,
        host="127.0.0.1",
        port=free_port(),
        model=model_from_release(release, role, None),
        release=release.release,
        engine_version=release.runtime.sglang_version,
        bootstrap_port=free_port() if role == "prefill" else None,
        latency=LatencyModel(prefill_tokens_per_s=50_000.0, prefill_overhead_ms=1.0, itl_ms=2.0, itl_per_running_ms=0.05),
        bootstrap_timeout_s=10.0,
        waiting_timeout_s=10.0,
        health_check_timeout_s=2.0,
        drain_poll_s=0.05,
    )
    return replace(cfg, **overrides)


@dataclass
class Running:
    emulator: Emulator
    session: aiohttp.ClientSession
    url: str
    exits: list[int]

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(self.url + path) as resp:
            return resp.status, await _body(resp)

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        async with self.session.post(self.url + path, json=body, **kwargs) as resp:
            return resp.status, await _body(resp)

    async def stream(self, path: str, body: Any) -> tuple[int, list[str]]:
        """SSE ``data:`` payloads in order (``[DONE]`` included)."""
        async with self.session.post(self.url + path, json=body) as resp:
            text = await resp.text()
            return resp.status, [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]


async def _body(resp: aiohttp.ClientResponse) -> Any:
    text = await resp.text()
    if resp.content_type == "application/json":
        return await resp.json(content_type=None)
    return text


@contextlib.asynccontextmanager
async def running(cfg: EngineConfig) -> AsyncIterator[Running]:
    exits: list[int] = []
    emulator = Emulator(cfg, exit_process=exits.append)
    await emulator.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Running(emulator, session, f"http://127.0.0.1:{cfg.port}", exits)
    finally:
        await emulator.stop()


@dataclass(frozen=True)
class MooncakeMaster:
    rpc_address: str
    metrics_url: str
    metadata_url: str

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


@contextlib.contextmanager
def mooncake_master(log_dir: Path) -> Iterator[MooncakeMaster]:
    """A real mooncake_master with its HTTP metadata server, on free ports, killed afterwards."""
    rpc, metrics, metadata = free_port(), free_port(), free_port()
    argv = [
        binary("mooncake_master"),
        f"--rpc_port={rpc}",
        "--rpc_address=127.0.0.1",
        f"--metrics_port={metrics}",
        "--metrics_host=127.0.0.1",
        "--enable_http_metadata_server=true",
        "--http_metadata_server_host=127.0.0.1",
        f"--http_metadata_server_port={metadata}",
    ]
    log = open(log_dir / "mooncake_master.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/health", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mooncake_master did not start; see {log_dir / 'mooncake_master.log'}") from None
                time.sleep(0.1)
        yield MooncakeMaster(f"127.0.0.1:{rpc}", f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{metadata}/metadata")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def emulator_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SGL_FORCE_SHUTDOWN", None)
    return env
