"""The recording half of a Mooncake failover drill: a timeline of leaders, etcd and client writes.

A drill is: record (seed keys, a write stream, leader/etcd samples) -> inject a fault -> wait until
the expected recovery shows in the timeline -> restore -> read every key back. The fault itself
is injected by whoever drives the drill (Ansible tasks for Kubernetes pods or local processes;
the benchmark signals processes directly), so this file only watches and measures.

The timeline is a JSON-lines file; ``drill_progress`` in mooncake_ha turns it into numbers.
Stdlib only (the store client runs in its own child process, see mooncake_store_client).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

try:  # inside an Ansible module's payload
    from ansible.module_utils.mooncake_ha import drill_done, drill_progress, sample_etcd, sample_leaders
    from ansible.module_utils.mooncake_store_client import StoreClientProcess, summarize
except ImportError:  # the controller package (benchmark, tests)
    from inferplane.node.mooncake_ha import drill_done, drill_progress, sample_etcd, sample_leaders
    from inferplane.node.mooncake_store_client import StoreClientProcess, summarize

TIMELINE = "timeline.jsonl"
CLIENT_LOG = "store-client.log"


class Timeline:
    """Append-only JSON lines, written by the sampler loop and the client's reader thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the recording

    def add(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._fh.write(json.dumps(event) + "\n")

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_timeline(path: str) -> list[dict[str, Any]]:
    events = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue  # the last line may be half-written while the recorder runs
    except FileNotFoundError:
        return []
    return events


class Recorder:
    def __init__(
        self,
        *,
        run_dir: str,
        masters: Sequence[dict[str, Any]],
        etcd_endpoints: Sequence[str],
        cluster_id: str,
        client_cfg: dict[str, Any],
        client_python: str,
        sample_interval_s: float = 0.2,
        etcd_sample_every: int = 2,
        hang_timeout_s: float = 30.0,
        probe_timeout_s: float = 0.4,
    ) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self.masters = list(masters)
        self.etcd_endpoints = list(etcd_endpoints)
        self.cluster_id = cluster_id
        self.sample_interval_s = sample_interval_s
        self.etcd_sample_every = etcd_sample_every
        self.hang_timeout_s = hang_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self.timeline_path = os.path.join(run_dir, TIMELINE)
        self.timeline = Timeline(self.timeline_path)
        self.client = StoreClientProcess(
            client_cfg, python=client_python, log_path=os.path.join(run_dir, CLIENT_LOG), on_event=self._client_event
        )
        self.hung = False
        self.started_at = 0.0

    def _client_event(self, event: dict[str, Any]) -> None:
        self.timeline.add(event)

    def start(self, ready_timeout_s: float) -> dict[str, Any]:
        """Start the client and wait until it has written its seed keys."""
        self.started_at = time.time()
        self.timeline.add({"kind": "start", "t": self.started_at, "masters": [m["name"] for m in self.masters]})
        self.client.start()
        ready = self.client.wait_for("ready", ready_timeout_s)
        setup = self.client.of_kind("setup")
        if ready is None:
            self.client.kill()
            detail = (
                setup[-1]
                if setup
                else {"error": f"no answer from the store client within {ready_timeout_s} s (log: {self.client.log_path})"}
            )
            raise RuntimeError(f"store client did not get ready: {detail.get('error') or 'setup rc ' + str(detail.get('rc'))}")
        return ready

    def sample_once(self, n: int) -> None:
        self.timeline.add(sample_leaders(self.masters, self.etcd_endpoints, self.cluster_id, self.probe_timeout_s))
        if n % self.etcd_sample_every == 0:
            self.timeline.add(sample_etcd(self.etcd_endpoints, self.probe_timeout_s))

    def watch(self, stop_file: str | None, max_s: float, stop_event: threading.Event | None = None) -> None:
        """Sample until the stop file appears (Ansible), the event is set (benchmark) or max_s passes."""
        n = 0
        deadline = time.time() + max_s
        while time.time() < deadline:
            if stop_file and os.path.exists(stop_file):
                break
            if stop_event is not None and stop_event.is_set():
                break
            t = time.time()
            try:
                self.sample_once(n)
            except Exception as exc:  # a bad answer must not end the recording mid-drill
                self.timeline.add({"kind": "sample_error", "t": t, "error": f"{type(exc).__name__}: {exc}"})
            n += 1
            if not self.hung and self.client.silent_for() > self.hang_timeout_s:
                # A put that has not returned in hang_timeout_s is a hung client, not a slow failover
                # (puts fail with RPC_FAIL after ~4 s each while no leader serves).
                self.hung = True
                self.timeline.add({"kind": "client_hung", "t": time.time(), "silent_s": round(self.client.silent_for(), 1)})
                self.client.kill()
            time.sleep(max(0.0, self.sample_interval_s - (time.time() - t)))

    def finish(self, verify_timeout_s: float) -> dict[str, Any]:
        verified = False if self.hung else self.client.stop(verify_timeout_s)
        self.client.kill()
        self.timeline.add({"kind": "finish", "t": time.time(), "verified": verified})
        self.timeline.close()
        summary = summarize(self.client.events)
        summary.update(
            client_hung=self.hung,
            verify_completed=verified,
            timeline=self.timeline_path,
            client_log=self.client.log_path,
            recorded_s=round(time.time() - self.started_at, 3),
        )
        return summary


def wait_for_recovery(
    timeline_path: str,
    *,
    drill: str,
    fault_at: float,
    previous_leader: str | None,
    previous_etcd_leader: str | None,
    hold_s: float,
    timeout_s: float,
    poll_s: float = 0.25,
    need_writes: bool = True,
) -> tuple[bool, dict[str, Any]]:
    """Poll the recorder's timeline until the drill's recovery is visible; (done, progress)."""
    deadline = fault_at + timeout_s
    while True:
        progress = drill_progress(read_timeline(timeline_path), fault_at, previous_leader, previous_etcd_leader)
        held = time.time() - fault_at
        if drill_done(drill, progress, held, hold_s, need_writes=need_writes):
            progress["waited_s"] = round(held, 3)
            return True, progress
        if time.time() > deadline:
            progress["waited_s"] = round(held, 3)
            return False, progress
        time.sleep(poll_s)
