"""The default router's kernel bandwidth and slope prior against the evidence, on `setup4-llm-bernoulli` and the ParetoBandit stream.

EvidenceThompson sets its RBF bandwidth by the median heuristic and the scale of its isotropic slope prior by the
evidence (type-II maximum likelihood; MacKay 1992; Rasmussen & Williams 2006, section 5.4). This measures whether
the evidence would choose another bandwidth, or another prior, and what either does where the default keeps little
of RFF-UCB's gain (``setup4-llm-bernoulli``):

- ``distances``: the median pairwise distance of the embeddings against the distances within and between prompt types;
- ``offline``: each model fitted on rounds of uniformly random models (``--train`` of them), 200 random Fourier features
  at the bandwidth ``multiple x median``: the log evidence of the isotropic prior (``lambda`` and the noise at their
  maximum, :func:`~genbandit.policies.routing.evidence_ridge`), the log predictive density of 3,000 held-out rounds,
  the regret per prompt of playing the largest posterior mean, and the median posterior standard deviation at a prompt;
  also two other priors on the same features: automatic relevance determination of each eigen-direction of the
  features' scatter (MacKay 1994; Tipping 2001; its fixed point in closed form in an orthogonal basis, Tipping &
  Faul 2003), and a prior precision ``lambda (mean e / e_i)^nu`` on the direction of eigenvalue ``e_i``, ``lambda``
  by the evidence for each ``nu`` (``nu = 0`` is the isotropic prior);
- ``online``: the default with its bandwidth ``multiple x median`` on ``setup4-llm-bernoulli`` (1,000 rounds,
  the setup4 section's seeds in ``benchmarks/router_default.py``): OtB, paired against the median heuristic, and the
  posterior standard deviation at a prompt after the last round.

Run by hand: ``PYTHONPATH=src python benchmarks/router_bandwidth.py --sections distances,offline,online --runs 30``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from genbandit import simulate  # noqa: E402
from genbandit.envs.prompts import SETUP4, ParetoBanditReplay, Setup4Synthetic, template_prompts  # noqa: E402
from genbandit.experiments.metrics import compute_metric  # noqa: E402
from genbandit.policies.routing import EvidenceThompson, evidence_ridge  # noqa: E402

MULTIPLES = (1.0, 2.0, 4.0, 8.0)


class ScaledBandwidth(EvidenceThompson):
    """The default with its bandwidth ``multiple`` times the median heuristic's (the frequencies divided by it first)."""

    multiple = 1.0

    def _set_bandwidth(self, r: int) -> None:
        self._freq[r] /= self.multiple
        super()._set_bandwidth(r)


def _median_distance(X: np.ndarray) -> float:
    sq = (X * X).sum(1)
    d = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0))[np.triu_indices(len(X), 1)]
    return float(np.median(d[d > 0]))


