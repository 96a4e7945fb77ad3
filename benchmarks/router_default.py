"""The router's default policy (EvidenceThompson) on the real ParetoBandit stream: quality, budgets, warm start, speed.

Side by side in one process, the same prompts in the same random orders for every router:

- ``quality``: router-default, LinUCB, RFF-UCB (bandwidth 0.5 and 5), plain Thompson sampling over
  the models, ParetoBandit (its package, cold start; its PCA features and our 384-d embeddings)
  and the best single model, over ``--orders`` orders;
- ``paired`` (not in the default list): router-default against ParetoBandit (cold start, its PCA features) alone, as
  shipped and without its registry's speed-profile prior, on the same ``--orders`` orders: each mean, their paired
  difference with its standard error, the median order's difference and how many orders end more than 0.005 below the
  best single model;
- ``budget``: at three budgets between the cheapest and the most expensive model's mean cost,
  router-default with ``budget`` against ParetoBandit with its ``BudgetPacer``;
- ``warm``: router-default warm-started (``fit_logged``) from every logged outcome of one random
  half of the prompts, then serving the other half: quality over its first 100 and 500 requests
  and over the half, against the best single model on the same requests;
- ``streams``: other full-information streams cut from the real one (by benchmark, recurring prompts,
  pure-noise context), router-default against Thompson sampling over the models, at several horizons;
- ``setup4``: the synthetic Setup 4 streams, router-default against RFF-UCB;
- ``speed``: select + update per decision on the same vectors (3 models, 384-d, 200 random
  features), against ParetoBandit's route + feedback, over ``--repeats`` repeats;
- ``floor`` (not in the default list): the default's compiled kernels, Beta draws, prompt key and evidence refit, each timed alone.

Run by hand (not in CI), BLAS on one thread:

    PYTHONPATH=src python benchmarks/router_default.py --orders 10 > docs/reproductions/pak-ucb/router-default.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from genbandit import simulate  # noqa: E402
from genbandit.envs.prompts import ArrayReplay, ParetoBanditReplay  # noqa: E402
from genbandit.experiments.metrics import compute_metric  # noqa: E402
from genbandit.policies.classic import ThompsonSampling  # noqa: E402
from genbandit.policies.kernel import RFFUCB, BestSingle, LinUCB  # noqa: E402
from genbandit.policies.paretobandit import ParetoBanditRouter  # noqa: E402
from genbandit.policies.routing import EvidenceThompson  # noqa: E402


def stream(env: ParetoBanditReplay) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(embeddings, rewards (N, G), dollar costs (N, G), model ids) of the ParetoBandit stream (one logged trial per prompt and model)."""
    return env.embeddings(), env.utilities(), np.nanmean(env._data[2], axis=2), env.models


def play(policy, env: ArrayReplay, n_runs: int, seed: int, *, reset_policy: bool = True, time_policy: bool = False, at=()) -> dict:
    """``policy`` over every row of ``env`` through :func:`genbandit.simulate`: per run, mean reward, mean cost, OtB, OPR,
    OtB after each round in ``at`` (``otb_at``) and, with ``time_policy``, microseconds per decision (select + update).

    Every router of a section gets the same ``seed``, so the same ``n_runs`` random orders of the rows.
    """
    T = env.max_horizon
    result = simulate(env, policy, T, n_runs=n_runs, seed=(seed, seed + 1), n_checkpoints=T if at else 2,
                      reset_policy=reset_policy, time_policy=time_policy)
    out = {"mean_reward": result.reward[:, -1] / T, "otb": compute_metric("otb", result, env, policy), "opr": compute_metric("opr", result, env, policy)}
    if "cost" in result.totals:  # a table with costs
        out["mean_cost"] = compute_metric("mean_cost", result, env, policy)
    if at:
        k = np.searchsorted(result.rounds, at)
        out["otb_at"] = (result.reward[:, k] - result.curves["best_single_reward"][:, k]) / result.rounds[k]
    if time_policy:
        out["us_per_decision"] = 1e6 * result.policy_seconds[-1] / (T * n_runs)
    return out


def pareto(d: int, models: list[str], features: str = "pca", budget: float | None = None, registry_prior: bool = True) -> ParetoBanditRouter:
    """ParetoBandit's router (its package, cold start) as a genbandit policy; ``registry_prior=False`` without its registry's
    speed-profile bias (the slow model's +0.05), so knowing nothing about the models."""
    return ParetoBanditRouter(n_arms=len(models), n_features=d, arm_names=tuple(models), features=features, budget=budget,
                              registry_prior=registry_prior, seed=0)


