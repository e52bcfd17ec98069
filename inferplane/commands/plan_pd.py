"""`inferplane plan pd --workload chat|code|rag|long|FILE --rate RPS --profile PROFILE [...]`

Prefill and decode group counts for one business pool: the formula's answer checked (and
trimmed or raised) by simulation, with the constraint that binds each pool. `--write-stack NAME`
turns the plan into a reviewed diff of stacks/Pulumi.<NAME>.yaml, written only with `--yes`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferplane.errors import ConfigError

if TYPE_CHECKING:
    from inferplane.planner.plan import Plan
    from inferplane.planner.profile import Curves, Profile
    from inferplane.planner.workload import Slo, Workload
    from inferplane.spec import PlatformSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload", required=True, metavar="chat|code|rag|long|FILE", help="a seed workload, a .jsonl trace or a .yaml histogram"
    )
    parser.add_argument("--rate", required=True, type=float, metavar="RPS", help="requests per second to plan for (the peak)")
    parser.add_argument("--profile", required=True, metavar="PROFILE", help="capacity profile YAML, e.g. profiles/h200-deepseek-v3.yaml")
    parser.add_argument(
        "--slo-ttft", type=float, metavar="S", help="TTFT SLO in seconds (default: the workload's, else the stack's p99 threshold)"
    )
    parser.add_argument(
        "--slo-tpot", type=float, metavar="S", help="TPOT SLO in seconds (default: the workload's, else the stack's p99 threshold)"
    )
    parser.add_argument("--target", type=float, default=0.99, help="share of requests within both SLOs (default 0.99)")
    parser.add_argument(
        "--utilisation",
        type=float,
        default=0.85,
        help="target utilisation: the plan holds the SLOs at rate / utilisation (default 0.85, i.e. ~18%% headroom)",
    )
    parser.add_argument("--gpu-price", type=float, metavar="USD_PER_GPU_HOUR", help="print GPUs' cost per million tokens at this price")
    parser.add_argument("--stack", metavar="NAME", help="take group shapes and SLO thresholds from stacks/Pulumi.<NAME>.yaml")
    parser.add_argument(
        "--write-stack", metavar="NAME", help="show the diff that sets the plan's group counts in stacks/Pulumi.<NAME>.yaml"
    )
    parser.add_argument("--yes", action="store_true", help="with --write-stack: write the file (otherwise only show the diff)")
    parser.add_argument("--stacks-dir", type=Path, metavar="DIR", help="where Pulumi.<NAME>.yaml lives (default: the repository's stacks/)")
    parser.add_argument(
        "--arrivals",
        choices=("poisson", "trace"),
        default="poisson",
        help="arrival process to simulate (trace: replay a timestamped trace)",
    )
    parser.add_argument("--requests", type=int, default=10_000, metavar="N", help="requests per simulation (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--formula-only", action="store_true", help="skip the simulation: the analytic answer only")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _resolve_slo(args: argparse.Namespace, workload: Workload, spec: PlatformSpec | None) -> Slo:
    from inferplane.planner.workload import Slo

    sources: list[tuple[float | None, float | None, str]] = [(args.slo_ttft, args.slo_tpot, "flags")]
    if workload.slo is not None:
        sources.append((workload.slo.ttft_seconds, workload.slo.tpot_seconds, f"workload {workload.name}"))
    if spec is not None:
        th = spec.observability.thresholds
        sources.append((th.ttft_p99_seconds, th.tpot_p99_seconds, "stack thresholds"))
    ttft = next((t for t, _, _ in sources if t is not None), None)
    tpot = next((t for _, t, _ in sources if t is not None), None)
    problems = []
    if ttft is None:
        problems.append("--slo-ttft: required; this workload carries no SLO and no --stack names one")
    elif ttft <= 0:
        problems.append(f"--slo-ttft: must be > 0 seconds (got {ttft})")
    if tpot is None:
        problems.append("--slo-tpot: required; this workload carries no SLO and no --stack names one")
    elif tpot <= 0:
        problems.append(f"--slo-tpot: must be > 0 seconds (got {tpot})")
    if problems:
        raise ConfigError("plan pd", problems)
    assert ttft is not None and tpot is not None
    return Slo(ttft_seconds=ttft, tpot_seconds=tpot)


def _check_shapes(profile: Profile, spec: PlatformSpec, stack: str) -> None:
    problems = []
    for role, measured in (("prefill", profile.prefill.group), ("decode", profile.decode.group)):
        pool = getattr(spec.pools, role)
        for field in ("nodes_per_group", "gpus_per_node", "tp", "dp", "ep"):
            if getattr(pool, field) != getattr(measured, field):
                problems.append(
                    f"pools.{role}.{field}: stack {stack} has {getattr(pool, field)}, profile {profile.name} was measured with "
                    f"{getattr(measured, field)}; use a profile measured on this group shape"
                )
    if problems:
        raise ConfigError(f"profile {profile.name}", problems)


def _validate_args(args: argparse.Namespace) -> None:
    problems = []
    if args.rate is None or not math.isfinite(args.rate) or args.rate <= 0:
        problems.append(f"--rate: must be a number of requests/s > 0 (got {args.rate})")
    if not 0 < args.target < 1:
        problems.append(f"--target: a fraction in (0, 1), e.g. 0.99 (got {args.target})")
    if not 0 < args.utilisation <= 1:
        problems.append(f"--utilisation: a fraction in (0, 1], e.g. 0.85 (got {args.utilisation})")
    if args.gpu_price is not None and not args.gpu_price > 0:
        problems.append(f"--gpu-price: USD per GPU-hour, > 0 (got {args.gpu_price})")
    if args.requests < 1000:
        problems.append(f"--requests: at least 1000 for a p99 to mean anything (got {args.requests})")
    if args.stack and args.write_stack and args.stack != args.write_stack:
        problems.append(f"--stack: '{args.stack}' differs from --write-stack '{args.write_stack}'; name one stack")
    if args.yes and not args.write_stack:
        problems.append("--yes: only meaningful with --write-stack NAME")
    if args.write_stack and args.formula_only:
        problems.append("--write-stack: a stack gets simulated plans only; drop --formula-only")
    if problems:
        raise ConfigError("plan pd", problems)


def run(args: argparse.Namespace) -> int:
    from inferplane.planner.plan import plan
    from inferplane.planner.profile import Curves, load_profile
    from inferplane.planner.workload import load_workload
    from inferplane.spec import load_stack

    _validate_args(args)
    workload = load_workload(args.workload)
    profile = load_profile(args.profile)
    stack_name = args.write_stack or args.stack
    spec = load_stack(stack_name, args.stacks_dir).platform if stack_name else None
    if spec is not None:
        _check_shapes(profile, spec, stack_name)
    curves = Curves(profile, max_running_requests=spec.pools.decode.max_running_requests if spec else None)
    slo = _resolve_slo(args, workload, spec)
    result = plan(
        workload,
        args.rate,
        curves,
        slo,
        target=args.target,
        utilisation=args.utilisation,
        prefill_gpus_per_group=spec.pools.prefill.gpus_per_group if spec else profile.prefill.group.gpus,
        decode_gpus_per_group=spec.pools.decode.gpus_per_group if spec else profile.decode.group.gpus,
        n_requests=args.requests,
        seed=args.seed,
        arrivals=args.arrivals,
        simulate_plan=not args.formula_only,
    )
    report = to_dict(result, profile, curves, args.gpu_price)
    notes = _notes(result, spec)
    stack_report = _write_stack(result, stack_name, args.yes, args.stacks_dir) if args.write_stack else None
    if stack_report is not None:
        report["stack"] = stack_report
    report["notes"] = notes
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
        if stack_report is not None:
            print()
            sys.stdout.write(stack_report["diff"] or f"{stack_report['path']} already holds these group counts\n")
            if stack_report["diff"]:
                print(f"\nwritten: {stack_report['path']}" if stack_report["written"] else "\nnot written: review the diff, then add --yes")
    return 0


def _notes(result: Plan, spec: PlatformSpec | None) -> list[str]:
    notes = []
    if spec is not None:
        th = spec.observability.thresholds
        if result.slo.ttft_seconds > th.ttft_p99_seconds or result.slo.tpot_seconds > th.tpot_p99_seconds:
            notes.append(
                f"the plan's SLOs (TTFT {result.slo.ttft_seconds:g} s, TPOT {result.slo.tpot_seconds:g} s) are looser than the stack's "
                f"alert thresholds (ttft_p99_seconds {th.ttft_p99_seconds:g}, tpot_p99_seconds {th.tpot_p99_seconds:g}): the alerts will fire"
            )
    return notes


def min_groups(result: Plan) -> tuple[int, int]:
    """Floor an upgrade may take each pool to: the fewest groups that still hold the SLOs at the planned rate."""
    return result.floor


def _write_stack(result: Plan, stack: str, yes: bool, stacks_dir: Path | None) -> dict[str, Any]:
    import yaml

    from inferplane.planner.stackfile import has_pool_field, unified_diff, update_pool_fields
    from inferplane.spec import PROJECT, parse_platform, stack_file

    path = stack_file(stack, stacks_dir)
    old = path.read_text()
    p_min, d_min = min_groups(result)
    values: dict[str, dict[str, int]] = {"prefill": {"groups": result.prefill_groups}, "decode": {"groups": result.decode_groups}}
    # min_groups: the groups that hold the SLOs at the planned rate (simulated), so an upgrade or a lost
    # node may take the pool down to them at peak and no further. A stack without the line keeps its default.
    for role, floor in (("prefill", p_min), ("decode", d_min)):
        if has_pool_field(old, role, "min_groups"):
            values[role]["min_groups"] = floor
    new = update_pool_fields(old, values, str(path))
    # Never write a stack that would not load: the same validation `pulumi up` and `spec check` apply.
    doc = yaml.safe_load(new)
    parse_platform(doc["config"][f"{PROJECT}:platform"], str(path))
    rel = _relative(path)
    diff = unified_diff(old, new, rel)
    written = False
    if yes and diff:
        path.write_text(new)
        written = True
    return {"name": stack, "path": rel, "diff": diff, "written": written, "values": values}


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def to_dict(result: Plan, profile: Profile, curves: Curves, gpu_price: float | None) -> dict[str, Any]:
    w, s = result.workload, result.sizing
    p_min, d_min = min_groups(result)
    pools: dict[str, dict[str, Any]] = {}
    for role, sizing, groups, per_group, floor in (
        ("prefill", s.prefill, result.prefill_groups, result.prefill_gpus_per_group, p_min),
        ("decode", s.decode, result.decode_groups, result.decode_gpus_per_group, d_min),
    ):
        pools[role] = {
            "groups": groups,
            "gpus_per_group": per_group,
            "gpus": groups * per_group,
            "min_groups": floor,
            "spare_groups": groups - floor,
            "formula_groups": sizing.groups,
            "demand_tokens_per_s": round(sizing.demand_tokens_per_s, 1),
            "saturated_tokens_per_s_per_group": round(sizing.saturated_tokens_per_s, 1),
            "capacity_tokens_per_s_per_group_at_slo": round(sizing.capacity_tokens_per_s, 1),
            "utilisation": round(sizing.demand_tokens_per_s / (groups * sizing.saturated_tokens_per_s), 4),
            "binds": sizing.binds,
            "binds_detail": sizing.detail,
            "operating_point": {k: round(v, 4) for k, v in sizing.operating_point.items()},
        }
    out: dict[str, Any] = {
        "workload": {
            "name": w.name,
            "description": w.description,
            "lengths": w.describe(),
            "mean_input_tokens": round(w.mean_input, 1),
            "mean_output_tokens": round(w.mean_output, 1),
        },
        "rate_rps": result.rate_rps,
        "design_rate_rps": round(result.design_rate, 3),
        "slo": {"ttft_seconds": result.slo.ttft_seconds, "tpot_seconds": result.slo.tpot_seconds},
        "target": result.target,
        "utilisation_target": result.utilisation,
        "profile": {
            "name": profile.name,
            "source": profile.provenance.source,
            "date": profile.provenance.date.isoformat(),
            "hardware": profile.provenance.hardware,
            "model": profile.provenance.model,
            "max_running_requests": curves.max_running_requests,
        },
        "pools": pools,
        "ratio": {
            "groups": round(result.prefill_groups / result.decode_groups, 3),
            "gpus": round(pools["prefill"]["gpus"] / pools["decode"]["gpus"], 3),
        },
        "gpus": result.gpus,
        "tokens_per_s": round(result.tokens_per_second, 1),
        "cost": None,
        "simulation": None,
        "search": {"simulations": len(result.evaluated), "wall_seconds": round(result.wall_seconds, 3)},
    }
    if gpu_price is not None:
        out["cost"] = {
            "gpu_hour_usd": gpu_price,
            "per_hour_usd": round(result.gpus * gpu_price, 2),
            "per_million_tokens_usd": round(result.cost_per_million_tokens(gpu_price), 4),
            "per_million_output_tokens_usd": round(result.cost_per_million_output_tokens(gpu_price), 4),
        }
    if result.evaluated:
        r = result.result
        out["simulation"] = {
            "rate_rps": round(r.rate_rps, 3),
            "requests": r.requests,
            "attainment": round(r.attainment, 5),
            "attainment_ttft": round(r.attainment_ttft, 5),
            "attainment_tpot": round(r.attainment_tpot, 5),
            "goodput_rps": round(r.goodput_rps, 3),
            "goodput_tokens_per_s": round(r.goodput_tokens_per_s, 1),
            "ttft_p50_seconds": round(r.ttft_p50, 4),
            "ttft_p99_seconds": round(r.ttft_p99, 4),
            "tpot_p50_seconds": round(r.tpot_p50, 5),
            "tpot_p99_seconds": round(r.tpot_p99, 5),
            "prefill_busy": round(r.prefill_busy, 4),
            "mean_decode_batch": round(r.mean_decode_batch, 1),
        }
        if result.floor_result is not None:
            f = result.floor_result
            out["simulation"]["at_min_groups"] = {
                "prefill_groups": result.floor[0],
                "decode_groups": result.floor[1],
                "rate_rps": result.rate_rps,
                "attainment": round(f.attainment, 5),
                "ttft_p99_seconds": round(f.ttft_p99, 4),
                "tpot_p99_seconds": round(f.tpot_p99, 5),
            }
        out["search"]["configurations"] = [
            {
                "prefill": e.prefill_groups,
                "decode": e.decode_groups,
                "attainment": round(e.attainment, 5),
                "ttft": round(e.attainment_ttft, 5),
            }
            for e in result.evaluated
        ]
        simulated = sum(e.arrivals for e in result.evaluated)
        sim_wall = sum(e.wall_seconds for e in result.evaluated)
        out["search"]["simulated_requests_per_s"] = round(simulated / sim_wall) if sim_wall > 0 else None
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def render(r: dict[str, Any]) -> str:
    w, slo, pools = r["workload"], r["slo"], r["pools"]
    prof = r["profile"]
    lines = [
        f"P:D plan: workload {w['name']} ({w['lengths']}) at {r['rate_rps']:g} req/s",
        f"profile {prof['name']} ({prof['source']} {prof['date']}; {prof['model']}; {prof['hardware']})",
        f"SLOs: TTFT <= {slo['ttft_seconds']:g} s and TPOT <= {_ms(slo['tpot_seconds'])} for {r['target']:.1%} of requests; "
        f"target utilisation {r['utilisation_target']:g}: the plan holds the SLOs at {r['design_rate_rps']:.1f} req/s",
        "",
        f"{'pool':<8} {'groups':>6} {'GPUs/group':>10} {'GPUs':>6} {'demand tok/s':>13} {'util':>5} {'min_groups':>10} {'spare':>5}  binds",
    ]
    for role in ("prefill", "decode"):
        p = pools[role]
        lines.append(
            f"{role:<8} {p['groups']:>6} {p['gpus_per_group']:>10} {p['gpus']:>6} {p['demand_tokens_per_s']:>13,.0f} "
            f"{p['utilisation']:>5.0%} {p['min_groups']:>10} {p['spare_groups']:>5}  {p['binds']} ({p['binds_detail']})"
        )
    ratio = r["ratio"]
    lines += [
        "",
        f"P:D ratio {pools['prefill']['groups']}:{pools['decode']['groups']} groups = {ratio['groups']:.2f} "
        f"({pools['prefill']['gpus']}:{pools['decode']['gpus']} GPUs = {ratio['gpus']:.2f}); {r['gpus']} GPUs in all",
    ]
    if r["cost"]:
        c = r["cost"]
        lines.append(
            f"cost at ${c['gpu_hour_usd']:g}/GPU-hour: ${c['per_hour_usd']:,.2f}/hour, ${c['per_million_tokens_usd']:.4f} per 1M tokens "
            f"(prompt + generated), ${c['per_million_output_tokens_usd']:.4f} per 1M generated tokens"
        )
    lines.append(f"formula alone: {pools['prefill']['formula_groups']} prefill, {pools['decode']['formula_groups']} decode groups")
    sim = r["simulation"]
    if sim:
        lines.append(
            f"simulated at {sim['rate_rps']:.1f} req/s ({sim['requests']:,} measured requests): within both SLOs {sim['attainment']:.2%} "
            f"(TTFT {sim['attainment_ttft']:.2%}, TPOT {sim['attainment_tpot']:.2%}); TTFT p99 {_ms(sim['ttft_p99_seconds'])}, "
            f"TPOT p99 {_ms(sim['tpot_p99_seconds'])}; goodput {sim['goodput_rps']:,.1f} req/s"
        )
        if "at_min_groups" in sim:
            m = sim["at_min_groups"]
            lines.append(
                f"simulated at {m['rate_rps']:g} req/s on min_groups only ({m['prefill_groups']}P/{m['decode_groups']}D): "
                f"within both SLOs {m['attainment']:.2%}"
            )
        s = r["search"]
        lines.append(
            f"search: {s['simulations']} simulations in {s['wall_seconds']:.2f} s ({s['simulated_requests_per_s']:,} simulated requests/s)"
        )
    else:
        lines.append("not simulated (--formula-only)")
    lines += [f"note: {n}" for n in r.get("notes", [])]
    return "\n".join(lines)
