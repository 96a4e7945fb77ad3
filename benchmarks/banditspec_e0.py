"""E0 losslessness at a larger sample: UCBSpec and fixed:0 on the toy LM, several seeds (run by hand).

    PYTHONPATH=src python benchmarks/banditspec_e0.py --runs 1000000 --seeds 11 12 13

The reproduction's E0 check uses 100,000 responses and the scenario's seed; this script repeats it
with the configured seed and the given ones, printing the chi-square p-values of the first three
tokens and of the binned length against plain decoding's exact law. A bias in speculative
sampling would drive every p-value towards 0 as the sample grows; chance would not.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from genbandit.envs.speculative import run_banditspec
from genbandit.experiments.banditspec_units import losslessness_pvalues
from genbandit.experiments.config import load_config
from genbandit.experiments.runner import plan_units
from genbandit.experiments.units import build_environment, build_policy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="*", default=[11, 12, 13])
    parser.add_argument("--policies", nargs="+", default=["UCBSpec", "fixed:0"])
    args = parser.parse_args(argv)
    units = [u for u in plan_units(load_config("banditspec")) if u.scenario_name == "e0" and u.policy.label in args.policies]
    print("| policy | seed | responses | p (first 3 tokens) | p (length) | seconds |")
    print("|---|---|---|---|---|---|")
    for unit in units:
        for seed in ["configured", *args.seeds]:
            env = build_environment(unit.scenario, unit.horizon)
            policy = build_policy(unit.policy, env, unit.horizon)
            seeds = unit.seeds() if seed == "configured" else (np.random.SeedSequence(seed), np.random.SeedSequence(seed + 100))
            start = time.perf_counter()
            run_banditspec(env, policy, n_runs=args.runs, seed=seeds)
            p = losslessness_pvalues(env)
            print(f"| {unit.policy.label} | {seed} | {args.runs:,} | {p['p_first3']:.3f} | {p['p_length']:.3f} | {time.perf_counter() - start:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