def _row(name: str, got: dict, keys: tuple[str, ...]) -> str:
    cells = []
    for k in keys:
        v = np.asarray(got[k])
        se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
        cells.append(f"{v.mean():.4f} ± {se:.4f}")
    return f"| {name} | " + " | ".join(cells) + " |"


def quality(X, R, C, models, n_orders):
    G, d = R.shape[1], X.shape[1]
    env = ArrayReplay(X, R, C, model_names=models)
    makers = {
        "router-default (EvidenceThompson)": lambda: EvidenceThompson(n_arms=G, n_features=d, seed=0),
        "LinUCB (shared)": lambda: LinUCB(n_arms=G, n_features=d, seed=0),
        "RFF-UCB (bandwidth 0.5, the paper's)": lambda: RFFUCB(n_arms=G, n_features=d, sigma=0.5, seed=0),
        "RFF-UCB (bandwidth 5)": lambda: RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=0),
        "Thompson sampling over the models (no context)": lambda: ThompsonSampling(n_arms=G, seed=0),
        "ParetoBandit (cold start, its PCA features)": lambda: pareto(d, models, "pca"),
        "ParetoBandit (cold start, our 384-d embeddings)": lambda: pareto(d, models, "raw"),
        "best single model": lambda: BestSingle(n_arms=G, arm=env.best_single_arm),
    }
    keys = ("mean_reward", "otb", "opr")
    out = ["## Quality, no budget", "", "| router | mean reward | OtB | OPR |", "|---|---|---|---|"]
    for name, make in makers.items():
        got = play(make(), env, n_orders, seed=0)
        print(f"{name}: {got['mean_reward'].mean():.4f}", file=sys.stderr, flush=True)
        out.append(_row(name, got, keys))
    return out + [""]


def paired(X, R, C, models, n_orders):
    """router-default and ParetoBandit, with and without its registry's prior, on the same orders, order by order: what the
    quality section's means cannot say."""
    G, d = R.shape[1], X.shape[1]
    env = ArrayReplay(X, R, C, model_names=models)
    ours, best = play(EvidenceThompson(n_arms=G, n_features=d, seed=0), env, n_orders, seed=0)["mean_reward"], R.mean(0).max()

    def se(v):
        return v.std(ddof=1) / np.sqrt(len(v))

    out = ["## router-default against ParetoBandit, order by order", "",
           f"{n_orders} orders, the same for every router; mean ± standard error over orders; the difference is router-default minus "
           "ParetoBandit, order by order.", "",
           "| ParetoBandit (cold start, its PCA features) | router-default | ParetoBandit | paired difference | median order's difference | "
           "orders below the best single model by more than 0.005: router-default, ParetoBandit |", "|---|---|---|---|---|---|"]
    for name, prior in (("as shipped (its registry's prior on the slow model)", True), ("without its registry's prior", False)):
        theirs = play(pareto(d, models, "pca", registry_prior=prior), env, n_orders, seed=0)["mean_reward"]
        diff = ours - theirs
        print(f"paired, ParetoBandit {name}: {theirs.mean():.5f}, difference {diff.mean():+.5f}", file=sys.stderr, flush=True)
        out.append(f"| {name} | {ours.mean():.5f} ± {se(ours):.5f} | {theirs.mean():.5f} ± {se(theirs):.5f} | {diff.mean():+.5f} ± "
                   f"{se(diff):.5f} | {np.median(diff):+.5f} | {(ours < best - 0.005).sum()}, {(theirs < best - 0.005).sum()} |")
    return out + [""]


def budgets(X, R, C, models, n_orders):
    G, d = R.shape[1], X.shape[1]
    env = ArrayReplay(X, R, C, model_names=models, reveal_cost=True)
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
            "router-default (EvidenceThompson, budget)": lambda: EvidenceThompson(n_arms=G, n_features=d, budget=B, seed=0),
            "ParetoBandit + BudgetPacer (its PCA features)": lambda: pareto(d, models, "pca", budget=B),
            "ParetoBandit + BudgetPacer (our 384-d embeddings)": lambda: pareto(d, models, "raw", budget=B),
        }
        for name, make in makers.items():
            got = play(make(), env, n_orders, seed=0)
            got["spend_over_budget"] = got["mean_cost"] / B
            print(f"budget {B:.5f} {name}: {got['mean_reward'].mean():.4f}", file=sys.stderr, flush=True)
            out.append(_row(f"{B:.5f} | {name}", got, ("mean_reward", "spend_over_budget", "opr")))
    return out + [""]


