"""Run the fabric pair tests on one node: start its servers, run its clients, collect the servers.

Three steps, because a pair spans two nodes and Ansible runs one task on every node before the
next: every node starts the servers the plan gives it (``serve``: detached processes with a
timeout, logs in a session directory), then every node runs its clients against its peers
(``run``), then every node stops and reads its servers (``collect``) and removes the session
directory. Nothing is left behind; a server nobody connected to dies at its timeout.

Commands:

- ``ib_write_bw -d DEV -i 1 -p PORT -D SECS --report_gbits -F [-x GID] [--use_cuda=GPU
  [--use_cuda_dmabuf]] [extra] [SERVER]`` per rail; rails of one pair run in parallel (separate
  NICs), pairs one after another.
- ``transfer_engine_bench --mode=target|initiator --metadata_server=P2PHANDSHAKE
  --local_server_name=ADDR --protocol=rdma (--auto_discovery | --device_name=DEVS)
  [--segment_id=SEG --duration=SECS] [extra]``; the target's segment id (host:port) is read
  from its log and handed to the initiator through the ``serve`` result.

Stdlib only: this file runs on nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from .mooncake_bench import parse_te_bench
from .perftest import parse_bw

READY_MARKERS = {"ib_write_bw": "Waiting for client to connect", "transfer_engine_bench": "listening on"}
STATE_FILE = "servers.json"


@dataclass
class Options:
    ib_write_bw: str = "ib_write_bw"
    ib_write_bw_args: list[str] = field(default_factory=list)
    te_bench: str = "transfer_engine_bench"
    te_bench_args: list[str] = field(default_factory=list)
    kv_auto_discovery: bool = True
    gid_index: int | None = None
    duration_s: int = 5
    gpudirect_method: str | None = None
    ready_timeout_s: float = 15.0
    server_timeout_s: int = 300
    connect_retries: int = 5


def ib_write_bw_argv(o: Options, device: str, gpu: int | None, port: int, cuda: bool, peer: str | None) -> list[str]:
    argv = [o.ib_write_bw, "-d", device, "-i", "1", "-p", str(port), "-D", str(o.duration_s), "--report_gbits", "-F"]
    if o.gid_index is not None:
        argv += ["-x", str(o.gid_index)]
    if cuda:
        argv.append(f"--use_cuda={gpu if gpu is not None else 0}")
        if o.gpudirect_method == "dmabuf":
            argv.append("--use_cuda_dmabuf")
    argv += list(o.ib_write_bw_args)
    if peer:
        argv.append(peer)
    return argv


def te_argv(o: Options, mode: str, own_address: str, devices: str, segment: str | None = None) -> list[str]:
    argv = [o.te_bench, f"--mode={mode}", "--metadata_server=P2PHANDSHAKE", f"--local_server_name={own_address}", "--protocol=rdma"]
    argv += ["--auto_discovery"] if o.kv_auto_discovery else [f"--device_name={devices}"]
    if segment:
        argv += [f"--segment_id={segment}", f"--duration={o.duration_s}", "--operation=write"]
    return argv + list(o.te_bench_args)


def _with_timeout(argv: list[str], seconds: int) -> list[str]:
    wrapper = shutil.which("timeout")
    return [wrapper, "--kill-after=5", str(seconds), *argv] if wrapper else argv


def _spawn(argv: list[str], log_path: str) -> int:
    # cwd: Ansible deletes the module's own temporary directory as soon as the module returns.
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=os.path.dirname(log_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running and not a zombie (a container's PID 1 may never reap our orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _resolve(binary: str) -> str:
    return shutil.which(binary) or binary


def serve(tests: list[dict], node: str, session: str, o: Options) -> dict:
    """Start every server this node runs for ``tests``; wait until each is listening."""
    os.makedirs(session, mode=0o700, exist_ok=True)
    o.ib_write_bw, o.te_bench = _resolve(o.ib_write_bw), _resolve(o.te_bench)
    servers: dict[str, dict] = {}
    for test in tests:
        if test["server"] != node:
            continue
        entry: dict = {"tool": test["tool"], "procs": []}
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", test["id"])
        if test["tool"] == "ib_write_bw":
            for rail in test["rails"]:
                log = os.path.join(session, f"{slug}.{rail['server_device']}.log")
                argv = ib_write_bw_argv(o, rail["server_device"], rail["server_gpu"], rail["port"], test["cuda"], None)
                entry["procs"].append(
                    {"pid": _spawn(_with_timeout(argv, o.server_timeout_s), log), "log": log, "device": rail["server_device"]}
                )
        else:
            log = os.path.join(session, f"{slug}.target.log")
            argv = te_argv(o, "target", test["server_address"], test["server_devices"])
            entry["procs"].append({"pid": _spawn(_with_timeout(argv, o.server_timeout_s), log), "log": log})
        servers[test["id"]] = entry
    deadline = time.monotonic() + o.ready_timeout_s
    pending = set(servers)
    while pending and time.monotonic() < deadline:
        for test_id in list(pending):
            entry = servers[test_id]
            logs = [_read(p["log"]) for p in entry["procs"]]
            if all(READY_MARKERS[entry["tool"]] in text for text in logs):
                if entry["tool"] == "transfer_engine_bench":
                    entry["segment"] = parse_te_bench(logs[0]).segment
                pending.discard(test_id)
            elif any(not _alive(p["pid"]) for p in entry["procs"]):
                entry["error"] = "server exited before listening: " + (_last(logs) or "no output")
                pending.discard(test_id)
        time.sleep(0.1)
    for test_id in pending:
        servers[test_id]["error"] = f"server not listening after {o.ready_timeout_s:g}s"
    with open(os.path.join(session, STATE_FILE), "w") as fh:
        json.dump(servers, fh)
    return {"session": session, "servers": {k: {x: v for x, v in e.items() if x != "procs"} for k, e in servers.items()}}


def _last(texts: list[str]) -> str:
    lines = [line.strip() for t in texts for line in t.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _run(argv: list[str], timeout: float, retries: int) -> tuple[int, str]:
    output = ""
    for attempt in range(retries + 1):
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return 124, out + f"\nclient timed out after {timeout:g}s"
        except OSError as exc:
            return 127, f"{argv[0]}: {exc.strerror or exc}"
        output = proc.stdout + proc.stderr
        # The peer's server may still be binding its port; perftest does not retry by itself.
        if proc.returncode != 0 and "Couldn't connect" in output and attempt < retries:
            time.sleep(1)
            continue
        return proc.returncode, output
    return 1, output


def run_clients(tests: list[dict], node: str, endpoints: dict, o: Options) -> dict:
    """Run every client this node runs; ``endpoints``: ``{peer: serve result}``."""
    o.ib_write_bw, o.te_bench = _resolve(o.ib_write_bw), _resolve(o.te_bench)
    results: dict[str, dict] = {}
    timeout = o.duration_s + 60
    for test in tests:
        if test["client"] != node:
            continue
        server_side = ((endpoints.get(test["server"]) or {}).get("servers") or {}).get(test["id"]) or {}
        if test["tool"] == "ib_write_bw":
            rails: list[dict] = [{} for _ in test["rails"]]

            def one(i: int, rail: dict, slot: list[dict] = rails, test: dict = test) -> None:
                argv = ib_write_bw_argv(o, rail["client_device"], rail["client_gpu"], rail["port"], test["cuda"], test["server_address"])
                rc, out = _run(argv, timeout, o.connect_retries)
                slot[i] = {
                    "client_device": rail["client_device"],
                    "server_device": rail["server_device"],
                    "rc": rc,
                    "parsed": parse_bw(out).to_dict(),
                    "tail": out.strip().splitlines()[-3:],
                }

            threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(test["rails"])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results[test["id"]] = {"tool": test["tool"], "rails": rails, "server_error": server_side.get("error")}
        else:
            segment = server_side.get("segment")
            if not segment:
                error = server_side.get("error") or "the target published no segment id"
                results[test["id"]] = {"tool": test["tool"], "rc": None, "parsed": {"errors": [error]}, "server_error": error}
                continue
            argv = te_argv(o, "initiator", test["client_address"], test["client_devices"], segment)
            rc, out = _run(argv, timeout, 0)
            results[test["id"]] = {
                "tool": test["tool"],
                "rc": rc,
                "parsed": parse_te_bench(out).to_dict(),
                "tail": out.strip().splitlines()[-3:],
            }
    return {"client": results}


def collect(session: str, wait_s: float = 15.0) -> dict:
    """Stop this node's servers, parse their logs, remove the session directory."""
    state_path = os.path.join(session, STATE_FILE)
    try:
        with open(state_path) as fh:
            servers = json.load(fh)
    except (OSError, ValueError):
        return {"server": {}}
    results: dict[str, dict] = {}
    deadline = time.monotonic() + wait_s
    for test_id, entry in servers.items():
        for proc in entry["procs"]:
            pid = proc["pid"]
            # perftest servers exit after their one client; Mooncake targets serve until told to stop.
            if entry["tool"] == "transfer_engine_bench":
                _signal_group(pid, signal.SIGINT)
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                _signal_group(pid, signal.SIGKILL)
        logs = [_read(p["log"]) for p in entry["procs"]]
        if entry["tool"] == "ib_write_bw":
            results[test_id] = {
                "tool": entry["tool"],
                "rails": [{"device": p.get("device"), "parsed": parse_bw(t).to_dict()} for p, t in zip(entry["procs"], logs, strict=True)],
            }
        else:
            results[test_id] = {
                "tool": entry["tool"],
                "parsed": parse_te_bench(logs[0] if logs else "").to_dict(),
                "tail": logs[0].strip().splitlines()[-3:] if logs else [],
            }
    shutil.rmtree(session, ignore_errors=True)
    # The run directory and the root are shared with the other nodes of a test machine; remove them once empty.
    for parent in (os.path.dirname(session), os.path.dirname(os.path.dirname(session))):
        try:
            os.rmdir(parent)
        except OSError:
            break
    return {"server": results}


def _signal_group(pid: int, sig: int) -> None:
    # Servers were started in their own session, so the group is the timeout wrapper and the tool.
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
