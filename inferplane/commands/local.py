"""`inferplane local up|down|status|group|proc`: the local platform (real control plane, emulated engines)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROC_ACTIONS = ("stop", "start", "kill", "pause", "resume")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", metavar="DIR", help="state, logs and data (default: local_platform.state_dir, .state/local)")
    common.add_argument(
        "--config", metavar="FILE", help="file holding `local_platform:` (default: inventories/local/group_vars/all/local_platform.yml)"
    )
    subs = parser.add_subparsers(dest="local_command", metavar="COMMAND", required=True)
    up = subs.add_parser("up", parents=[common], help="start (or complete) the platform; idempotent")
    up.add_argument(
        "--base-port",
        type=int,
        metavar="N",
        help="every port is N + a fixed offset (default: the state dir's last run, else local_platform.base_port)",
    )
    up.add_argument("--json", action="store_true", help="print state.json's content when done")
    down = subs.add_parser("down", parents=[common], help="stop exactly what `up` started")
    down.add_argument("--purge", action="store_true", help="also delete the state dir (etcd/Prometheus data, logs, model copy)")
    status = subs.add_parser("status", parents=[common], help="health of each part, Mooncake leader, SMG workers, firing alerts")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    group = subs.add_parser("group", help="engine group lifecycle (the local equivalent of recreating an LWS group)")
    gsubs = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    for action, text in (
        ("stop", "SIGTERM the group's engine and wait (in-flight requests finish)"),
        ("start", "start the group again on its recorded version and release"),
        ("restart", "recreate the group, optionally on a new engine version/release; SMG registration is not touched"),
        ("add", "start a group beyond the configured ones (e.g. prefill-2 of a blue/green set); no gateway is told"),
        ("remove", "stop a group started with `group add` and forget it"),
    ):
        g = gsubs.add_parser(action, parents=[common], help=text, description=text)
        g.add_argument("name", help="group name, e.g. prefill-0, decode-1, encoder-0")
        if action in ("restart", "add"):
            g.add_argument("--version", help="SGLang version the engine reports (default: the release's for the role)")
            g.add_argument("--release", metavar="FILE", help="release manifest the group runs")
        if action in ("start", "restart", "add"):
            g.add_argument(
                "--timeout", type=float, metavar="S", help="seconds for the engine to turn healthy (default startup_timeout_seconds)"
            )
    gw = subs.add_parser("gateway", help="extra SMG gateways (a blue/green set's own gateway)")
    gwsubs = gw.add_subparsers(dest="gateway_command", metavar="ACTION", required=True)
    gadd = gwsubs.add_parser("add", parents=[common], help="start SMG smg-NAME with GROUPS as its workers")
    gadd.add_argument("name")
    gadd.add_argument("--groups", required=True, metavar="G1,G2,...", help="prefill and decode groups it routes to")
    gremove = gwsubs.add_parser("remove", parents=[common], help="stop smg-NAME (the front must send it nothing)")
    gremove.add_argument("name")
    front = subs.add_parser("front", help="the front clients address: which gateway(s) get new requests")
    fsubs = front.add_subparsers(dest="front_command", metavar="ACTION", required=True)
    fset = fsubs.add_parser("set", parents=[common], help="route new requests by weight, e.g. `front set smg=90 green=10`")
    fset.add_argument("weights", nargs="+", metavar="GATEWAY=WEIGHT", help="'smg' is the platform's own gateway")
    fserve = fsubs.add_parser("serve", help="run the front process (started by `local up`)")
    fserve.add_argument("--host", default="127.0.0.1")
    fserve.add_argument("--port", type=int, required=True)
    fserve.add_argument("--targets-file", type=Path, required=True)
    p = subs.add_parser("proc", help="signal one process: etcd-N, mooncake-master-N, mooncake-metadata, s3, smg, prometheus, or a group")
    psubs = p.add_subparsers(dest="proc_command", metavar="ACTION", required=True)
    for action, text in (
        ("stop", "SIGTERM and wait"),
        ("start", "start again with the same arguments"),
        ("kill", "SIGKILL"),
        ("pause", "SIGSTOP (a hung process)"),
        ("resume", "SIGCONT"),
    ):
        a = psubs.add_parser(action, parents=[common], help=text, description=text)
        a.add_argument("name")


def run(args: argparse.Namespace) -> int:
    if args.local_command == "front" and args.front_command == "serve":
        from inferplane.local.front import run as serve_front

        return serve_front(args.host, args.port, args.targets_file)

    from inferplane.local import LocalError, LocalPlatform, MissingBinary, load_config

    cfg = load_config(Path(args.config) if args.config else None, state_dir=args.state_dir)
    platform = LocalPlatform(cfg, base_port=getattr(args, "base_port", None), say=lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        if args.local_command == "up":
            state = platform.up()
            if args.json:
                print(json.dumps(state.model_dump(mode="json"), indent=2))
            else:
                print(render_status(platform.status()))
                print("\nstop it with `inferplane local down" + (f" --state-dir {args.state_dir}" if args.state_dir else "") + "`")
            return 0
        if args.local_command == "down":
            stopped = platform.down(purge=args.purge)
            print(f"stopped {len(stopped)} process(es) of {platform.state_dir}" + (" and deleted it" if args.purge else ""))
            return 0
        if args.local_command == "status":
            report = platform.status()
            print(json.dumps(report, indent=2) if args.json else render_status(report))
            return 0 if report["healthy"] else 1
        if args.local_command == "group":
            if args.group_command == "remove":
                platform.group_remove(args.name)
                print(f"{args.name}: removed")
                return 0
            if args.group_command == "restart":
                group = platform.group_restart(args.name, version=args.version, release=args.release, timeout=args.timeout)
            elif args.group_command == "add":
                group = platform.group_add(args.name, release=args.release, version=args.version, timeout=args.timeout)
            elif args.group_command == "stop":
                group = platform.group_stop(args.name)
            else:
                group = platform.group_start(args.name, timeout=args.timeout)
            print(f"{group.name}: {args.group_command} done (version {group.version}, release {group.release}, {group.url})")
            return 0
        if args.local_command == "gateway":
            if args.gateway_command == "add":
                gw = platform.gateway_add(args.name, [g.strip() for g in args.groups.split(",") if g.strip()])
                print(f"gateway {args.name}: {gw.url} (metrics {gw.metrics_url}) routes to {', '.join(gw.groups or [])}")
            else:
                platform.gateway_remove(args.name)
                print(f"gateway {args.name}: removed")
            return 0
        if args.local_command == "front":
            weights: dict[str, int] = {}
            for item in args.weights:
                name, sep, value = item.partition("=")
                if not sep or not value.isdigit():
                    print(f"inferplane local front set: '{item}' is not GATEWAY=WEIGHT (e.g. smg=100)", file=sys.stderr)
                    return 2
                weights[name] = int(value)
            front = platform.front_set(weights)
            print(f"front {front.url}: " + ", ".join(f"{n}={w}" for n, w in front.weights.items()))
            return 0
        rec = platform.proc(args.proc_command, args.name)
        print(f"{rec.name}: {args.proc_command} done" + (f" (pid {rec.pid})" if rec.pid else ""))
        return 0
    except (LocalError, MissingBinary) as exc:
        print(f"inferplane local: {exc}", file=sys.stderr)
        return 1


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def render_status(report: dict[str, Any]) -> str:
    lines = [
        f"local platform {report['state_dir']} (base port {report['base_port']}): {'healthy' if report['healthy'] else 'NOT healthy'}",
        "",
    ]
    rows = [["PROCESS", "KIND", "PID", "STATE", "DETAIL", "PORTS"]]
    for p in report["processes"]:
        ports = ",".join(f"{k}={v}" for k, v in p["ports"].items())
        rows.append([p["name"], p["kind"], str(p["pid"] or "-"), p["state"], p["detail"], ports])
    lines += [_table(rows), ""]
    mc = report["mooncake"]
    others = ", ".join(f"{m['name']} {m.get('role', 'down')}/{m.get('ha_state', '-')}" for m in mc["masters"])
    lines.append(f"Mooncake leader: {mc['leader'] or 'NONE'} ({others}); clients use {mc['master_address']}")
    gw = report["gateway"]
    workers = gw["workers"]
    if workers is None:
        lines.append(f"Gateway {gw['url']}: not answering GET /workers")
    else:
        lines.append(f"Gateway {gw['url']}: {len(workers)} worker(s)")
        rows = [["GROUP", "TYPE", "STATUS", "HEALTHY", "LOAD", "URL"]]
        rows += [
            [w["group"], str(w["worker_type"]), str(w["status"]), str(w["is_healthy"]), str(w["load"]), str(w["url"])] for w in workers
        ]
        lines.append(_table(rows))
    groups = ", ".join(f"{g['name']}={g['version']}" for g in report["groups"])
    lines.append(f"Engine versions: {groups}")
    if report.get("front"):
        weights = ", ".join(f"{n}={w}" for n, w in report["front"]["weights"].items())
        lines.append(f"Front {report['front']['url']} (what clients use): {weights}")
    for name, gw in (report.get("extra_gateways") or {}).items():
        lines.append(f"Extra gateway {name} {gw['url']}: {', '.join(gw['groups'] or [])}")
    alerts = report["alerts"]
    if alerts is None:
        lines.append("Alerts: Prometheus not answering")
    else:
        firing = sorted({a["alertname"] for a in alerts if a["state"] == "firing"})
        pending = sorted({a["alertname"] for a in alerts if a["state"] == "pending"})
        lines.append(f"Alerts firing: {', '.join(firing) or 'none'}" + (f" (pending: {', '.join(pending)})" if pending else ""))
    ep = report["endpoints"]
    lines.append(
        f"Prometheus {ep['prometheus']}  S3 {ep['s3']['endpoint']} (s3://{ep['s3']['bucket']}/{ep['s3']['prefix']})  "
        f"etcd {','.join(ep['etcd']['endpoints'])}  gateway metrics {ep['gateway']['metrics_url']}"
    )
    return "\n".join(lines)
