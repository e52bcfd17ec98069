"""A running local platform as tests and drills use it: endpoints from state.json plus helpers.

The integration tests' ``local_platform`` fixture yields one of these; runbook rehearsals in
Python use it the same way. Every call reads state.json again, so it sees what `local group`
and `local proc` changed, whoever ran them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from inferplane.local import proc
from inferplane.local import state as st
from inferplane.local.config import LocalPlatformConfig
from inferplane.local.http import get_json, request
from inferplane.local.layout import SPAN, Layout
from inferplane.local.platform import LocalPlatform, admin_headers, mooncake_leader, prometheus_alerts, smg_workers, status_of
from inferplane.manifest import load_release

T = TypeVar("T")


def free_base_port(cfg: LocalPlatformConfig, *, low: int = 10000, high: int = 32000, attempts: int = 200, seed: int | None = None) -> int:
    """A base port whose every port is free now. Below the kernel's ephemeral range (32768+), where
    other tests' bind-to-0 ports and outgoing connections never land."""
    rng = random.Random(seed)
    for _ in range(attempts):
        base = rng.randrange(low, high - SPAN)
        ports = [p for by_purpose in Layout.of(cfg, base).ports().values() for p in by_purpose.values()]
        if all(proc.port_free(p) for p in ports):
            return base
    raise RuntimeError(f"no free base port in [{low}, {high}) after {attempts} attempts")


class PlatformHandle:
    def __init__(self, platform: LocalPlatform) -> None:
        self.platform = platform
        self.state_dir = platform.state_dir

    # ---- endpoints ----

    @property
    def state(self) -> st.State:
        return self.platform.state()

    @property
    def gateway_url(self) -> str:
        return self.state.endpoints.gateway.url

    @property
    def gateway_metrics_url(self) -> str:
        return self.state.endpoints.gateway.metrics_url

    @property
    def admin_headers(self) -> dict[str, str]:
        return admin_headers(self.state)

    @property
    def front_url(self) -> str:
        """What clients address: routes each request to a gateway by weight (`front_set`)."""
        front = self.state.endpoints.front
        if front is None:
            raise RuntimeError("this platform has no front; `ensure_up()` starts one")
        return front.url

    @property
    def prometheus_url(self) -> str:
        return self.state.endpoints.prometheus

    def group(self, name: str) -> st.Group:
        return self.state.groups[name]

    def groups(self, role: str | None = None) -> list[st.Group]:
        return [g for g in self.state.groups.values() if role is None or g.role == role]

    # ---- gateway ----

    def workers(self) -> list[dict[str, Any]]:
        return smg_workers(self.state) or []

    def worker(self, url: str) -> dict[str, Any] | None:
        return next((w for w in self.workers() if w.get("url") == url), None)

    def generate(
        self, text: str, *, max_new_tokens: int = 8, url: str | None = None, timeout: float = 30.0, **extra: Any
    ) -> tuple[int, Any]:
        """POST /generate (through the gateway unless ``url``); (status, JSON body or text)."""
        body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}, **extra}
        resp = request((url or self.gateway_url) + "/generate", "POST", body, timeout=timeout)
        try:
            return resp.status, resp.json()
        except ValueError:
            return resp.status, resp.text

    def register_missing_workers(self) -> list[str]:
        """POST every group SMG does not list (a test that removed one and failed before re-adding)."""
        listed = {w.get("url") for w in self.workers()}
        added = []
        for g in self.groups():
            if g.role in ("prefill", "decode") and g.url not in listed:
                spec: dict[str, Any] = {"url": g.url, "worker_type": g.role}
                if g.bootstrap_port:
                    spec["bootstrap_port"] = g.bootstrap_port
                request(self.gateway_url + "/workers", "POST", spec, headers=self.admin_headers)
                added.append(g.url)
        return added

    # ---- Mooncake, Prometheus ----

    def mooncake_leader(self) -> str | None:
        return mooncake_leader(self.state)[0]

    def prom_query(self, expr: str) -> list[dict[str, Any]]:
        from urllib.parse import quote

        body = get_json(f"{self.prometheus_url}/api/v1/query?query={quote(expr)}", timeout=5.0) or {}
        return list(body.get("data", {}).get("result", []))

    def alerts(self, state: str | None = "firing") -> list[dict[str, Any]]:
        found = prometheus_alerts(self.state) or []
        return [a for a in found if state is None or a.get("state") == state]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.alerts("firing")}

    # ---- engines ----

    def faults(self, group: str, **faults: Any) -> Any:
        """POST /emulator/faults on a group (unhealthy, slow_ms, crash, wrong_revision, kv_transfer_fail, error_body)."""
        return request(self.group(group).url + "/emulator/faults", "POST", faults).json()

    def clear_faults(self, group: str | None = None) -> None:
        for g in [self.group(group)] if group else self.groups():
            request(g.url + "/emulator/faults", "DELETE")

    # ---- lifecycle ----

    def proc(self, action: str, name: str) -> st.Process:
        return self.platform.proc(action, name)  # type: ignore[arg-type]

    def group_stop(self, name: str) -> st.Group:
        return self.platform.group_stop(name)

    def group_start(self, name: str) -> st.Group:
        return self.platform.group_start(name)

    def group_restart(self, name: str, version: str | None = None, release: str | Path | None = None) -> st.Group:
        return self.platform.group_restart(name, version=version, release=release)

    def group_add(self, name: str, release: str | Path | None = None, version: str | None = None) -> st.Group:
        return self.platform.group_add(name, release=release, version=version)

    def group_remove(self, name: str) -> None:
        self.platform.group_remove(name)

    def gateway_add(self, name: str, groups: list[str]) -> st.Gateway:
        return self.platform.gateway_add(name, groups)

    def gateway_remove(self, name: str) -> None:
        self.platform.gateway_remove(name)

    def front_set(self, **weights: int) -> st.Front:
        return self.platform.front_set(weights)

    def status(self) -> dict[str, Any]:
        return status_of(self.state)

    def ensure_up(self) -> st.State:
        """Start whatever is not running (idempotent `up`); registrations and versions are left alone."""
        return self.platform.up()

    def restore(self) -> st.State:
        """Back to the baseline: every process running, groups on the baseline release and version,
        no faults, every group registered with SMG. For tests that change the platform."""
        state = self.platform.up()
        # A blue/green run that stopped half way leaves its set behind: the front back to the
        # platform's gateway, extra gateways and run-time groups gone.
        if state.endpoints.front is not None and state.endpoints.front.weights != {"smg": 100}:
            self.platform.front_set({"smg": 100})
        for name in list(state.endpoints.gateways):
            self.platform.front_set({"smg": 100})
            self.platform.gateway_remove(name)
        baseline = self.platform.baseline_groups(self.platform.layout(state.base_port), load_release(state.release), state.model)
        for name in [n for n in self.state.groups if n not in baseline]:
            self.platform.group_remove(name)
        state = self.state
        for name, g in state.groups.items():
            base = baseline[name]
            if (g.version, g.release) != (base.version, base.release):
                self.platform.group_restart(name, version=base.version, release=base.release)
        self.clear_faults()
        self.register_missing_workers()
        want = {g.url for g in self.groups() if g.role in ("prefill", "decode")}
        self.wait_for(lambda: want <= {w.get("url") for w in self.workers() if w.get("status") == "ready"}, 30, "every group ready in SMG")
        return self.state

    @staticmethod
    def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
        """Poll until ``predicate()`` is truthy and return it; AssertionError naming ``what`` on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)
