"""Metrics: named functions of a finished simulation, one value per run (or one for the unit).

A metric is ``fn(result, env, policy) -> array (n_runs,) | float``. Families register their own
(``mat``, ``otb``, ``opr``...) with :func:`register_metric` next to the environments that
report what those metrics need through ``Step.info``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.base import Environment, Policy
from ..core.metrics import reported_total as _total
from ..core.registry import METRICS, register_metric
from ..core.simulator import SimulationResult
from ..core.validation import InvalidParameterError

__all__ = ["METRICS", "register_metric", "compute_metric"]

MetricFn = Callable[[SimulationResult, Environment, Policy], "np.ndarray | float"]


def compute_metric(name: str, result: SimulationResult, env: Environment, policy: Policy) -> np.ndarray | float:
    return METRICS.get(name)(result, env, policy)


@register_metric("final_regret", "cumulative pseudo-regret at the horizon; for runs that end themselves, stopping time minus the reference's")
def _final_regret(result, env, policy):
    """An environment whose runs end when a task is complete and that reports a reference stopping time
    (``reference_stopping_times()``, BanditSpec eq. 1 and 12) measures regret in rounds against it."""
    if hasattr(env, "reference_stopping_times"):
        return (result.stopping_time - env.reference_stopping_times()).astype(float)
    return result.final_regret


@register_metric("final_reward", "cumulative reward at the horizon")
def _final_reward(result, env, policy):
    return result.reward[:, -1]


@register_metric("mean_regret", "average pseudo-regret per round (the gap to the oracle's mean)")
def _mean_regret(result, env, policy):
    return result.final_regret / result.horizon


@register_metric("mean_reward", "average reward per round")
def _mean_reward(result, env, policy):
    return result.reward[:, -1] / result.horizon


@register_metric("pulls_per_second", "rounds x runs simulated per second of wall time (one value per unit)")
def _pulls_per_second(result, env, policy):
    return result.pulls_per_second


@register_metric("seconds_per_round", "wall time per round of all runs (one value per unit)")
def _seconds_per_round(result, env, policy):
    return result.wall_time / result.horizon


@register_metric("seconds_per_decision", "wall time per decision of one run (one value per unit)")
def _seconds_per_decision(result, env, policy):
    return result.wall_time / (result.horizon * result.n_runs)


@register_metric("optimal_rate", "share of rounds in which the best action was chosen")
def _optimal_rate(result, env, policy):
    return _total(result, "optimal", "optimal_rate") / result.horizon


@register_metric("best_arm_rate", "share of runs whose most-pulled arm is the best arm")
def _best_arm_rate(result, env, policy):
    means = env.mean_rewards()
    if means is None:
        raise InvalidParameterError("best_arm_rate needs an environment with mean_rewards().")
    return (result.counts.argmax(axis=1) == np.asarray(means).argmax(axis=1)).astype(float)


@register_metric("best_final_arm_rate", "share of runs whose most-pulled arm has the best converged expected reward")
def _best_final_arm_rate(result, env, policy):
    if not hasattr(env, "best_final_arm"):
        raise InvalidParameterError("best_final_arm_rate needs a rested rising environment (genbandit.envs.rising).")
    return (result.counts.argmax(axis=1) == env.best_final_arm).astype(float)


@register_metric("best_fixed_arm_rate", "share of runs whose most-pulled arm is the best fixed arm over the horizon")
def _best_fixed_arm_rate(result, env, policy):
    if not hasattr(env, "best_arm"):
        raise InvalidParameterError("best_fixed_arm_rate needs a rested rising environment (genbandit.envs.rising).")
    return (result.counts.argmax(axis=1) == env.best_arm).astype(float)


@register_metric("us_per_decision", "microseconds spent in the policy's select and update per decision, the environment excluded (one value per unit)")
def _us_per_decision(result, env, policy):
    return 1e6 * result.policy_seconds[-1] / (result.horizon * result.n_runs)


_us_per_decision.times_policy = True  # the unit times the policy (simulate's time_policy)


@register_metric("spend_over_budget", "mean dollar cost per decision over the policy's budget (only for a policy with a budget)")
def _spend_over_budget(result, env, policy):
    budget = getattr(policy, "budget", None)
    return None if budget is None else _total(result, "cost", "spend_over_budget") / result.horizon / budget
