"""Assemble the preflight reports: one JSON document per node, the fleet summary (JSON and a
Markdown table) and the node labels, from what every node's checks returned.

The fabric lines are only known here: a pair test has two ends, so the pair results of all nodes
are combined and each failing pair is attributed (fabric_checks.attribute) before any node's
status is final.

Stdlib only: the controller runs it as an Ansible module on localhost, so the same file works on a
machine that has nothing but ansible-core.
"""

from __future__ import annotations

import re

from .checks import FAIL, OK, WARN, Check, Skip, check, node_status
from .fabric_checks import KINDS, attribute, check_name, evaluate_edge, node_fabric_checks, own_transport

SCHEMA_VERSION = 1
AREAS = ("gpu", "topology", "rdma", "host")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(value: object) -> str:
    """A Kubernetes label value: <= 63 chars of [A-Za-z0-9_.-], alphanumeric at both ends."""
    text = _LABEL_VALUE.sub("-", str(value))[:63].strip("-_.")
    return text


def node_labels(prefix: str, rack: str | None, status: str, release: str | None, topology_facts: dict | None) -> dict[str, str]:
    labels = {f"{prefix}/preflight": status}
    if rack:
        labels[f"{prefix}/rack"] = label_value(rack)
    if release:
        labels[f"{prefix}/preflight-release"] = label_value(release)
    for gpu, m in sorted(((topology_facts or {}).get("gpu_map") or {}).items(), key=lambda kv: int(kv[0])):
        if m.get("nic"):
            labels[f"{prefix}/gpu{gpu}-nic"] = label_value(m["nic"])
        if m.get("numa") is not None:
            labels[f"{prefix}/gpu{gpu}-numa"] = label_value(m["numa"])
    return labels


def _fabric_attribution(nodes: list[dict], plan_doc: dict, floors: dict[str, float], kinds: list[str]) -> dict[str, dict[str, Check]]:
    results = {n["name"]: ((n.get("results") or {}).get("fabric") or {}) for n in nodes}
    tests = {t["id"]: t for per in plan_doc.get("nodes", {}).values() for t in per.get("run", [])}
    out: dict[str, dict[str, Check]] = {}
    for kind in kinds:
        edges = []
        for client, server in plan_doc.get("edges", {}).get(kind, []):
            test_id = f"{kind}:{client}->{server}"
            test = tests.get(test_id)
            if test is None:
                continue
            client_result = (results.get(client, {}).get("client") or {}).get(test_id)
            server_result = (results.get(server, {}).get("server") or {}).get(test_id)
            ok, observed = evaluate_edge(test, client_result, server_result, float(floors.get(kind, 0) or 0))
            edges.append({"client": client, "server": server, "ok": ok, "observed": observed})
        participants = sorted({n for e in edges for n in (e["client"], e["server"])})
        per_node = attribute(kind, edges, participants)
        if KINDS[kind].tool == "transfer_engine_bench":
            for name, c in per_node.items():
                transport = own_transport(results.get(name))
                if c["status"] != OK and transport:
                    c["observed"] = f"this node's transfer engine used {transport}; " + c["observed"]
        out[kind] = per_node
    return out


