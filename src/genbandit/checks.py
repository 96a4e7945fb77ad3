"""Conformance checks any policy or environment can be run through, built-in or your own.

``check_policy(policy, env)`` and ``check_environment(env)`` raise ``AssertionError`` with a
message naming the broken promise. The test suite runs them over every registered class, so a
new policy is checked the moment it is registered; run them on your own classes the same way.

>>> from genbandit import UCB1, BernoulliArms
>>> check_policy(UCB1(n_arms=3, seed=0), BernoulliArms(means=[0.2, 0.5, 0.7], seed=1))
>>> check_environment(BernoulliArms(means=[0.2, 0.5], seed=0))
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .core.base import Environment, Policy, Step
from .core.validation import InvalidInputError

__all__ = ["check_policy", "check_environment", "play", "assert_finite_state"]


def play(policy: Policy, env: Environment, rounds: int) -> list[np.ndarray]:
    """Play ``rounds`` rounds through the public batch API; return the actions taken."""
    actions = []
    for _ in range(rounds):
        contexts = env.observe()
        action = policy.select_batch(contexts)
        step = env.step(action)
        policy.update_batch(action, step.feedback, contexts)
        actions.append(np.array(action))
    return actions


def _state_json(policy: Policy) -> str:
    return json.dumps(policy.state_dict(), sort_keys=True)


def assert_finite_state(policy: Policy) -> None:
    """Every float in the policy's learned state is finite (``inf`` markers for untried arms aside)."""
    for name, value in vars(policy).items():
        if not name.startswith("_") or name == "_rng":
            continue
        for arr in _arrays(value):
            if np.issubdtype(arr.dtype, np.floating):
                assert not np.isnan(arr).any(), f"{type(policy).__name__}.{name} holds NaN"


