"""BanditSpec's arm-selection rules (Hou et al., ICML 2025, arXiv 2505.15141), vectorised over runs.

In speculative decoding an arm is one configuration (a drafter, a speculation length); a round is
one draft plus one target verification, and the reward is the number of tokens the round emits,
``Y in {1, ..., L+1}`` (the accepted draft tokens plus the bonus/correction token). ``L`` is the
longest speculation any arm makes, so rewards span a width of ``L``.

- :class:`UCBSpec` (Algorithm 4/8) and :class:`EXP3Spec` (Algorithm 5/9): the paper's rules.
- :class:`ServingUCBSpec`, :class:`ServingEXP3Spec`: the same rules on a throughput reward
  (tokens/s), normalised by an a-priori bound ``max_reward`` (section 6.2: the analysis needs rewards in a known bounded range).
- :class:`SpecUCB1` ("UCB1-style"): ``mean + L sqrt(2 ln t / n)``, a textbook yardstick.
- :class:`ReleasedUCB` ("released-UCB"): the rule in the authors' released serving code; its
  bonus divides by the *total* pull count, so it is the same for every arm and the rule is greedy
  after a 7-round warm-up, which gives linear regret when an early sample misleads it.
- :class:`FixedArm`: always the same configuration (the ``ALG_i`` of the paper).

The BanditSpec loop itself (per prompt the state starts empty; the stopping time is the number
of rounds needed to emit the response) is :func:`genbandit.envs.speculative.run_banditspec`.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidInputError, check_finite_array
from .classic import FixedArm

__all__ = ["UCBSpec", "EXP3Spec", "ServingUCBSpec", "ServingEXP3Spec", "SpecUCB1", "ReleasedUCB", "FixedArm", "ucbspec_radius", "exp3spec_probabilities"]


def ucbspec_radius(n: np.ndarray, t: int, n_arms: int, width: float, delta: float) -> np.ndarray:
    """UCBSpec's confidence radius (paper eq. 6 / 19), in reward units.

    ``cr = (width/2) sqrt((1 + n)/n^2 (1 + 2 log(K t^2 sqrt(1 + n) / delta)))`` with ``n`` the
    arm's pulls and ``t`` the completed rounds; ``width = L`` for rewards in ``[1, L+1]``.

    >>> round(float(ucbspec_radius(np.array(5), 20, 4, 4.0, 0.5)), 2)  # eq. 6 by hand: 4.26
    4.26
    """
    n = np.asarray(n, dtype=float)
    log_term = np.log(n_arms * float(t) ** 2 * np.sqrt(1.0 + n) / delta)
    return (width / 2.0) * np.sqrt((1.0 + n) / n**2 * (1.0 + 2.0 * log_term))


def exp3spec_probabilities(cum_loss: np.ndarray, t: int) -> np.ndarray:
    """EXP3Spec's distribution at round ``t`` (1-based; paper eq. 21): softmax(-eta_t * cum_loss).

    ``eta_t = sqrt(log K / (t K))``; ``cum_loss`` ``(..., K)`` is the importance-weighted loss
    summed over the ``t - 1`` completed rounds.

    >>> exp3spec_probabilities(np.array([0.0, 2.0]), 2).round(4).tolist()
    [0.6969, 0.3031]
    """
    cum_loss = np.asarray(cum_loss, dtype=float)
    k = cum_loss.shape[-1]
    eta = math.sqrt(math.log(k) / (t * k)) if k > 1 else 0.0
    logits = -eta * cum_loss
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


def _sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One arm per row of ``probs`` ``(n_runs, K)`` by inverse CDF."""
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((np.cumsum(probs, axis=1) < u).sum(axis=1), probs.shape[1] - 1).astype(np.int64)


