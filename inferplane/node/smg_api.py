"""SMG 1.13's worker API as the upgrade and blue/green runbooks use it (runtime-interfaces.md S3, S4).

Workers are looked up by URL every time: SMG gives a worker a new id on every add. A drain is
``PATCH drain_settle_secs`` (the settle must outlast the longest request) then ``DELETE``: the
worker turns ``draining`` at once, gets no new requests, and SMG removes it ``drain_settle_secs``
after the DELETE whatever its load. A drain cannot be cancelled; a drained worker comes back with
``POST`` (``worker_type`` and, for a prefill, ``bootstrap_port``: SMG discovers neither).

Stdlib only: Ansible ships it as ``ansible.module_utils.smg_api``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SmgError(Exception):
    """A worker-API call failed or a worker did not reach the state asked for in time."""


@dataclass(frozen=True)
class Gateway:
    """One SMG replica: every replica keeps its own worker registry (no mesh), so each is told."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.url


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, parsed JSON or text); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    hdrs = dict(headers or {})
    if data is not None:
        hdrs["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read() or b""
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return 0, str(getattr(exc, "reason", exc))
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def workers(gw: Gateway) -> list[dict[str, Any]]:
    status, body = http("GET", gw.url + "/workers", headers=gw.headers)
    if status != 200 or not isinstance(body, dict):
        raise SmgError(
            f"{gw.label}: GET /workers answered {status or 'nothing'} ({str(body)[:200]}); is the gateway up and the admin key right?"
        )
    return list(body.get("workers") or [])


def find(gw: Gateway, url: str) -> dict[str, Any] | None:
    url = url.rstrip("/")
    return next((w for w in workers(gw) if str(w.get("url", "")).rstrip("/") == url), None)


def spec_of(worker: dict[str, Any]) -> dict[str, Any]:
    """What POST /workers needs to bring this worker back as it was."""
    spec: dict[str, Any] = {"url": worker["url"], "worker_type": worker.get("worker_type") or "regular"}
    if spec["worker_type"] == "prefill":
        spec["bootstrap_port"] = worker.get("bootstrap_port")
    return spec


def wait_for(
    gw: Gateway, url: str, done: Callable[[dict[str, Any] | None], bool], what: str, timeout: float, poll: float = 0.25
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while True:
        last = find(gw, url)
        if done(last):
            return last
        if time.monotonic() > deadline:
            seen = "not listed" if last is None else f"status {last.get('status')}"
            raise SmgError(f"{gw.label}: {url} not {what} after {timeout:.0f}s ({seen})")
        time.sleep(poll)


@dataclass
class Drain:
    gateway: str
    url: str
    worker_id: str
    spec: dict[str, Any]
    deleted_at: float  # wall clock (time.time()) of the DELETE
    settle_s: float


def start_drain(gw: Gateway, url: str, settle_s: float, patch_wait_s: float = 0.5, timeout: float = 10.0) -> Drain | None:
    """PATCH the settle, DELETE, and wait until SMG lists the worker ``draining``.

    None when this gateway does not list ``url`` (nothing to drain there). A worker already draining
    is left as it is: its removal time is whatever the earlier DELETE set.
    """
    worker = find(gw, url)
    if worker is None:
        return None
    wid = str(worker["id"])
    if worker.get("status") != "draining":
        status, body = http("PATCH", f"{gw.url}/workers/{wid}", {"health": {"drain_settle_secs": int(settle_s)}}, gw.headers)
        if status != 202:
            raise SmgError(f"{gw.label}: PATCH drain_settle_secs on {url} answered {status} ({str(body)[:200]})")
        # The PATCH is applied in the background and WorkerInfo does not show it: give it the time it
        # takes (< 0.5 s measured) so the DELETE's removal uses the new settle.
        time.sleep(patch_wait_s)
        status, body = http("DELETE", f"{gw.url}/workers/{wid}", headers=gw.headers)
        if status != 202:
            raise SmgError(f"{gw.label}: DELETE {url} answered {status} ({str(body)[:200]})")
    deleted_at = time.time()
    wait_for(gw, url, lambda w: w is None or w.get("status") == "draining", "draining", timeout)
    return Drain(gw.label, url, wid, spec_of(worker), deleted_at, settle_s)


def add(gw: Gateway, spec: dict[str, Any], ready_timeout: float, removal_timeout: float) -> dict[str, Any]:
    """Wait for a pending removal (a drain cannot be cancelled), POST the spec, wait for ``ready``."""
    url = spec["url"]
    wait_for(gw, url, lambda w: w is None or w.get("status") != "draining", "removed after its drain", removal_timeout)
    current = find(gw, url)
    if current is None:
        if spec.get("worker_type") == "prefill" and not spec.get("bootstrap_port"):
            raise SmgError(f"{url}: a prefill needs its bootstrap_port; SMG would send bootstrap_port null to the decodes")
        status, body = http("POST", gw.url + "/workers", spec, gw.headers)
        if status not in (202, 409):
            raise SmgError(f"{gw.label}: POST /workers {url} answered {status} ({str(body)[:200]})")
    try:
        ready = wait_for(gw, url, lambda w: w is not None and w.get("status") == "ready", "ready", ready_timeout)
    except SmgError as exc:
        raise SmgError(f"{exc}; SMG health-checks {url}/health: the engine answers it?") from None
    assert ready is not None
    return ready
