"""`inferplane emulator` as a process: flag errors, the ready line, SIGTERM draining, a taken port."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.emulator_support import RELEASE, REPO, emulator_env, free_port


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplane.cli", "emulator", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "judge", "--port", "1", "--release", str(RELEASE)], "argument --role: invalid choice: 'judge'"),
        (["--role", "unified", "--release", str(RELEASE)], "the following arguments are required: --port"),
        (["--role", "decode", "--port", "30001", "--release", str(RELEASE)], "--mooncake-master: required with --role decode"),
        (["--role", "unified", "--port", "70000", "--release", str(RELEASE)], "--port: 70000 is not a TCP port"),
        (
            ["--role", "decode", "--port", "1", "--bootstrap-port", "2", "--release", str(RELEASE), "--mooncake-master", "h:1"],
            "--bootstrap-port: only a prefill",
        ),
        (["--role", "unified", "--port", "1", "--release", str(RELEASE), "--itl-ms", "-1"], "--itl-ms: must be >= 0"),
        (["--role", "unified", "--port", "1", "--release", str(RELEASE), "--model", "nope"], "models.nope: not in this release"),
        (["--role", "unified", "--port", "1", "--release", "missing.yaml"], "cannot read"),
    ],
)
def test_bad_flags_are_one_line_errors_with_exit_2(args: list[str], message: str) -> None:
    res = cli(*args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert message in res.stderr


class Proc:
    """An emulator process whose stdout is collected by a thread."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.err = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "inferplane.cli", "emulator", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            env=emulator_env(),
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line starting {prefix!r}; stdout={self.lines}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.err.close()


def http(url: str, body: dict[str, object] | None = None, timeout: float = 30) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_ready_line_then_sigterm_drains_in_flight_requests_and_exits(tmp_path: Path) -> None:
    port = free_port()
    p = Proc(["--role", "unified", "--port", str(port), "--release", str(RELEASE), "--drain-poll-s", "0.2"], tmp_path / "emu.log")
    try:
        assert p.wait_line("ready on") == f"ready on http://127.0.0.1:{port}"
        base = f"http://127.0.0.1:{port}"
        assert http(base + "/health")[0] == 200
        result: dict[str, tuple[int, str]] = {}
        long = {"text": "drain me", "sampling_params": {"max_new_tokens": 250, "ignore_eos": True}}
        worker = threading.Thread(target=lambda: result.setdefault("r", http(base + "/generate", long)))
        worker.start()
        time.sleep(0.3)
        p.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        assert http(base + "/health")[0] == 503
        assert http(base + "/ready")[0] == 503
        worker.join(30)
        status, text = result["r"]
        assert status == 200 and json.loads(text)["meta_info"]["completion_tokens"] == 250
        assert p.proc.wait(15) == 0
    finally:
        p.stop()


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = cli("--role", "unified", "--port", str(port), "--release", str(RELEASE))
    assert res.returncode == 2
    assert f"127.0.0.1:{port} is already in use" in res.stderr and "Traceback" not in res.stderr
