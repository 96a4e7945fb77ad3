"""The core contract: validation, seeding, state persistence and the simulator's bookkeeping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import genbandit
from genbandit import (
    EXP3,
    UCB1,
    AdversarialTable,
    BernoulliArms,
    GaussianArms,
    InvalidInputError,
    InvalidParameterError,
    PiecewiseStationary,
    Policy,
    ThompsonSampling,
    simulate,
)
from genbandit.core.rng import check_random_state
from genbandit.core.serialization import from_jsonable, to_jsonable
from genbandit.core.simulator import checkpoint_grid


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: UCB1(n_arms=0), "The 'n_arms' parameter of UCB1 must be an int in the range \\[1, inf\\). Got 0 instead."),
        (lambda: UCB1(n_arms=2, alpha=-1.0), "'alpha' parameter of UCB1"),
        (lambda: UCB1(n_arms=2, seed="x"), "'seed' parameter of UCB1 must be None, an int or a numpy Generator"),
        (lambda: BernoulliArms(means=[0.5, 1.5]), "'means' parameter of BernoulliArms"),
        (lambda: GaussianArms(means=[0.0, 1.0], sigma=[1.0]), "one per arm"),
        (lambda: PiecewiseStationary(means=[[0.1, 0.2]], change_points=[5]), "one fewer than segments"),
        (lambda: AdversarialTable(rewards=[[0.0, np.nan]]), "finite 2-d table"),
    ],
)
def test_bad_parameters_raise_one_clear_error(make, message):
    with pytest.raises(InvalidParameterError, match=message):
        make()


def test_parameter_error_is_value_and_type_error():
    assert issubclass(InvalidParameterError, ValueError) and issubclass(InvalidParameterError, TypeError)


@pytest.mark.parametrize(
    "action, reward, message",
    [
        (3, 1.0, "Unknown arm for UCB1: arms are 0..2. Got \\[3\\] instead."),
        (-1, 1.0, "Unknown arm"),
        (1.5, 1.0, "must be an int arm index"),
        (0, float("nan"), "must be finite"),
        (0, float("inf"), "must be finite"),
        (0, [1.0, 2.0], "must have shape"),
    ],
)
def test_bad_input_raises_and_leaves_state_unchanged(action, reward, message):
    policy = UCB1(n_arms=3, seed=0)
    policy.update(0, 1.0)
    before = json.dumps(policy.state_dict(), sort_keys=True)
    with pytest.raises(InvalidInputError, match=message):
        policy.update(action, reward)
    assert json.dumps(policy.state_dict(), sort_keys=True) == before


def test_reward_range_is_enforced_where_the_algorithm_needs_it():
    with pytest.raises(InvalidInputError, match="must lie in \\[0.0, 1.0\\]"):
        ThompsonSampling(n_arms=2).update(0, 1.5)
    UCB1(n_arms=2).update(0, 1.5)  # UCB1 takes any finite reward


def test_batch_api_checks_shapes():
    policy = UCB1(n_arms=3, seed=0).reset(n_runs=4)
    with pytest.raises(InvalidInputError, match="holds 4 runs"):
        policy.select()
    actions = policy.select_batch()
    assert actions.shape == (4,)
    with pytest.raises(InvalidInputError, match="must have shape \\(4,\\)"):
        policy.update_batch(actions, np.ones(3))
    policy.update_batch(actions, np.ones(4))
    assert policy.t == 1


def test_same_seed_same_numbers_bit_for_bit():
    env = BernoulliArms(means=[0.3, 0.5, 0.6])
    a = simulate(env, ThompsonSampling(n_arms=3), horizon=500, n_runs=8, seed=42)
    b = simulate(env, ThompsonSampling(n_arms=3), horizon=500, n_runs=8, seed=42)
    c = simulate(env, ThompsonSampling(n_arms=3), horizon=500, n_runs=8, seed=43)
    assert np.array_equal(a.regret, b.regret) and np.array_equal(a.counts, b.counts)
    assert not np.array_equal(a.regret, c.regret)


def test_clone_from_same_parameters_repeats_itself():
    p = EXP3(n_arms=4, seed=5)
    q = p.clone()
    assert [p.select() for _ in range(20)] == [q.select() for _ in range(20)]
    assert repr(p) == "EXP3(n_arms=4, eta=None, seed=5)"


def test_two_unseeded_policies_differ():
    a = [ThompsonSampling(n_arms=5).select() for _ in range(30)]
    b = [ThompsonSampling(n_arms=5).select() for _ in range(30)]
    assert a != b or len(set(a)) == 1


def test_state_dict_round_trip_mid_run_continues_identically():
    rng = np.random.default_rng(0)
    policy = ThompsonSampling(n_arms=3, seed=9)
    for _ in range(50):
        arm = policy.select()
        policy.update(arm, float(rng.random() < 0.5))
    copy = Policy.from_state_dict(json.loads(json.dumps(policy.state_dict())))
    assert type(copy) is ThompsonSampling
    rewards = rng.random(50) < 0.5
    for r in rewards:
        a, b = policy.select(), copy.select()
        assert a == b
        policy.update(a, float(r))
        copy.update(b, float(r))


def test_from_state_dict_rejects_garbage_and_the_wrong_class():
    with pytest.raises(InvalidInputError, match="Not a genbandit policy state dict"):
        Policy.from_state_dict(["policy", "nowhere:Nothing"])
    with pytest.raises(InvalidInputError, match="cannot find"):
        Policy.from_state_dict({**UCB1(n_arms=2).state_dict(), "policy": "nowhere:Nothing"})
    with pytest.raises(InvalidInputError, match="not a EXP3"):
        EXP3.from_state_dict(UCB1(n_arms=2).state_dict())


def test_a_state_without_a_format_version_is_refused_as_older():
    state = UCB1(n_arms=2).state_dict()
    del state["version"]
    with pytest.raises(InvalidInputError, match="saved by an older genbandit"):
        Policy.from_state_dict(state)
    with pytest.raises(InvalidInputError, match="format version 2; this genbandit reads version 1"):
        Policy.from_state_dict({**UCB1(n_arms=2).state_dict(), "version": 2})


def test_a_state_whose_array_changed_dtype_or_shape_is_refused():
    policy = UCB1(n_arms=3, seed=0)
    policy.update(policy.select(), 1.0)
    name = next(k for k, v in vars(policy).items() if isinstance(v, np.ndarray) and v.dtype == np.float64)
    state = policy.state_dict()
    vars(policy)[name] = vars(policy)[name].astype(np.float32)
    state32 = policy.state_dict()
    with pytest.raises(InvalidInputError, match=f"'{name}' has dtype float32, shape \\(1, 3\\); expected float64, shape \\(1, 3\\)"):
        Policy.from_state_dict(state32)
    vars(policy)[name] = np.zeros((1, 4))
    with pytest.raises(InvalidInputError, match=f"'{name}' has dtype float64, shape \\(1, 4\\)"):
        Policy.from_state_dict(policy.state_dict())
    assert Policy.from_state_dict(state).state_dict() == state


def test_import_genbandit_loads_no_heavy_library():
    code = (
        "import sys, genbandit, genbandit.core, genbandit.experiments, genbandit.specdec; "
        "print(sorted(m for m in ('matplotlib', 'pandas', 'pyarrow', 'torch', 'transformers', 'sklearn', 'ray', 'numba', 'scipy') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(genbandit.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]", out.stdout


def test_serialization_is_exact():
    value = {"a": np.array([0.1, np.pi, -0.0]), "b": (1, "x"), "c": [np.int64(3)], "d": np.arange(6).reshape(2, 3)}
    back = from_jsonable(json.loads(json.dumps(to_jsonable(value))))
    assert back["a"].tobytes() == value["a"].tobytes() and back["b"] == (1, "x") and back["c"] == [3]
    assert np.array_equal(back["d"], value["d"]) and back["d"].dtype == value["d"].dtype


def test_rng_helpers():
    assert check_random_state(3).random() == np.random.default_rng(3).random()
    g = np.random.default_rng(1)
    assert check_random_state(g) is g
    with pytest.raises(InvalidParameterError):
        check_random_state(-1)


def test_simulator_accumulates_regret_exactly():
    # Deterministic table: regret at each round is known in advance.
    table = np.array([[1.0, 0.0]] * 5 + [[0.0, 1.0]] * 5)
    result = simulate(AdversarialTable(rewards=table), UCB1(n_arms=2, seed=0), horizon=10, n_runs=3, seed=0, n_checkpoints=20)
    assert result.rounds.tolist() == list(range(1, 11))
    # Both arms total 5: the comparator is arm 0; regret = sum over t of r[t,0] - r[t,a_t].
    counts = result.counts
    assert counts.sum(axis=1).tolist() == [10, 10, 10]
    np.testing.assert_allclose(result.regret[:, -1], 5.0 - result.reward[:, -1])


def test_simulator_rejects_mismatches():
    with pytest.raises(InvalidParameterError, match="has 3 arms but BernoulliArms has 2"):
        simulate(BernoulliArms(means=[0.1, 0.2]), UCB1(n_arms=3), horizon=10)
    with pytest.raises(InvalidParameterError, match="exceeds what AdversarialTable can play"):
        simulate(AdversarialTable(rewards=[[0.0, 1.0]]), UCB1(n_arms=2), horizon=2)


def test_piecewise_regret_uses_the_current_best_arm():
    env = PiecewiseStationary(means=[[0.9, 0.1], [0.1, 0.9]], change_points=[100])
    result = simulate(env, UCB1(n_arms=2), horizon=400, n_runs=5, seed=0)
    assert result.totals["optimal"].mean() < 400 and result.final_regret.mean() > 10


def test_checkpoint_grid_covers_the_horizon():
    grid = checkpoint_grid(100_000)
    assert grid[0] == 1 and grid[-1] == 100_000 and 10_000 in grid and np.all(np.diff(grid) > 0)
