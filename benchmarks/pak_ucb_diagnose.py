"""Why RFF-UCB at the paper's LLM bandwidth (sigma = 0.5) routes the paretobandit stream almost at random.

Two measurements on the real stream (MiniLM embeddings, unit vectors in 384-d):

1. The RBF kernel between two different prompts and its D = 200 random-feature estimate, at
   sigma 0.5 and 5: how much there is to generalise from, and how much of it the features keep.
2. RFF-UCB played over random orders of the whole stream, recording before every decision each
   arm's estimated mean and exploration bonus: which term decides the pick, and whether the
   estimated means track the true utilities at all.

Run by hand (not in CI):

    PYTHONPATH=src python benchmarks/pak_ucb_diagnose.py --orders 3
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from genbandit.envs.prompts import ParetoBanditReplay  # noqa: E402
from genbandit.policies.kernel import RFFUCB  # noqa: E402


def kernel_stats(X: np.ndarray, sigma: float, n_components: int, rng: np.random.Generator, n_pairs_from: int = 1500) -> str:
    Xs = X[rng.choice(len(X), n_pairs_from, replace=False)]
    upper = np.triu_indices(len(Xs), 1)
    exact = np.exp(-np.clip(2.0 - 2.0 * Xs @ Xs.T, 0.0, None) / (2.0 * sigma**2))[upper]
    policy = RFFUCB(n_arms=1, n_features=X.shape[1], sigma=sigma, n_components=n_components, seed=int(rng.integers(2**31)))
    policy.reset(1)
    F = policy._features(Xs)
    approx = (F @ F.T)[upper]
    return (f"| {sigma} | {np.median(exact):.3f} ({np.quantile(exact, 0.05):.3f}-{np.quantile(exact, 0.95):.3f}) | "
            f"{np.std(approx - exact):.3f} | {np.corrcoef(exact, approx)[0, 1]:.2f} |")


def play(X: np.ndarray, U: np.ndarray, sigma: float, seed: int, skip: int = 500) -> dict:
    """RFF-UCB over one random order; statistics of the rounds after the first ``skip``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    policy = RFFUCB(n_arms=U.shape[1], n_features=X.shape[1], sigma=sigma, n_components=200, seed=seed)
    policy.reset(1)
    eta = policy._eta()
    rows = []
    for t, i in enumerate(order):
        mu, sd = (a[0] for a in policy.ucb(X[i][None, :]))
        arm = int(policy.select(X[i]))
        policy.update(arm, float(U[i, arm]), context=X[i])
        if t >= skip:
            rows.append((mu, eta * sd, arm, U[i]))
    mu, bonus, arm, util = (np.array(c) for c in zip(*rows))
    centred = lambda a: (a - a.mean(axis=1, keepdims=True)).ravel()  # noqa: E731
    return {
        "utility": float(util[np.arange(len(util)), arm].mean()),
        "pick_is_argmax_mean": float(np.mean(arm == mu.argmax(1))),
        "pick_is_argmax_bonus": float(np.mean(arm == bonus.argmax(1))),
        "bonus": float(np.median(bonus)),
        "bonus_spread": float(np.median(np.ptp(bonus, axis=1))),
        "mean_spread": float(np.median(np.ptp(mu, axis=1))),
        "corr": float(np.corrcoef(centred(mu), centred(util))[0, 1]),
        "argmax_mean_utility": float(util[np.arange(len(util)), mu.argmax(1)].mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=3, help="random orders of the whole stream per bandwidth")
    ap.add_argument("--prices", default="0,5")
    args = ap.parse_args()
    X = ParetoBanditReplay().embeddings()
    print(f"{len(X)} prompts, {X.shape[1]}-d embeddings, norms {np.linalg.norm(X, axis=1).min():.4f}-{np.linalg.norm(X, axis=1).max():.4f}\n")
    print("| sigma | exact RBF kernel between two prompts: median (5-95%) | D = 200 estimate: error s.d. | correlation with exact |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(0)
    for sigma in (0.5, 5.0):
        print(kernel_stats(X, sigma, 200, rng))
    print("\nRounds 501 to the end of each order, mean over orders:\n")
    print("| price | sigma | mean utility | pick = argmax of mean | pick = argmax of bonus | median bonus eta*sd | its spread across arms | "
          "spread of the means across arms | corr(estimated, true) around the arm average | always argmax of mean |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for price in (float(p) for p in args.prices.split(",")):
        U = ParetoBanditReplay(price=price).utilities()
        for sigma in (0.5, 5.0):
            runs = [play(X, U, sigma, seed) for seed in range(args.orders)]
            m = {k: np.mean([r[k] for r in runs]) for k in runs[0]}
            print(f"| {price:g} | {sigma} | {m['utility']:.4f} | {m['pick_is_argmax_mean']:.2f} | {m['pick_is_argmax_bonus']:.2f} | {m['bonus']:.2f} | "
                  f"{m['bonus_spread']:.2f} | {m['mean_spread']:.2f} | {m['corr']:.2f} | {m['argmax_mean_utility']:.4f} |", flush=True)
        print(f"| {price:g} | best single model | {U.mean(0).max():.4f} | | | | | | | |")


if __name__ == "__main__":
    main()