def warm(X, R, C, models, n_orders):
    G, d = R.shape[1], X.shape[1]
    out = [
        "## Warm start: every logged outcome of one half of the prompts, then serving the other half",
        "",
        "OtB against the best single model of the served half, on the same requests.",
        "",
        "| router | first 100 requests | first 500 | whole half | best single model (whole half) |",
        "|---|---|---|---|---|",
    ]
    rows = {"router-default, warm-started": [], "router-default, cold": []}
    for s in range(n_orders):
        order = np.random.default_rng(s).permutation(len(X))
        logged, served = order[: len(X) // 2], order[len(X) // 2 :]
        env = ArrayReplay(X[served], R[served], C[served], model_names=models)
        for name in rows:
            policy = EvidenceThompson(n_arms=G, n_features=d, seed=s)
            if "warm" in name:
                policy.fit_logged(np.repeat(X[logged], G, axis=0), np.tile(np.arange(G), len(logged)), R[logged].ravel())
            else:
                policy.reset(1)
            got = play(policy, env, 1, seed=s, reset_policy=False, at=(100, 500, len(served)))
            rows[name].append([*got["otb_at"][0], R[served, env.best_single_arm].mean()])
    for name, vals in rows.items():
        v = np.array(vals)
        se = v.std(0, ddof=1) / np.sqrt(len(v))
        cells = [f"{v[:, k].mean():+.4f} ± {se[k]:.4f}" for k in range(3)]
        out.append(f"| {name} | " + " | ".join(cells) + f" | {v[:, 3].mean():.4f} |")
    return out + [""]


def streams(X, R, C, models, n_orders):
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
        env = ArrayReplay(Xs, Rs, model_names=models)
        hz = [h for h in (100, 300, 1000) if h < n] + [n]
        routers = {"router-default": EvidenceThompson(n_arms=G, n_features=d, seed=0), "Thompson": ThompsonSampling(n_arms=G, seed=0)}
        for label, policy in routers.items():
            c = play(policy, env, n_orders, seed=1000, at=hz)["otb_at"]
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


class _CpuTimed:
    """A router whose ``select`` and ``update`` also book this thread's CPU time per decision: what the machine's other work
    inflates far less than the wall time (it still shares the caches)."""

    def __init__(self, policy):
        self.policy, self.cpu, self._spent = policy, [], 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def _select(self, contexts):
        tic = time.thread_time_ns()
        actions = self.policy._select(contexts)
        self._spent = time.thread_time_ns() - tic
        return actions

    def _learn(self, actions, feedback, contexts):
        tic = time.thread_time_ns()
        self.policy._learn(actions, feedback, contexts)
        self.cpu.append(self._spent + time.thread_time_ns() - tic)


def speed(X, R, C, models, n=2000, repeats=5):
    """Microseconds per decision (select + update) of each router, side by side: ``repeats`` times, fresh routers each time, on
    distinct prompts (one random order of the stream) and on recurring ones (300 prompts drawn again and again)."""
    G, d = R.shape[1], X.shape[1]
    makers = {
        "ParetoBandit route + feedback (384-d)": lambda: pareto(d, models, "raw"),
        "RFF-UCB (200 frequencies, cos-sin: 400 features)": lambda: RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=0),
        "RFF-UCB (200 features, cos-phase)": lambda: RFFUCB(n_arms=G, n_features=d, sigma=5.0, feature_map="cos-phase", seed=0),
        "router-default (EvidenceThompson, 200 features)": lambda: EvidenceThompson(n_arms=G, n_features=d, seed=0),
        "router-default with a budget (half-way between the cheapest and the dearest model's mean cost)": lambda: EvidenceThompson(
            n_arms=G, n_features=d, budget=float(C.mean(0).min() + 0.5 * np.ptp(C.mean(0))), seed=0),
    }
    rng = np.random.default_rng(12345)
    streams = {"distinct": np.random.default_rng(0).permutation(len(X))[: 500 + n],
               "recurring": rng.choice(rng.choice(len(X), 300, replace=False), 500 + n)}
    out = ["## Speed: select + update per decision (3 models, 384-d embeddings), one process, one BLAS thread", "",
           f"{repeats} repeats, each with fresh routers: 500 untimed decisions, then {n} timed ones in 20 interleaved blocks, so every "
           "router sees the same load; prompts distinct (a random order of the stream) or recurring (300 of them drawn again and again). "
           "Wall: the engine's policy timing (wall time inside select and update), a repeat's mean per decision, the evidence refits "
           "included; minimum and median over the repeats, and ParetoBandit's time over the router's within each repeat. CPU: this "
           "thread's CPU time inside select and update, a repeat's mean per decision and its median decision, median over the repeats, "
           "taken on a second copy of each router that makes the same decisions beside it, so no clock read falls inside the wall time.", "",
           "| prompts | router | wall us, min | wall us, median | ParetoBandit / this | CPU us, mean | CPU us, median decision |",
           "|---|---|---|---|---|---|---|"]
    loads = [os.getloadavg()[0]]
    for label, rows in streams.items():
        wall, cpu_mean, cpu_median = (np.zeros((repeats, len(makers))) for _ in range(3))
        warm_up, timed = rows[:500], rows[500:]
        for rep in range(repeats):
            # two identical copies of every router (same seeds, same rounds, so the same decisions): one timed by the wall clock,
            # one by the thread's CPU clock, so that neither clock's reads (a system call each) fall inside the other's timing
            policies = [make() for make in makers.values()]
            copies = [make() for make in makers.values()]
            for policy in policies + copies:  # untimed: every router starts timing with 500 decisions learned (a budget learns the costs too)
                policy.reset(1)
                reveal = getattr(policy, "budget", None) is not None
                play(policy, ArrayReplay(X[warm_up], R[warm_up], C[warm_up], reveal_cost=reveal), 1, seed=1, reset_policy=False)
            copies = [_CpuTimed(policy) for policy in copies]
            for k, block in enumerate(np.array_split(timed, 20)):  # interleaved blocks: every router sees the same machine load
                for j, (policy, copy) in enumerate(zip(policies, copies)):
                    env = ArrayReplay(X[block], R[block], C[block], reveal_cost=getattr(policy, "budget", None) is not None)
                    wall[rep, j] += play(policy, env, 1, seed=k, reset_policy=False, time_policy=True)["us_per_decision"] * len(block) / n
                    play(copy, ArrayReplay(X[block], R[block], C[block], reveal_cost=env.reveal_cost), 1, seed=k, reset_policy=False)
            cpu_mean[rep] = [1e-3 * np.mean(copy.cpu) for copy in copies]
            cpu_median[rep] = [1e-3 * np.median(copy.cpu) for copy in copies]
            loads.append(os.getloadavg()[0])
            print(f"speed {label} repeat {rep + 1}: " + ", ".join(f"{w:.0f}" for w in wall[rep]), file=sys.stderr, flush=True)
        ratio = wall[:, :1] / wall  # ParetoBandit over each router, within one repeat
        out += [f"| {label} | {name} | {wall[:, j].min():.0f} | {np.median(wall[:, j]):.0f} | {np.median(ratio[:, j]):.2f}x | "
                f"{np.median(cpu_mean[:, j]):.0f} | {np.median(cpu_median[:, j]):.0f} |" for j, name in enumerate(makers)]
    return out + ["", f"1-minute load average {min(loads):.2f} to {max(loads):.2f} ({time.strftime('%H:%M')} at the end).", ""]


