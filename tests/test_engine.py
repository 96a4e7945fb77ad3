"""The engine (``genbandit.simulate``): stop conditions, info curves, reward ranges, backends, policy time."""

from __future__ import annotations

import numpy as np
import pytest

from genbandit import AdversarialTable, BernoulliArms, InvalidInputError, InvalidParameterError, UCB1, simulate
from genbandit.core.base import Environment, Step
from genbandit.policies.classic import KLUCB


class _Finishing(Environment):
    """Two arms of means 0.2 and 0.8; run ``r`` is done after ``lengths[r]`` rounds (then pays nothing)."""

    name = "finishing"

    def __init__(self, lengths, seed=None) -> None:
        self.lengths = lengths
        self.seed = seed

    n_arms = 2

    def _init_state(self, n_runs: int) -> None:
        self._played = np.zeros(n_runs, dtype=np.int64)

    def finished(self) -> np.ndarray:
        return self._played >= np.asarray(self.lengths)

    def _step(self, actions: np.ndarray) -> Step:
        live = ~self.finished()
        self._played += live
        chosen = np.where(actions == 1, 0.8, 0.2)
        return Step(feedback=chosen, reward=chosen * live, regret=(0.8 - chosen) * live, info={"live": live.astype(float)})


def test_a_stop_condition_ends_runs_and_they_stop_counting():
    env = _Finishing(lengths=[5, 12, 30])
    res = simulate(env, UCB1(n_arms=2), horizon=1000, n_runs=3, seed=0, n_checkpoints=1000, stop=env.finished)
    assert res.stopping_time.tolist() == [5, 12, 30]
    assert res.counts.sum(axis=1).tolist() == [5, 12, 30]
    assert env.t == 30  # the loop ended when the last run was done, not at the horizon
    assert res.totals["live"].tolist() == [5.0, 12.0, 30.0]
    # after its stop a run's books are flat up to the horizon
    for r, length in enumerate([5, 12, 30]):
        after = res.rounds >= length
        assert np.all(res.regret[r, after] == res.regret[r, after][0]) and np.all(res.curves["live"][r, after] == length)


def test_info_keys_are_recorded_cumulatively_at_every_checkpoint():
    env = BernoulliArms(means=[0.3, 0.5, 0.7])
    res = simulate(env, UCB1(n_arms=3), horizon=300, n_runs=4, seed=1, n_checkpoints=600)
    assert res.rounds.tolist() == list(range(1, 301))
    optimal = res.curves["optimal"]
    np.testing.assert_array_equal(optimal[:, -1], res.totals["optimal"])
    steps = np.diff(optimal, axis=1, prepend=0.0)
    assert set(np.unique(steps)) <= {0.0, 1.0} and 0 < optimal[:, -1].min() < 300
    # regret grows exactly by the gap of each round's arm: 0 on the optimal rounds
    gaps = np.diff(res.regret, axis=1, prepend=0.0)
    assert np.all((steps == 1.0) == np.isclose(gaps, 0.0))


def test_simulate_refuses_an_out_of_range_reward_as_update_does():
    env = AdversarialTable(rewards=[[0.5, 1.5]] * 10)
    with pytest.raises(InvalidInputError) as from_simulate:
        simulate(env, KLUCB(n_arms=2), horizon=10, seed=0)
    policy = KLUCB(n_arms=2)
    with pytest.raises(InvalidInputError) as from_update:
        policy.update(1, 1.5)
    assert str(from_simulate.value) == str(from_update.value) == "The reward of KLUCB must lie in [0.0, 1.0]. Got [1.5] instead."
    # a policy without a declared range takes the same table
    assert simulate(env, UCB1(n_arms=2), horizon=10, seed=0).reward[0, -1] > 0


def test_backends_are_chosen_by_capability():
    env = BernoulliArms(means=[0.3, 0.7])
    with pytest.raises(InvalidParameterError, match="has no compiled loop"):
        simulate(env, KLUCB(n_arms=2), horizon=10, backend="compiled")
    with pytest.raises(InvalidParameterError, match="has no compiled loop"):
        simulate(AdversarialTable(rewards=[[0.5, 1.0]] * 10), UCB1(n_arms=2), horizon=10, backend="compiled")
    with pytest.raises(InvalidParameterError, match="backend must be one of"):
        simulate(env, UCB1(n_arms=2), horizon=10, backend="numba")
    # UCB1 offers a compiled loop on Bernoulli arms: chosen by default, the plain loop's numbers
    a = simulate(env, UCB1(n_arms=2), horizon=200, n_runs=2, seed=3)
    b = simulate(env, UCB1(n_arms=2), horizon=200, n_runs=2, seed=3, backend="python")
    np.testing.assert_array_equal(a.regret, b.regret)
    np.testing.assert_array_equal(a.curves["optimal"], b.curves["optimal"])


def test_the_policy_time_is_booked_apart_from_the_environment():
    res = simulate(BernoulliArms(means=[0.3, 0.7]), UCB1(n_arms=2), horizon=500, seed=0, time_policy=True)
    assert np.all(np.diff(res.policy_seconds) >= 0) and 0 < res.policy_seconds[-1] <= res.wall_time
    assert simulate(BernoulliArms(means=[0.3, 0.7]), UCB1(n_arms=2), horizon=50, seed=0).policy_seconds is None


