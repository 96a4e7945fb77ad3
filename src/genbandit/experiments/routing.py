"""The router's default policy on the real ParetoBandit stream, side by side with LinUCB, ParetoBandit and the best single model.

Every router replays the same prompts in the same random orders (one order per run, drawn from
the scenario's seed, shared by every router of the scenario); each round reveals only the
chosen model's logged reward and dollar cost. ParetoBandit is its own package's
``BanditRouter`` (cold start, ``priors="none"``), on its shipped 26-d PCA features of the same
MiniLM embeddings (``features = "pca"``, its default pipeline) or on the 384-d embeddings
(``"raw"``); with a ``budget`` it runs its own ``BudgetPacer`` (adaptive mode, no static cost
penalty), as its paper's budget sweep does. Our routers get a ``budget`` as a policy parameter.

:func:`router_unit` is the ``reproduce pak-ucb`` runner; ``benchmarks/router_default.py`` uses
the same pieces for the 10-order tables of docs/router.md.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .units import Unit, UnitResult, build_environment, build_policy

__all__ = ["ParetoBanditPeer", "PolicyPeer", "replay", "router_unit", "paretobandit_table"]


class PolicyPeer:
    """A genbandit policy as a router: ``select(i)``, ``update(i, arm, reward, cost)`` on row ``i`` of ``X``."""

    def __init__(self, policy, X: np.ndarray) -> None:
        self.policy, self.X = policy, X
        self.budgeted = getattr(policy, "budget", None) is not None
        if policy.n_runs == 0:  # a policy that already learned (a warm start) keeps its state
            policy.reset(1)

    def select(self, i: int) -> int:
        return self.policy.select(self.X[i])

    def update(self, i: int, arm: int, reward: float, cost: float) -> None:
        self.policy.update(arm, {"reward": reward, "cost": cost} if self.budgeted else reward, context=self.X[i])


class ParetoBanditPeer:
    """ParetoBandit's ``BanditRouter`` (the ``paretobandit`` package), cold start, optionally with its ``BudgetPacer``."""

    def __init__(self, X: np.ndarray, models: list[str], seed: int, features: str = "pca", budget: float | None = None) -> None:
        import logging

        from pareto_bandit import BanditRouter, FeatureService
        from pareto_bandit.budget_pacer import BudgetPacer, PacingMode
        from pareto_bandit.config import DEFAULT_PCA_PATH

        logging.getLogger("pareto_bandit").setLevel(logging.ERROR)
        X32 = X.astype(np.float32)
        if features == "pca":
            lookup = {i: X32[i] for i in range(len(X32))}
            fs = FeatureService(custom_encoder=lambda text: lookup[int(text)], pca_path=DEFAULT_PCA_PATH, embedding_dim=X.shape[1])
            self.F = fs.extract_features_batch([str(i) for i in range(len(X))])  # one PCA transform for every row
        else:
            fs = FeatureService.for_precomputed(X.shape[1])
            self.F = X32
        pacer = None if budget is None else BudgetPacer(target_avg_spend_usd=budget, mode=PacingMode.ADAPTIVE)
        self.router = BanditRouter.create(feature_service=fs, priors="none", cost_penalty=0.0, budget_pacer=pacer, bandit_seed=seed)
        self.models = models
        self._log = None

    def select(self, i: int) -> int:
        model_id, self._log = self.router.route(self.F[i])
        return self.models.index(model_id)

    def update(self, i: int, arm: int, reward: float, cost: float) -> None:
        self._log.cost_usd = cost  # the logged cost, as its own demo's replay sets it
        self.router.process_feedback(self._log.request_id, float(np.clip(reward, 0.0, 1.0)))


