"""Planner: a ~1,000-GPU fleet per seed workload, formula alone vs formula + simulation, side by side.

Each seed workload runs at the rate whose plan is about 1,000 GPUs on the example profile
(profiles/h200-deepseek-v3.yaml). Both modes plan that same input in the same run, so the ratio
between them is what the simulation costs. The simulator's speed is reported
as simulated requests per wall-clock second over every simulation the searches ran.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from inferplane.planner.plan import plan
from inferplane.planner.profile import Curves, load_profile
from inferplane.planner.workload import SEEDS

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "h200-deepseek-v3.yaml"
P_GPUS, D_GPUS = 16, 32
# Rates at which each seed workload's plan is about 1,000 GPUs on the example profile (prefill
# groups of 16 GPUs, decode groups of 32); README.md tabulates the same plans.
FLEET_RATES = {"chat": 1200.0, "code": 300.0, "rag": 80.0, "long": 10.0}


def run(quick: bool) -> dict:
    curves = Curves(load_profile(PROFILE))
    n_requests = 3_000 if quick else 10_000
    formula_reps = 20 if quick else 200
    rows = []
    total_formula = total_sim = 0.0
    simulated = sim_wall = 0.0
    for name, w in SEEDS.items():
        assert w.slo is not None
        rate = FLEET_RATES[name]
        kw = {"prefill_gpus_per_group": P_GPUS, "decode_gpus_per_group": D_GPUS}

        times = []
        for _ in range(formula_reps):
            t = time.perf_counter()
            f = plan(w, rate, curves, w.slo, simulate_plan=False, **kw)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t)
        formula_s = statistics.median(times)

        t = time.perf_counter()
        p = plan(w, rate, curves, w.slo, n_requests=n_requests, **kw)  # type: ignore[arg-type]
        sim_s = time.perf_counter() - t

        total_formula += formula_s
        total_sim += sim_s
        arrivals = sum(r.arrivals for r in p.evaluated)
        wall = sum(r.wall_seconds for r in p.evaluated)
        simulated += arrivals
        sim_wall += wall
        rows.append(
            {
                "workload": name,
                "rate req/s": rate,
                "formula P/D (GPUs)": f"{f.prefill_groups}/{f.decode_groups} ({f.gpus})",
                "simulated P/D (GPUs)": f"{p.prefill_groups}/{p.decode_groups} ({p.gpus})",
                "attainment": f"{p.result.attainment:.2%}",
                "formula only ms": round(formula_s * 1000, 2),
                "formula+sim s": round(sim_s, 2),
                "ratio": f"{sim_s / formula_s:,.0f}x",
                "simulations": len(p.evaluated),
                "simulated req/s": f"{arrivals / wall:,.0f}",
            }
        )
    rows.append(
        {
            "workload": "all four",
            "rate req/s": "",
            "formula P/D (GPUs)": "",
            "simulated P/D (GPUs)": "",
            "attainment": "",
            "formula only ms": round(total_formula * 1000, 2),
            "formula+sim s": round(total_sim, 2),
            "ratio": f"{total_sim / total_formula:,.0f}x",
            "simulations": sum(r["simulations"] for r in rows),  # type: ignore[misc]
            "simulated req/s": f"{simulated / sim_wall:,.0f}",
        }
    )
    notes = (
        f"Each workload at the rate whose plan is ~1,000 GPUs (prefill groups of {P_GPUS}, decode of {D_GPUS} GPUs), "
        f"target 99 % within both SLOs, utilisation 0.85, {n_requests:,} requests per simulation (the CLI default is 10,000). "
        f"formula only: median of {formula_reps} runs. formula+sim: one run of the whole search, including the simulations at the "
        "planned rate that find min_groups. simulated req/s: arrivals simulated per wall-clock second, setup included."
    )
    return {"title": "Planner: ~1,000-GPU fleet per seed workload, formula vs formula + simulation", "rows": rows, "notes": notes}
