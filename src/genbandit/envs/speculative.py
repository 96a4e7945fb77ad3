"""Speculative-decoding simulators E0-E5 for BanditSpec (Hou et al., ICML 2025) and the BanditSpec loop.

Each run is one prompt: it has a response to emit, and every round (one draft plus one target
verification with the chosen arm) emits ``Y in {1, ..., L+1}`` tokens, truncated at the end of the
response (footnote 3 of the paper). Feedback is the truncated ``Y``; ``Step.info`` carries
``tokens`` (counted only while the response is unfinished), ``seconds`` (simulated wall time of
the round) and ``optimal``. The per-round pseudo-regret is ``(mu* - mu_a) / mu*``, whose sum is the
reward-decomposition estimate of the stopping-time regret (paper eq. 36).

- E0 :class:`ToyLMSpeculative`: a toy Markov language model with exact speculative sampling
  (Algorithm 6), to check that BanditSpec is lossless (Prop. 3.1).
- E1 :class:`TGDArms`: stationary truncated-geometric arms (Thm 4.3, Prop 4.5).
- E2 :class:`Table1Replica`: a prompt mixture (free text / copy-heavy) calibrated to Table 1;
  :class:`Table1Serving` serves that mixture response after response (one server per run).
- E3 :class:`DriftingArms`: copy and free-text regimes alternating inside a response.
- E4 :class:`ObliviousReplay`: a reward table fixed before play, indexed by round (Assumption 5.1).
- E5 :class:`ServingThroughput`: batch serving, arms are speculation lengths, reward tokens/s.

:func:`run_banditspec` runs a policy on such an environment until every response is complete and
returns the stopping times (the BanditSpec loop, Algorithm 3). The truncated-geometric law lives in
:mod:`genbandit.envs.tgd`, the paper's Table 1 and its calibration in :mod:`genbandit.envs.table1`
(both importable from here too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ..core.base import Environment, Policy, Step
from ..core.metrics import reported_total
from ..core.registry import register_environment, register_metric
from ..core.rng import spawn_seeds
from ..core.simulator import checkpoint_grid, simulate
from ..core.validation import ArrayOf, Interval, InvalidParameterError, Options
from .table1 import ARM_LENGTHS, COPY_RUN, TABLE1, TABLE1_ARMS, calibrate_table1
from .tgd import draw_tgd, tgd_accept_for_mean, tgd_mean

__all__ = [
    "tgd_mean",
    "tgd_accept_for_mean",
    "TABLE1",
    "TABLE1_ARMS",
    "calibrate_table1",
    "TGDArms",
    "Table1Replica",
    "Table1Serving",
    "DriftingArms",
    "ObliviousReplay",
    "ToyLMSpeculative",
    "ServingThroughput",
    "BanditSpecResult",
    "checkpoint_rounds",
    "run_banditspec",
]


# ----------------------------------------------------------------------------- base classes
_REGRET_REFERENCES = ("best-arm", "per-run-min", "best-fixed")

class _SpeculativeEnv(Environment):
    """One prompt per run; subclasses draw ``Y`` and give the per-run arm means and costs.

    A run ends when its response is complete: :meth:`done` is the stop condition the engine plays
    to, within :attr:`max_rounds`. Every fixed arm's outcome on the draws of the current reset
    (:meth:`fixed_arm_outcomes`) gives the per-prompt oracle (:meth:`fastest_fixed_arms`) and the
    reference of the stopping-time regret (:meth:`reference_stopping_times`).
    """

    #: Names of the arms, in order (a fixed arm may be named by them).
    arm_names: tuple[str, ...] = ()
    #: Which fixed arm the stopping-time regret is measured against (see :meth:`reference_stopping_times`).
    regret_against: str | None = None
    #: MAT and tokens/s are ratios of totals over groups of this many prompts (a data set pass).
    group_size: int = 1

    def reset(self, n_runs: int = 1, **kwargs):
        super().reset(n_runs, **kwargs)
        self._fixed = None
        self._start = copy.deepcopy({k: v for k, v in vars(self).items() if k != "_start"})  # the state play starts from
        return self

    def _init_state(self, n_runs: int) -> None:
        self._emitted = np.zeros(n_runs, dtype=np.int64)
        self._finished = np.zeros(n_runs, dtype=bool)
        self._pulls = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._response = self._draw_lengths(n_runs)

    def _draw_lengths(self, n_runs: int) -> np.ndarray:
        return np.full(n_runs, int(self.response_length), dtype=np.int64)

    def done(self) -> np.ndarray:
        """``(n_runs,)`` whether each response is complete (the stop condition of the loop)."""
        return self._finished.copy()

    @property
    def max_rounds(self) -> int:
        """Rounds within which every response is complete (a round emits at least one token)."""
        return int(self._response.max())

    def policy_arguments(self) -> dict:
        """Constructor arguments a policy may take from this environment: the drafts' ``max_length`` L (where it
        has one), the ``arm_names`` and, per run, the ``fastest_fixed_arms`` (the per-prompt oracle's arms; a
        function, computed only for a policy that takes them)."""
        return {"max_length": getattr(self, "max_length", None), "arm_names": tuple(self.arm_names) or None,
                "fastest_fixed_arms": self.fastest_fixed_arms}

    def response_lengths(self) -> np.ndarray:
        """``(n_runs,)`` tokens each response has (known in advance by the simulator only)."""
        return self._response.copy()

    def round_seconds(self, actions: np.ndarray) -> np.ndarray:
        """Simulated wall time of one round with ``actions``, ``(n_runs,)``."""
        cost = np.asarray(getattr(self, "cost_ms", None) or [1.0] * self.n_arms, dtype=float)
        return cost[actions] / 1000.0

    def best_arms(self) -> np.ndarray | None:
        """``(n_runs,)`` the arm of smallest expected stopping time per prompt, when known."""
        means = self.mean_rewards()
        return None if means is None else means.argmax(axis=1)

    def fixed_arm_outcomes(self) -> dict[str, np.ndarray]:
        """What every fixed arm gives on the draws of the current reset: ``stopping_time``, ``tokens`` and
        ``seconds`` (simulated), each ``(n_runs, n_arms)``.

        The environment replays its own draws from the state play started from, once per arm (no
        policy plays: the arm is constant); environments whose draws do not depend on the order of
        play compute it directly from them.
        """
        if self._fixed is None:
            shape = (self.n_runs, self.n_arms)
            out = {"stopping_time": np.zeros(shape, dtype=np.int64), "tokens": np.zeros(shape), "seconds": np.zeros(shape)}
            for arm in range(self.n_arms):
                replay = copy.copy(self)
                replay.__dict__.update(copy.deepcopy(self._start))
                actions = np.full(self.n_runs, arm, dtype=np.int64)
                while not replay._finished.all():
                    active = ~replay._finished
                    info = replay._advance(actions).info
                    out["stopping_time"][:, arm] += active
                    out["tokens"][:, arm] += info["tokens"]
                    out["seconds"][:, arm] += info["seconds"]
            self._fixed = out
        return self._fixed

    def fastest_fixed_arms(self) -> np.ndarray:
        """``(n_runs,)`` per prompt, the fixed arm with the least simulated time (the fewest rounds on ties):
        the per-prompt oracle, the best fixed arm in hindsight (BanditSpec eq. 12)."""
        fixed = self.fixed_arm_outcomes()
        return np.argmin(fixed["seconds"] + 1e-9 * fixed["stopping_time"], axis=1)

    def reference_stopping_times(self) -> np.ndarray:
        """``(n_runs,)`` the stopping time the regret ``ST(policy) - ST(reference)`` is measured against, on the same draws.

        ``regret_against``: ``"best-arm"`` (the arm of largest mean per prompt, BanditSpec eq. 1; the
        default where the means are known), ``"per-run-min"`` (the best fixed arm in hindsight per
        prompt, eq. 12) or ``"best-fixed"`` (the fixed arm with the least mean stopping time over the
        prompts; the default under drift).
        """
        st = self.fixed_arm_outcomes()["stopping_time"]
        best = self.best_arms()
        against = self.regret_against or ("best-arm" if best is not None else "best-fixed")
        if against == "best-arm":
            if best is None:
                raise InvalidParameterError(f"{type(self).__name__} does not know each prompt's best arm; use regret_against='best-fixed'.")
            return st[np.arange(self.n_runs), best]
        if against == "per-run-min":
            return st.min(axis=1)
        return st[:, int(st.mean(axis=0).argmin())]

    def _draw_y(self, actions: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _step(self, actions: np.ndarray) -> Step:
        rows = np.arange(actions.shape[0])
        y = self._draw_y(actions)
        self._pulls[rows, actions] += 1
        active = ~self._finished
        remaining = self._response - self._emitted
        y = np.where(active, np.minimum(y, np.maximum(remaining, 1)), y)
        tokens = np.where(active, y, 0)
        self._emitted += tokens
        self._finished |= self._emitted >= self._response
        means = self.mean_rewards()
        if means is None:
            regret = np.zeros(actions.shape[0])
            optimal = np.zeros(actions.shape[0])
        else:
            best = means.max(axis=1)
            chosen = means[rows, actions]
            regret = np.where(active, (best - chosen) / best, 0.0)
            optimal = (chosen == best).astype(float)
        seconds = np.where(active, self.round_seconds(actions), 0.0)
        return Step(feedback=y.astype(float), reward=tokens.astype(float), regret=regret, info={"tokens": tokens.astype(float), "seconds": seconds, "optimal": optimal})


class _ArmLengths:
    """For environments whose ``lengths`` parameter gives each arm's longest speculation."""

    lengths: tuple

    @property
    def n_arms(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        """``L``: the longest speculation of any arm (``Y <= L + 1``)."""
        return int(max(self.lengths))


class _PullStacks:
    """Per-arm streams of draws indexed by the arm's pull count (common random numbers).

    The ``k``-th pull of arm ``i`` in run ``r`` always gets the same draw, whichever policy plays,
    so policies and fixed arms are compared on the same randomness.
    """

    def __init__(self, seed, n_arms: int, draw, chunk: int = 256) -> None:
        self._rngs = [np.random.default_rng(s) for s in spawn_seeds(seed, n_arms)]
        self._draw = draw  # draw(rng, arm, n_columns) -> (n_runs, n_columns) ints
        self._stacks = [np.zeros((0, 0), dtype=np.int16) for _ in range(n_arms)]
        self._chunk = chunk

    def ensure(self, arm: int, size: int) -> np.ndarray:
        stack = self._stacks[arm]
        while stack.shape[1] < size:
            extra = max(self._chunk, stack.shape[1])
            new = self._draw(self._rngs[arm], arm, extra).astype(np.int16)
            stack = new if stack.size == 0 else np.concatenate([stack, new], axis=1)
        self._stacks[arm] = stack
        return stack

    def take(self, actions: np.ndarray, index: np.ndarray) -> np.ndarray:
        out = np.empty(actions.shape[0], dtype=np.int64)
        for arm in np.unique(actions):
            rows = np.nonzero(actions == arm)[0]
            stack = self.ensure(int(arm), int(index[rows].max()) + 1)
            out[rows] = stack[rows, index[rows]]
        return out


def _outcomes_from_stopping_times(env: _SpeculativeEnv) -> dict[str, np.ndarray]:
    """:meth:`_SpeculativeEnv.fixed_arm_outcomes` from an environment's ``fixed_stopping_times()``: every fixed arm
    emits the whole response, a round of arm ``i`` takes its ``round_seconds``."""
    if env._fixed is None:
        st = env.fixed_stopping_times()
        seconds = np.stack([st[:, arm] * env.round_seconds(np.full(env.n_runs, arm)) for arm in range(env.n_arms)], axis=1)
        tokens = np.broadcast_to(env.response_lengths().astype(float)[:, None], st.shape)
        env._fixed = {"stopping_time": st, "tokens": tokens, "seconds": seconds}
    return env._fixed


class _StackedEnv(_SpeculativeEnv):
    """Draws from :class:`_PullStacks`; subclasses give ``_draw_arm(rng, arm, n_columns)``."""

    def _init_state(self, n_runs: int) -> None:
        super()._init_state(n_runs)
        self._init_laws(n_runs)
        self._stacks = _PullStacks(int(self._rng.integers(2**63)), self.n_arms, self._draw_arm)

    def _init_laws(self, n_runs: int) -> None:
        """Draw anything per prompt (types) before the streams start."""

    def _draw_arm(self, rng, arm, n_columns):
        raise NotImplementedError

    def _draw_y(self, actions):
        return self._stacks.take(actions, self._pulls[np.arange(actions.shape[0]), actions])

    def fixed_stopping_times(self) -> np.ndarray:
        """``(n_runs, n_arms)`` the rounds each fixed arm needs for each response, on the same draws."""
        out = np.empty((self.n_runs, self.n_arms), dtype=np.int64)
        need = int(self._response.max())
        for arm in range(self.n_arms):
            stack = self._stacks.ensure(arm, need)[:, :need].astype(np.int64)
            out[:, arm] = (np.cumsum(stack, axis=1) < self._response[:, None]).sum(axis=1) + 1
        return out

    def fixed_arm_outcomes(self) -> dict[str, np.ndarray]:
        return _outcomes_from_stopping_times(self)

    # state_dict of environments is not part of the contract; the stacks rebuild from the seed.


# ----------------------------------------------------------------------------- E1
@register_environment("tgd-arms")
class TGDArms(_StackedEnv):
    """E1 of the BanditSpec spec: stationary truncated-geometric arms, ``Y ~ TGD(p_i, L)`` (paper eq. 10).

    Each run is a response of ``response_length`` tokens; arm ``i`` accepts each draft token with
    probability ``accept[i]`` (or give ``means`` and the acceptances are solved from them).
    Instance A: ``means = [1.46, 1.29, 1.83, 3.94]`` (Table 1, LLaMA3, Spec Bench).

    >>> from genbandit.envs.speculative import TGDArms
    >>> env = TGDArms(means=[1.46, 1.29, 1.83, 3.94], max_length=6, response_length=256, seed=0).reset(n_runs=2)
    >>> [round(p, 4) for p in env.accept_probabilities()]
    [0.3153, 0.2248, 0.4558, 0.7989]
    >>> env.step(np.array([3, 0])).feedback.tolist()
    [7.0, 2.0]
    """

    name = "tgd-arms"
    arm_names = TABLE1_ARMS
    _parameter_constraints = {
        "accept": [None, ArrayOf(Interval(Real, 0, 1, "left"))],
        "means": [None, ArrayOf(Interval(Real, 1, None, "left"))],
        "max_length": [Interval(Integral, 1, None, "left")],
        "response_length": [Interval(Integral, 1, None, "left")],
        "cost_ms": [None, ArrayOf(Interval(Real, 0, None, "neither"))],
    }

    def __init__(self, accept=None, means=None, max_length: int = 6, response_length: int = 1024, cost_ms=None, seed=None) -> None:
        self.accept = accept
        self.means = means
        self.max_length = max_length
        self.response_length = response_length
        self.cost_ms = cost_ms
        self.seed = seed

    def _check_params(self) -> None:
        if (self.accept is None) == (self.means is None):
            raise InvalidParameterError("TGDArms needs exactly one of 'accept' and 'means'.")
        if self.means is not None and max(self.means) >= self.max_length + 1:
            raise InvalidParameterError(f"The 'means' of TGDArms must lie below L+1 = {self.max_length + 1}. Got {list(self.means)} instead.")
        if self.cost_ms is not None and len(self.cost_ms) != self.n_arms:
            raise InvalidParameterError(f"TGDArms needs one cost per arm ({self.n_arms}). Got {len(self.cost_ms)} instead.")

    # max_length is a parameter here, so the property of the base class is shadowed by it
    @property
    def n_arms(self) -> int:
        return len(self.accept if self.accept is not None else self.means)

    def accept_probabilities(self) -> list[float]:
        if self.accept is not None:
            return [float(p) for p in self.accept]
        return [tgd_accept_for_mean(float(m), self.max_length) for m in self.means]

    def mean_rewards(self) -> np.ndarray:
        return np.broadcast_to(self._means, (self.n_runs, self.n_arms))

    def _init_laws(self, n_runs):
        self._p = np.array(self.accept_probabilities())
        self._means = tgd_mean(self._p, self.max_length)

    def _draw_arm(self, rng, arm, n_columns):
        return draw_tgd(rng, np.full((self.n_runs, n_columns), self._p[arm]), self.max_length)

    @classmethod
    def _check_examples(cls):
        return [cls(accept=[0.3, 0.6, 0.8], max_length=4, response_length=64, seed=0)]


# ----------------------------------------------------------------------------- E2
@register_environment("table1-replica")
class Table1Replica(_StackedEnv):
    """E2 of the BanditSpec spec: a prompt mixture calibrated to one cell of the paper's Table 1.

    Arms PLD, REST, Suffix, Eagle-2. A prompt is copy-heavy with probability ``copy_share`` and
    free text otherwise; per type each arm's ``Y`` follows the law :func:`calibrate_table1` solves
    so that every fixed arm's round-weighted MAT over the data set is Table 1's; each arm's round
    costs ``1000 MAT / tokens_per_s`` ms of the table, so its tokens/s is Table 1's too. Response
    lengths are lognormal (median ``response_median``, log-sd ``response_sigma``), clipped.

    >>> from genbandit.envs.speculative import Table1Replica
    >>> env = Table1Replica("debug-bench", "qwen2", seed=0).reset(n_runs=4)
    >>> env.max_length, env.response_lengths().tolist()
    (10, [270, 231, 367, 266])
    """

    name = "table1-replica"
    arm_names = TABLE1_ARMS
    _parameter_constraints = {
        "benchmark": [Options(tuple(sorted(TABLE1["llama3"])))],
        "model": [Options(tuple(sorted(TABLE1)))],
        "response_median": [Interval(Real, 1, None, "left")],
        "response_sigma": [Interval(Real, 0, None, "left")],
        "max_response": [Interval(Integral, 1, None, "left")],
        "group_size": [Interval(Integral, 1, None, "left")],
    }

    def __init__(self, benchmark: str = "spec-bench", model: str = "llama3", response_median: float = 250.0, response_sigma: float = 0.6, max_response: int = 2048,
                 group_size: int = 1, seed=None) -> None:
        self.benchmark = benchmark
        self.model = model
        self.response_median = response_median
        self.response_sigma = response_sigma
        self.max_response = max_response
        self.group_size = group_size
        self.seed = seed

    n_arms = len(TABLE1_ARMS)

    @property
    def calibration(self) -> dict:
        """:func:`calibrate_table1` of this cell, solved once (root finding: it is read every round)."""
        key = (self.benchmark, self.model)
        if getattr(self, "_calibrated", (None,))[0] != key:
            self._calibrated = (key, calibrate_table1(*key))
        return self._calibrated[1]

    @property
    def cost_ms(self) -> list[float]:
        return self.calibration["cost_ms"]

    @property
    def max_length(self) -> int:
        """``L``: the longest speculation of any arm (``Y <= L + 1``)."""
        return max(ARM_LENGTHS)

    def _draw_lengths(self, n_runs):
        raw = self.response_median * np.exp(self.response_sigma * self._rng.standard_normal(n_runs))
        return np.clip(np.round(raw), 16, self.max_response).astype(np.int64)

    def _init_laws(self, n_runs):
        cal = self.calibration
        self._copy = self._rng.random(n_runs) < cal["copy_share"]
        self._type_means = np.empty((2, self.n_arms))  # row 0 free text, row 1 copy-heavy
        run_mean = sum(COPY_RUN) / 2.0
        for i, length in enumerate(ARM_LENGTHS):
            self._type_means[0, i] = tgd_mean(cal["free_accept"][i], length)
            q = cal["copy_run"][i]
            self._type_means[1, i] = q * run_mean + (1 - q) * tgd_mean(cal["copy_accept"][i], length)
        self._cal = cal

    def mean_rewards(self):
        return self._type_means[self._copy.astype(int)]

    def _draw_arm(self, rng, arm, n_columns):
        cal, n = self._cal, self.n_runs
        copy = self._copy[:, None]
        p = np.where(copy, cal["copy_accept"][arm], cal["free_accept"][arm])
        y = draw_tgd(rng, np.broadcast_to(p, (n, n_columns)), ARM_LENGTHS[arm])
        long_run = copy & (rng.random((n, n_columns)) < cal["copy_run"][arm])
        runs = rng.integers(COPY_RUN[0], COPY_RUN[1] + 1, size=(n, n_columns))
        return np.where(long_run, runs, y)

    @classmethod
    def _check_examples(cls):
        return [cls("code-editor", "llama3", response_median=64, seed=0)]


# ----------------------------------------------------------------------------- serving chains of E2 responses
@register_environment("table1-serving")
class Table1Serving(Environment):
    """E2's prompt mixture served response after response: each run is a server, a chain of ``n_responses`` responses.

    Every response is a prompt of :class:`Table1Replica`'s mixture for one cell of the paper's
    Table 1 (copy-heavy with probability ``copy_share``, free text otherwise; a lognormal length of
    median ``response_median``) with the replica's laws and per-round costs; when a response is
    complete the next one starts in the next round. The feedback of a round is
    ``{"tokens": Y, "seconds": cost, "response_end": 0 or 1}``: a policy that learns across responses
    (``WarmThroughputUCB``) sees where a response ends, a fixed arm ignores it. The prompts (types
    and lengths) are drawn from their own stream before play, so every policy serves the same prompts
    in the same order (common random numbers). :meth:`done` is the stop condition of the loop;
    ``Step.info`` carries ``tokens`` and ``seconds`` (simulated), summed per run by the engine.

    >>> from genbandit.envs.speculative import Table1Serving
    >>> env = Table1Serving("code-editor", "llama3", n_responses=3, seed=0).reset(n_runs=2)
    >>> step = env.step(np.array([3, 2]))
    >>> sorted(step.feedback), bool(env.done().any())
    (['response_end', 'seconds', 'tokens'], False)
    """

    name = "table1-serving"
    arm_names = TABLE1_ARMS
    n_arms = len(TABLE1_ARMS)
    _parameter_constraints = {
        "benchmark": [Options(tuple(sorted(TABLE1["llama3"])))],
        "model": [Options(tuple(sorted(TABLE1)))],
        "response_median": [Interval(Real, 1, None, "left")],
        "response_sigma": [Interval(Real, 0, None, "left")],
        "max_response": [Interval(Integral, 1, None, "left")],
        "n_responses": [Interval(Integral, 1, None, "left")],
    }

    def __init__(self, benchmark: str = "spec-bench", model: str = "llama3", response_median: float = 250.0, response_sigma: float = 0.6,
                 max_response: int = 2048, n_responses: int = 20, seed=None) -> None:
        self.benchmark = benchmark
        self.model = model
        self.response_median = response_median
        self.response_sigma = response_sigma
        self.max_response = max_response
        self.n_responses = n_responses
        self.seed = seed

    @property
    def max_length(self) -> int:
        return max(ARM_LENGTHS)

    def _init_state(self, n_runs: int) -> None:
        cal = calibrate_table1(self.benchmark, self.model)
        self._cal = cal
        self._cost = np.asarray(cal["cost_ms"]) / 1000.0
        prompts = np.random.default_rng(int(self._rng.integers(2**63)))
        self._copy = prompts.random((n_runs, self.n_responses)) < cal["copy_share"]
        raw = self.response_median * np.exp(self.response_sigma * prompts.standard_normal((n_runs, self.n_responses)))
        self._lengths = np.clip(np.round(raw), 16, self.max_response).astype(np.int64)
        self._served = np.zeros(n_runs, dtype=np.int64)  # responses completed
        self._left = self._lengths[:, 0].copy()  # tokens left in the current response
        run_mean = sum(COPY_RUN) / 2.0
        means = np.empty((2, self.n_arms))  # row 0 free text, row 1 copy-heavy
        for i, length in enumerate(ARM_LENGTHS):
            means[0, i] = tgd_mean(cal["free_accept"][i], length)
            q = cal["copy_run"][i]
            means[1, i] = q * run_mean + (1 - q) * tgd_mean(cal["copy_accept"][i], length)
        self._rates = means / self._cost  # tokens per second of each arm, per prompt type

    def done(self) -> np.ndarray:
        """``(n_runs,)`` whether each server has completed its ``n_responses`` responses (the stop condition of the loop)."""
        return self._served >= self.n_responses

    @property
    def max_rounds(self) -> int:
        """Rounds within which every server has answered (a round emits at least one token)."""
        return self.n_responses * self.max_response

    def _step(self, actions: np.ndarray) -> Step:
        rows = np.arange(actions.shape[0])
        current = np.minimum(self._served, self.n_responses - 1)
        copy = self._copy[rows, current]
        y = np.empty(actions.shape[0], dtype=np.int64)
        for arm in np.unique(actions):
            sel = np.nonzero(actions == arm)[0]
            p = np.where(copy[sel], self._cal["copy_accept"][arm], self._cal["free_accept"][arm])
            draw = draw_tgd(self._rng, p, ARM_LENGTHS[arm])
            long_run = copy[sel] & (self._rng.random(sel.size) < self._cal["copy_run"][arm])
            y[sel] = np.where(long_run, self._rng.integers(COPY_RUN[0], COPY_RUN[1] + 1, size=sel.size), draw)
        active = ~self.done()
        y = np.minimum(y, np.maximum(self._left, 1))  # truncated at the end of the response (the paper's footnote 3)
        tokens = np.where(active, y, 0)
        self._left -= tokens
        end = active & (self._left <= 0)
        self._served += end
        self._left = np.where(end, self._lengths[rows, np.minimum(self._served, self.n_responses - 1)], self._left)
        rates = self._rates[copy.astype(int)]
        best = rates.max(axis=1)
        regret = np.where(active, (best - rates[rows, actions]) / best, 0.0)
        seconds = self._cost[actions]
        feedback = {"tokens": y.astype(float), "seconds": seconds, "response_end": end.astype(float)}
        return Step(feedback=feedback, reward=tokens.astype(float), regret=regret, info={"tokens": tokens.astype(float), "seconds": np.where(active, seconds, 0.0)})

    @classmethod
    def _check_examples(cls):
        return [cls("code-editor", "llama3", response_median=32, n_responses=2, seed=0)]


# ----------------------------------------------------------------------------- E3
@register_environment("drifting-arms")
class DriftingArms(_ArmLengths, _SpeculativeEnv):
    """E3 of the BanditSpec spec: copy and free-text regimes alternate inside each response.

    Segments have geometric lengths (mean ``segment_mean`` tokens) and alternate, starting with a
    random regime; in each regime arm ``i`` is TGD with mean ``copy_means[i]`` / ``free_means[i]``
    (max speculation ``lengths[i]``). This breaks Assumption 4.1 (stationary means).

    >>> from genbandit.envs.speculative import DriftingArms
    >>> env = DriftingArms(seed=0).reset(n_runs=2)
    >>> env.mean_rewards().round(2).tolist()
    [[6.0, 1.3, 6.5, 3.9], [1.3, 1.3, 1.5, 4.4]]
    """

    name = "drifting-arms"
    arm_names = TABLE1_ARMS
    _parameter_constraints = {
        "copy_means": [ArrayOf(Interval(Real, 1, None, "left"))],
        "free_means": [ArrayOf(Interval(Real, 1, None, "left"))],
        "lengths": [ArrayOf(Interval(Integral, 1, None, "left"))],
        "segment_mean": [Interval(Real, 1, None, "left")],
        "response_length": [Interval(Integral, 1, None, "left")],
        "cost_ms": [None, ArrayOf(Interval(Real, 0, None, "neither"))],
        "regret_against": [None, Options(_REGRET_REFERENCES)],
    }

    def __init__(self, copy_means=(6.0, 1.3, 6.5, 3.9), free_means=(1.3, 1.3, 1.5, 4.4), lengths=(10, 10, 10, 6), segment_mean: float = 64.0, response_length: int = 512, cost_ms=(33.2, 31.7, 33.2, 40.1),
                 regret_against: str | None = None, seed=None) -> None:
        self.copy_means = copy_means
        self.free_means = free_means
        self.lengths = lengths
        self.segment_mean = segment_mean
        self.response_length = response_length
        self.cost_ms = cost_ms
        self.regret_against = regret_against
        self.seed = seed

    def _check_params(self) -> None:
        k = len(self.lengths)
        if len(self.copy_means) != k or len(self.free_means) != k or (self.cost_ms is not None and len(self.cost_ms) != k):
            raise InvalidParameterError("DriftingArms needs copy_means, free_means, lengths (and cost_ms) of one length.")
        for means in (self.copy_means, self.free_means):
            if any(m >= length + 1 for m, length in zip(means, self.lengths)):
                raise InvalidParameterError(f"DriftingArms means must lie below L_i + 1. Got {list(means)} for lengths {list(self.lengths)}.")

    def _init_state(self, n_runs):
        super()._init_state(n_runs)
        n_seg = int(4 * self.response_length / self.segment_mean) + 8
        seg = self._rng.geometric(1.0 / self.segment_mean, size=(n_runs, n_seg))
        self._boundaries = np.cumsum(seg, axis=1)  # regime k covers tokens [b_{k-1}, b_k)
        self._start_copy = self._rng.random(n_runs) < 0.5
        p = [[tgd_accept_for_mean(float(m), int(length)) for m, length in zip(means, self.lengths)] for means in (self.free_means, self.copy_means)]
        self._p = np.array(p)  # (2 regimes, K)
        self._means = np.array([self.free_means, self.copy_means], dtype=float)

    def _regime(self) -> np.ndarray:
        segment = (self._boundaries <= self._emitted[:, None]).sum(axis=1)
        return ((segment % 2 == 0) == self._start_copy).astype(int)  # 1 copy, 0 free

    def mean_rewards(self):
        return self._means[self._regime()]

    def best_arms(self):
        return None  # the best fixed arm is not known in advance under drift

    def _draw_y(self, actions):
        # one uniform per run and round, whatever the arms: a run's draws do not depend on what the other runs play
        p = np.minimum(self._p[self._regime(), actions], 1.0 - 1e-12)
        u = 1.0 - self._rng.random(actions.shape[0])  # in (0, 1]
        with np.errstate(divide="ignore"):
            accepted = np.floor(np.log(u) / np.log(p))  # P(accepted >= k) = p^k; p = 0 accepts nothing
        return 1 + np.minimum(accepted, np.asarray(self.lengths)[actions]).astype(np.int64)

    @classmethod
    def _check_examples(cls):
        return [cls(response_length=96, seed=0)]


# ----------------------------------------------------------------------------- E4
@register_environment("oblivious-replay")
class ObliviousReplay(_SpeculativeEnv):
    """E4 of the BanditSpec spec: ``y[i, t]`` fixed before play and replayed by round (Assumption 5.1).

    The table is drawn per run from TGD(accept_i, L) with the environment's seed, so every policy
    of a scenario meets the same tables; with a fixed table each fixed arm's stopping time is
    deterministic, and regret is ``E[ST(ALG)] - min_i ST(ALG_i)`` (paper eq. 12).

    >>> from genbandit.envs.speculative import ObliviousReplay
    >>> env = ObliviousReplay(accept=[0.3, 0.8], max_length=4, response_length=64, seed=0).reset(n_runs=2)
    >>> env.fixed_stopping_times().tolist()
    [[43, 18], [42, 16]]
    """

    name = "oblivious-replay"
    _parameter_constraints = {
        "accept": [ArrayOf(Interval(Real, 0, 1, "left"))],
        "max_length": [Interval(Integral, 1, None, "left")],
        "response_length": [Interval(Integral, 1, None, "left")],
        "regret_against": [None, Options(_REGRET_REFERENCES)],
    }

    def __init__(self, accept=(0.3153, 0.2248, 0.4558, 0.7989), max_length: int = 6, response_length: int = 1024, regret_against: str | None = None, seed=None) -> None:
        self.accept = accept
        self.max_length = max_length
        self.response_length = response_length
        self.regret_against = regret_against
        self.seed = seed

    @property
    def n_arms(self) -> int:
        return len(self.accept)

    def _init_state(self, n_runs):
        super()._init_state(n_runs)
        p = np.asarray(self.accept, dtype=float)[None, :, None]
        self._table = draw_tgd(self._rng, np.broadcast_to(p, (n_runs, self.n_arms, self.response_length)), self.max_length).astype(np.int16)
        self._means = tgd_mean(np.asarray(self.accept, dtype=float), self.max_length)

    def mean_rewards(self):
        return np.broadcast_to(self._means, (self.n_runs, self.n_arms))

    def _draw_y(self, actions):
        t = min(self._t, self.response_length - 1)
        return self._table[np.arange(actions.shape[0]), actions, t].astype(np.int64)

    def fixed_stopping_times(self) -> np.ndarray:
        """``(n_runs, n_arms)`` the deterministic stopping time of every fixed arm on its table."""
        cum = np.cumsum(self._table.astype(np.int64), axis=2)
        return (cum < self._response[:, None, None]).sum(axis=2) + 1

    def fixed_arm_outcomes(self) -> dict[str, np.ndarray]:
        return _outcomes_from_stopping_times(self)

    @classmethod
    def _check_examples(cls):
        return [cls(accept=[0.3, 0.8], max_length=4, response_length=64, seed=0)]


# ----------------------------------------------------------------------------- E0
@register_environment("toy-lm-speculative")
class ToyLMSpeculative(_SpeculativeEnv):
    """E0 of the BanditSpec spec: a toy Markov language model decoded by exact speculative sampling.

    Target ``P(. | last token)``: each row puts ``1 - 1/eos_every`` of its mass on ``support`` random
    tokens (Dirichlet weights) and ``1/eos_every`` on EOS, so ``E[len] ~ eos_every``. Arm ``k`` is the
    draft ``Q_k = softmax(log(P + 1e-3) + sigma_k eps_k)``; a round drafts ``L`` tokens and verifies
    them with Algorithm 6 (accept with ``min(1, P/Q)``, resample from ``Norm([P - Q]_+)``, bonus token
    when all are accepted). EOS is absorbing in both models; the output is cut after the first EOS.
    :meth:`outputs` gives each run's length and first three tokens for the losslessness check.

    >>> from genbandit.envs.speculative import ToyLMSpeculative
    >>> env = ToyLMSpeculative(seed=0).reset(n_runs=3)
    >>> env.step(np.array([0, 1, 2])).feedback.tolist()
    [5.0, 2.0, 3.0]
    """

    name = "toy-lm-speculative"
    _parameter_constraints = {
        "vocab_size": [Interval(Integral, 2, None, "left")],
        "support": [Interval(Integral, 1, None, "left")],
        "eos_every": [Interval(Real, 1, None, "neither")],
        "sigmas": [ArrayOf(Interval(Real, 0, None, "left"))],
        "max_length": [Interval(Integral, 1, None, "left")],
        "max_tokens": [Interval(Integral, 1, None, "left")],
        "model_seed": [Interval(Integral, 0, None, "left")],
    }

    def __init__(self, vocab_size: int = 20, support: int = 5, eos_every: float = 64.0, sigmas=(0.3, 1.0, 3.0), max_length: int = 4, max_tokens: int = 4096, model_seed: int = 0, seed=None) -> None:
        self.vocab_size = vocab_size
        self.support = support
        self.eos_every = eos_every
        self.sigmas = sigmas
        self.max_length = max_length
        self.max_tokens = max_tokens
        self.model_seed = model_seed
        self.seed = seed

    def _check_params(self) -> None:
        if self.support > self.vocab_size:
            raise InvalidParameterError(f"ToyLMSpeculative's support ({self.support}) exceeds the vocabulary ({self.vocab_size}).")

    @property
    def n_arms(self) -> int:
        return len(self.sigmas)

    @property
    def eos(self) -> int:
        return self.vocab_size

    def models(self) -> tuple[np.ndarray, np.ndarray]:
        """``(P, Q)``: target ``(V+1, V+1)`` and drafts ``(K, V+1, V+1)``, rows = previous token (EOS last)."""
        rng = np.random.default_rng(self.model_seed)
        v = self.vocab_size
        target = np.zeros((v + 1, v + 1))
        for row in range(v):
            cols = rng.choice(v, size=self.support, replace=False)
            target[row, cols] = rng.dirichlet(np.ones(self.support)) * (1 - 1 / self.eos_every)
            target[row, v] = 1 / self.eos_every
        target[v, v] = 1.0
        drafts = np.empty((self.n_arms, v + 1, v + 1))
        for k, sigma in enumerate(self.sigmas):
            logits = np.log(target + 1e-3) + sigma * rng.standard_normal((v + 1, v + 1))
            q = np.exp(logits - logits.max(axis=1, keepdims=True))
            drafts[k] = q / q.sum(axis=1, keepdims=True)
            drafts[k, v] = 0.0
            drafts[k, v, v] = 1.0
        return target, drafts

    def _init_state(self, n_runs):
        super()._init_state(n_runs)
        self._target, self._drafts = self.models()
        self._last = np.zeros(n_runs, dtype=np.int64)  # generation starts after token 0
        self._first3 = np.full((n_runs, 3), -1, dtype=np.int64)

    def _draw_lengths(self, n_runs):
        return np.full(n_runs, self.max_tokens, dtype=np.int64)

    def _sample_rows(self, probs: np.ndarray) -> np.ndarray:
        u = self._rng.random(probs.shape[0])[:, None]
        return np.minimum((np.cumsum(probs, axis=1) < u * probs.sum(axis=1, keepdims=True)).sum(axis=1), probs.shape[1] - 1)

    def _draw_y(self, actions):
        y_all = np.ones(actions.shape[0], dtype=np.int64)
        live = np.nonzero(~self._finished)[0]  # finished responses need no work
        if live.size == 0:
            return y_all
        actions = actions[live]
        n, big_l, eos = live.size, self.max_length, self.eos
        rows = np.arange(n)
        ctx = np.empty((n, big_l + 1), dtype=np.int64)  # ctx[:, i] = token before draft i+1
        ctx[:, 0] = self._last[live]
        drafts = np.empty((n, big_l), dtype=np.int64)
        for i in range(big_l):
            drafts[:, i] = self._sample_rows(self._drafts[actions, ctx[:, i]])
            ctx[:, i + 1] = drafts[:, i]
        p = self._target[ctx[:, :-1], drafts]
        q = self._drafts[actions[:, None], ctx[:, :-1], drafts]
        accept = self._rng.random((n, big_l)) <= np.minimum(1.0, p / q)
        n_acc = np.where(accept.all(axis=1), big_l, accept.argmin(axis=1))
        out = np.where(np.arange(big_l + 1)[None, :] < n_acc[:, None], np.concatenate([drafts, drafts[:, -1:]], axis=1), eos)
        prev = ctx[rows, n_acc]  # context of the correction / bonus token
        full = n_acc == big_l
        residual = np.maximum(self._target[prev] - np.where(full[:, None], 0.0, self._drafts[actions, prev]), 0.0)
        empty = residual.sum(axis=1) <= 0  # P == Q at that context: nothing to correct, sample P
        residual[empty] = self._target[prev[empty]]
        out[rows, n_acc] = self._sample_rows(residual)
        y = n_acc + 1
        is_eos = (out == eos) & (np.arange(big_l + 1)[None, :] < y[:, None])
        hit = is_eos.any(axis=1)
        y = np.where(hit, is_eos.argmax(axis=1) + 1, y)  # cut after the first EOS (footnote 3)
        emitted = self._emitted[live]
        for j in range(3):  # record the first three output tokens
            pos = j - emitted
            take = (pos >= 0) & (pos < y) & (self._first3[live, j] < 0)
            self._first3[live[take], j] = out[take, pos[take]]
        self._last[live] = out[rows, y - 1]
        self._response[live[hit]] = emitted[hit] + y[hit]
        y_all[live] = y
        return y_all

    def outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths (n_runs,), first three tokens (n_runs, 3))``, EOS included, -1 past the end."""
        return self._emitted.copy(), self._first3.copy()

    def exact_distributions(self, max_len: int = 2048) -> tuple[dict, np.ndarray]:
        """Canonical decoding's exact law: ``{first-3 tuple: prob}`` and the length pmf ``(max_len + 1,)``."""
        target = self._target if hasattr(self, "_target") else self.models()[0]
        eos = self.eos
        first3: dict[tuple, float] = {}
        for a in np.nonzero(target[0])[0]:
            pa = target[0, a]
            if a == eos:
                first3[(eos, -1, -1)] = first3.get((eos, -1, -1), 0) + pa
                continue
            for b in np.nonzero(target[a])[0]:
                pb = pa * target[a, b]
                if b == eos:
                    first3[(a, eos, -1)] = first3.get((a, eos, -1), 0) + pb
                    continue
                for c in np.nonzero(target[b])[0]:
                    first3[(a, b, c)] = first3.get((a, b, c), 0) + pb * target[b, c]
        pmf = np.zeros(max_len + 1)
        dist = np.zeros(eos + 1)
        dist[0] = 1.0
        for length in range(1, max_len + 1):
            dist = dist @ target
            pmf[length] = dist[eos]
            dist[eos] = 0.0
        return first3, pmf

    @classmethod
    def _check_examples(cls):
        return [cls(seed=0)]