def assemble(
    nodes: list[dict],
    plan_doc: dict | None,
    floors: dict[str, float],
    kinds: list[str],
    label_prefix: str = "inferplane.io",
    release: str | None = None,
) -> dict:
    """``nodes``: ``{name, rack, results}`` where results maps each area that ran to its ``preflight_<area>_results`` fact
    (``{gpu|topology|rdma|host: {checks, skipped, facts}, fabric: {client, server}}``) or None."""
    attributed = _fabric_attribution(nodes, plan_doc, floors, kinds) if plan_doc else {}
    reports = {}
    for n in nodes:
        results = n.get("results")
        checks: list[Check] = []
        skipped: list[Skip] = []
        facts: dict = {}
        if not results:
            checks.append(
                check(
                    "node",
                    "node_reachable",
                    FAIL,
                    "no preflight results: the node was unreachable or a task failed before its checks ran",
                    "the node answers and runs every check",
                    "read the play recap for this host (UNREACHABLE or FAILED), fix access (ssh, python3, sudo) and rerun",
                )
            )
        else:
            for area in AREAS:
                part = results.get(area)
                if part:
                    checks += part.get("checks", [])
                    skipped += part.get("skipped", [])
                    if part.get("facts"):
                        facts[area] = part["facts"]
            if plan_doc:
                fabric_checks, fabric_skipped = node_fabric_checks(n["name"], plan_doc, attributed, kinds)
                checks += fabric_checks
                skipped += fabric_skipped
        status = node_status(checks)
        reports[n["name"]] = {
            "schema_version": SCHEMA_VERSION,
            "node": n["name"],
            "rack": n.get("rack"),
            "release": release,
            "status": status,
            "failing": [c["name"] for c in checks if c["status"] == FAIL],
            "warnings": [c["name"] for c in checks if c["status"] == WARN],
            "checks": checks,
            "skipped": skipped,
            "labels": node_labels(label_prefix, n.get("rack"), status, release, facts.get("topology")),
            "facts": facts,
        }
    summary = _summary(reports, release, kinds if plan_doc else [])
    return {"nodes": reports, "summary": summary, "markdown": markdown(summary, reports)}


def _summary(reports: dict[str, dict], release: str | None, kinds: list[str]) -> dict:
    counts = {"pass": 0, "warn": 0, "fail": 0}
    for r in reports.values():
        counts[r["status"]] += 1
    fleet = "fail" if counts["fail"] else ("warn" if counts["warn"] else "pass")

    def lines(status: str) -> list[dict]:
        return [
            {"node": name, **{k: c[k] for k in ("area", "name", "observed", "expected", "hint")}}
            for name, r in sorted(reports.items())
            for c in r["checks"]
            if c["status"] == status
        ]

    return {
        "schema_version": SCHEMA_VERSION,
        "release": release,
        "status": fleet,
        "counts": counts,
        "fabric_tests": [check_name(k) for k in kinds],
        "nodes": {
            name: {
                "rack": r["rack"],
                "status": r["status"],
                "failing": r["failing"],
                "warnings": r["warnings"],
                "skipped": len(r["skipped"]),
            }
            for name, r in sorted(reports.items())
        },
        "failures": lines(FAIL),
        "warnings": lines(WARN),
        "node_labels": {name: r["labels"] for name, r in sorted(reports.items())},
    }


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(summary: dict, reports: dict[str, dict]) -> str:
    c = summary["counts"]
    out = [
        "# Preflight fleet summary",
        "",
        f"Release `{summary.get('release') or 'unknown'}`: {sum(c.values())} nodes, **{summary['status']}** "
        f"({c['pass']} pass, {c['warn']} warn, {c['fail']} fail).",
        "",
        "| node | rack | status | failing checks | warnings |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, n in summary["nodes"].items():
        out.append(
            f"| {_cell(name)} | {_cell(n['rack'] or '')} | {n['status']} | {_cell(', '.join(n['failing']))} | {_cell(', '.join(n['warnings']))} |"
        )
    for title, key in (("Failures", "failures"), ("Warnings", "warnings")):
        if summary[key]:
            out += ["", f"## {title}", "", "| node | check | observed | expected | what to do |", "| --- | --- | --- | --- | --- |"]
            out += [
                f"| {_cell(x['node'])} | {x['name']} | {_cell(x['observed'])} | {_cell(x['expected'])} | {_cell(x['hint'])} |"
                for x in summary[key]
            ]
    skipped = [(name, s) for name, r in sorted(reports.items()) for s in r["skipped"]]
    if skipped:
        out += ["", "## Not evaluated", "", "| node | check | why |", "| --- | --- | --- |"]
        out += [f"| {_cell(name)} | {s['name']} | {_cell(s['reason'])} |" for name, s in skipped]
    return "\n".join(out) + "\n"
