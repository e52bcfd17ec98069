"""Mooncake master HA on etcd: probes, one verdict, and the arithmetic of a failover drill.

Stdlib only: Ansible ships this file as ``ansible.module_utils.mooncake_ha`` to the host that runs
the probes (the controller, or a pod in the cluster), and the benchmark imports it as
``inferplane.node.mooncake_ha``. Facts it relies on (runtime-interfaces.md section 5):

- the leader holds ``mooncake-store/<cluster_id>/master_view`` (value ``host:rpc_port``) under an
  etcd lease of 5 s; a new leader spends one more lease TTL in ``leader_warmup`` before serving;
- every master answers ``GET /health`` on its metrics port with its role, HA state, the leader it
  believes in and the view version, and ``GET /metrics`` with the ``ha_oplog_*`` gauges;
- etcd speaks JSON through its gRPC gateway (``/v3/...``, keys and values base64).

Every probe has a short timeout: a SIGSTOPped process accepts TCP connections (the kernel does)
and then never answers, which is exactly the failure nobody noticed in production.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MASTER_VIEW_LEASE_TTL_S = 5  # DEFAULT_MASTER_VIEW_LEASE_TTL_SEC, mooncake-store/include/types.h
LOWER_BOUND_FAILOVER_S = 2 * MASTER_VIEW_LEASE_TTL_S  # lease expiry + one TTL of leader warm-up
DEFAULT_TIMEOUT_S = 1.0
TE_METADATA_PREFIXES = ("mooncake/ram/", "mooncake/rpc_meta/")  # transfer-engine segment descriptors in etcd

ERROR_NAMES = {
    0: "OK",
    -1: "INTERNAL_ERROR",
    -200: "NO_AVAILABLE_HANDLE",
    -600: "INVALID_PARAMS",
    -703: "REPLICA_IS_NOT_READY",
    -704: "OBJECT_NOT_FOUND",
    -705: "OBJECT_ALREADY_EXISTS",
    -706: "OBJECT_HAS_LEASE",
    -707: "LEASE_EXPIRED",
    -800: "TRANSFER_FAIL",
    -900: "RPC_FAIL",
    -901: "RPC_TIMEOUT",
    -1000: "ETCD_OPERATION_ERROR",
}

# The /metrics gauges a diagnosis reports; everything else stays on the dashboards.
MASTER_GAUGES = (
    "master_active_clients",
    "master_key_count",
    "master_total_capacity_bytes",
    "master_allocated_bytes",
    "ha_oplog_last_sequence_id",
    "ha_oplog_applied_sequence_id",
    "ha_oplog_standby_lag",
    "ha_oplog_pending_entries",
    "ha_pending_mutation_queue_size",
    "ha_standby_state",
    "ha_state_transitions_total",
)

VERDICTS = ("healthy", "degraded", "down", "split-brain-suspected")


class ProbeError(Exception):
    """A probe got no usable answer (refused, timed out, or not the JSON it promised)."""


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"error {code}")


# --------------------------------------------------------------------------- HTTP


def _request(url: str, body: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException, ValueError) as exc:
        # HTTPException: a process frozen or killed mid-answer leaves a truncated response.
        reason = getattr(exc, "reason", exc)
        raise ProbeError(f"{url}: {reason or type(exc).__name__}") from None


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
    status, raw = _request(url, body, timeout)
    try:
        parsed = json.loads(raw or b"null")
    except ValueError:
        raise ProbeError(f"{url}: HTTP {status}, not JSON: {raw[:120]!r}") from None
    if status >= 400 and not isinstance(parsed, dict):
        raise ProbeError(f"{url}: HTTP {status}")
    return parsed


def http_text(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    status, raw = _request(url, None, timeout)
    if status >= 400:
        raise ProbeError(f"{url}: HTTP {status}")
    return raw.decode(errors="replace")


# --------------------------------------------------------------------------- etcd v3 (gRPC gateway)


def as_int(value: Any, default: int = 0) -> int:
    """etcd's gateway sends int64 as strings and omits zero values; a master in transition sends nulls."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str | None) -> str:
    return base64.b64decode(text or "").decode(errors="replace")


