"""The simulator: one policy against one environment, ``n_runs`` independent runs in lock step.

This is the only place regret is accumulated. Environments report the instantaneous
pseudo-regret of each run's action; the simulator sums it, records the sums at checkpoints,
counts pulls and times the loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np
from tqdm.auto import tqdm

from .base import Environment, Policy
from .rng import spawn_seeds
from .validation import InvalidParameterError

__all__ = ["SimulationResult", "simulate", "checkpoint_grid"]


def checkpoint_grid(horizon: int, n_points: int = 200) -> np.ndarray:
    """Rounds (1-based) at which cumulative quantities are recorded: half log-spaced, half linear.

    >>> checkpoint_grid(10, 4).tolist()
    [1, 5, 10]
    """
    if horizon < 1:
        raise InvalidParameterError(f"horizon must be a positive int. Got {horizon!r} instead.")
    half = max(n_points // 2, 1)
    log_part = np.geomspace(1, horizon, half)
    lin_part = np.linspace(horizon / half, horizon, half)
    return np.unique(np.clip(np.round(np.concatenate([log_part, lin_part])), 1, horizon).astype(np.int64))


@dataclass
class SimulationResult:
    """What :func:`simulate` records. Arrays have a leading run axis.

    ``rounds`` ``(n_checkpoints,)``; ``regret`` and ``reward`` ``(n_runs, n_checkpoints)`` are
    cumulative; ``counts`` ``(n_runs, n_arms)`` pulls (units, for allocations); ``totals`` maps
    each key of the environment's ``Step.info`` to its per-run sum ``(n_runs,)``.
    """

    horizon: int
    n_runs: int
    rounds: np.ndarray
    regret: np.ndarray
    reward: np.ndarray
    counts: np.ndarray
    wall_time: float
    totals: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def final_regret(self) -> np.ndarray:
        return self.regret[:, -1]

    @property
    def pulls_per_second(self) -> float:
        return self.n_runs * self.horizon / max(self.wall_time, 1e-12)


def simulate(
    env: Environment,
    policy: Policy,
    horizon: int,
    *,
    n_runs: int = 1,
    seed: int | np.random.SeedSequence | tuple | None = None,
    n_checkpoints: int = 200,
    progress: bool = False,
    description: str | None = None,
) -> SimulationResult:
    """Run ``policy`` on ``env`` for ``horizon`` rounds in ``n_runs`` runs at once.

    The environment and the policy get independent streams derived from ``seed``, so the same
    seed gives the same numbers bit for bit. A pair ``(env_seed, policy_seed)`` seeds them
    separately: the experiment runner gives every policy of a scenario the same environment seed,
    so policies are compared on the same draws (common random numbers).

    >>> from genbandit import BernoulliArms, UCB1, simulate
    >>> result = simulate(BernoulliArms(means=[0.3, 0.7]), UCB1(n_arms=2), horizon=1000, n_runs=4, seed=0)
    >>> result.regret.shape == (4, len(result.rounds)), bool(result.final_regret.mean() < 40)
    (True, True)
    """
    if not isinstance(horizon, Integral) or isinstance(horizon, bool) or horizon < 1:
        raise InvalidParameterError(f"horizon must be a positive int. Got {horizon!r} instead.")
    if env.max_horizon is not None and horizon > env.max_horizon:
        raise InvalidParameterError(f"horizon {horizon} exceeds what {type(env).__name__} can play ({env.max_horizon} rounds).")
    if policy.action_kind != env.action_kind:
        raise InvalidParameterError(f"{type(policy).__name__} plays {policy.action_kind} actions but {type(env).__name__} takes {env.action_kind} actions.")
    if policy.contextual and env.context_dim is None:
        raise InvalidParameterError(f"{type(policy).__name__} needs contexts, which {type(env).__name__} does not produce.")
    env_seed, policy_seed = seed if isinstance(seed, tuple) else spawn_seeds(seed, 2)
    env.reset(n_runs, seed=env_seed)
    policy.reset(n_runs, seed=policy_seed)
    if env.n_arms != policy.n_arms:
        raise InvalidParameterError(f"{type(policy).__name__} has {policy.n_arms} arms but {type(env).__name__} has {env.n_arms}.")

    rounds = checkpoint_grid(int(horizon), n_checkpoints)
    regret_at = np.empty((n_runs, rounds.size))
    reward_at = np.empty((n_runs, rounds.size))
    cum_regret = np.zeros(n_runs)
    cum_reward = np.zeros(n_runs)
    counts = np.zeros((n_runs, env.n_arms), dtype=np.int64)
    totals: dict[str, np.ndarray] = {}
    rows = np.arange(n_runs)
    allocation = policy.action_kind == "allocation"
    bar = tqdm(total=horizon, desc=description, disable=not progress, leave=False, unit="round", mininterval=0.5)
    tick = max(horizon // 200, 1)
    next_checkpoint = 0

    start = time.perf_counter()
    for t in range(1, horizon + 1):
        contexts = env._observe()
        actions = policy._select(contexts)
        step = env._advance(actions)
        policy._learn(actions, step.feedback, contexts)
        cum_regret += step.regret
        cum_reward += step.reward
        if allocation:
            counts += actions
        else:
            counts[rows, actions] += 1
        for key, value in step.info.items():
            if key in totals:
                totals[key] += value
            else:
                totals[key] = np.array(value, dtype=float)
        if t == rounds[next_checkpoint]:
            regret_at[:, next_checkpoint] = cum_regret
            reward_at[:, next_checkpoint] = cum_reward
            next_checkpoint += 1
        if t % tick == 0:
            bar.update(tick)
    wall = time.perf_counter() - start
    bar.close()
    return SimulationResult(
        horizon=int(horizon), n_runs=n_runs, rounds=rounds, regret=regret_at, reward=reward_at, counts=counts, wall_time=wall, totals=totals
    )