# ----------------------------------------------------------------------------- E5
@register_environment("serving-throughput")
class ServingThroughput(_ArmLengths, _SpeculativeEnv):
    """E5 of the BanditSpec spec: batch serving (section 6.2), arms = speculation lengths ``gamma``.

    A run is one batch of ``batch_size`` rows; row ``j`` accepts Eagle-1 chain draft tokens with
    probability ``alpha_j ~ Beta(accept_a, accept_b)``, so with ``gamma`` it emits TGD(alpha_j, gamma)
    tokens (one with ``gamma = 0``, plain decoding). A round costs
    ``T = gamma (a_d + b_d B) + a_v + b_v B (gamma + 1)`` ms times lognormal(0, noise) noise. The reward
    is the round's throughput ``sum_j y_j / T`` in tokens/s; the batch ends when its first row
    reaches ``stop_tokens`` tokens (as in the released code).

    >>> from genbandit.envs.speculative import ServingThroughput
    >>> env = ServingThroughput(batch_size=2, seed=0).reset(n_runs=1)
    >>> round(env.max_throughput(), 1), env.round_ms(0)
    (350.9, 28.5)
    """

    name = "serving-throughput"
    _parameter_constraints = {
        "batch_size": [Interval(Integral, 1, None, "left")],
        "lengths": [ArrayOf(Interval(Integral, 0, None, "left"))],
        "accept_a": [Interval(Real, 0, None, "neither")],
        "accept_b": [Interval(Real, 0, None, "neither")],
        "verify_ms": [Interval(Real, 0, None, "neither")],
        "verify_ms_per_token": [Interval(Real, 0, None, "left")],
        "draft_ms": [Interval(Real, 0, None, "left")],
        "draft_ms_per_row": [Interval(Real, 0, None, "left")],
        "noise": [Interval(Real, 0, None, "left")],
        "stop_tokens": [Interval(Integral, 1, None, "left")],
        "oracle_lengths": [None, ArrayOf(Interval(Integral, 0, None, "left"))],
    }

    def __init__(self, batch_size: int = 1, lengths=(0, 1, 2, 3, 4), accept_a: float = 3.0, accept_b: float = 2.0, verify_ms: float = 28.0, verify_ms_per_token: float = 0.25, draft_ms: float = 7.0, draft_ms_per_row: float = 0.05, noise: float = 0.03, stop_tokens: int = 256,
                 oracle_lengths=None, seed=None) -> None:
        self.batch_size = batch_size
        self.lengths = lengths
        self.accept_a = accept_a
        self.accept_b = accept_b
        self.verify_ms = verify_ms
        self.verify_ms_per_token = verify_ms_per_token
        self.draft_ms = draft_ms
        self.draft_ms_per_row = draft_ms_per_row
        self.noise = noise
        self.stop_tokens = stop_tokens
        self.oracle_lengths = oracle_lengths
        self.seed = seed

    def round_ms(self, gamma) -> float:
        """Noise-free cost of one round with speculation length ``gamma``, in ms."""
        b = self.batch_size
        return gamma * (self.draft_ms + self.draft_ms_per_row * b) + self.verify_ms + self.verify_ms_per_token * b * (gamma + 1)

    def max_throughput(self) -> float:
        """An a-priori bound on a round's throughput: ``(max gamma + 1) B / min_gamma T(gamma)`` (tokens/s)."""
        return (max(self.lengths) + 1) * self.batch_size * 1000.0 / min(self.round_ms(g) for g in self.lengths)

    def plain_throughput(self) -> float:
        """Expected tokens/s of plain decoding (gamma = 0): the normalisation of Figure 3."""
        return self.batch_size * 1000.0 / self.round_ms(0) * float(np.exp(self.noise**2 / 2))

    def _check_params(self) -> None:
        if self.oracle_lengths is not None and not set(self.oracle_lengths) <= set(self.lengths):
            raise InvalidParameterError(f"The oracle_lengths of ServingThroughput must be among its lengths {list(self.lengths)}. Got {list(self.oracle_lengths)} instead.")

    @property
    def max_rounds(self) -> int:
        """A batch ends within ``stop_tokens`` rounds (every row emits at least one token a round)."""
        return int(self.stop_tokens)

    def policy_arguments(self) -> dict:
        """As for every speculative environment, plus ``max_reward``: the a-priori bound :meth:`max_throughput`."""
        return {**super().policy_arguments(), "max_reward": self.max_throughput()}

    def fastest_fixed_arms(self) -> np.ndarray:
        """``(n_runs,)`` per batch, the fixed ``gamma`` among ``oracle_lengths`` (all lengths by default) of the
        largest throughput on this batch's draws (Figure 3's oracle best)."""
        fixed = self.fixed_arm_outcomes()
        arms = np.arange(self.n_arms) if self.oracle_lengths is None else np.array([list(self.lengths).index(g) for g in self.oracle_lengths])
        throughput = fixed["tokens"][:, arms] / np.maximum(fixed["seconds"][:, arms], 1e-12)
        return arms[throughput.argmax(axis=1)]

    def _init_state(self, n_runs):
        super()._init_state(n_runs)
        self._alpha = self._rng.beta(self.accept_a, self.accept_b, size=(n_runs, self.batch_size))
        self._rows = np.zeros((n_runs, self.batch_size), dtype=np.int64)
        self._last_seconds = np.zeros(n_runs)

    def _draw_lengths(self, n_runs):
        return np.full(n_runs, np.iinfo(np.int64).max // 2, dtype=np.int64)  # ends on stop_tokens instead

    def mean_rewards(self):
        """Expected throughput of every gamma per batch (noise-free cost), ``(n_runs, K)`` tokens/s."""
        out = np.empty((self.n_runs, self.n_arms))
        for k, g in enumerate(self.lengths):
            out[:, k] = tgd_mean(self._alpha, g).sum(axis=1) * 1000.0 / self.round_ms(g)
        return out

    def round_seconds(self, actions):
        return self._last_seconds

    def _step(self, actions):
        rows = np.arange(actions.shape[0])
        gamma = np.asarray(self.lengths)[actions]
        y = draw_tgd(self._rng, self._alpha, gamma[:, None])
        ms = np.array([self.round_ms(g) for g in gamma]) * np.exp(self.noise * self._rng.standard_normal(actions.shape[0]))
        self._last_seconds = ms / 1000.0
        active = ~self._finished
        tokens = np.where(active, y.sum(axis=1), 0)
        self._rows += np.where(active[:, None], y, 0)
        self._emitted += tokens
        self._pulls[rows, actions] += 1
        self._finished |= self._rows.max(axis=1) >= self.stop_tokens
        throughput = y.sum(axis=1) / self._last_seconds
        means = self.mean_rewards()
        best, chosen = means.max(axis=1), means[rows, actions]
        return Step(
            feedback=throughput,
            reward=np.where(active, throughput, 0.0),
            regret=np.where(active, best - chosen, 0.0),
            info={"tokens": tokens.astype(float), "seconds": np.where(active, self._last_seconds, 0.0), "optimal": (chosen == best).astype(float)},
        )

    @classmethod
    def _check_examples(cls):
        return [cls(batch_size=4, lengths=[0, 1, 2], stop_tokens=64, seed=0)]


# ----------------------------------------------------------------------------- the loop
@dataclass
class BanditSpecResult:
    """Per-run outcome of :func:`run_banditspec`; arrays have a leading run axis.

    ``stopping_time`` rounds to finish the response, ``tokens`` emitted, ``seconds`` simulated
    wall time, ``counts`` ``(n_runs, n_arms)`` pulls before stopping, ``regret`` the decomposition
    estimate ``sum_t (mu* - mu_{I_t}) / mu*``; ``rounds``/``regret_curve`` its cumulative value at
    geometrically spaced rounds ``(n_runs, n_checkpoints)``.
    """

    stopping_time: np.ndarray
    tokens: np.ndarray
    seconds: np.ndarray
    counts: np.ndarray
    regret: np.ndarray
    rounds: np.ndarray
    regret_curve: np.ndarray

    @property
    def mat(self) -> np.ndarray:
        """Mean accepted tokens per round (bonus included), per run."""
        return self.tokens / np.maximum(self.stopping_time, 1)

    @property
    def tokens_per_second(self) -> np.ndarray:
        return self.tokens / np.maximum(self.seconds, 1e-12)


def checkpoint_rounds(n_rounds: int, max_rounds: int = 1_000_000) -> np.ndarray:
    """The rounds at which :func:`run_banditspec` reports its regret curve for a loop that ran ``n_rounds`` rounds.

    The engine's checkpoints for ``max_rounds`` (:func:`genbandit.core.simulator.checkpoint_grid`)
    before ``n_rounds``, then ``n_rounds`` itself.

    >>> checkpoint_rounds(100).tolist()
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 14, 16, 19, 22, 25, 28, 33, 38, 43, 50, 57, 66, 76, 87, 100]
    """
    grid = checkpoint_grid(int(max_rounds))
    return np.append(grid[grid < n_rounds], max(int(n_rounds), 1)).astype(np.int64)


def run_banditspec(env: _SpeculativeEnv, policy: Policy, *, n_runs: int, seed=None, max_rounds: int = 1_000_000) -> BanditSpecResult:
    """BanditSpec(ALG) (Algorithm 3) on ``n_runs`` prompts at once: play until every response is done.

    The loop is :func:`genbandit.simulate`'s, stopped per run when its response is complete. The
    policy is reset first, so its state starts empty for every prompt (each run is a prompt).
    ``seed`` as in :func:`genbandit.simulate` (an int, or a pair of environment and policy seeds).

    >>> from genbandit.envs.speculative import TGDArms, run_banditspec
    >>> from genbandit.policies.speculative import FixedArm
    >>> env = TGDArms(means=[1.5, 3.9], max_length=6, response_length=256, seed=0)
    >>> out = run_banditspec(env, FixedArm(n_arms=2, arm=1), n_runs=3, seed=0)
    >>> out.stopping_time.tolist() == env.fixed_stopping_times()[:, 1].tolist()
    True
    """
    result = simulate(env, policy, max_rounds, n_runs=n_runs, seed=seed, stop=env.done, backend="python")
    played = int(result.stopping_time.max())
    rounds = checkpoint_rounds(played, max_rounds)
    curve = np.concatenate([result.regret[:, : rounds.size - 1], result.regret[:, -1:]], axis=1)
    zeros = np.zeros(n_runs)
    return BanditSpecResult(
        result.stopping_time, result.totals.get("tokens", zeros), result.totals.get("seconds", zeros), result.counts, result.final_regret, rounds, curve
    )


# ----------------------------------------------------------------------------- metrics
def _grouped(values: np.ndarray, group: int) -> np.ndarray:
    """Sums over consecutive groups of ``group`` runs (an incomplete last group left out)."""
    n = values.shape[0] // group * group
    return values[:n].reshape(-1, group).sum(axis=1)


@register_metric("stopping_time", "rounds each run played before its response was complete (BanditSpec's stopping time)")
def _stopping_time(result, env, policy):
    return result.stopping_time.astype(float)


@register_metric("regret_decomposition", "the reward-decomposition estimate of the stopping-time regret, sum of (mu* - mu_a) / mu* (BanditSpec eq. 36)")
def _regret_decomposition(result, env, policy):
    return result.final_regret


@register_metric("mat", "mean accepted tokens per round: total tokens over total rounds of each group of group_size runs")
def _mat(result, env, policy):
    group = int(getattr(env, "group_size", 1))
    tokens = reported_total(result, "tokens", "mat")
    return _grouped(tokens, group) / np.maximum(_grouped(result.stopping_time.astype(float), group), 1)


@register_metric("tokens_per_second", "simulated tokens per second: total tokens over total simulated seconds of each group of group_size runs")
def _tokens_per_second(result, env, policy):
    group = int(getattr(env, "group_size", 1))
    tokens, seconds = reported_total(result, "tokens", "tokens_per_second"), reported_total(result, "seconds", "tokens_per_second")
    return _grouped(tokens, group) / np.maximum(_grouped(seconds, group), 1e-12)


@register_metric("improvement", "tokens per second over plain decoding's expected tokens per second (BanditSpec Figure 3)")
def _improvement(result, env, policy):
    if not hasattr(env, "plain_throughput"):
        raise InvalidParameterError("improvement needs a serving environment with plain_throughput() (serving-throughput).")
    tokens, seconds = reported_total(result, "tokens", "improvement"), reported_total(result, "seconds", "improvement")
    return tokens / np.maximum(seconds, 1e-12) / env.plain_throughput()
