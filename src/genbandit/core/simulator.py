"""The engine: one loop plays a policy against an environment, ``n_runs`` runs in lock step.

Every experiment of genbandit goes through :func:`simulate`. It keeps one book: the sums of the
environment's instantaneous pseudo-regret and reward, the pulls, and every key of ``Step.info``,
recorded cumulatively at the checkpoints of :func:`checkpoint_grid`. What the families need beyond
the plain loop is a small option of the same loop, never a copy of it:

- ``stop``: a callable giving, before each round, the runs that are done (for example a
  speculative-decoding environment whose response is complete). Done runs stop counting (no
  regret, reward, info or pulls), their ``stopping_time`` is the rounds they counted, and the loop
  ends when every run is done (or at ``horizon``).
- per-round quantities: each ``Step.info`` key is summed and recorded at the checkpoints in
  ``SimulationResult.curves`` (``totals`` holds the final sums); ``time_policy=True`` books the
  time spent in the policy alone the same way (``policy_seconds``).
- for a policy that declares a ``reward_range``, every round's feedback goes through the check
  :meth:`Policy.update` makes, so a reward outside it is refused with the same error.
- compiled backends: a policy that has a compiled loop for an environment returns it from its
  public ``compiled_loop(env)`` method (``None`` otherwise). ``backend="auto"`` runs it when no
  stop condition is asked for; ``"python"`` forces the plain loop, ``"compiled"`` requires the
  compiled one. A compiled loop takes the freshly reset environment and policy and the checkpoint
  rounds and returns ``(regret_at, reward_at, counts)``, optionally followed by a dict of ``Step.info``
  keys recorded cumulatively at the checkpoints (``curves``; ``totals`` are their last columns);
  each one is tested round for round against the plain loop on the same random numbers, or, where
  it draws its own random numbers, against the law of the plain loop's choices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from numbers import Integral
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from .base import Environment, Policy
from .rng import spawn_seeds
from .validation import InvalidParameterError

__all__ = ["SimulationResult", "simulate", "checkpoint_grid", "BACKEND_CHOICES"]

BACKEND_CHOICES = ("auto", "python", "compiled")


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
    each key of the environment's ``Step.info`` to its per-run sum ``(n_runs,)`` and ``curves`` to
    its cumulative sum at the checkpoints ``(n_runs, n_checkpoints)``; ``stopping_time``
    ``(n_runs,)`` the rounds each run counted (``horizon`` unless a stop condition ended it);
    ``policy_seconds`` ``(n_checkpoints,)`` the wall time spent in the policy's ``select`` and
    ``update`` alone (the environment excluded), cumulative at the checkpoints (with ``time_policy``).
    """

    horizon: int
    n_runs: int
    rounds: np.ndarray
    regret: np.ndarray
    reward: np.ndarray
    counts: np.ndarray
    wall_time: float
    totals: dict[str, np.ndarray] = field(default_factory=dict)
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    stopping_time: np.ndarray | None = None
    policy_seconds: np.ndarray | None = None

    @property
    def final_regret(self) -> np.ndarray:
        return self.regret[:, -1]

    @property
    def pulls_per_second(self) -> float:
        return self.n_runs * self.horizon / max(self.wall_time, 1e-12)


def _check_setup(env: Environment, policy: Policy, horizon: int) -> None:
    if not isinstance(horizon, Integral) or isinstance(horizon, bool) or horizon < 1:
        raise InvalidParameterError(f"horizon must be a positive int. Got {horizon!r} instead.")
    if env.max_horizon is not None and horizon > env.max_horizon:
        raise InvalidParameterError(f"horizon {horizon} exceeds what {type(env).__name__} can play ({env.max_horizon} rounds).")
    if policy.action_kind != env.action_kind:
        raise InvalidParameterError(f"{type(policy).__name__} plays {policy.action_kind} actions but {type(env).__name__} takes {env.action_kind} actions.")
    if policy.contextual and env.context_dim is None:
        raise InvalidParameterError(f"{type(policy).__name__} needs contexts, which {type(env).__name__} does not produce.")


