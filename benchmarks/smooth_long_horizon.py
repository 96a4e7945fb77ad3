"""Time one run at T = 10^8 on one core for each smooth-family policy (run by hand, not in CI).

    PYTHONPATH=src python benchmarks/smooth_long_horizon.py [--horizon 100000000] [--policies BE-S,Rexp3]

The slope-check instance (sinusoid, 10x amplitude, Rademacher rewards), one run, numba limited to one
thread. Reports wall time, process CPU time (the single-core cost, robust to a busy machine) and the
load average before and after; writes docs/reproductions/smooth/benchmark.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np

from genbandit import simulate
from genbandit.envs.smooth import SinusoidArms
from genbandit.policies.smooth import BENS, BES, SmoothDUCB, SmoothRexp3, SmoothSWUCB


def make(name: str, T: int, env: SinusoidArms):
    l1, l2 = env.holder_constants()
    return {
        "BE-S": lambda: BES(n_arms=2, horizon=T, L=l2, one_armed=True, static_mean=env.static_means()),
        "BE-NS": lambda: BENS(n_arms=2, horizon=T, L=l1, one_armed=True, static_mean=env.static_means()),
        "Rexp3": lambda: SmoothRexp3(n_arms=2, horizon=T, reward_min=-1.0),
        "SW-UCB": lambda: SmoothSWUCB(n_arms=2, horizon=T, L=l1, scale=2.0),
        "D-UCB": lambda: SmoothDUCB(n_arms=2, horizon=T, L=l1, scale=2.0),
    }[name]()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=10**8)
    parser.add_argument("--policies", default="BE-S,BE-NS,Rexp3,SW-UCB,D-UCB")
    parser.add_argument("--out", default="docs/reproductions/smooth/benchmark.json")
    args = parser.parse_args()
    T = args.horizon
    numba.set_num_threads(1)  # one core per run, as measured
    rows = []
    for name in args.policies.split(","):
        warm = SinusoidArms(horizon=1000, amplitude_scale=2.5, amplitude_sd=0.01)
        warm.reset(1, seed=0)
        simulate(warm, make(name, 1000, warm), 1000, n_runs=1, seed=0, backend="compiled")  # compile (cached on disk)
        env = SinusoidArms(horizon=T, amplitude_scale=2.5, amplitude_sd=0.01)
        env.reset(1, seed=(seed := np.random.SeedSequence(2026)))
        policy = make(name, T, env)
        load_before = os.getloadavg()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        res = simulate(env, policy, T, n_runs=1, seed=(seed, np.random.SeedSequence(7)), backend="compiled")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        load_after = os.getloadavg()
        row = {
            "policy": name,
            "horizon": T,
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "ns_per_round_cpu": round(cpu / T * 1e9, 1),
            "final_regret": float(res.final_regret[0]),
            "load_1min_before": round(load_before[0], 2),
            "load_1min_after": round(load_after[0], 2),
            "within_2_minutes": wall <= 120.0,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