def replay(peer: Any, order: np.ndarray, rewards: np.ndarray, costs: np.ndarray, best_arm: int) -> dict:
    """Play ``peer`` over the rows ``order``; quality, spend, OtB, OPR, microseconds per decision (select + update) and
    ``otb_curve``, the running mean OtB after each round ``(len(order),)``."""
    quality = spend = 0.0
    optimal = 0
    spent = 0.0
    best = rewards.max(1)
    gains = np.empty(len(order))
    for t, i in enumerate(order):
        i = int(i)
        start = time.perf_counter()
        arm = peer.select(i)
        spent += time.perf_counter() - start
        r, c = float(rewards[i, arm]), float(costs[i, arm])
        start = time.perf_counter()
        peer.update(i, arm, r, c)
        spent += time.perf_counter() - start
        quality += r
        spend += c
        gains[t] = r - rewards[i, best_arm]
        optimal += int(r >= best[i] - 1e-12)
    n = len(order)
    curve = np.cumsum(gains) / np.arange(1, n + 1)
    return {"mean_reward": quality / n, "mean_cost": spend / n, "otb": float(curve[-1]), "opr": optimal / n, "us_per_decision": 1e6 * spent / n,
            "otb_curve": curve}


def paretobandit_table(env) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(embeddings, rewards (N, G), dollar costs (N, G), model ids) of a ParetoBandit replay environment."""
    _, rewards, costs, models = env._data  # (N, G, trials): the ParetoBandit log holds one trial per prompt and model
    return env.embeddings(), np.nanmean(rewards, axis=2), np.nanmean(costs, axis=2), models


def make_peer(label: str, name: str, params: dict, X: np.ndarray, models: list[str], best_arm: int, seed: int, unit_env, horizon: int):
    """The router a policy spec names: ``paretobandit`` (the package) or any registered genbandit policy."""
    from dataclasses import replace

    from .config import PolicySpec

    if name.lower() == "paretobandit":
        return ParetoBanditPeer(X, models, seed, features=params.get("features", "pca"), budget=params.get("budget"))
    spec = PolicySpec(label=label, policy=name, params=dict(params))
    if name.replace("-", "").lower() in ("bestsingle", "onearmoracle") and "arm" not in params:
        spec = replace(spec, params={**params, "arm": best_arm})
    policy = build_policy(spec, unit_env, horizon)
    return PolicyPeer(policy.clone(seed=seed), X)


def router_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """Replay one router over ``n_runs`` random orders of the stream (the same orders for every router of the scenario).

    ``policy = "paretobandit"`` (declared in ``router_unit.policies``) is ParetoBandit's own router, built here.
    """
    env = build_environment(unit.scenario, unit.horizon)
    X, rewards, costs, models = paretobandit_table(env)
    env_seed, policy_seed = unit.seeds()
    rng = np.random.default_rng(env_seed)
    n_runs, T = unit.scenario.n_runs, min(unit.horizon, len(X))
    orders = [rng.permutation(len(X))[:T] for _ in range(n_runs)]
    best_arm = int(rewards.mean(0).argmax())
    seeds = np.random.default_rng(policy_seed).integers(2**31, size=n_runs)
    runs = []
    for run, order in enumerate(orders):
        peer = make_peer(unit.policy.label, unit.policy.policy, unit.policy.params, X, models, best_arm, int(seeds[run]), env, T)
        runs.append(replay(peer, order, rewards, costs, best_arm))
    metrics = {k: [r[k] for r in runs] for k in ("mean_reward", "mean_cost", "otb", "opr", "us_per_decision")}
    budget = unit.policy.params.get("budget")
    if budget is not None:
        metrics["spend_over_budget"] = [r["mean_cost"] / budget for r in runs]
    reward = np.array([[r["mean_reward"] * T] for r in runs])
    return UnitResult(unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=T, n_runs=n_runs,
                      rounds=np.array([T], dtype=np.int64), regret=np.zeros((n_runs, 1)), reward=reward, metrics=metrics,
                      extras={"budget": budget}, wall_time=float(sum(r["us_per_decision"] for r in runs) * T / 1e6))


router_unit.policies = ("paretobandit",)
