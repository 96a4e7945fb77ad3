"""TI-UCB against the sliding-window baselines at the paper's horizon (fifteen-arm, T = 1,500,000).

The generic simulator costs one Python round per step (~0.1-2 ms on a shared machine), too slow
for 1.5M rounds x several policies. This script compiles single-run loops with numba for TI-UCB,
SW-UCB, SW-TS and UCB1 on the same rested environment (Gaussian noise, the same oracle: the best
fixed arm), mirroring genbandit.policies.rising line for line, and first checks them against the
library classes at a short horizon (mean final regret within a few standard errors).

Run by hand (not in CI):

    PYTHONPATH=src python benchmarks/rising_paper_horizon.py --horizon 1500000 --runs 10 --also 100000 300000 \
        --out docs/reproductions/ti-ucb/paper-horizon.json --plot docs/reproductions/ti-ucb/paper-horizon.png
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numba
import numpy as np

from genbandit.envs.rising import synthetic_curves


@numba.njit(cache=True)
def _ls(sy, ssy, lo, hi, x0):
    m = hi - lo + 1.0
    c = 0.5 * (lo + hi)
    if m < 2.0:
        return sy
    return sy / m + (ssy - c * sy) / (m * (m * m - 1.0) / 12.0) * (x0 - c)


@numba.njit(cache=True)
def _argmax(v):
    best = -np.inf
    arg = 0
    ties = 0
    for i in range(v.shape[0]):
        if v[i] > best:
            best, arg, ties = v[i], i, 1
        elif v[i] == best:
            ties += 1
            if np.random.random() < 1.0 / ties:
                arg = i
    return arg


@numba.njit(cache=True)
def run_tiucb(table, oracle, sigma, omega, gamma, width, checkpoints, seed):
    np.random.seed(seed)
    k, horizon = table.shape[0], oracle.shape[0]
    ring = 2 * omega + 1
    counts = np.zeros(k, np.int64)
    n = np.zeros(k, np.int64)
    sy = np.zeros(k)
    ssy = np.zeros(k)
    py = np.zeros((k, ring))
    psy = np.zeros((k, ring))
    out = np.zeros(checkpoints.shape[0])
    idx = np.zeros(k)
    regret, c, resets = 0.0, 0, 0
    for t in range(horizon):
        for i in range(k):
            if n[i] == 0:
                idx[i] = np.inf
            else:
                idx[i] = _ls(sy[i], ssy[i], 1.0, n[i], n[i] + 1.0) + width / math.sqrt(n[i])
        a = _argmax(idx)
        mean = table[a, counts[a]]
        counts[a] += 1
        x = mean + sigma * np.random.standard_normal()
        regret += oracle[t] - mean
        m = n[a] + 1
        n[a] = m
        sy[a] += x
        ssy[a] += m * x
        py[a, m % ring] = sy[a]
        psy[a, m % ring] = ssy[a]
        if m >= 2 * omega:
            y0, y1, y2 = py[a, m % ring], py[a, (m - omega) % ring], py[a, (m - 2 * omega) % ring]
            s0, s1, s2 = psy[a, m % ring], psy[a, (m - omega) % ring], psy[a, (m - 2 * omega) % ring]
            p1 = _ls(y1 - y2, s1 - s2, m - 2 * omega + 1.0, m - omega + 0.0, m + 1.0)
            p2 = _ls(y0 - y1, s0 - s1, m - omega + 1.0, m + 0.0, m + 1.0)
            if abs(p1 - p2) > gamma / 2.0:
                n[a] = 1
                sy[a] = x
                ssy[a] = x
                py[a, 0] = 0.0
                psy[a, 0] = 0.0
                py[a, 1] = x
                psy[a, 1] = x
                resets += 1
        if c < checkpoints.shape[0] and t + 1 == checkpoints[c]:
            out[c] = regret
            c += 1
    return out, counts, resets


@numba.njit(cache=True)
def run_window(table, oracle, sigma, tau, xi, thompson, checkpoints, seed):
    """SW-UCB (thompson = False) or SW-TS with the Bernoulli trick (thompson = True)."""
    np.random.seed(seed)
    k, horizon = table.shape[0], oracle.shape[0]
    counts = np.zeros(k, np.int64)
    wc = np.zeros(k, np.int64)
    ws = np.zeros(k)
    past_a = np.full(tau, -1, np.int64)
    past_x = np.zeros(tau)
    out = np.zeros(checkpoints.shape[0])
    idx = np.zeros(k)
    regret, c = 0.0, 0
    for t in range(horizon):
        if thompson:
            for i in range(k):
                idx[i] = np.random.beta(ws[i] + 1.0, wc[i] - ws[i] + 1.0)
        else:
            h = max(min(t, tau), 1)
            for i in range(k):
                idx[i] = np.inf if wc[i] == 0 else ws[i] / wc[i] + math.sqrt(xi * math.log(h) / wc[i])
        a = _argmax(idx) if not thompson else np.argmax(idx)
        mean = table[a, counts[a]]
        counts[a] += 1
        x = mean + sigma * np.random.standard_normal()
        regret += oracle[t] - mean
        if thompson:
            x = 1.0 if np.random.random() < min(max(x, 0.0), 1.0) else 0.0
        slot = t % tau
        if past_a[slot] >= 0:
            wc[past_a[slot]] -= 1
            ws[past_a[slot]] -= past_x[slot]
        wc[a] += 1
        ws[a] += x
        past_a[slot] = a
        past_x[slot] = x
        if c < checkpoints.shape[0] and t + 1 == checkpoints[c]:
            out[c] = regret
            c += 1
    return out, counts


@numba.njit(cache=True)
def run_ucb1(table, oracle, sigma, checkpoints, seed):
    np.random.seed(seed)
    k, horizon = table.shape[0], oracle.shape[0]
    counts = np.zeros(k, np.int64)
    sums = np.zeros(k)
    out = np.zeros(checkpoints.shape[0])
    idx = np.zeros(k)
    regret, c = 0.0, 0
    for t in range(horizon):
        for i in range(k):
            idx[i] = np.inf if counts[i] == 0 else sums[i] / counts[i] + math.sqrt(2.0 * math.log(max(t, 1)) / counts[i])
        a = _argmax(idx)
        mean = table[a, counts[a]]
        counts[a] += 1
        sums[a] += mean + sigma * np.random.standard_normal()
        regret += oracle[t] - mean
        if c < checkpoints.shape[0] and t + 1 == checkpoints[c]:
            out[c] = regret
            c += 1
    return out, counts


def run_all(instance: str, horizon: int, runs: int, sigma: float = 0.1, seed: int = 0) -> dict:
    table = synthetic_curves(instance, horizon)
    best = int(table.sum(axis=1).argmax())
    oracle = table[best].copy()
    checkpoints = np.unique(np.linspace(horizon / 20, horizon, 20).astype(np.int64))
    width = 16.0 * math.sqrt(2.0 * math.log(horizon))
    policies = {
        "TI-UCB": lambda s: run_tiucb(table, oracle, sigma, 100, 0.3, width, checkpoints, s)[0],
        "SW-UCB": lambda s: run_window(table, oracle, sigma, int(4 * math.sqrt(horizon * math.log(horizon))), 0.6, False, checkpoints, s)[0],
        "SW-TS": lambda s: run_window(table, oracle, sigma, math.ceil(math.sqrt(horizon)), 0.0, True, checkpoints, s)[0],
        "UCB1": lambda s: run_ucb1(table, oracle, sigma, checkpoints, s)[0],
    }
    result = {"instance": instance, "horizon": horizon, "runs": runs, "best_arm": best, "checkpoints": checkpoints.tolist(), "policies": {}}
    for name, fn in policies.items():
        start = time.perf_counter()
        curves = np.array([fn(seed + r) for r in range(runs)])
        final = curves[:, -1]
        result["policies"][name] = {
            "final_regret_mean": float(final.mean()),
            "final_regret_stderr": float(final.std(ddof=1) / math.sqrt(runs)) if runs > 1 else None,
            "final_regret_runs": final.tolist(),
            "mean_curve": curves.mean(axis=0).tolist(),
            "seconds": time.perf_counter() - start,
        }
        print(f"{instance} T={horizon}: {name:7s} final regret {final.mean():10.1f} ± {result['policies'][name]['final_regret_stderr'] or 0:.1f}", flush=True)
    return result


def plot(results: list[dict], path: str) -> None:
    """Mean cumulative regret against rounds, one panel per horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6))
    for ax, res in zip(np.atleast_1d(axes), results):
        for name, rec in res["policies"].items():
            ax.plot(res["checkpoints"], rec["mean_curve"], marker=".", label=name)
        ax.set_title(f"{res['instance']}, T = {res['horizon']:,} ({res['runs']} runs)")
        ax.set_xlabel("round")
        ax.set_ylabel("cumulative regret (mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instance", default="fifteen-arm")
    parser.add_argument("--horizon", type=int, default=1_500_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--also", type=int, nargs="*", default=[300_000], help="further horizons to run")
    parser.add_argument("--out", help="JSON file for the results")
    parser.add_argument("--plot", help="PNG file for the regret curves")
    parser.add_argument("--replot", help="only redraw --plot from this JSON file")
    args = parser.parse_args()
    if args.replot:
        with open(args.replot) as f:
            results = json.load(f)
    else:
        results = [run_all(args.instance, h, args.runs) for h in [*args.also, args.horizon]]
    if args.out and not args.replot:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
