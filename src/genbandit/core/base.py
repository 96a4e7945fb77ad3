"""The contract every policy and environment keeps.

Shapes, everywhere: ``n_runs`` independent runs advance in lock step, so state arrays carry a
leading run axis.

=====================  =======================================================
actions (arm)          ``(n_runs,)`` int64, an arm index per run
actions (allocation)   ``(n_runs, n_arms)`` int64, units given to each arm
feedback (reward)      ``(n_runs,)`` float, the chosen action's reward
feedback (semi-bandit) set by the family (see ``policies/combinatorial.py``)
contexts               ``(n_runs, context_dim)`` float, or ``None``
=====================  =======================================================

A :class:`Policy` stores its hyperparameters in ``__init__`` and nothing else; ``reset(n_runs)``
allocates private state (attributes starting with ``_``) and builds the policy's own RNG from
``seed``. ``select``/``update`` work on one run; ``select_batch``/``update_batch`` on all runs.
Both validate what they are given and raise :class:`InvalidInputError` before touching state.
"""

from __future__ import annotations

import abc
import copy
import functools
import importlib
import inspect
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, ClassVar

import numpy as np

from .registry import ENVIRONMENTS
from .rng import check_random_state
from .serialization import STATE_VERSION, check_fields, check_state_layout, from_jsonable, to_jsonable
from .validation import (
    Interval,
    InvalidInputError,
    InvalidParameterError,
    check_finite_array,
    validate_params,
)

__all__ = ["Policy", "Environment", "Step"]

_KEEP_SEED = object()