def etcd_url(endpoint: str) -> str:
    return endpoint.rstrip("/") if "://" in endpoint else f"http://{endpoint}"


def prefix_end(prefix: str) -> str:
    """etcd's range_end for 'every key starting with prefix' (last byte + 1)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


def etcd_call(endpoint: str, path: str, body: dict[str, Any], timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    out = http_json(etcd_url(endpoint) + path, body, timeout)
    if not isinstance(out, dict):
        raise ProbeError(f"{endpoint}{path}: unexpected answer {out!r:.120}")
    if "error" in out or ("code" in out and "message" in out):
        raise ProbeError(f"{endpoint}{path}: {out.get('error') or out.get('message')}")
    return out


def etcd_range(
    endpoint: str, key: str, *, prefix: bool = False, keys_only: bool = False, timeout: float = DEFAULT_TIMEOUT_S
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"key": b64(key)}
    if prefix:
        body["range_end"] = b64(prefix_end(key))
    if keys_only:
        body["keys_only"] = True
    out = etcd_call(endpoint, "/v3/kv/range", body, timeout)
    return [
        {
            "key": unb64(kv.get("key")),
            "value": unb64(kv.get("value")),
            "lease": as_int(kv.get("lease")),
            "mod_revision": as_int(kv.get("mod_revision")),
        }
        for kv in out.get("kvs", [])
    ]


def etcd_status(endpoint: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    out = etcd_call(endpoint, "/v3/maintenance/status", {}, timeout)
    header = out.get("header", {})
    return {
        "member_id": str(header.get("member_id", "")),
        "leader_id": str(out.get("leader", "")),
        "raft_term": as_int(out.get("raftTerm", header.get("raft_term"))),
        "raft_index": as_int(out.get("raftIndex")),
        "db_size": as_int(out.get("dbSize")),
        "version": out.get("version", ""),
        "errors": list(out.get("errors", [])),
    }


def etcd_members(endpoint: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, Any]]:
    out = etcd_call(endpoint, "/v3/cluster/member/list", {}, timeout)
    return [
        {
            "id": str(m.get("ID", "")),
            "name": m.get("name", ""),
            "client_urls": list(m.get("clientURLs", [])),
            "peer_urls": list(m.get("peerURLs", [])),
            "learner": bool(m.get("isLearner", False)),
        }
        for m in out.get("members", [])
    ]


def etcd_alarms(endpoint: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, str]]:
    out = etcd_call(endpoint, "/v3/maintenance/alarm", {"action": "GET"}, timeout)
    return [{"member_id": str(a.get("memberID", "")), "alarm": a.get("alarm", "NONE")} for a in out.get("alarms", [])]


def etcd_health(endpoint: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """etcd's own /health: true only when the member sees a leader and can commit."""
    try:
        out = http_json(etcd_url(endpoint) + "/health", None, timeout)
    except ProbeError:
        return False
    return isinstance(out, dict) and str(out.get("health")) == "true"


def etcd_lease_ttl(endpoint: str, lease_id: int, timeout: float = DEFAULT_TIMEOUT_S) -> int:
    out = etcd_call(endpoint, "/v3/kv/lease/timetolive", {"ID": str(lease_id)}, timeout)
    return as_int(out.get("TTL"), -1)