class _TokenReward(Policy):
    """Rewards are tokens emitted per round, in ``[1, max_length + 1]``."""

    max_length: int

    @property
    def reward_range(self) -> tuple[float, float]:  # type: ignore[override]
        return (1.0, float(self.max_length + 1))

    def _check_feedback(self, feedback, actions):
        rewards = check_finite_array("reward", feedback, (self._n_runs,), type(self).__name__)
        if np.any((rewards < 1) | (rewards > self.max_length + 1)):
            raise InvalidInputError(
                f"The reward of {type(self).__name__} is the tokens a round emits, in [1, {self.max_length + 1}]. Got {rewards.tolist()} instead."
            )
        return rewards

    def _normalise(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards mapped onto [0, 1]: ``(y - 1) / L``."""
        return (rewards - 1.0) / self.max_length

    @property
    def _width(self) -> float:
        return float(self.max_length)

    @classmethod
    def _check_examples(cls):
        TGDArms = ENVIRONMENTS.get("TGDArms")

        return [(cls(n_arms=3, max_length=4, seed=0), TGDArms(accept=[0.3, 0.6, 0.8], max_length=4, response_length=64, seed=1))]


class _ThroughputReward(Policy):
    """Rewards are throughputs (tokens/s) in ``[0, max_reward]``; larger ones are clipped to ``max_reward``."""

    max_reward: float

    @property
    def reward_range(self) -> tuple[float, float]:  # type: ignore[override]
        """The nominal range; throughputs above ``max_reward`` are accepted and clipped."""
        return (0.0, float(self.max_reward))

    def _check_feedback(self, feedback, actions):
        rewards = check_finite_array("reward", feedback, (self._n_runs,), type(self).__name__)
        if np.any(rewards < 0):
            raise InvalidInputError(f"The reward of {type(self).__name__} is a throughput, >= 0. Got {rewards.tolist()} instead.")
        return rewards

    def _normalise(self, rewards: np.ndarray) -> np.ndarray:
        return np.clip(rewards / self.max_reward, 0.0, 1.0)

    @property
    def _width(self) -> float:
        return float(self.max_reward)

    @classmethod
    def _check_examples(cls):
        ServingThroughput = ENVIRONMENTS.get("ServingThroughput")

        env = ServingThroughput(batch_size=4, lengths=[0, 1, 2], stop_tokens=64, seed=1)
        return [(cls(n_arms=3, max_reward=env.max_throughput(), seed=0), env)]


class _UCBSpecRule(Policy):
    """UCBSpec on normalised rewards ``x in [0, 1]``: one round-robin pass, then argmax of UCB."""

    delta: float

    def _init_state(self, n_runs: int) -> None:
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        # Sums of rewards in their own units, clipped to the reward range, normalised only as means: token
        # counts then sum exactly, so two arms with the same history tie exactly and the lowest index wins.
        self._sums = np.zeros((n_runs, self.n_arms))

    def confidence_radius(self) -> np.ndarray:
        """``cr_{i,t}`` of every arm after the completed rounds, in reward units, ``(n_runs, K)``."""
        self._ensure_state(single=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            radius = getattr(self, "radius_scale", 1.0) * ucbspec_radius(self._counts, max(self._t, 1), self.n_arms, self._width, self.delta)
        return np.where(self._counts > 0, radius, np.inf)

    def _select(self, contexts):
        if self._t < self.n_arms:  # rounds 1..K: arm t (Algorithm 8, line 4)
            return np.full(self._n_runs, self._t, dtype=np.int64)
        n = np.maximum(self._counts, 1)
        index = self._normalise(self._sums / n) + getattr(self, "radius_scale", 1.0) * ucbspec_radius(n, self._t, self.n_arms, 1.0, self.delta)
        return index.argmax(axis=1)  # ties: lowest index (the paper leaves them open)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        self._counts[rows, actions] += 1
        self._sums[rows, actions] += np.clip(feedback, *self.reward_range)


@register_policy("ucb-spec")
class UCBSpec(_TokenReward, _UCBSpecRule):
    """UCBSpec (BanditSpec, Hou et al. 2025, Algorithm 4 / Algorithm 8, eqs. 5-7).

    Each arm once (round robin), then the arm of largest ``mean_i + cr_i`` with
    ``cr_i = (L/2) sqrt((1+n_i)/n_i^2 (1 + 2 log(K t^2 sqrt(1+n_i)/delta)))``, ``t`` the completed
    rounds. ``delta = 1/2`` is the value of the proof of Theorem 4.3 (the paper's experiments do
    not give one). Rewards are the tokens each round emits, in ``[1, L+1]``. ``radius_scale``
    multiplies ``cr`` (1, the paper's rule, by default; it can be treated as tunable
    because the radius is large for responses of a few hundred tokens).

    >>> from genbandit.policies.speculative import UCBSpec
    >>> policy = UCBSpec(n_arms=2, max_length=4, seed=0)
    >>> for y in (3, 1):
    ...     _ = policy.update(policy.select(), y)
    >>> policy.confidence_radius().round(3).tolist()  # t = 2, n = (1, 1)
    [[7.61, 7.61]]
    >>> policy.select()
    0
    """

    name = "UCBSpec"
    _parameter_constraints = {
        "max_length": [Interval(Integral, 1, None, "left")],
        "delta": [Interval(Real, 0, 1, "neither")],
        "radius_scale": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, n_arms: int, max_length: int = 4, delta: float = 0.5, radius_scale: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.max_length = max_length
        self.delta = delta
        self.radius_scale = radius_scale
        self.seed = seed


@register_policy("ucbspec-serving")
class ServingUCBSpec(_ThroughputReward, _UCBSpecRule):
    """UCBSpec on a throughput reward (BanditSpec section 6.2), normalised by ``max_reward``.

    The reward is tokens/s, unbounded in principle; the paper's radius needs a bounded reward, so
    it is divided by an a-priori bound ``max_reward`` (clipped to 1 above it) and the radius uses
    width 1 (section 6.2). Otherwise Algorithm 8 unchanged.

    >>> from genbandit.policies.speculative import ServingUCBSpec
    >>> policy = ServingUCBSpec(n_arms=2, max_reward=200.0, seed=0)
    >>> _ = policy.update(policy.select(), 150.0); _ = policy.update(policy.select(), 90.0)
    >>> policy.select()
    0
    """

    name = "UCBSpec-serving"
    _parameter_constraints = {"max_reward": [Interval(Real, 0, None, "neither")], "delta": [Interval(Real, 0, 1, "neither")]}

    def __init__(self, n_arms: int, max_reward: float = 1.0, delta: float = 0.5, seed=None) -> None:
        self.n_arms = n_arms
        self.max_reward = max_reward
        self.delta = delta
        self.seed = seed


class _EXP3SpecRule(Policy):
    """EXP3Spec: sample from softmax(-eta_t * cumulative importance-weighted loss)."""

    def _init_state(self, n_runs: int) -> None:
        self._cum_loss = np.zeros((n_runs, self.n_arms))

    def _probabilities(self, contexts):
        return exp3spec_probabilities(self._cum_loss, self._t + 1)

    def _select(self, contexts):
        return _sample(self._probabilities(contexts), self._rng)

    def _update(self, actions, feedback, contexts):
        # The state has not changed since select, so these are the probabilities that drew `actions`.
        # The floor only binds for updates of arms the policy all but never draws (p < 1e-12, an
        # off-policy update): it keeps the importance weight, and so the state, finite.
        probs = self._probabilities(contexts)
        rows = np.arange(actions.shape[0])
        self._cum_loss[rows, actions] += (1.0 - self._normalise(feedback)) / np.maximum(probs[rows, actions], 1e-12)


@register_policy("exp3-spec")
class EXP3Spec(_TokenReward, _EXP3SpecRule):
    """EXP3Spec (BanditSpec, Hou et al. 2025, Algorithm 5 / Algorithm 9, eqs. 21-22).

    ``p_t = softmax(-eta_t * sum_{s<t} Z_s)`` with the anytime rate ``eta_t = sqrt(log K / (t K))``
    and the importance-weighted normalised loss ``Z_{i,t} = 1{i = I_t} (L + 1 - y) / (L p_{t,i})``.
    No explicit uniform mixing; round 1 is uniform.

    >>> from genbandit.policies.speculative import EXP3Spec
    >>> policy = EXP3Spec(n_arms=2, max_length=4, seed=0)
    >>> policy.probabilities().tolist()
    [0.5, 0.5]
    >>> _ = policy.update(0, 1)  # loss 1 / 0.5 = 2 on arm 0; eta_2 = sqrt(log 2 / 4)
    >>> policy.probabilities().round(4).tolist()
    [0.3031, 0.6969]
    """

    name = "EXP3Spec"
    _parameter_constraints = {"max_length": [Interval(Integral, 1, None, "left")]}

    def __init__(self, n_arms: int, max_length: int = 4, seed=None) -> None:
        self.n_arms = n_arms
        self.max_length = max_length
        self.seed = seed


@register_policy("exp3spec-serving")
class ServingEXP3Spec(_ThroughputReward, _EXP3SpecRule):
    """EXP3Spec on a throughput reward (BanditSpec section 6.2): loss ``1 - min(r / max_reward, 1)``.

    >>> from genbandit.policies.speculative import ServingEXP3Spec
    >>> policy = ServingEXP3Spec(n_arms=2, max_reward=100.0, seed=0)
    >>> _ = policy.update(1, 50.0)
    >>> policy.probabilities().round(4).tolist()
    [0.6026, 0.3974]
    """

    name = "EXP3Spec-serving"
    _parameter_constraints = {"max_reward": [Interval(Real, 0, None, "neither")]}

    def __init__(self, n_arms: int, max_reward: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.max_reward = max_reward
        self.seed = seed


@register_policy("ucb1-spec")
class SpecUCB1(_TokenReward):
    """UCB1-style rule for speculative decoding (Auer et al. 2002, scaled to rewards in [1, L+1]).

    Each arm once, then ``argmax mean_i + L sqrt(2 ln t / n_i)``, ``t`` the completed rounds
    (a UCB1-style index, Auer et al. 2002).

    >>> from genbandit.policies.speculative import SpecUCB1
    >>> policy = SpecUCB1(n_arms=2, max_length=4, seed=0)
    >>> for y in (5, 2):
    ...     _ = policy.update(policy.select(), y)
    >>> policy.select()  # 5 + 4 sqrt(2 ln 2) beats 2 + 4 sqrt(2 ln 2)
    0
    """

    name = "UCB1-style"
    _parameter_constraints = {"max_length": [Interval(Integral, 1, None, "left")]}

    def __init__(self, n_arms: int, max_length: int = 4, seed=None) -> None:
        self.n_arms = n_arms
        self.max_length = max_length
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._sums = np.zeros((n_runs, self.n_arms))

    def _select(self, contexts):
        if self._t < self.n_arms:
            return np.full(self._n_runs, self._t, dtype=np.int64)
        n = np.maximum(self._counts, 1)
        return (self._sums / n + self.max_length * np.sqrt(2.0 * math.log(self._t) / n)).argmax(axis=1)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        self._counts[rows, actions] += 1
        self._sums[rows, actions] += feedback


@register_policy("released-ucb", "repo-ucb")
class ReleasedUCB(Policy):
    """The UCB variant of BanditSpec's released code (``ucb_length_spec_generate``), labelled as such.

    Warm-up: round ``s`` (1-based) plays arm ``(s - 1) mod K`` for ``s <= warmup`` (7 in the code:
    arms 1,2,3,4,1,2,3). Then ``argmax mean_i + sqrt(c ln s / sum_j N_j)`` with ``c = 6``. The bonus
    divides by the *total* pull count, so it is the same for every arm: the rule is greedy on the
    empirical means and can lock onto a wrong arm, hence linear regret. The
    reward is whatever is fed back (raw tokens/s in the released serving code).

    >>> from genbandit.policies.speculative import ReleasedUCB
    >>> policy = ReleasedUCB(n_arms=2, warmup=2, seed=0)
    >>> for r in (1.0, 3.0):
    ...     _ = policy.update(policy.select(), r)
    >>> policy.select(), policy.select()  # greedy: the bonus is common to both arms
    (1, 1)
    """

    name = "released-UCB"
    _parameter_constraints = {"exploration_weight": [Interval(Real, 0, None, "left")], "warmup": [Interval(Integral, 0, None, "left")]}

    def __init__(self, n_arms: int, exploration_weight: float = 6.0, warmup: int = 7, seed=None) -> None:
        self.n_arms = n_arms
        self.exploration_weight = exploration_weight
        self.warmup = warmup
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        self._means = np.zeros((n_runs, self.n_arms))

    def _select(self, contexts):
        step = self._t + 1
        if step <= self.warmup:
            return np.full(self._n_runs, (step - 1) % self.n_arms, dtype=np.int64)
        total = np.maximum(self._counts.sum(axis=1, keepdims=True), 1)
        return (self._means + np.sqrt(self.exploration_weight * math.log(step) / total)).argmax(axis=1)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        n = self._counts[rows, actions]
        self._means[rows, actions] = (self._means[rows, actions] * n + feedback) / (n + 1)
        self._counts[rows, actions] = n + 1