def test_compare_summaries_reports_moved_missing_and_timing_records(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_summaries.py"
    spec = importlib.util.spec_from_file_location("compare_summaries", path)
    compare_summaries = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare_summaries)

    def rec(scenario, metric, mean, stderr=0.1):
        return {"scenario": scenario, "policy": "UCB1", "metric": metric, "mean": mean, "stderr": stderr, "n_runs": 4}

    a = [rec("s", "final_regret", 10.0), rec("s", "pulls_per_second", 1e5), rec("s", "optimal_rate", 0.5), rec("t", "final_regret", 1.0)]
    b = [rec("s", "final_regret", 10.0 + 1e-9), rec("s", "pulls_per_second", 2e5), rec("s", "optimal_rate", 0.6)]
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    lines = compare_summaries.compare(compare_summaries.load_records(tmp_path / "a.json"), compare_summaries.load_records(tmp_path / "b.json"))
    assert lines == [
        "differs: s / UCB1 / final_regret: mean 10.0 -> 10.000000001 (relative 1.00e-10)",
        "differs: s / UCB1 / optimal_rate: mean 0.5 -> 0.6 (relative 1.67e-01)",
        "only in A: t / UCB1 / final_regret",
    ]
    assert compare_summaries.main([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    assert compare_summaries.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--rtol", "1e-6"]) == 1  # optimal_rate and t still differ


def test_a_policy_plays_on_from_what_it_learned_with_reset_policy_false():
    """``reset_policy=False`` keeps what the policy learned (a warm start); a run-count mismatch is refused."""
    from genbandit.envs.prompts import ArrayReplay
    from genbandit.policies.kernel import LinUCB

    rng = np.random.default_rng(0)
    X, R = rng.standard_normal((200, 4)), rng.uniform(size=(200, 3))
    policy = LinUCB(n_arms=3, n_features=4, seed=1)
    simulate(ArrayReplay(X[:120], R[:120]), policy, 120, seed=(5, 6))
    learned = policy._Ainv.copy()
    second = simulate(ArrayReplay(X[120:], R[120:]), policy, 80, seed=(7, 8), reset_policy=False)
    assert second.counts.sum() == 80 and policy._t == 200 and policy._pulls.sum() == 200
    fresh = LinUCB(n_arms=3, n_features=4, seed=1)
    simulate(ArrayReplay(X[120:], R[120:]), fresh, 80, seed=(7, 8))
    assert not np.allclose(policy._Ainv, fresh._Ainv) and not np.allclose(policy._Ainv, learned)
    with pytest.raises(InvalidParameterError, match="n_runs must be 1"):
        simulate(ArrayReplay(X, R), policy, 10, n_runs=2, reset_policy=False)


def test_array_replay_reveals_cost_and_refuses_mismatched_tables():
    from genbandit.envs.prompts import ArrayReplay

    env = ArrayReplay(np.eye(3), [[0.9, 0.1], [0.2, 0.8], [0.5, 0.6]], costs=[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], reveal_cost=True, seed=0)
    env.reset(2, seed=0)
    env._observe()
    step = env._advance(np.array([0, 1]))
    assert set(step.feedback) == {"reward", "cost"} and step.feedback["cost"].tolist() == [1.0, 2.0]
    assert step.feedback["reward"].tolist() == step.reward.tolist()
    with pytest.raises(InvalidParameterError, match="rewards"):
        ArrayReplay(np.eye(3), [[0.9, 0.1], [0.2, 0.8]]).reset()
    with pytest.raises(InvalidInputError, match="finite"):
        ArrayReplay([[np.nan, 0.0], [0.0, 1.0]], [[0.9, 0.1], [0.2, 0.8]]).reset()


def test_a_logged_order_replays_the_rows_as_they_are_in_every_run_and_a_shuffle_does_not():
    """``order="logged"``: every run sees row 0, then row 1, ... (a log replayed as it happened); ``"shuffle"`` permutes per run;
    an unknown order is refused."""
    from genbandit.envs.prompts import ArrayReplay

    X = np.arange(40, dtype=float).reshape(20, 2)
    R = np.random.default_rng(0).uniform(size=(20, 2))
    seen = {}
    for order in ("logged", "shuffle"):
        env = ArrayReplay(X, R, order=order, seed=3)
        env.reset(n_runs=3)
        assert env.max_horizon == 20
        rows = []
        for _ in range(20):
            rows.append(env._observe()[:, 0] / 2)
            env._advance(np.zeros(3, dtype=np.int64))
        seen[order] = np.array(rows).T  # (runs, rounds): the row each run saw
    assert (seen["logged"] == np.arange(20)).all()
    assert all(sorted(run) == list(range(20)) for run in seen["shuffle"]) and not (seen["shuffle"] == np.arange(20)).all(axis=1).any()
    with pytest.raises(InvalidParameterError, match="order"):
        ArrayReplay(X, R, order="sorted")
