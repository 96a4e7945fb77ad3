"""genbandit against SMPyBandits and MABWiser: UCB1 and Thompson sampling on bernoulli-10.

Run by hand (not in CI), from the repository root::

    python -m venv /tmp/smpy-venv
    /tmp/smpy-venv/bin/pip install "scipy<1.14" "numpy<2" "numba<0.61" tqdm SMPyBandits
    PYTHONPATH=src python benchmarks/peers_classic.py --smpy-python /tmp/smpy-venv/bin/python

It writes docs/benchmarks.md. Every (library, algorithm) pair runs in its own fresh process
(SMPyBandits in its own virtual environment, since it needs scipy<1.14), on the same instance
and the same number of runs and rounds. Each process first plays a short warm-up game (so that
imports, numba compilation and caches are not counted), then times the measured games only.

- pulls per second = rounds x runs / wall seconds of the measured games;
- final regret = pseudo-regret at T, sum over rounds of (best mean - mean of the chosen arm),
  mean ± stderr over the runs; genbandit is compared with each peer by Welch's t-test.

The peers are played the way their documentation shows, one decision at a time:
SMPyBandits ``policy.choice()`` / ``policy.getReward(arm, reward)`` against its own
``Arms.Bernoulli`` (the loop of its ``Evaluator.delayed_play`` without the result bookkeeping),
MABWiser ``mab.predict()`` / ``mab.partial_fit([arm], [reward])``. genbandit plays all runs at once
with :func:`genbandit.simulate`, as its experiment runner does.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MEANS = (0.5, 0.45, 0.45, 0.45, 0.4, 0.4, 0.4, 0.35, 0.35, 0.3)
ALGORITHMS = ("UCB1", "Thompson")
LIBRARIES = ("genbandit", "genbandit-plain", "SMPyBandits", "MABWiser")
ROOT = Path(__file__).resolve().parents[1]

#: What each library is asked to run, so that all three play the same algorithm.
CONFIGURATION = {
    ("genbandit", "UCB1"): "`UCB1(n_arms=10, alpha=2.0)`: mean + sqrt(2 ln t / n), untried arms first; ties (untried arms included) "
    "by a random order of the arms drawn per run at reset; `simulate` runs its compiled loop (`backend=\"auto\"`), the plain "
    "loop's decisions round for round",
    ("genbandit-plain", "UCB1"): "the same policy through the plain numpy loop (`simulate(..., backend=\"python\")`)",
    ("SMPyBandits", "UCB1"): "`Policies.UCB(10)`: mean + sqrt(2 ln t / n) (`UCB.computeAllIndex`), untried arms index +inf, random tie-break",
    ("MABWiser", "UCB1"): "`LearningPolicy.UCB1(alpha=1.0)`: mean + alpha sqrt(2 ln t / n) (`_UCB1._get_ucb`); "
    "an untried arm's expectation is 0 in MABWiser, so the game starts with `fit` on one pull of each arm (the same "
    "K initial pulls as the others, in arm order); ties go to the first arm",
    ("genbandit", "Thompson"): "`ThompsonSampling(n_arms=10)`: Beta(1 + successes, 1 + failures) per arm, play the largest sample; "
    "`simulate` runs its compiled loop (`backend=\"auto\"`: exact Beta draws as ratios of Marsaglia-Tsang gammas, its own "
    "random streams)",
    ("genbandit-plain", "Thompson"): "the same policy through the plain numpy loop (`simulate(..., backend=\"python\")`, "
    "numpy's `Generator.beta`)",
    ("SMPyBandits", "Thompson"): "`Policies.Thompson(10)`: Beta(1 + successes, 1 + failures) (`Posterior.Beta`), largest sample",
    ("MABWiser", "Thompson"): "`LearningPolicy.ThompsonSampling()`: Beta counters start at 1 (`_ThompsonSampling.fit`), largest sample",
}


# ----------------------------------------------------------------------------------- workers
def _gaps() -> np.ndarray:
    means = np.asarray(MEANS)
    return means.max() - means


def _time_games(game, horizon: int, runs: int, seed: int) -> tuple[float, float, list[float]]:
    """Warm up with a short game, then play ``runs`` games one after the other: (wall s, CPU s, regrets)."""
    game(200, seed + 10**6)
    start, cpu = time.perf_counter(), time.process_time()
    regrets = [game(horizon, seed + run) for run in range(runs)]
    return time.perf_counter() - start, time.process_time() - cpu, regrets


def _play_genbandit(algorithm: str, horizon: int, runs: int, seed: int, backend: str = "auto") -> tuple[float, float, list[float]]:
    from genbandit import BernoulliArms, ThompsonSampling, UCB1, simulate

    def game(t: int, n: int, s: int):
        policy = UCB1(n_arms=len(MEANS), alpha=2.0) if algorithm == "UCB1" else ThompsonSampling(n_arms=len(MEANS))
        return simulate(BernoulliArms(means=list(MEANS)), policy, t, n_runs=n, seed=s, n_checkpoints=2, backend=backend)

    game(200, 2, seed + 10**6)  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    result = game(horizon, runs, seed)
    return time.perf_counter() - start, time.process_time() - cpu, result.final_regret.tolist()


def _play_smpybandits(algorithm: str, horizon: int, runs: int, seed: int) -> tuple[float, float, list[float]]:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # it prints warnings about optional modules at import
        from SMPyBandits.Arms import Bernoulli
        from SMPyBandits.Policies import UCB, Thompson

    gaps = _gaps()

    def game(t: int, run_seed: int) -> float:
        np.random.seed(run_seed)  # SMPyBandits draws from the global numpy generator
        arms = [Bernoulli(m) for m in MEANS]
        policy = UCB(len(MEANS)) if algorithm == "UCB1" else Thompson(len(MEANS))
        policy.startGame()
        regret = 0.0
        for _ in range(t):
            arm = policy.choice()
            policy.getReward(arm, arms[arm].draw())
            regret += gaps[arm]
        return regret

    return _time_games(game, horizon, runs, seed)


def _play_mabwiser(algorithm: str, horizon: int, runs: int, seed: int) -> tuple[float, float, list[float]]:
    from mabwiser.mab import MAB, LearningPolicy

    gaps = _gaps()
    arm_ids = list(range(len(MEANS)))

    def game(t: int, run_seed: int) -> float:
        rng = np.random.default_rng(run_seed)
        policy = LearningPolicy.UCB1(alpha=1.0) if algorithm == "UCB1" else LearningPolicy.ThompsonSampling()
        mab = MAB(arms=arm_ids, learning_policy=policy, seed=run_seed)
        first = (rng.random(len(MEANS)) < np.asarray(MEANS)).astype(float)  # one pull of each arm
        mab.fit(decisions=arm_ids, rewards=first.tolist())
        regret = float(gaps.sum())
        for _ in range(t - len(MEANS)):
            arm = mab.predict()
            reward = float(rng.random() < MEANS[arm])
            mab.partial_fit([arm], [reward])
            regret += gaps[arm]
        return regret

    return _time_games(game, horizon, runs, seed)


def _play_genbandit_plain(algorithm: str, horizon: int, runs: int, seed: int) -> tuple[float, float, list[float]]:
    return _play_genbandit(algorithm, horizon, runs, seed, backend="python")


PLAYERS = {"genbandit": _play_genbandit, "genbandit-plain": _play_genbandit_plain, "SMPyBandits": _play_smpybandits, "MABWiser": _play_mabwiser}


def _worker(library: str, algorithm: str, horizon: int, runs: int, seed: int) -> None:
    wall, cpu, regrets = PLAYERS[library](algorithm, horizon, runs, seed)
    version = _version(library)
    print(json.dumps({"library": library, "version": version, "algorithm": algorithm, "wall": wall, "cpu": cpu, "regrets": regrets}))


def _version(library: str) -> str:
    from importlib import metadata

    try:
        return metadata.version("genbandit" if library.startswith("genbandit") else library.lower())
    except metadata.PackageNotFoundError:
        if library.startswith("genbandit"):
            import genbandit

            return genbandit.__version__
        return "?"


# ----------------------------------------------------------------------------------- driver
def _measure(library: str, algorithm: str, args: argparse.Namespace) -> dict:
    python = args.smpy_python if library == "SMPyBandits" else sys.executable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    runs = args.mabwiser_runs if library == "MABWiser" and args.mabwiser_runs else args.runs
    cmd = [python, str(Path(__file__).resolve()), "--worker", library, algorithm, str(args.horizon), str(runs), str(args.seed)]
    load_before = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{library} {algorithm} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load"] = (load_before, os.getloadavg()[0])
    out["runs"] = runs
    out["pulls_per_second"] = args.horizon * runs / out["wall"]
    out["pulls_per_cpu_second"] = args.horizon * runs / out["cpu"]
    regrets = np.asarray(out["regrets"])
    out["mean"], out["stderr"] = float(regrets.mean()), float(regrets.std(ddof=1) / math.sqrt(regrets.size))
    print(f"{library:12} {algorithm:9} {out['pulls_per_second']:12,.0f} pulls/s {out['pulls_per_cpu_second']:12,.0f} pulls/cpu-s  regret {out['mean']:.1f} ± {out['stderr']:.1f}  load {load_before:.2f}", flush=True)
    return out


def _welch(a: list[float], b: list[float]) -> tuple[float, float]:
    from scipy import stats

    res = stats.ttest_ind(a, b, equal_var=False)
    return float(res.statistic), float(res.pvalue)


def _profile(algorithm: str, horizon: int, runs: int) -> str:
    """cProfile of genbandit's plain loop (the compiled loops are a single call): where a pull's time goes."""
    import cProfile
    import io
    import pstats

    from genbandit import BernoulliArms, ThompsonSampling, UCB1, simulate

    policy = UCB1(n_arms=len(MEANS)) if algorithm == "UCB1" else ThompsonSampling(n_arms=len(MEANS))
    simulate(BernoulliArms(means=list(MEANS)), policy, 200, n_runs=2, seed=1, backend="python")
    profiler = cProfile.Profile()
    profiler.enable()
    simulate(BernoulliArms(means=list(MEANS)), policy, horizon, n_runs=runs, seed=1, n_checkpoints=2, backend="python")
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).strip_dirs().sort_stats("tottime").print_stats(14)
    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start:])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        library, algorithm, horizon, runs, seed = argv[1:6]
        _worker(library, algorithm, int(horizon), int(runs), int(seed))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--smpy-python", default="/tmp/smpy-venv/bin/python", help="python of the SMPyBandits environment")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument("--from-json", type=Path, help="reuse the measurements in this file (from --json) and run only the missing ones")
    parser.add_argument("--mabwiser-runs", type=int, help="runs for MABWiser, the slowest peer (default: --runs)")
    args = parser.parse_args(argv)
    command = "PYTHONPATH=src python benchmarks/peers_classic.py " + " ".join(argv)

    measured: dict[tuple[str, str], dict] = {}
    if args.from_json:
        for key, value in json.loads(args.from_json.read_text()).items():
            library, algorithm = key.split("/")
            if library in args.libraries:
                measured[(library, algorithm)] = value
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # The slowest peer last; the doc is rewritten after every measurement, so a stopped run keeps what it has.
    order = sorted(((lib, alg) for lib in args.libraries for alg in ALGORITHMS), key=lambda k: (k[0] == "MABWiser", ALGORITHMS.index(k[1])))
    for library, algorithm in order:
        if (library, algorithm) not in measured:
            measured[(library, algorithm)] = _measure(library, algorithm, args)
        if args.json:
            args.json.write_text(json.dumps({f"{k[0]}/{k[1]}": v for k, v in measured.items()}, indent=1))
        args.out.write_text(_render(measured, {}, args, command))
    profiles = {alg: _profile(alg, min(args.horizon, 2000), args.runs) for alg in ALGORITHMS}
    args.out.write_text(_render(measured, profiles, args, command))
    print(f"wrote {args.out}")


def _render(measured: dict, profiles: dict, args: argparse.Namespace, command: str) -> str:
    loads = [m["load"][0] for m in measured.values()] + [m["load"][1] for m in measured.values()]
    lines = [
        "# Benchmarks against peers: UCB1 and Thompson sampling on bernoulli-10",
        "",
        f"- command: `{command.strip()}` (SMPyBandits in its own virtual environment, see the script's docstring)",
        f"- generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; 1-minute load average {min(loads):.2f} to {max(loads):.2f} "
        "during the measurements (absolute speeds fall as the load rises; the ratios compare measurements taken minutes apart)",
        f"- instance: Bernoulli arms with means {list(MEANS)}; horizon T = {args.horizon:,}; {args.runs} runs "
        + (f"({args.mabwiser_runs} for MABWiser, the slowest peer)" if args.mabwiser_runs else "")
        + f"; seed {args.seed} (run r uses seed + r)",
        "- pulls/s = T x runs / seconds of the measured games (a warm-up game first, in the same process, so imports and "
        "JIT compilation are not counted), by wall clock and by the process's CPU time (every player is single-threaded; "
        "CPU time is the steadier measure on a shared machine); final regret = pseudo-regret at T, mean ± stderr over the runs",
        "- each (library, algorithm) ran in its own fresh process, one after the other, single-threaded peers as documented",
        "",
        "| algorithm | library | version | runs | pulls/s (wall) | speed-up (wall) | pulls/s (CPU time) | speed-up (CPU) | final regret (mean ± stderr) | Welch t vs genbandit | p-value |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for algorithm in ALGORITHMS:
        ours = measured.get(("genbandit", algorithm))
        for library in args.libraries:
            m = measured.get((library, algorithm))
            if m is None:
                continue
            if library == "genbandit" or ours is None:
                speed, speed_cpu, t, p = "1", "1", "", ""
            else:
                ratio = ours["pulls_per_second"] / m["pulls_per_second"]
                ratio_cpu = ours["pulls_per_cpu_second"] / m["pulls_per_cpu_second"]
                stat, pvalue = _welch(ours["regrets"], m["regrets"])
                speed, speed_cpu, t, p = f"{ratio:,.1f}x", f"{ratio_cpu:,.1f}x", f"{stat:+.2f}", f"{pvalue:.3f}"
                verdicts.append((algorithm, library, ratio, ratio_cpu, pvalue))
            lines.append(
                f"| {algorithm} | {library} | {m['version']} | {m.get('runs', args.runs)} | {m['pulls_per_second']:,.0f} | {speed} | {m['pulls_per_cpu_second']:,.0f} | {speed_cpu} "
                f"| {m['mean']:.1f} ± {m['stderr']:.1f} | {t} | {p} |"
            )
    lines += ["", "## Verdict", ""]
    for algorithm, library, ratio, ratio_cpu, pvalue in verdicts:
        target = ""
        if library == "SMPyBandits":
            target = " (target: at least 50x: " + ("met" if min(ratio, ratio_cpu) >= 50 else "met on one measure only" if max(ratio, ratio_cpu) >= 50 else "NOT met") + ")"
        same = "statistically indistinguishable (Welch p > 0.05)" if pvalue > 0.05 else f"DIFFERENT at the 5% level (Welch p = {pvalue:.3f})"
        lines.append(f"- {algorithm}, genbandit vs {library}: {ratio:,.1f}x the pulls per wall second, {ratio_cpu:,.1f}x per CPU second{target}; final regret {same}.")
    lines += ["", "## What each library ran", "", "| algorithm | library | configuration (checked in its source) |", "|---|---|---|"]
    for (library, algorithm), text in CONFIGURATION.items():
        if library in args.libraries:
            lines.append(f"| {algorithm} | {library} | {text} |")
    lines += [
        "",
        "Regret is measured the same way for all: the pseudo-regret of the chosen arms against the true means, not the "
        "libraries' own bookkeeping. The environments differ in their random streams only (genbandit's `BernoulliArms`, "
        "SMPyBandits' `Arms.Bernoulli` on numpy's global generator, a seeded numpy generator for MABWiser).",
        "",
        "## Where genbandit's time goes",
        "",
        f"cProfile of one `simulate(..., backend=\"python\")` call, the plain loop (T = {min(args.horizon, 2000):,}, "
        f"{args.runs} runs), sorted by own time; the compiled loops are one call each:",
        "",
    ]
    for algorithm, text in profiles.items():
        lines += [f"**{algorithm}**", "", "```", text, "```", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