class _Configurable:
    """Hyperparameters stored as given, validated once after ``__init__`` (like scikit-learn's)."""

    _parameter_constraints: ClassVar[dict[str, list]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            init = cls.__dict__["__init__"]

            @functools.wraps(init)
            def validated_init(self, *args: Any, __init=init, **kw: Any) -> None:
                __init(self, *args, **kw)
                if type(self).__init__ is cls.__init__:
                    self._validate_params()

            cls.__init__ = validated_init

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters, as given to ``__init__``."""
        return {name: getattr(self, name) for name in self._param_names()}

    def _all_constraints(self) -> dict[str, list]:
        merged: dict[str, list] = {}
        for klass in reversed(type(self).__mro__):
            merged.update(getattr(klass, "_parameter_constraints", {}) or {})
        return merged

    def _validate_params(self) -> None:
        validate_params(type(self).__name__, self.get_params(), self._all_constraints())
        self._check_params()

    def _check_params(self) -> None:
        """Cross-parameter checks a subclass needs beyond the declared constraints."""

    def clone(self, **overrides: Any):
        """A fresh, unfitted copy with the same hyperparameters (and ``overrides``)."""
        params = {k: copy.deepcopy(v) for k, v in self.get_params().items()}
        params.update(overrides)
        return type(self)(**params)

    def __repr__(self) -> str:
        shown = []
        for k, v in self.get_params().items():
            text = repr(v.tolist() if isinstance(v, np.ndarray) else v)
            shown.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
        return f"{type(self).__name__}({', '.join(shown)})"


class _Seeded(_Configurable):
    """Objects that own per-run state and an RNG: ``reset(n_runs, seed=...)`` starts them afresh."""

    seed: Any

    def reset(self, n_runs: int = 1, *, seed: Any = _KEEP_SEED):
        """Forget everything and allocate state for ``n_runs`` runs.

        ``seed`` overrides the constructor's seed for this reset (the simulator derives one per
        run batch); by default the object reseeds from its own ``seed``, so ``reset`` repeats.
        """
        if not isinstance(n_runs, Integral) or isinstance(n_runs, bool) or n_runs < 1:
            raise InvalidParameterError(f"n_runs must be a positive int. Got {n_runs!r} instead.")
        self._rng = check_random_state(self.seed if seed is _KEEP_SEED else seed)
        self._n_runs = int(n_runs)
        self._t = 0
        self._init_state(self._n_runs)
        return self

    @abc.abstractmethod
    def _init_state(self, n_runs: int) -> None:
        """Allocate per-run state (private attributes)."""

    @property
    def n_runs(self) -> int:
        """Number of runs the current state holds (0 before the first ``reset``)."""
        return getattr(self, "_n_runs", 0)

    @property
    def t(self) -> int:
        """Rounds seen since the last reset."""
        return getattr(self, "_t", 0)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(path: str) -> type:
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class Policy(_Seeded, abc.ABC):
    """A bandit policy: ``select`` an action, ``update`` on the feedback it brought.

    Subclasses write ``_init_state(n_runs)``, ``_select(contexts)`` and ``_update(actions,
    feedback, contexts)`` over batches of runs, and may override ``_check_feedback`` (for example
    for semi-bandit samples) or ``_probabilities`` (for randomised policies).
    """

    #: Name used in results, figures and reports (the paper's name for the algorithm).
    name: ClassVar[str] = ""
    #: Whether ``select`` needs a context vector.
    contextual: ClassVar[bool] = False
    #: ``"arm"`` (an index per run) or ``"allocation"`` (an integer vector per run).
    action_kind: ClassVar[str] = "arm"
    #: Closed interval rewards must lie in, or ``None`` for any finite reward.
    reward_range: ClassVar[tuple[float, float] | None] = None

    _parameter_constraints = {"n_arms": [Interval(Integral, 1, None, "left")], "seed": ["seed"]}

    n_arms: int
    seed: Any

    @property
    def context_dim(self) -> int | None:
        return getattr(self, "n_features", None) if self.contextual else None

    def _ensure_state(self, single: bool) -> None:
        if not hasattr(self, "_n_runs"):
            self.reset()
        if single and self._n_runs != 1:
            raise InvalidInputError(
                f"{type(self).__name__} holds {self._n_runs} runs; use select_batch/update_batch, or reset(n_runs=1)."
            )

    # ----------------------------------------------------------------- public API
    def select(self, context: Any = None) -> Any:
        """Choose an action for one run: an arm index (int) or an allocation (int array)."""
        self._ensure_state(single=True)
        contexts = self._check_contexts(None if context is None else np.asarray(context, dtype=float)[None], 1)
        actions = self._select(contexts)
        return int(actions[0]) if self.action_kind == "arm" else np.array(actions[0])

    def update(self, action: Any, feedback: Any, context: Any = None) -> "Policy":
        """Learn from one run's ``feedback`` to ``action`` (taken in ``context``)."""
        self._ensure_state(single=True)
        actions = self._check_actions(np.asarray(action)[None])
        contexts = self._check_contexts(None if context is None else np.asarray(context, dtype=float)[None], 1)
        fb = self._check_feedback(_batch_feedback(feedback), actions)
        self._learn(actions, fb, contexts)
        return self

    def select_batch(self, contexts: Any = None) -> np.ndarray:
        """Choose one action per run: ``(n_runs,)`` arms or ``(n_runs, n_arms)`` allocations."""
        self._ensure_state(single=False)
        return self._select(self._check_contexts(contexts, self._n_runs))

    def update_batch(self, actions: Any, feedback: Any, contexts: Any = None) -> "Policy":
        """Learn from every run's feedback at once (shapes as in the module docstring)."""
        self._ensure_state(single=False)
        acts = self._check_actions(np.asarray(actions))
        ctx = self._check_contexts(contexts, self._n_runs)
        fb = self._check_feedback(feedback, acts)
        self._learn(acts, fb, ctx)
        return self

    def probabilities(self, context: Any = None) -> np.ndarray | None:
        """The distribution the next ``select`` samples from, ``(n_arms,)``, for randomised policies.

        ``None`` for policies that do not choose through an explicit distribution.
        """
        self._ensure_state(single=True)
        probs = self._probabilities(self._check_contexts(None if context is None else np.asarray(context, dtype=float)[None], 1))
        return None if probs is None else probs[0]

    # ----------------------------------------------------------------- for subclasses
    @abc.abstractmethod
    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        """Actions for every run, trusting ``contexts``."""

    @abc.abstractmethod
    def _update(self, actions: np.ndarray, feedback: Any, contexts: np.ndarray | None) -> None:
        """Learn, trusting the inputs (already validated or produced by a checked environment)."""

    def _probabilities(self, contexts: np.ndarray | None) -> np.ndarray | None:
        return None

    def _learn(self, actions: np.ndarray, feedback: Any, contexts: np.ndarray | None) -> None:
        """Trusted update used by the simulator: ``_update`` plus the round counter."""
        self._update(actions, feedback, contexts)
        self._t += 1

    # ----------------------------------------------------------------- validation
    def _check_contexts(self, contexts: Any, n_runs: int) -> np.ndarray | None:
        if not self.contextual:
            return None if contexts is None else np.asarray(contexts)
        if contexts is None:
            raise InvalidInputError(f"{type(self).__name__} is contextual: select/update need a context.")
        return check_finite_array("context", contexts, (n_runs, self.context_dim), type(self).__name__)

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        owner = type(self).__name__
        if self.action_kind == "arm":
            if actions.shape != (self._n_runs,) or actions.dtype.kind not in "iu":
                if actions.shape == (self._n_runs,) and np.issubdtype(actions.dtype, np.floating) and np.all(actions == np.round(actions)):
                    actions = actions.astype(np.int64)
                else:
                    raise InvalidInputError(f"The action of {owner} must be an int arm index per run. Got {actions!r} instead.")
            arms = actions.tolist()  # a few Python ints: cheaper to bound than by array comparisons
            if min(arms) < 0 or max(arms) >= self.n_arms:
                raise InvalidInputError(f"Unknown arm for {owner}: arms are 0..{self.n_arms - 1}. Got {arms} instead.")
            return actions.astype(np.int64, copy=False)
        if actions.shape != (self._n_runs, self.n_arms) or not np.all(np.isfinite(actions)) or not np.all(actions == np.round(actions)):
            raise InvalidInputError(
                f"The action of {owner} must be an integer vector of length {self.n_arms} per run. Got {actions!r} instead."
            )
        if np.any(actions < 0):
            raise InvalidInputError(f"The allocation of {owner} must be non-negative. Got {actions.tolist()} instead.")
        return actions.astype(np.int64)

    def _check_feedback(self, feedback: Any, actions: np.ndarray) -> Any:
        rewards = check_finite_array("reward", feedback, (self._n_runs,), type(self).__name__)
        if self.reward_range is not None:
            lo, hi = self.reward_range
            if np.any((rewards < lo) | (rewards > hi)):
                raise InvalidInputError(
                    f"The reward of {type(self).__name__} must lie in [{lo}, {hi}]. Got {rewards.tolist()} instead."
                )
        return rewards

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this policy is: JSON-safe and exact.

        The dict carries the format ``version`` (:data:`STATE_VERSION`), the class (``policy``),
        its hyperparameters (``params``), the learned ``state`` and the ``rng`` state.
        """
        self._ensure_state(single=False)
        params = self.get_params()
        if not (params.get("seed") is None or isinstance(params.get("seed"), Integral)):
            params["seed"] = None  # a shared Generator cannot be stored; its state travels below
        learned = {k: v for k, v in vars(self).items() if k.startswith("_") and k != "_rng"}
        return {
            "version": STATE_VERSION,
            "policy": _class_path(type(self)),
            "params": to_jsonable(params),
            "state": to_jsonable(learned),
            "rng": {"bit_generator": type(self._rng.bit_generator).__name__, "state": self._rng.bit_generator.state},
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "Policy":
        """Rebuild a policy from :meth:`state_dict`'s output.

        Refuses, naming what differs, a state of another format version (or of none: an older
        genbandit), of another class, with missing or unknown fields, or with arrays whose dtype
        or shape is not what this class keeps: a state is never read with another meaning.
        """
        check_state_layout(state)
        try:
            klass = _resolve_class(state["policy"])
        except (TypeError, AttributeError, ImportError, ValueError) as exc:
            raise InvalidInputError(f"The state dict names a class genbandit cannot find ({state['policy']!r}): {exc}") from exc
        if not (isinstance(klass, type) and issubclass(klass, cls)):
            raise InvalidInputError(f"The state dict holds a {state['policy']}, not a {cls.__name__}.")
        try:
            params = from_jsonable(state["params"])
            learned = from_jsonable(state["state"])
            bitgen = getattr(np.random, state["rng"]["bit_generator"])()
            bitgen.state = state["rng"]["state"]
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise InvalidInputError(f"The state dict of {klass.__name__} is damaged: {exc}") from exc
        check_fields(f"the hyperparameters of {klass.__name__}", params, dict.fromkeys(klass._param_names()))
        policy = klass(**params)
        n_runs = learned.get("_n_runs")
        if not isinstance(n_runs, Integral) or n_runs < 1:
            problem = "missing '_n_runs'" if "_n_runs" not in learned else f"'_n_runs' must be a positive int, not {n_runs!r}"
            raise InvalidInputError(f"the learned state of {klass.__name__}: {problem}.")
        reference = policy.clone().reset(int(n_runs), seed=0)
        expected = {k: v for k, v in vars(reference).items() if k.startswith("_") and k != "_rng"}
        check_fields(f"the learned state of {klass.__name__}", learned, expected)
        vars(policy).update(learned)
        policy._rng = np.random.Generator(bitgen)
        return policy

    # ----------------------------------------------------------------- checks
    @classmethod
    def _check_examples(cls) -> list[tuple["Policy", "Environment"]]:
        """Small (policy, environment) pairs the contract suite runs this class on."""
        return [(cls(n_arms=3, seed=0), ENVIRONMENTS.create("bernoulli-arms", means=[0.2, 0.5, 0.7], seed=1))]


def _batch_feedback(feedback: Any) -> Any:
    if isinstance(feedback, dict):
        return {k: np.asarray(v)[None] for k, v in feedback.items()}
    value = np.asarray(feedback)  # once: np.ndim would convert it too
    return (value.astype(float) if value.ndim == 0 else value)[None]


@dataclass
class Step:
    """What an environment returns for one round of every run.

    ``feedback`` is what the policy observes; ``reward`` ``(n_runs,)`` the realised scalar reward;
    ``regret`` ``(n_runs,)`` the instantaneous pseudo-regret against the environment's comparator
    (the best arm's mean, or the best fixed arm in hindsight); ``info`` per-run quantities the
    simulator sums over rounds (for example ``optimal``: 1.0 when the best action was chosen).
    """

    feedback: Any
    reward: np.ndarray
    regret: np.ndarray
    info: dict[str, np.ndarray] = field(default_factory=dict)


class Environment(_Seeded, abc.ABC):
    """Produces contexts and feedback for ``n_runs`` runs, and knows the truth regret needs."""

    name: ClassVar[str] = ""
    action_kind: ClassVar[str] = "arm"
    _parameter_constraints = {"seed": ["seed"]}

    #: Number of arms (set by the subclass's ``__init__`` from its parameters).
    n_arms: int
    #: Context dimension, or ``None`` for non-contextual environments.
    context_dim: int | None = None
    #: The longest horizon this environment supports (a replay's length), or ``None``.
    max_horizon: int | None = None

    def observe(self) -> np.ndarray | None:
        """Contexts for the coming round, ``(n_runs, context_dim)``, or ``None``."""
        if not hasattr(self, "_n_runs"):
            self.reset()
        return self._observe()

    def step(self, actions: Any) -> Step:
        """Play ``actions`` (validated) in every run and advance one round."""
        if not hasattr(self, "_n_runs"):
            self.reset()
        if self.max_horizon is not None and self._t >= self.max_horizon:
            raise InvalidInputError(f"{type(self).__name__} ends after {self.max_horizon} rounds.")
        return self._advance(self._check_actions(np.asarray(actions)))

    def _advance(self, actions: np.ndarray) -> Step:
        step = self._step(actions)
        self._t += 1
        return step

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        owner = type(self).__name__
        if self.action_kind == "arm":
            if actions.shape != (self._n_runs,) or actions.dtype.kind not in "iu":
                raise InvalidInputError(f"{owner}.step needs one int arm index per run. Got {actions!r} instead.")
            if ((actions < 0) | (actions >= self.n_arms)).any():
                raise InvalidInputError(f"Unknown arm for {owner}: arms are 0..{self.n_arms - 1}. Got {actions.tolist()} instead.")
            return actions
        if actions.shape != (self._n_runs, self.n_arms) or not np.issubdtype(actions.dtype, np.integer) or np.any(actions < 0):
            raise InvalidInputError(f"{owner}.step needs a non-negative int vector of length {self.n_arms} per run. Got {actions!r} instead.")
        return actions

    # ----------------------------------------------------------------- for subclasses
    def _observe(self) -> np.ndarray | None:
        return None

    @abc.abstractmethod
    def _step(self, actions: np.ndarray) -> Step:
        """Feedback, reward and regret for trusted ``actions`` at round ``self._t``."""

    def mean_rewards(self) -> np.ndarray | None:
        """Expected reward of every arm at the coming round, ``(n_runs, n_arms)``, where defined."""
        return None

    @classmethod
    def _check_examples(cls) -> list["Environment"]:
        """Small instances the contract suite runs this class on."""
        return []
