"""Time per round of the multi-play policies against the duplicated baselines on B3 (run by hand).

    PYTHONPATH=src python benchmarks/mp_csb_scaling.py [--horizon 1000] [--runs 10] [--repeats 3]

Policies run interleaved, ``repeats`` times, so that load on a shared machine hits all of them
alike; the table gives the median seconds per round (all runs vectorised) and the ratio to the
duplicated baseline.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from genbandit.core.simulator import simulate
from genbandit.envs.combinatorial import TransportSemiBandit
from genbandit.policies.combinatorial import CTSDup, GenCTS, GenLBINFV, LBINFVDup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = TransportSemiBandit(supply=[10, 20, 30], demand=[25, 35], cost_seed=1)
    kw = {"n_arms": env.n_arms, "action_set": env.action_set}
    policies = {
        "GenCTS": lambda: GenCTS(**kw),
        "CTS-dup": lambda: CTSDup(**kw),
        "GenLBINFV": lambda: GenLBINFV(horizon=10000, **kw),
        "GenLBINFV (face-walking sampler)": lambda: GenLBINFV(horizon=10000, sampler="decomposition", **kw),
        "LBINFV-dup": lambda: LBINFVDup(horizon=10000, **kw),
    }
    times: dict[str, list[float]] = {name: [] for name in policies}
    for rep in range(args.repeats):
        for name, make in policies.items():
            res = simulate(env, make(), args.horizon, n_runs=args.runs, seed=(rep, 1))
            times[name].append(res.wall_time / args.horizon)
    med = {name: float(np.median(v)) for name, v in times.items()}
    load = os.getloadavg()[0]
    print(f"B3, T = {args.horizon}, {args.runs} runs vectorised, median of {args.repeats} interleaved repeats, load average {load:.1f}")
    print("| policy | seconds per round | ratio to its duplicated baseline |")
    print("|---|---|---|")
    for name, t in med.items():
        base = med["CTS-dup"] if "CTS" in name else med["LBINFV-dup"]
        print(f"| {name} | {t * 1e3:.2f} ms | {t / base:.3f} |")


if __name__ == "__main__":
    main()