def _arrays(value: Any):
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            for item in value.ravel():
                yield from _arrays(item)
        else:
            yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _arrays(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _arrays(item)
    elif isinstance(value, float):
        yield np.array([value])


def _assert_valid_actions(policy: Policy, actions: np.ndarray, n_runs: int) -> None:
    name = type(policy).__name__
    if policy.action_kind == "arm":
        assert actions.shape == (n_runs,), f"{name}.select_batch returned shape {actions.shape}, expected ({n_runs},)"
        assert np.issubdtype(actions.dtype, np.integer), f"{name} returned non-integer arms"
        assert np.all((actions >= 0) & (actions < policy.n_arms)), f"{name} returned an arm outside 0..{policy.n_arms - 1}"
    else:
        assert actions.shape == (n_runs, policy.n_arms), f"{name} returned allocations of shape {actions.shape}"
        assert np.issubdtype(actions.dtype, np.integer) and np.all(actions >= 0), f"{name} returned an invalid allocation"


def check_policy(policy: Policy, env: Environment, rounds: int = 30, n_runs: int = 3) -> None:
    """The promises of the Policy contract, on ``policy`` (unfitted) playing ``env``."""
    name = type(policy).__name__
    assert not any(k.startswith("_") for k in vars(policy)), f"{name}.__init__ must store hyperparameters only, not state"
    assert policy.clone().get_params().keys() == policy.get_params().keys(), f"{name}.clone() changes the parameters"
    half = rounds // 2

    # Seeding: the same seeds give the same actions.
    first = play(policy.clone().reset(n_runs, seed=7), env.clone().reset(n_runs, seed=11), rounds)
    second = play(policy.clone().reset(n_runs, seed=7), env.clone().reset(n_runs, seed=11), rounds)
    for a, b in zip(first, second):
        _assert_valid_actions(policy, a, n_runs)
        assert np.array_equal(a, b), f"{name} is not repeatable from its seed"

    # State round trip mid-run through JSON: the copy continues exactly like the original.
    original = policy.clone().reset(n_runs, seed=3)
    env_a, env_b = env.clone().reset(n_runs, seed=5), env.clone().reset(n_runs, seed=5)
    play(original, env_a, half)
    play(original.clone().reset(n_runs, seed=3), env_b, half)  # advance env_b identically
    restored = type(policy).from_state_dict(json.loads(json.dumps(original.state_dict())))
    assert _state_json(restored) == _state_json(original), f"{name}.from_state_dict does not restore the state"
    cont_a, cont_b = play(original, env_a, half), play(restored, env_b, half)
    for a, b in zip(cont_a, cont_b):
        assert np.array_equal(a, b), f"{name} restored from state_dict continues differently"
    assert_finite_state(original)

    # Bad input is rejected and changes nothing.
    single = policy.clone().reset(1, seed=0)
    single_env = env.clone().reset(1, seed=0)
    play(single, single_env, 3)
    context = single_env.observe()
    ctx = None if context is None else context[0]
    action = single.select(ctx)
    before = _state_json(single)
    good_feedback = single_env.step(np.array([action]) if policy.action_kind == "arm" else np.array(action)[None]).feedback
    bad_inputs = []
    if policy.action_kind == "arm":
        bad_inputs += [(policy.n_arms, _first(good_feedback), ctx), (-1, _first(good_feedback), ctx), ("x", _first(good_feedback), ctx)]
        bad_inputs += [(action, float("nan"), ctx), (action, float("inf"), ctx), (action, [1.0, 2.0], ctx)]
    else:
        bad_inputs += [(np.append(action, 0), _first(good_feedback), ctx), (-np.ones_like(action), _first(good_feedback), ctx)]
        bad_inputs += [(action, _poison(_first(good_feedback)), ctx)]
    if policy.contextual:
        bad_inputs += [(action, _first(good_feedback), np.zeros(policy.context_dim + 1)), (action, _first(good_feedback), np.full(policy.context_dim, np.nan))]
    for bad_action, bad_feedback, bad_context in bad_inputs:
        try:
            single.update(bad_action, bad_feedback, bad_context)
        except InvalidInputError:
            pass
        else:
            raise AssertionError(f"{name}.update accepted bad input (action={bad_action!r}, feedback={bad_feedback!r})")
        assert _state_json(single) == before, f"{name}.update changed its state before rejecting bad input"
    single.update(action, _first(good_feedback), ctx)  # the good input still goes through

    probs = policy.clone().reset(1, seed=0).probabilities(ctx)
    if probs is not None:
        assert probs.shape == (policy.n_arms,) and np.all(probs >= 0), f"{name}.probabilities is not a distribution"
        assert abs(probs.sum() - 1) < 1e-9, f"{name}.probabilities sums to {probs.sum()}"


def _first(feedback: Any) -> Any:
    if isinstance(feedback, dict):
        return {k: np.asarray(v)[0] for k, v in feedback.items()}
    return np.asarray(feedback)[0]


def _poison(feedback: Any) -> Any:
    """The same feedback with a NaN where a number was."""
    if isinstance(feedback, dict):
        key = next(iter(feedback))
        return {**feedback, key: np.full(np.shape(feedback[key]), np.nan)}
    return np.full(np.shape(feedback), np.nan)


def check_environment(env: Environment, rounds: int = 20, n_runs: int = 3) -> None:
    """The promises of the Environment contract: shapes, finiteness, seeding, rejected bad actions."""
    name = type(env).__name__
    assert not any(k.startswith("_") for k in vars(env)), f"{name}.__init__ must store parameters only, not state"

    def trace(seed: int) -> list[tuple]:
        e = env.clone().reset(n_runs, seed=seed)
        rng = np.random.default_rng(0)
        out = []
        for _ in range(rounds):
            ctx = e.observe()
            if e.context_dim is not None:
                assert ctx is not None and ctx.shape == (n_runs, e.context_dim), f"{name}.observe returned {None if ctx is None else ctx.shape}"
                assert np.all(np.isfinite(ctx)), f"{name}.observe returned non-finite contexts"
            actions = _random_actions(e, rng, n_runs)
            step = e.step(actions)
            assert isinstance(step, Step), f"{name}.step must return a Step"
            for field_name in ("reward", "regret"):
                value = np.asarray(getattr(step, field_name))
                assert value.shape == (n_runs,), f"{name}.step {field_name} has shape {value.shape}, expected ({n_runs},)"
                assert np.all(np.isfinite(value)), f"{name}.step {field_name} is not finite"
            for key, value in step.info.items():
                assert np.shape(value) == (n_runs,), f"{name}.step info[{key!r}] has shape {np.shape(value)}"
            out.append((None if ctx is None else ctx.copy(), np.array(step.reward), np.array(step.regret)))
        return out

    for (c1, r1, g1), (c2, r2, g2) in zip(trace(1), trace(1)):
        assert np.array_equal(r1, r2) and np.array_equal(g1, g2), f"{name} is not repeatable from its seed"
        assert (c1 is None and c2 is None) or np.array_equal(c1, c2), f"{name} contexts are not repeatable"

    e = env.clone().reset(n_runs, seed=0)
    e.observe()
    bad = [np.full(n_runs, e.n_arms), np.zeros(n_runs + 1, dtype=np.int64)] if e.action_kind == "arm" else [-np.ones((n_runs, e.n_arms), dtype=np.int64)]
    for actions in bad:
        try:
            e.step(actions)
        except InvalidInputError:
            continue
        raise AssertionError(f"{name}.step accepted invalid actions {actions!r}")


def _random_actions(env: Environment, rng: np.random.Generator, n_runs: int) -> np.ndarray:
    if env.action_kind == "arm":
        return rng.integers(env.n_arms, size=n_runs)
    sample = getattr(env, "sample_actions", None)
    assert sample is not None, f"{type(env).__name__} takes allocations: it needs sample_actions(rng, n_runs) for checks"
    return np.asarray(sample(rng, n_runs))