def floor(X, R, C, models, _orders, n=2000):
    """The default's work that no restructuring of the calls removes, each piece timed alone on the state after 500 decisions
    (minimum and median over ``n`` prompts): its compiled kernels, the Beta draws, the prompt key and the evidence refit."""
    from genbandit.policies import routing

    G, d = R.shape[1], X.shape[1]
    policy = EvidenceThompson(n_arms=G, n_features=d, seed=0)
    policy.reset(1)
    warm_up = np.random.default_rng(1).permutation(len(X))[:500]
    play(policy, ArrayReplay(X[warm_up], R[warm_up], C[warm_up]), 1, seed=1, reset_policy=False)
    kernels, rows = routing._kernels(), np.random.default_rng(0).permutation(len(X))[:n]
    work = policy._scratch_for(1)
    never = np.full_like(policy._next_fit, np.iinfo(np.int64).max)  # learn on copies of the state, no refit falling due
    copy = kernels.state(**{k: never if k == "next_fit" else a.copy() if isinstance(a, np.ndarray) else a for k, a in work.fields.items()})
    rng, arm = np.random.default_rng(0), np.zeros(1, dtype=np.int64)
    address = rng.bit_generator.ctypes.bit_generator.value  # the draws' generator: rng, kept alive here

    def timed(step):
        t = np.empty(n)
        for k, i in enumerate(rows):
            tic = time.perf_counter()
            step(i)
            t[k] = time.perf_counter() - tic
        return 1e6 * t

    work.known[:] = False  # the features computed, as for a prompt whose features were not kept
    parts = {"features, (C_g + lambda_g I)^-1 z, the scores and the Beta laws (prepare)": timed(lambda i: kernels.prepare(X[i][None], work.state))}
    work.known[:] = True  # a recurring prompt's kept features (any: the arithmetic is the same)
    parts["the same for a recurring prompt whose features were kept (prepare without the features)"] = timed(
        lambda i: kernels.prepare(X[i][None], work.state))
    work.known[:] = False
    parts |= {
        "moments, the base's inverse-propensity weight and Sherman-Morrison after the played model's round (learn, on a copy)": timed(
            lambda i: kernels.learn(arm, R[i, :1], policy.t, copy)),
        "three Beta draws and a uniform, compiled on NumPy's generator (context_free_draws)": timed(
            lambda i: kernels.context_free_draws(address, work.ab, 1, work.draws)),
        "the recurring-prompt key (BLAKE2 of the embedding)": timed(lambda i: routing._key(X[i])),
    }
    t, most = np.empty(5), int(policy._n[0].argmax())
    for k in range(5):
        tic = time.perf_counter()
        policy._refit(0, most)
        t[k] = time.perf_counter() - tic
    out_rows = ["## Where the default's time goes: each piece alone, after 500 decisions", "",
                f"{n} prompts; the compiled kernels on the policy's own arrays, BLAS on one thread; 1-minute load average "
                f"{os.getloadavg()[0]:.2f} ({time.strftime('%H:%M')}).", "",
                "| piece | us, min | us, median |", "|---|---|---|"]
    out_rows += [f"| {name} | {v.min():.1f} | {np.median(v):.1f} |" for name, v in parts.items()]
    refits = []  # how many the speed section's timed decisions make: replayed on a router in the state it starts them in
    fresh = EvidenceThompson(n_arms=G, n_features=d, seed=0)
    fresh.reset(1)
    play(fresh, ArrayReplay(X[warm_up], R[warm_up], C[warm_up]), 1, seed=1, reset_policy=False)
    refit_one = fresh._refit
    fresh._refit = lambda r, g, C=None: (refits.append(g), refit_one(r, g, C))[1]
    play(fresh, ArrayReplay(X[rows], R[rows], C[rows]), 1, seed=0, reset_policy=False)
    out_rows += [f"| one evidence refit (tridiagonal reduction of the {policy.n_components} x {policy.n_components} inverse and its rebuild, when "
                 f"a model's count doubles; median of 5; {len(refits)} in the {n} decisions after the first 500) | {1e6 * t.min():.0f} | "
                 f"{1e6 * np.median(t):.0f} |", ""]
    return out_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=3)
    ap.add_argument("--sections", default="quality,budget,warm,streams,setup4,speed")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the speed section")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    X, R, C, models = stream(ParetoBanditReplay())
    best = int(R.mean(0).argmax())
    out = [
        "# The router's default policy on the ParetoBandit stream",
        "",
        f"Command: `PYTHONPATH=src python benchmarks/router_default.py --orders {args.orders} --sections {args.sections} --repeats {args.repeats}` "
        f"({len(X)} prompts, {len(models)} LLMs; every router plays, through the engine, the same {args.orders} random orders of the whole stream; "
        f"mean ± standard error over orders; 1-minute load average {os.getloadavg()[0]:.2f} at the start). "
        f"Best single model: {models[best]}, {R[:, best].mean():.4f}.",
        "",
    ]
    sections = {"quality": quality, "paired": paired, "budget": budgets, "warm": warm, "streams": streams, "floor": floor}
    for name in args.sections.split(","):
        if name in ("speed", "setup4"):
            out += speed(X, R, C, models, repeats=args.repeats) if name == "speed" else setup4()
        else:
            out += sections[name](X, R, C, models, args.orders)
        print("\n".join(out), file=sys.stderr, flush=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