def _pick_loop(env: Environment, policy: Policy, backend: str, stop, time_policy: bool) -> Callable | None:
    """The compiled loop to run, or ``None`` for the plain one (which alone can stop runs or time the policy)."""
    if backend not in BACKEND_CHOICES:
        raise InvalidParameterError(f"backend must be one of {', '.join(BACKEND_CHOICES)}. Got {backend!r} instead.")
    if backend == "python":
        return None
    offer = getattr(policy, "compiled_loop", None)
    loop = offer(env) if callable(offer) and stop is None and not time_policy else None
    if backend == "compiled" and loop is None:
        asked = " with a stop condition." if stop is not None else " that times the policy." if time_policy else "."
        raise InvalidParameterError(f"{type(policy).__name__} has no compiled loop for {type(env).__name__}{asked}")
    return loop


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
    stop: Callable[[], np.ndarray] | None = None,
    backend: str = "auto",
    time_policy: bool = False,
    reset_policy: bool = True,
) -> SimulationResult:
    """Run ``policy`` on ``env`` for ``horizon`` rounds in ``n_runs`` runs at once.

    The environment and the policy get independent streams derived from ``seed``, so the same
    seed gives the same numbers bit for bit. A pair ``(env_seed, policy_seed)`` seeds them
    separately: the experiment runner gives every policy of a scenario the same environment seed,
    so policies are compared on the same draws (common random numbers). ``stop`` and ``backend``
    as in the module docstring; ``time_policy=True`` books the time spent in the policy's
    ``select`` and ``update`` alone at the checkpoints (``policy_seconds``; plain loop only).
    ``reset_policy=False`` plays a policy on from what it already learned (a warm start from logs,
    or an earlier call), with its own random stream: it must hold ``n_runs`` runs.

    >>> from genbandit import BernoulliArms, UCB1, simulate
    >>> result = simulate(BernoulliArms(means=[0.3, 0.7]), UCB1(n_arms=2), horizon=1000, n_runs=4, seed=0)
    >>> result.regret.shape == (4, len(result.rounds)), bool(result.final_regret.mean() < 40)
    (True, True)
    """
    _check_setup(env, policy, horizon)
    env_seed, policy_seed = seed if isinstance(seed, tuple) else spawn_seeds(seed, 2)
    env.reset(n_runs, seed=env_seed)
    if reset_policy:
        policy.reset(n_runs, seed=policy_seed)
    elif policy.n_runs != n_runs:
        raise InvalidParameterError(f"{type(policy).__name__} holds {policy.n_runs} run(s); reset_policy=False plays on from them, so n_runs must be {policy.n_runs}.")
    if env.n_arms != policy.n_arms:
        raise InvalidParameterError(f"{type(policy).__name__} has {policy.n_arms} arms but {type(env).__name__} has {env.n_arms}.")
    rounds = checkpoint_grid(int(horizon), n_checkpoints)
    loop = _pick_loop(env, policy, backend, stop, time_policy)
    start = time.perf_counter()
    if loop is not None:
        regret_at, reward_at, counts, *info = loop(env, policy, rounds)
        wall = time.perf_counter() - start
        curves = info[0] if info else {}
        return SimulationResult(
            horizon=int(horizon), n_runs=n_runs, rounds=rounds, regret=regret_at, reward=reward_at, counts=counts, wall_time=wall,
            totals={key: curve[:, -1].copy() for key, curve in curves.items()}, curves=curves,
            stopping_time=np.full(n_runs, int(horizon), dtype=np.int64),
        )  # fmt: skip
    book = _Book(rounds, n_runs, env.n_arms, policy, time_policy)
    bar = tqdm(total=horizon, desc=description, disable=not progress, leave=False, unit="round", mininterval=0.5)
    tick = max(horizon // 200, 1)
    allocation = policy.action_kind == "allocation"
    for t in range(1, horizon + 1):
        active = None
        if stop is not None:
            done = np.asarray(stop(), dtype=bool)
            if done.all():
                break
            active = ~done
        contexts = env._observe()
        if time_policy:
            tic = time.perf_counter()
            actions = policy._select(contexts)
            spent = time.perf_counter() - tic
            step = env._advance(actions)
            book.check_reward(step.feedback, actions)
            tic = time.perf_counter()
            policy._learn(actions, step.feedback, contexts)
            book.policy_time += spent + (time.perf_counter() - tic)
        else:
            actions = policy._select(contexts)
            step = env._advance(actions)
            book.check_reward(step.feedback, actions)
            policy._learn(actions, step.feedback, contexts)
        book.add(t, actions, step, allocation, active)
        if t % tick == 0:
            bar.update(tick)
    wall = time.perf_counter() - start
    bar.close()
    return book.result(int(horizon), wall)


class _Book:
    """The regret book of the plain loop: running sums, pulls, info keys, checkpoint records."""

    def __init__(self, rounds: np.ndarray, n_runs: int, n_arms: int, policy: Policy, time_policy: bool) -> None:
        self.rounds = rounds
        self.n_runs = n_runs
        self.rows = np.arange(n_runs)
        self.regret = np.zeros(n_runs)
        self.reward = np.zeros(n_runs)
        self.counts = np.zeros((n_runs, n_arms), dtype=np.int64)
        self.stopping_time = np.zeros(n_runs, dtype=np.int64)  # counted per run under a stop condition
        self.played = 0  # rounds every run counted (without one)
        self.regret_at = np.empty((n_runs, rounds.size))
        self.reward_at = np.empty((n_runs, rounds.size))
        self.policy_time = 0.0
        self.policy_time_at = np.empty(rounds.size) if time_policy else None
        self.totals: dict[str, np.ndarray] = {}
        self.curves: dict[str, np.ndarray] = {}
        self.next = 0
        self.policy = policy

    def check_reward(self, feedback, actions: np.ndarray) -> None:
        """For a policy that declares a ``reward_range``: the very check ``Policy.update`` makes (same error).

        Rewards inside the range (the usual case) pass on a cheap test; anything else goes through
        the policy's own check, which raises or, for a policy that accepts and clips, lets it pass.
        """
        bounds = self.policy.reward_range
        if bounds is None:
            return
        if isinstance(feedback, np.ndarray) and feedback.size and bounds[0] <= feedback.min() and feedback.max() <= bounds[1]:
            return
        self.policy._check_feedback(feedback, actions)

    def add(self, t: int, actions: np.ndarray, step, allocation: bool, active: np.ndarray | None) -> None:
        if active is None:
            self.regret += step.regret
            self.reward += step.reward
            if allocation:
                self.counts += actions
            else:
                self.counts[self.rows, actions] += 1
            self.played = t
            info = step.info
        else:
            self.regret += np.where(active, step.regret, 0.0)
            self.reward += np.where(active, step.reward, 0.0)
            if allocation:
                self.counts += actions * active[:, None]
            else:
                self.counts[self.rows[active], actions[active]] += 1
            self.stopping_time += active
            info = {key: np.where(active, value, 0.0) for key, value in step.info.items()}
        for key, value in info.items():
            if key in self.totals:
                self.totals[key] += value
            else:
                self.totals[key] = np.array(value, dtype=float)
                self.curves[key] = np.zeros((self.n_runs, self.rounds.size))
        if t == self.rounds[self.next]:
            self._record(self.next, self.next + 1)

    def _record(self, first: int, last: int) -> None:
        self.regret_at[:, first:last] = self.regret[:, None]
        self.reward_at[:, first:last] = self.reward[:, None]
        if self.policy_time_at is not None:
            self.policy_time_at[first:last] = self.policy_time
        for key, total in self.totals.items():
            self.curves[key][:, first:last] = total[:, None]
        self.next = last

    def result(self, horizon: int, wall: float) -> SimulationResult:
        if self.next < self.rounds.size:  # stopped early: the sums hold from here to the horizon
            self._record(self.next, self.rounds.size)
        return SimulationResult(
            horizon=horizon, n_runs=self.n_runs, rounds=self.rounds, regret=self.regret_at, reward=self.reward_at, counts=self.counts,
            wall_time=wall, totals=self.totals, curves=self.curves, stopping_time=self.stopping_time + self.played, policy_seconds=self.policy_time_at,
        )  # fmt: skip