def _llm_bernoulli() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(embeddings, stored outcomes (N, G, S), prompt type) of ``setup4-llm-bernoulli`` as the setup4 section builds it."""
    env = Setup4Synthetic(setup="llm-bernoulli", seed=3)
    env.reset(1)
    return env._contexts, env._scores, template_prompts(SETUP4["llm-bernoulli"]["categories"], env.n_prompts_per_category)[1]


def distances() -> list[str]:
    X, _, labels = _llm_bernoulli()
    sq = (X * X).sum(1)
    D = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0))
    upper = np.triu_indices(len(X), 1)
    d, same = D[upper], (labels[:, None] == labels[None, :])[upper]
    q = lambda v: f"{np.median(v):.3f} (10% {np.quantile(v, 0.1):.3f}, 90% {np.quantile(v, 0.9):.3f})"
    return ["## Distances between the embeddings of setup4-llm-bernoulli", "",
            f"median over all pairs {np.median(d[d > 0]):.3f}; within a prompt type {q(d[same & (d > 0)])}; "
            f"between types {q(d[~same])}", ""]


def _moments(Phi: np.ndarray, y: np.ndarray) -> tuple:
    Pc, yc = Phi - Phi.mean(0), y - y.mean()
    e, V = np.linalg.eigh(Pc.T @ Pc)
    return np.maximum(e, 1e-9 * e.max()), V, V.T @ (Pc.T @ yc), float(yc @ yc), Phi.mean(0), y.mean(), len(y)


def _log_evidence(e, p, syy, n, lam) -> tuple[float, float]:
    """(log evidence, noise) of ridge regression on centred data with prior precision ``lam`` (per direction) over the noise,
    the noise at its maximum (Bishop, PRML eq. 3.86 with ``alpha = lam beta``)."""
    m = p / (e + lam)
    fit = max(syy - 2.0 * m @ p + (e * m * m).sum(), 0.0) + (lam * m * m).sum()
    s2 = fit / (n - 1)
    return 0.5 * np.log(lam).sum() - 0.5 * np.log(e + lam).sum() - 0.5 * (n - 1) * (math.log(2.0 * math.pi * s2) + 1.0), s2


def _fit(Phi: np.ndarray, y: np.ndarray, prior: str, nu: float = 0.0) -> dict:
    e, V, p, syy, pbar, ybar, n = _moments(Phi, y)
    if prior == "isotropic":
        lam = np.full_like(e, evidence_ridge(e, p, syy, n, iters=300)[0])
    elif prior == "ard":  # Tipping & Faul 2003: alpha_i = s_i^2 / (q_i^2 - s_i) where q_i^2 > s_i, else the direction pruned
        s2 = syy / (n - 1)
        for _ in range(200):
            excess = p * p - s2 * e
            lam = np.where(excess > 0, s2 * e * e / np.maximum(excess, 1e-300), 1e12)
            m, gamma = p / (e + lam), e / (e + lam)
            s2 = max(syy - 2.0 * m @ p + (e * m * m).sum(), 0.0) / max(n - 1 - gamma.sum(), 1.0)
    else:  # the spectrum's power nu: lambda by the evidence on a grid
        shape = (e.mean() / e) ** nu
        lam = shape * math.exp(max(np.linspace(-8.0, 10.0, 361), key=lambda lg: _log_evidence(e, p, syy, n, math.exp(lg) * shape)[0]))
    le, s2 = _log_evidence(e, p, syy, n, lam)
    return {"V": V, "w": p / (e + lam), "inv": 1.0 / (e + lam), "s2": s2, "pbar": pbar, "ybar": ybar, "n": n, "log_evidence": le}


def _predict(f: dict, Phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = (Phi - f["pbar"]) @ f["V"]
    return f["ybar"] + z @ f["w"], f["s2"] * (1.0 / f["n"] + (z * z * f["inv"]).sum(1))


def offline(name: str, X: np.ndarray, table: np.ndarray, n_train: int, seed: int = 0) -> list[str]:
    """Fits on ``n_train`` rounds of uniformly random models (one stored outcome each), scored on 3,000 more."""
    rng = np.random.default_rng(seed)
    G, truth = table.shape[1], table.mean(2)
    rows, arms = rng.integers(len(X), size=n_train), rng.integers(G, size=n_train)
    test, test_arms = rng.integers(len(X), size=3000), rng.integers(G, size=3000)
    outcome = lambda i, a: table[i, a, rng.integers(table.shape[2], size=len(i))]
    y, y_test = outcome(rows, arms), outcome(test, test_arms)
    median = _median_distance(X[rows[:32]])
    W, b = rng.standard_normal((200, X.shape[1])), rng.uniform(0.0, 2.0 * np.pi, 200)
    out = [f"## {name}: {n_train} rounds of uniformly random models, evidence and held-out fit by bandwidth and prior", "",
           f"median heuristic {median:.3f}; 200 random features; held-out: 3,000 rounds; regret: of the largest posterior mean, "
           f"per prompt (the best single model's: {np.mean(truth.max(1) - truth[:, truth.mean(0).argmax()]):.4f})", "",
           "| bandwidth / median | prior | log evidence (sum over models) | held-out log density per round | regret "
           "| median sd at a prompt, per model |",
           "|---|---|---|---|---|---|"]
    for multiple in MULTIPLES:
        Phi = math.sqrt(2.0 / 200) * np.cos(X @ W.T / (median * multiple) + b)
        for prior, nu in [("isotropic", 0.0), ("ard", 0.0), ("spectrum", 0.5), ("spectrum", 1.0), ("spectrum", 2.0)]:
            fits = [_fit(Phi[rows[arms == g]], y[arms == g], prior, nu) for g in range(G)]
            mean, var = (np.stack(v, 1) for v in zip(*[_predict(f, Phi) for f in fits]))
            s2 = np.array([f["s2"] for f in fits])[test_arms]
            v = var[test, test_arms] + s2
            density = np.mean(-0.5 * (np.log(2.0 * np.pi * v) + (y_test - mean[test, test_arms]) ** 2 / v))
            regret = np.mean(truth.max(1) - truth[np.arange(len(X)), mean.argmax(1)])
            label = prior if prior != "spectrum" else f"(mean e / e_i)^{nu:g}"
            out.append(f"| {multiple:g} | {label} | {sum(f['log_evidence'] for f in fits):.1f} | {density:.4f} | {regret:.4f} | "
                       f"{', '.join(f'{s:.3f}' for s in np.median(np.sqrt(var), 0))} |")
            print(out[-1], file=sys.stderr, flush=True)
    return out + [""]


def online(n_runs: int, seed: int = 5) -> list[str]:
    X, _, labels = _llm_bernoulli()
    out = [f"## The default with its bandwidth a multiple of the median heuristic: setup4-llm-bernoulli, 1,000 rounds, {n_runs} runs", "",
           ("| bandwidth / median | OtB | paired against the median | posterior sd at a prompt, per model (median) "
            "| share of each type's prompts where model 1 has the larger posterior mean |"), "|---|---|---|---|---|"]
    first = None
    for multiple in MULTIPLES:
        env = Setup4Synthetic(setup="llm-bernoulli", seed=3)
        policy = ScaledBandwidth(n_arms=env.n_arms, n_features=384, seed=1)
        policy.multiple = multiple
        otb = compute_metric("otb", simulate(env, policy, 1000, n_runs=n_runs, seed=seed), env, policy)
        first = otb if first is None else first
        post = np.array([policy.posterior(np.repeat(x[None], n_runs, 0)) for x in X])  # (N, 2, R, G)
        prefer = post[:, 0, :, 1] > post[:, 0, :, 0]
        se = lambda v: f"{v.mean():+.4f} ± {v.std(ddof=1) / np.sqrt(len(v)):.4f}"
        sd = ", ".join(f"{s:.3f}" for s in np.median(np.sqrt(post[:, 1]), (0, 1)))
        out.append(f"| {multiple:g} | {se(otb)} | {se(otb - first)} | {sd} | "
                   f"{', '.join(f'{prefer[labels == c].mean():.2f}' for c in range(labels.max() + 1))} |")
        print(out[-1], file=sys.stderr, flush=True)
    return out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="distances,offline,online")
    ap.add_argument("--runs", type=int, default=10, help="runs of the online section")
    ap.add_argument("--train", type=int, default=1000, help="rounds of the offline fits on llm-bernoulli (1.5x that on ParetoBandit)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    out = [(f"Command: `PYTHONPATH=src python benchmarks/router_bandwidth.py --sections {args.sections} --runs {args.runs} "
            f"--train {args.train}` "
            f"(1-minute load average {os.getloadavg()[0]:.2f} at the start)"), ""]
    for name in args.sections.split(","):
        if name == "distances":
            out += distances()
        elif name == "offline":
            X, table, _ = _llm_bernoulli()
            out += offline("setup4-llm-bernoulli", X, table, args.train)
            env = ParetoBanditReplay()
            out += offline("ParetoBandit stream", env.embeddings(), env.utilities()[:, :, None], args.train * 3 // 2)
        else:
            out += online(args.runs)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
