"""The router's default policy (EvidenceThompson) on the real ParetoBandit stream: quality, budgets, warm start, speed.

Side by side in one process, the same prompts in the same random orders for every router:

- ``quality``: router-default, LinUCB, RFF-UCB (bandwidth 0.5 and 5), plain Thompson sampling over
  the models, ParetoBandit (its package, cold start; its PCA features and our 384-d embeddings)
  and the best single model, over ``--orders`` orders;
- ``budget``: at three budgets between the cheapest and the most expensive model's mean cost,
  router-default with ``budget`` against ParetoBandit with its ``BudgetPacer``;
- ``warm``: router-default warm-started (``fit_logged``) from every logged outcome of one random
  half of the prompts, then serving the other half: quality over its first 100 and 500 requests
  and over the half, against the best single model on the same requests;
- ``streams``: other full-information streams cut from the real one (by benchmark, recurring prompts,
  pure-noise context), router-default against Thompson sampling over the models, at several horizons;
- ``setup4``: the synthetic Setup 4 streams, router-default against RFF-UCB;
- ``speed``: select + update per decision on the same vectors (3 models, 384-d, 200 random
  features), against ParetoBandit's route + feedback.

Run by hand (not in CI), BLAS on one thread:

    PYTHONPATH=src python benchmarks/router_default.py --orders 10 > docs/reproductions/pak-ucb/router-default.md
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from genbandit.envs.prompts import ParetoBanditReplay  # noqa: E402
from genbandit.experiments.routing import ParetoBanditPeer, PolicyPeer, paretobandit_table, replay  # noqa: E402
from genbandit.policies.classic import ThompsonSampling  # noqa: E402
from genbandit.policies.kernel import RFFUCB, BestSingle, LinUCB  # noqa: E402
from genbandit.policies.routing import EvidenceThompson  # noqa: E402


def _row(name: str, runs: list[dict], keys: tuple[str, ...]) -> str:
    cells = []
    for k in keys:
        v = np.array([r[k] for r in runs])
        se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
        cells.append(f"{v.mean():.4f} ± {se:.4f}" if k not in ("us_per_decision",) else f"{v.mean():.0f}")
    return f"| {name} | " + " | ".join(cells) + " |"


def quality(X, R, C, models, orders, best):
    G, d = R.shape[1], X.shape[1]
    makers = {
        "router-default (EvidenceThompson)": lambda s: PolicyPeer(EvidenceThompson(n_arms=G, n_features=d, seed=s), X),
        "LinUCB (shared)": lambda s: PolicyPeer(LinUCB(n_arms=G, n_features=d, seed=s), X),
        "RFF-UCB (bandwidth 0.5, the paper's)": lambda s: PolicyPeer(RFFUCB(n_arms=G, n_features=d, sigma=0.5, seed=s), X),
        "RFF-UCB (bandwidth 5)": lambda s: PolicyPeer(RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=s), X),
        "Thompson sampling over the models (no context)": lambda s: _ContextFree(ThompsonSampling(n_arms=G, seed=s)),
        "ParetoBandit (cold start, its PCA features)": lambda s: ParetoBanditPeer(X, models, s, features="pca"),
        "ParetoBandit (cold start, our 384-d embeddings)": lambda s: ParetoBanditPeer(X, models, s, features="raw"),
        "best single model": lambda s: PolicyPeer(BestSingle(n_arms=G, arm=best, seed=s), X),
    }
    keys = ("mean_reward", "otb", "opr", "us_per_decision")
    out = ["## Quality, no budget", "", "| router | mean reward | OtB | OPR | us per decision |", "|---|---|---|---|---|"]
    for name, make in makers.items():
        runs = [replay(make(s), order, R, C, best) for s, order in enumerate(orders)]
        print(f"{name}: {np.mean([r['mean_reward'] for r in runs]):.4f}", file=sys.stderr, flush=True)
        out.append(_row(name, runs, keys))
    return out + [""]


class _ContextFree:
    def __init__(self, policy):
        self.policy = policy
        policy.reset(1)

    def select(self, i):
        return self.policy.select()

    def update(self, i, arm, reward, cost):
        self.policy.update(arm, reward)


def budgets(X, R, C, models, orders, best):
    G, d = R.shape[1], X.shape[1]
    lo, hi = C.mean(0).min(), C.mean(0).max()
    out = [
        "## Quality under a budget (target mean dollar cost per request)",
        "",
        f"Mean cost per request: cheapest model {lo:.6f}, most expensive {hi:.6f}; budgets at 1/4, 1/2 and 3/4 of the way.",
        "",
        "| budget | router | mean reward | mean spend / budget | OPR |",
        "|---|---|---|---|---|",
    ]
    for frac in (0.25, 0.5, 0.75):
        B = float(lo + frac * (hi - lo))
        makers = {
            "router-default (EvidenceThompson, budget)": lambda s: PolicyPeer(EvidenceThompson(n_arms=G, n_features=d, budget=B, seed=s), X),
            "ParetoBandit + BudgetPacer (its PCA features)": lambda s: ParetoBanditPeer(X, models, s, features="pca", budget=B),
            "ParetoBandit + BudgetPacer (our 384-d embeddings)": lambda s: ParetoBanditPeer(X, models, s, features="raw", budget=B),
        }
        for name, make in makers.items():
            runs = [replay(make(s), order, R, C, best) for s, order in enumerate(orders)]
            for r in runs:
                r["spend_over_budget"] = r["mean_cost"] / B
            print(f"budget {B:.5f} {name}: {np.mean([r['mean_reward'] for r in runs]):.4f}", file=sys.stderr, flush=True)
            out.append(_row(f"{B:.5f} | {name}", runs, ("mean_reward", "spend_over_budget", "opr")))
    return out + [""]


def warm(X, R, C, models, orders, best):
    G, d = R.shape[1], X.shape[1]
    out = [
        "## Warm start: every logged outcome of one half of the prompts, then serving the other half",
        "",
        "| router | first 100 requests | first 500 | whole half | best single model, same requests (whole half) |",
        "|---|---|---|---|---|",
    ]
    rows = {"router-default, warm-started": [], "router-default, cold": []}
    for s, order in enumerate(orders):
        half = len(order) // 2
        logged, served = order[:half], order[half:]
        for name in rows:
            policy = EvidenceThompson(n_arms=G, n_features=d, seed=s)
            if "warm" in name:
                policy.fit_logged(np.repeat(X[logged], G, axis=0), np.tile(np.arange(G), len(logged)), R[logged].ravel())
            peer = PolicyPeer(policy, X)
            got = []
            for i in served:
                arm = peer.select(int(i))
                peer.update(int(i), arm, float(R[i, arm]), float(C[i, arm]))
                got.append(R[i, arm] - R[i, best])
            got = np.array(got)
            base = R[served, best]
            rows[name].append([got[:100].mean() + base[:100].mean(), got[:500].mean() + base[:500].mean(), got.mean() + base.mean(), base.mean(),
                               got[:100].mean(), got[:500].mean(), got.mean()])
    for name, vals in rows.items():
        v = np.array(vals)
        se = v.std(0, ddof=1) / np.sqrt(len(v))
        out.append(f"| {name} | {v[:, 0].mean():.4f} (OtB {v[:, 4].mean():+.4f} ± {se[4]:.4f}) | {v[:, 1].mean():.4f} (OtB {v[:, 5].mean():+.4f} ± {se[5]:.4f}) "
                   f"| {v[:, 2].mean():.4f} (OtB {v[:, 6].mean():+.4f} ± {se[6]:.4f}) | {v[:, 3].mean():.4f} |")
    return out + [""]


def streams(X, R, C, models, orders, best):
    """Other full-information streams cut from the real one: by benchmark, with recurring prompts, with pure-noise context."""
    G, d = R.shape[1], X.shape[1]
    rng = np.random.default_rng(12345)
    sources = np.array(_sources())
    pool = rng.choice(len(X), 300, replace=False)
    recurring = rng.choice(pool, 3000)
    noise = rng.standard_normal(X.shape)
    cuts = {
        "gsm8k prompts only": (X[sources == "gsm8k"], R[sources == "gsm8k"]),
        "mmlu prompts only": (X[sources == "mmlu"], R[sources == "mmlu"]),
        "BIG-Bench Hard prompts only": (X[np.char.startswith(sources, "bbh")], R[np.char.startswith(sources, "bbh")]),
        "300 prompts drawn 3,000 times (recurring)": (X[recurring], R[recurring]),
        "the whole stream, context replaced by noise": (noise / np.linalg.norm(noise, axis=1, keepdims=True), R),
    }
    out = [
        "## Other streams: mean reward minus the best single model's (OtB) at several horizons",
        "",
        "Thompson = Beta-Bernoulli Thompson sampling over the models (no context); mean ± s.e. over orders.",
        "",
        "| stream | router | " + " | ".join(f"t = {h}" for h in (100, 300, 1000, "end")) + " |",
        "|---|---|---|---|---|---|",
    ]
    for name, (Xs, Rs) in cuts.items():
        n = len(Xs)
        arm = int(Rs.mean(0).argmax())
        hz = [h for h in (100, 300, 1000) if h < n] + [n]
        routers = {
            "router-default": lambda s: PolicyPeer(EvidenceThompson(n_arms=G, n_features=d, seed=s), Xs),
            "Thompson": lambda s: _ContextFree(ThompsonSampling(n_arms=G, seed=s)),
        }
        for label, make in routers.items():
            free = np.zeros_like(Rs)
            runs = [replay(make(s), np.random.default_rng(1000 + s).permutation(n), Rs, free, arm) for s in range(len(orders))]
            c = np.array([r["otb_curve"][np.array(hz) - 1] for r in runs])
            se = c.std(0, ddof=1) / np.sqrt(len(c))
            got = {h: f"{m:+.4f} ± {e:.4f}" for h, m, e in zip(hz, c.mean(0), se)}
            cells = [got.get(h, "") for h in (100, 300, 1000)] + [got[n]]
            out.append(f"| {name} ({n}) | {label} | " + " | ".join(cells) + " |")
            print(f"{name} {label}: {c.mean(0)}", file=sys.stderr, flush=True)
    return out + [""]


def setup4(n_runs: int = 3, horizon: int = 1000):
    """The synthetic Setup 4 streams of ``reproduce pak-ucb`` (MiniLM embeddings of template prompts), OtB at ``horizon``."""
    from genbandit import simulate
    from genbandit.envs.prompts import Setup4Synthetic
    from genbandit.experiments.metrics import compute_metric

    out = [f"## Setup 4 (synthetic, per-prompt routing matters): OtB after {horizon} rounds, {n_runs} runs, mean ± s.e.", "",
           "| setup | RFF-UCB (the paper's configuration) | router-default | Thompson sampling over the models |", "|---|---|---|---|"]
    for setup in ("expert", "swap2", "llm-bernoulli"):
        cells = []
        for make in (lambda G: RFFUCB(n_arms=G, n_features=384, sigma=5.0, seed=1), lambda G: EvidenceThompson(n_arms=G, n_features=384, seed=1),
                     lambda G: ThompsonSampling(n_arms=G, seed=1)):
            env = Setup4Synthetic(setup=setup, seed=3)
            policy = make(env.n_arms)
            otb = compute_metric("otb", simulate(env, policy, horizon, n_runs=n_runs, seed=5), env, policy)
            cells.append(f"{otb.mean():+.4f} ± {otb.std(ddof=1) / np.sqrt(n_runs):.4f}")
            print(f"setup4 {setup} {type(policy).__name__}: {otb}", file=sys.stderr, flush=True)
        out.append(f"| {setup} | " + " | ".join(cells) + " |")
    return out + [""]


def _sources() -> list[str]:
    from genbandit.envs.prompts import load_paretobandit

    return load_paretobandit()[4]


def speed(X, R, C, models, n=2000):
    import time

    G, d = R.shape[1], X.shape[1]
    order = np.random.default_rng(0).permutation(len(X))[:n]
    makers = {
        "ParetoBandit route + feedback (384-d)": lambda: ParetoBanditPeer(X, models, 0, features="raw"),
        "RFF-UCB (200 frequencies, cos-sin: 400 features)": lambda: PolicyPeer(RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=0), X),
        "RFF-UCB (200 features, cos-phase)": lambda: PolicyPeer(RFFUCB(n_arms=G, n_features=d, sigma=5.0, feature_map="cos-phase", seed=0), X),
        "router-default (EvidenceThompson, 200 features)": lambda: PolicyPeer(EvidenceThompson(n_arms=G, n_features=d, seed=0), X),
    }
    peers = {name: make() for name, make in makers.items()}
    got = dict.fromkeys(peers, 0.0)
    cpu = dict.fromkeys(peers, 0.0)
    best = int(R.mean(0).argmax())
    warm_up = np.random.default_rng(1).permutation(len(X))[:500]
    for peer in peers.values():  # untimed: every router starts timing with 500 decisions learned
        replay(peer, warm_up, R, C, best)
    for block in np.array_split(order, 20):  # interleaved blocks: every router sees the same machine load
        for name, peer in peers.items():
            start = time.process_time()
            got[name] += replay(peer, block, R, C, best)["us_per_decision"] * len(block) / n
            cpu[name] += 1e6 * (time.process_time() - start) / n
    base = got["ParetoBandit route + feedback (384-d)"]
    out = ["## Speed: select + update per decision (3 models, 384-d embeddings), one process, one BLAS thread", "",
           f"1-minute load average {os.getloadavg()[0]:.2f} at the end ({time.strftime('%H:%M')}); {n} timed decisions each, "
           "after 500 untimed ones, in 20 interleaved blocks. CPU time counts only the time this process ran (the replay's "
           "own bookkeeping included), so it is less inflated than the wall time on a loaded machine.", "",
           "| router | us per decision | ParetoBandit / this | CPU us per decision |", "|---|---|---|---|"]
    out += [f"| {name} | {us:.0f} | {base / us:.2f}x | {cpu[name]:.0f} |" for name, us in got.items()]
    return out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=3)
    ap.add_argument("--sections", default="quality,budget,warm,streams,setup4,speed")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    X, R, C, models = paretobandit_table(ParetoBanditReplay())
    best = int(R.mean(0).argmax())
    orders = [np.random.default_rng(seed).permutation(len(X)) for seed in range(args.orders)]
    out = [
        "# The router's default policy on the ParetoBandit stream",
        "",
        f"Command: `PYTHONPATH=src python benchmarks/router_default.py --orders {args.orders} --sections {args.sections}` "
        f"({len(X)} prompts, {len(models)} LLMs; every router replays the same {args.orders} random orders of the whole stream; "
        f"mean ± standard error over orders; 1-minute load average {os.getloadavg()[0]:.2f} at the start). "
        f"Best single model: {models[best]}, {R[:, best].mean():.4f}.",
        "",
    ]
    sections = {"quality": quality, "budget": budgets, "warm": warm, "streams": streams}
    for name in args.sections.split(","):
        if name in ("speed", "setup4"):
            out += speed(X, R, C, models) if name == "speed" else setup4()
        else:
            out += sections[name](X, R, C, models, orders, best)
        print("\n".join(out), file=sys.stderr, flush=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
