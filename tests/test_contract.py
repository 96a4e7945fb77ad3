"""The contract suite: every registered policy and environment, through the public checks.

A class joins by registering; its ``_check_examples()`` supplies small instances.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genbandit import ENVIRONMENTS, POLICIES, UCB1, InvalidInputError, RandomPolicy
from genbandit.checks import assert_finite_state, check_environment, check_policy, play
from genbandit.core.serialization import STATE_VERSION, from_jsonable, to_jsonable
from genbandit.core.optional import MissingExtraError, extra_for



def _cases(registry, width: int) -> list:
    """One case per example of every registered class; a class whose examples need a missing extra is skipped."""
    cases = []
    for name, cls, _ in registry.items():
        try:
            examples = cls._check_examples()
        except MissingExtraError as exc:
            cases.append(pytest.param(*[None] * width, id=f"{name}-0", marks=pytest.mark.skip(reason=str(exc))))
            continue
        cases += [pytest.param(*(example if width > 1 else (example,)), id=f"{name}-{i}") for i, example in enumerate(examples)]
    return cases


POLICY_CASES = _cases(POLICIES, 2)
ENV_CASES = _cases(ENVIRONMENTS, 1)


def test_every_registered_class_has_examples():
    names_with_examples = {p.id.rsplit("-", 1)[0] for p in POLICY_CASES} | {p.id.rsplit("-", 1)[0] for p in ENV_CASES}
    registered = {name for name, _, _ in POLICIES.items()} | {name for name, _, _ in ENVIRONMENTS.items()}
    assert registered <= names_with_examples, f"no _check_examples for {sorted(registered - names_with_examples)}"


def test_every_registered_class_documents_its_source():
    for registry in (POLICIES, ENVIRONMENTS):
        for name, cls, summary in registry.items():
            assert summary, f"{name} ({cls.__name__}) has no one-line docstring"
            assert cls.name, f"{cls.__name__} has no display name"


@pytest.mark.parametrize("policy, env", POLICY_CASES)
def test_policy_contract(policy, env):
    check_policy(policy, env)


@pytest.mark.parametrize("env", ENV_CASES)
def test_environment_contract(env):
    try:
        check_environment(env)
    except ImportError as exc:  # an environment whose data comes from an extra that is not installed
        if not (exc.name and extra_for(exc.name)):
            raise
        pytest.skip(f"needs {exc.name} (the {extra_for(exc.name)} extra)")


ARM_CASES = [p for p in POLICY_CASES if p.values[0] is not None and p.values[0].action_kind == "arm"]


@pytest.mark.parametrize("policy, env", ARM_CASES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_valid_histories_keep_state_finite(policy, env, data):
    """Any valid history (arms the policy did not choose included) leaves a finite state and valid choices."""
    p = policy.clone().reset(1, seed=data.draw(st.integers(0, 2**16)))
    e = env.clone().reset(1, seed=data.draw(st.integers(0, 2**16)))
    low, high = p.reward_range if p.reward_range is not None else (-5.0, 5.0)
    for _ in range(data.draw(st.integers(1, 25))):
        ctx = e.observe()
        ctx = None if ctx is None else ctx[0]
        arm = data.draw(st.integers(0, p.n_arms - 1))
        reward = data.draw(st.floats(low, high, allow_nan=False))
        p.update(arm, reward, ctx)
        assert_finite_state(p)
        chosen = p.select(ctx)
        assert 0 <= chosen < p.n_arms
        probs = p.probabilities(ctx)
        if probs is not None:
            assert np.all(probs >= 0) and abs(probs.sum() - 1.0) < 1e-9


def _recode(state: dict, key: str, change) -> None:
    """Apply ``change`` to the decoded learned-state field ``key`` and store it back encoded."""
    state["state"][key] = to_jsonable(change(from_jsonable(state["state"][key])))


@pytest.mark.parametrize("policy, env", POLICY_CASES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_state_that_does_not_match_its_class_is_refused_naming_the_difference(policy, env, data):
    """Version, class, hyperparameters, fields, array dtypes and shapes: any difference is refused, never reinterpreted."""
    played = policy.clone().reset(2, seed=0)
    play(played, env.clone().reset(2, seed=1), 3)
    state = json.loads(json.dumps(played.state_dict()))
    fresh = vars(played.clone().reset(2, seed=0))  # fields a fresh policy already holds as arrays have a fixed dtype and shape
    arrays = {k: v for k, v in from_jsonable(state["state"]).items() if isinstance(v, np.ndarray) and v.dtype != object and v.size and isinstance(fresh.get(k), np.ndarray)}
    floats = sorted(k for k, v in arrays.items() if v.dtype == np.float64)
    kinds = ["no version", "version", "top field", "class", "param", "missing", "unknown"] + (["dtype"] if floats else []) + (["shape"] if arrays else [])
    kind = data.draw(st.sampled_from(kinds))
    name = "_" + data.draw(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8))
    if kind == "no version":
        del state["version"]
        expected = "saved by an older genbandit"
    elif kind == "version":
        state["version"] = data.draw(st.integers(-5, 50).filter(lambda v: v != STATE_VERSION))
        expected = f"format version {state['version']}"
    elif kind == "top field":
        state["extra"] = 1
        expected = "unknown 'extra'"
    elif kind == "class":
        other = RandomPolicy if not issubclass(RandomPolicy, type(policy)) else UCB1
        state["policy"] = f"{other.__module__}:{other.__qualname__}"
        expected = f"not a {type(policy).__name__}"
    elif kind == "param":
        state["params"]["x" + name] = 1
        expected = f"unknown 'x{name}'"
    elif kind == "missing":
        field = data.draw(st.sampled_from(sorted(state["state"])))
        del state["state"][field]
        expected = f"missing '{field}'"
    elif kind == "unknown":
        field = name if name not in state["state"] else name + "_new"
        state["state"][field] = 0
        expected = f"unknown '{field}'"
    elif kind == "dtype":
        field = data.draw(st.sampled_from(floats))
        _recode(state, field, lambda a: a.astype(np.float32))
        expected = f"'{field}' has dtype float32"
    else:
        field = data.draw(st.sampled_from(sorted(arrays)))
        _recode(state, field, lambda a: np.concatenate([a, a], axis=-1) if a.ndim else a.reshape(1))
        expected = f"'{field}' has dtype"
    with pytest.raises(InvalidInputError, match=re.escape(expected)):
        type(policy).from_state_dict(state)


def test_registry_lookup_is_forgiving_and_errors_are_clear():
    assert POLICIES.get("kl_ucb") is POLICIES.get("KL-UCB")
    with pytest.raises(ValueError, match="Unknown policy 'nope'. Known policies: .*UCB1"):
        POLICIES.get("nope")
    with pytest.raises(InvalidInputError):
        POLICIES.create("UCB1", n_arms=2).update(5, 1.0)