def etcd_delete_if_unchanged(endpoint: str, key: str, mod_revision: int, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """Delete key only while it is the version we judged stale (compare-and-delete in one txn)."""
    body = {
        "compare": [{"target": "MOD", "key": b64(key), "result": "EQUAL", "mod_revision": str(mod_revision)}],
        "success": [{"request_delete_range": {"key": b64(key)}}],
    }
    out = etcd_call(endpoint, "/v3/kv/txn", body, timeout)
    return bool(out.get("succeeded", False))


def first_answer(endpoints: Sequence[str], fn: Any, *args: Any, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[str, Any]:
    """Ask endpoints in order; the first that answers wins. Raises ProbeError naming every failure."""
    errors = []
    for ep in endpoints:
        try:
            return ep, fn(ep, *args, timeout=timeout)
        except ProbeError as exc:
            errors.append(str(exc))
    raise ProbeError("no etcd endpoint answered: " + "; ".join(errors))


def master_view_key(cluster_id: str) -> str:
    return f"mooncake-store/{cluster_id}/master_view"


def oplog_prefix(cluster_id: str) -> str:
    return f"/oplog/{cluster_id}/"


# --------------------------------------------------------------------------- masters


def admin_base(url: str) -> str:
    """http://h:p from any of a master's admin URLs (metrics_url, health_url)."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    return f"{parts.scheme}://{parts.netloc}"


def master_health(base: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    out = http_json(base + "/health", None, timeout)
    if not isinstance(out, dict) or "role" not in out:
        raise ProbeError(f"{base}/health: unexpected answer {out!r:.120}")
    return out


def parse_metrics(text: str, names: Iterable[str] = MASTER_GAUGES) -> dict[str, float]:
    """Unlabelled samples of the named families from Prometheus text format."""
    wanted = set(names)
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if name in wanted:
            try:
                found[name] = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
    return found


def master_metrics(base: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, float]:
    return parse_metrics(http_text(base + "/metrics", timeout))


def master_segments(base: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, Any]]:
    out = http_json(base + "/get_segments_detail", None, timeout)
    if not isinstance(out, dict):
        raise ProbeError(f"{base}/get_segments_detail: unexpected answer")
    return list(out.get("segments", []))


def master_has_key(base: str, key: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    out = http_json(base + "/query_key?" + urllib.parse.urlencode({"key": key}), None, timeout)
    return isinstance(out, dict) and bool(out.get("success"))


# --------------------------------------------------------------------------- snapshot


def _probe_etcd(endpoint: str, timeout: float) -> dict[str, Any]:
    row: dict[str, Any] = {"endpoint": endpoint, "ok": False}
    try:
        row.update(etcd_status(endpoint, timeout))
        row["ok"] = True
        row["healthy"] = etcd_health(endpoint, timeout)
    except ProbeError as exc:
        row["error"] = str(exc)
    return row


def _probe_master(master: dict[str, Any], timeout: float, with_metrics: bool) -> dict[str, Any]:
    base = admin_base(master.get("health_url") or master["metrics_url"])
    row: dict[str, Any] = {"name": master["name"], "rpc_address": master.get("rpc_address", ""), "admin_url": base, "ok": False}
    try:
        health = master_health(base, timeout)
    except ProbeError as exc:
        row["error"] = str(exc)
        return row
    row.update(
        ok=True,
        role=health.get("role"),
        ha_state=health.get("ha_state"),
        service_ready=bool(health.get("service_ready")),
        leader_address=health.get("leader_address", ""),
        view_version=as_int(health.get("view_version")),
    )
    if with_metrics:
        try:
            row["metrics"] = master_metrics(base, timeout)
        except ProbeError as exc:
            row["metrics_error"] = str(exc)
    return row


def _probe_worker(worker: dict[str, Any], timeout: float) -> dict[str, Any]:
    """What an engine says about its Mooncake connection, where its /server_info says anything."""
    row: dict[str, Any] = {"name": worker["name"], "url": worker["url"], "ok": False}
    try:
        info = http_json(worker["url"].rstrip("/") + "/server_info", None, timeout)
    except ProbeError as exc:
        row["error"] = str(exc)
        return row
    row["ok"] = True
    row["mooncake"] = (
        {k: v for k, v in (info or {}).items() if "mooncake" in k.lower() or "hicache" in k.lower()} if isinstance(info, dict) else {}
    )
    return row


def snapshot(
    etcd_endpoints: Sequence[str],
    masters: Sequence[dict[str, Any]],
    cluster_id: str,
    *,
    workers: Sequence[dict[str, Any]] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
    with_metrics: bool = True,
    with_segments: bool = True,
) -> dict[str, Any]:
    """Everything a diagnosis needs, probed in parallel so a hung member costs one timeout, not N."""
    taken_at = time.time()
    with ThreadPoolExecutor(max_workers=max(4, len(etcd_endpoints) + len(masters) + len(workers))) as pool:
        etcd_rows = list(pool.map(lambda ep: _probe_etcd(ep, timeout), etcd_endpoints))
        master_rows = list(pool.map(lambda m: _probe_master(m, timeout, with_metrics), masters))
        worker_rows = list(pool.map(lambda w: _probe_worker(w, timeout), workers))
    answering = [r["endpoint"] for r in etcd_rows if r["ok"]]
    snap: dict[str, Any] = {
        "taken_at": taken_at,
        "cluster_id": cluster_id,
        "etcd": {"endpoints": etcd_rows, "members": [], "alarms": [], "errors": []},
        "master_view": None,
        "masters": master_rows,
        "workers": worker_rows,
        "segments": None,
    }
    for call, field in ((etcd_members, "members"), (etcd_alarms, "alarms")):
        try:
            snap["etcd"][field] = first_answer(answering, call, timeout=timeout)[1]
        except ProbeError as exc:
            snap["etcd"]["errors"].append(f"{field}: {exc}")
    try:
        ep, kvs = first_answer(answering, etcd_range, master_view_key(cluster_id), timeout=timeout)
        if kvs:
            view = dict(kvs[0])
            try:
                view["ttl"] = etcd_lease_ttl(ep, view["lease"], timeout) if view["lease"] else None
            except ProbeError:
                view["ttl"] = None
            snap["master_view"] = view
        else:
            snap["master_view"] = {"key": master_view_key(cluster_id), "value": "", "lease": 0, "ttl": None, "absent": True}
        durable = etcd_range(ep, oplog_prefix(cluster_id) + "durable_prefix", timeout=timeout)
        snap["oplog"] = {"durable_prefix_present": bool(durable), "durable_prefix": durable[0]["value"] if durable else None}
    except ProbeError as exc:
        snap["etcd"]["errors"].append(f"master_view: {exc}")
    leader = next((m for m in master_rows if m.get("role") == "leader" and m.get("ha_state") == "serving"), None)
    if with_segments and leader is not None:
        try:
            snap["segments"] = [
                {
                    "name": s.get("segment_name"),
                    "capacity_bytes": s.get("allocator_capacity_bytes"),
                    "used_bytes": s.get("allocator_used_bytes"),
                    "status": s.get("status"),
                }
                for s in master_segments(leader["admin_url"], timeout)
            ]
        except ProbeError as exc:
            snap["segments_error"] = str(exc)
    return snap


# --------------------------------------------------------------------------- verdict


def _problem(reasons: list[dict[str, str]], severity: str, what: str, next_step: str) -> None:
    reasons.append({"severity": severity, "what": what, "next_step": next_step})


def published(master: dict[str, Any]) -> str:
    """The address a leader put into master_view: its own /health leader_address (on Kubernetes the
    pod IP, not the DNS name the inventory knows it by)."""
    return str(master.get("leader_address") or master.get("rpc_address", ""))


def assess(snap: dict[str, Any], *, expected_masters: int = 2, expected_etcd_members: int = 3, max_standby_lag: int = 0) -> dict[str, Any]:
    """One verdict from a snapshot: healthy / degraded / down / split-brain-suspected, and what to do next.

    Order matters: without etcd quorum nothing else can be trusted or fixed, so it is named first;
    two serving leaders are named before a missing one because restarting anything then is unsafe.
    """
    reasons: list[dict[str, str]] = []
    etcd = snap["etcd"]
    rows = etcd["endpoints"]
    answering = [r for r in rows if r["ok"]]
    members = etcd.get("members") or []
    member_count = len(members) or len(rows)
    quorum_size = member_count // 2 + 1
    leaders_seen = {r.get("leader_id") for r in answering if r.get("leader_id") not in (None, "", "0")}
    names = {m["id"]: m["name"] for m in members}
    etcd_leader = next(iter(leaders_seen)) if len(leaders_seen) == 1 else None
    has_quorum = len(answering) >= quorum_size and etcd_leader is not None and any(r.get("healthy") for r in answering)

    masters = snap["masters"]
    up = [m for m in masters if m["ok"]]
    serving = [m for m in up if m.get("role") == "leader" and m.get("ha_state") == "serving"]
    claiming = [m for m in up if m.get("role") == "leader"]
    view = snap.get("master_view") or {}
    view_addr = view.get("value", "")
    leader = serving[0] if len(serving) == 1 else None

    if not has_quorum:
        dead = ", ".join(f"{r['endpoint']} ({r.get('error', 'no leader')})" for r in rows if not r["ok"]) or "none unreachable"
        _problem(
            reasons,
            "down",
            f"etcd has no quorum: {len(answering)} of {member_count} members answer, {quorum_size} needed; unreachable: {dead}",
            "restore etcd first (-e mode=recovery rejoins stopped members); masters cannot keep or elect a leader without it",
        )
    if len(serving) > 1:
        _problem(
            reasons,
            "split-brain-suspected",
            "more than one master serves as leader: "
            + ", ".join(f"{m['name']} ({m['rpc_address']})" for m in serving)
            + f"; etcd master_view says {view_addr or 'nothing'}",
            f"restart nothing yet; re-run diagnose in {MASTER_VIEW_LEASE_TTL_S} s (a resumed old leader steps down within a second); if it persists, stop the master whose address is not the master_view value",
        )
    elif leader is not None and view_addr and view_addr != published(leader) and has_quorum:
        _problem(
            reasons,
            "split-brain-suspected",
            f"{leader['name']} serves as leader at {published(leader)} but etcd master_view names {view_addr}; clients follow the view",
            f"re-run diagnose in {MASTER_VIEW_LEASE_TTL_S} s; if it persists, stop {leader['name']} so the view's holder is the only leader",
        )
    if not up:
        _problem(
            reasons,
            "down",
            "no Mooncake master answers: " + "; ".join(f"{m['name']}: {m.get('error', '?')}" for m in masters),
            "run recovery (-e mode=recovery) to start the masters; clients fail every put/get with RPC_FAIL (-900) until a leader serves",
        )
    elif not serving:
        warm = [m for m in claiming if m.get("ha_state") == "leader_warmup"]
        if warm:
            _problem(
                reasons,
                "degraded",
                f"failover in progress: {warm[0]['name']} is leader in warm-up (serves after one lease TTL, {MASTER_VIEW_LEASE_TTL_S} s)",
                f"re-run diagnose in {MASTER_VIEW_LEASE_TTL_S} s; clients retry meanwhile",
            )
        else:
            _problem(
                reasons,
                "down",
                f"no master serves as leader ({len(up)} answer, all standby); master_view is {view_addr or 'absent'}",
                "if etcd has quorum the standby takes the lease within 5 s: re-run diagnose; if a standby stays standby with no view, run recovery to restart the masters",
            )
    if len(up) < expected_masters and up:
        missing = [m["name"] for m in masters if not m["ok"]]
        _problem(
            reasons,
            "degraded",
            f"{len(up)} of {expected_masters} masters answer; not answering: {', '.join(missing) or '(not configured)'}",
            "run recovery (-e mode=recovery) to restart them; until then a leader failure is an outage",
        )
    if leader is not None:
        for m in up:
            if m is leader:
                continue
            if m.get("role") != "standby" or m.get("ha_state") != "standby":
                _problem(
                    reasons,
                    "degraded",
                    f"{m['name']} is {m.get('role')}/{m.get('ha_state')}, expected standby/standby",
                    "re-run diagnose; if it stays, restart it (recovery)",
                )
            elif m.get("leader_address") and m["leader_address"] != published(leader):
                _problem(
                    reasons,
                    "degraded",
                    f"{m['name']} follows {m['leader_address']}, the leader is {published(leader)}",
                    "re-run diagnose; a standby that keeps following the old leader needs a restart (recovery)",
                )
            lag = (m.get("metrics") or {}).get("ha_oplog_standby_lag")
            if lag is not None and lag > max_standby_lag:
                _problem(
                    reasons,
                    "degraded",
                    f"{m['name']} oplog lag is {int(lag)} entries (allowed {max_standby_lag})",
                    "wait for the standby to catch up before any drill or restart",
                )
        versions = {m.get("view_version") for m in up}
        if len(versions) > 1:
            _problem(
                reasons,
                "degraded",
                f"masters disagree on the view version: {sorted(v for v in versions if v is not None)}",
                "re-run diagnose; persistent disagreement means a master lost its etcd watch: restart it",
            )
    if has_quorum:
        bad = [r for r in rows if not r["ok"] or not r.get("healthy")]
        if bad:
            _problem(
                reasons,
                "degraded",
                f"etcd quorum kept but {len(bad)} of {member_count} members are unhealthy: "
                + ", ".join(f"{r['endpoint']} ({r.get('error', 'unhealthy')})" for r in bad),
                "run recovery (-e mode=recovery) to rejoin the member; one more loss breaks quorum",
            )
        if len(members) and len(members) != expected_etcd_members:
            _problem(
                reasons,
                "degraded",
                f"etcd has {len(members)} members, expected {expected_etcd_members}",
                "add or remove members to match the inventory",
            )
        if etcd.get("alarms"):
            _problem(
                reasons,
                "degraded",
                "etcd alarms raised: " + ", ".join(f"{a['alarm']} on {names.get(a['member_id'], a['member_id'])}" for a in etcd["alarms"]),
                "NOSPACE: compact + defragment, then disarm the alarm; CORRUPT: replace the member",
            )
    order = {"split-brain-suspected": 3, "down": 2, "degraded": 1}
    verdict = "healthy"
    for r in reasons:
        if order[r["severity"]] > order.get(verdict, 0):
            verdict = r["severity"]
    first = next((r for r in reasons if r["severity"] == verdict), None)
    return {
        "verdict": verdict,
        "reasons": reasons,
        "next_step": first["next_step"] if first else "none: the platform is healthy",
        "leader": leader["name"] if leader else None,
        "leader_address": published(leader) if leader else None,
        "standbys": [m["name"] for m in up if m.get("role") == "standby"],
        "view": {
            "address": view_addr,
            "lease": view.get("lease"),
            "ttl": view.get("ttl"),
            "version": leader.get("view_version") if leader else None,
        },
        "etcd": {
            "members": member_count,
            "answering": len(answering),
            "quorum": has_quorum,
            "leader": names.get(etcd_leader or "", etcd_leader),
            "leader_endpoint": next((r["endpoint"] for r in answering if r.get("member_id") == etcd_leader), None),
        },
        "masters_up": [m["name"] for m in up],
        "masters_down": [m["name"] for m in masters if not m["ok"]],
    }


def render_text(snap: dict[str, Any], result: dict[str, Any]) -> str:
    """The human half of the report: verdict first, then one line per component."""
    lines = [f"VERDICT: {result['verdict']}", f"NEXT STEP: {result['next_step']}"]
    for r in result["reasons"]:
        lines.append(f"  [{r['severity']}] {r['what']}")
    e = result["etcd"]
    lines.append(
        f"etcd: {e['answering']}/{e['members']} members answer, quorum {'yes' if e['quorum'] else 'NO'}, leader {e['leader'] or '-'}"
    )
    for row in snap["etcd"]["endpoints"]:
        state = (
            f"member {row.get('member_id')} term {row.get('raft_term')} db {row.get('db_size')} B health {row.get('healthy')}"
            if row["ok"]
            else row.get("error", "")
        )
        lines.append(f"  {row['endpoint']}: {state}")
    v = result["view"]
    lines.append(f"master_view: {v['address'] or '(absent)'} lease {v['lease']} ttl {v['ttl']} view_version {v['version']}")
    for m in snap["masters"]:
        if not m["ok"]:
            lines.append(f"  {m['name']} {m.get('rpc_address', '')}: DOWN ({m.get('error')})")
            continue
        mt = m.get("metrics") or {}
        lines.append(
            f"  {m['name']} {m['rpc_address']}: {m.get('role')}/{m.get('ha_state')} ready={m.get('service_ready')} "
            f"follows {m.get('leader_address')} v{m.get('view_version')} "
            f"oplog last={mt.get('ha_oplog_last_sequence_id', '-')} applied={mt.get('ha_oplog_applied_sequence_id', '-')} "
            f"lag={mt.get('ha_oplog_standby_lag', '-')} clients={mt.get('master_active_clients', '-')} keys={mt.get('master_key_count', '-')} "
            f"capacity={mt.get('master_total_capacity_bytes', '-')} B"
        )
    if snap.get("segments") is not None:
        lines.append(f"segments mounted on the leader: {len(snap['segments'])} " + ", ".join(str(s["name"]) for s in snap["segments"][:8]))
    for w in snap.get("workers", []):
        lines.append(f"  worker {w['name']}: " + (json.dumps(w.get("mooncake")) if w["ok"] else f"unreachable ({w.get('error')})"))
    return "\n".join(lines)


# --------------------------------------------------------------------------- drill timelines


def sample_leaders(
    masters: Sequence[dict[str, Any]], etcd_endpoints: Sequence[str], cluster_id: str, timeout: float = 0.4
) -> dict[str, Any]:
    """One observation for a drill timeline: every master's role and the etcd master_view."""
    t = time.time()
    with ThreadPoolExecutor(max_workers=len(masters) + 1) as pool:
        futs = {m["name"]: pool.submit(_probe_master, m, timeout, False) for m in masters}
        view_fut = pool.submit(first_answer, etcd_endpoints, etcd_range, master_view_key(cluster_id), timeout=timeout)
        roles = {}
        for name, fut in futs.items():
            row = fut.result()
            roles[name] = (
                {"role": row.get("role"), "ha_state": row.get("ha_state"), "view_version": row.get("view_version")}
                if row["ok"]
                else {"error": row.get("error")}
            )
        try:
            kvs = view_fut.result()[1]
            view: str | None = kvs[0]["value"] if kvs else ""
        except ProbeError:
            view = None
    return {"kind": "leaders", "t": t, "view": view, "roles": roles}


def sample_etcd(etcd_endpoints: Sequence[str], timeout: float = 0.4) -> dict[str, Any]:
    t = time.time()
    with ThreadPoolExecutor(max_workers=len(etcd_endpoints)) as pool:
        rows = list(pool.map(lambda ep: _probe_etcd(ep, timeout), etcd_endpoints))
    return {
        "kind": "etcd",
        "t": t,
        "members": {
            r["endpoint"]: ({"leader_id": r.get("leader_id"), "member_id": r.get("member_id")} if r["ok"] else {"error": r.get("error")})
            for r in rows
        },
    }


def serving_leaders(sample: dict[str, Any]) -> list[str]:
    return sorted(n for n, r in sample["roles"].items() if r.get("role") == "leader" and r.get("ha_state") == "serving")


def claiming_leaders(sample: dict[str, Any]) -> list[str]:
    return sorted(n for n, r in sample["roles"].items() if r.get("role") == "leader")


def _etcd_leader(sample: dict[str, Any]) -> str | None:
    ids = {r.get("leader_id") for r in sample["members"].values() if r.get("leader_id") not in (None, "", "0")}
    return next(iter(ids)) if len(ids) == 1 else None


def drill_progress(
    events: Sequence[dict[str, Any]], fault_at: float, previous_leader: str | None, previous_etcd_leader: str | None = None
) -> dict[str, Any]:
    """Measure a drill from its timeline; pure so unit tests can feed it made-up timelines.

    events: recorder lines ({"kind": "leaders"|"etcd"|"put", "t": ...}); fault_at: epoch seconds of
    the injection. Times are seconds after the fault.
    - new_leader_s: first sample after the fault in which a master other than previous_leader serves;
    - leader_serving_s: first sample after the fault with exactly one serving leader that follows an
      interval without one (any master, the old one included: etcd faults may re-elect it);
    - writes_recovered_s: end of the first successful put after the first failed one (0 outage when
      no put failed).
    """
    after = [e for e in events if e.get("t", 0) >= fault_at]
    leaders = [e for e in after if e["kind"] == "leaders"]
    puts = [e for e in events if e["kind"] == "put" and e.get("t1", e["t"]) >= fault_at]
    out: dict[str, Any] = {
        "fault_at": fault_at,
        "samples": len(leaders),
        "new_leader": None,
        "new_leader_s": None,
        "leader_gap_s": None,
        "leader_serving_s": None,
        "two_serving_samples": 0,
        "two_claiming_samples": 0,
        "view_changes": 0,
        "writes_after_fault": len(puts),
        "write_failures": 0,
        "first_failure_s": None,
        "writes_recovered_s": None,
        "write_outage_s": 0.0,
        "failure_codes": {},
        "etcd_new_leader_s": None,
        "etcd_unanswering": [],
    }
    gap_start = None
    last_view = None
    for s in leaders:
        srv = serving_leaders(s)
        if len(srv) > 1:
            out["two_serving_samples"] += 1
        if len(claiming_leaders(s)) > 1:
            out["two_claiming_samples"] += 1
        if s.get("view") is not None:
            if last_view is not None and s["view"] != last_view:
                out["view_changes"] += 1
            last_view = s["view"]
        if not srv and gap_start is None:
            gap_start = s["t"]
        if len(srv) == 1:
            if gap_start is not None and out["leader_serving_s"] is None:
                out["leader_serving_s"] = round(s["t"] - fault_at, 3)
                out["leader_gap_s"] = round(s["t"] - gap_start, 3)
            if out["new_leader"] is None and srv[0] != previous_leader:
                out["new_leader"] = srv[0]
                out["new_leader_s"] = round(s["t"] - fault_at, 3)
    first_fail = None
    for p in puts:
        if p["rc"] != 0:
            out["write_failures"] += 1
            name = error_name(p["rc"])
            out["failure_codes"][name] = out["failure_codes"].get(name, 0) + 1
            if first_fail is None:
                first_fail = p
        elif first_fail is not None and out["writes_recovered_s"] is None:
            out["writes_recovered_s"] = round(p["t1"] - fault_at, 3)
            out["write_outage_s"] = round(p["t1"] - first_fail["t"], 3)
    if first_fail is not None:
        out["first_failure_s"] = round(first_fail["t"] - fault_at, 3)
    etcd_samples = [e for e in after if e["kind"] == "etcd"]
    silent: set[str] = set()
    for s in etcd_samples:
        silent |= {ep for ep, r in s["members"].items() if "error" in r}
        lead = _etcd_leader(s)
        if out["etcd_new_leader_s"] is None and lead and previous_etcd_leader and lead != previous_etcd_leader:
            out["etcd_new_leader_s"] = round(s["t"] - fault_at, 3)
    out["etcd_unanswering"] = sorted(silent)
    return out


def drill_done(drill: str, progress: dict[str, Any], held_s: float, hold_s: float, *, need_writes: bool = True) -> bool:
    """Whether the drill's expected recovery has been observed (the wait module polls this).

    ``need_writes=False`` (leader drills only): a new serving leader is enough. The leader_stop
    drill waits for that first, restarts the hung leader as its liveness probe would, and only
    then for writes: a client call in flight to the hung leader stays blocked until then.
    """
    writes_ok = progress["write_failures"] == 0 or progress["writes_recovered_s"] is not None
    if drill in ("leader_kill", "leader_stop"):
        return progress["new_leader"] is not None and (progress["writes_recovered_s"] is not None or not need_writes)
    if drill == "etcd_leader_stop":
        return progress["etcd_new_leader_s"] is not None and writes_ok and held_s >= hold_s
    return held_s >= hold_s and writes_ok


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): no interpolation between drills that really happened."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
