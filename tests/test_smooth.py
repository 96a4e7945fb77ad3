"""Smooth non-stationary bandits: tunings, BE bookkeeping by hand, compiled vs plain, environments, runner."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genbandit.core.validation import InvalidParameterError
from genbandit.envs.stochastic import BernoulliArms
from genbandit.envs.smooth import ClickCurveArms, CTRStandIn, OBDClickCurves, SinusoidArms, holder_constants, obd_click_log, smooth_click_rates
from genbandit.core.simulator import checkpoint_grid, simulate
from genbandit.policies._smooth_numba import run_loop
from genbandit.policies.smooth import BENS, BES, BudgetedExploration, SmoothDUCB, SmoothRexp3, SmoothSWUCB, be_ns_tuning, be_s_tuning, window_for
from genbandit.policies.rising import rexp3_tuning


# ------------------------------------------------------------------------------------------ tunings
@pytest.mark.parametrize(
    "T, ns_delta, ns_n, ns_b, s_delta, s_n, s_b",
    [  # spec §2.3 table (L = 1, log = ln)
        (2700, 0.1430, 386, 55.2, 0.3114, 841, 81.5),
        (86400, 0.0509, 4394, 223.5, 0.1674, 14466, 405.5),
        (10**6, 0.0240, 23995, 575.8, 0.1067, 106678, 1214.0),
        (10**8, 0.0057, 568986, 3237.5, 0.0450, 4498432, 9103.0),
    ],
)
def test_be_tunings_match_the_spec_table(T, ns_delta, ns_n, ns_b, s_delta, s_n, s_b):
    d, b = be_ns_tuning(T)
    assert round(d, 4) == pytest.approx(ns_delta, abs=1e-4) and b == pytest.approx(ns_b, abs=0.06)
    assert BENS(n_arms=2, horizon=T).epoch_length_ == pytest.approx(ns_n, abs=1)
    d, b = be_s_tuning(T)
    assert d == pytest.approx(s_delta, abs=1e-4) and b == pytest.approx(s_b, abs=0.06)
    assert BES(n_arms=2, horizon=T, one_armed=True).epoch_length_ == pytest.approx(s_n, abs=1)


def test_tunings_follow_the_formulas_in_L_and_k():
    T, L, k = 10**7, 98.7, 5
    lt = math.log(T)
    d, b = be_s_tuning(T, L)
    assert d == pytest.approx(L ** -0.4 * T ** -0.2 * lt**0.2) and b == pytest.approx(L ** -0.2 * T**0.4 * lt**0.6)
    d, b = be_ns_tuning(T, 6.3)
    assert d == pytest.approx(6.3 ** (-2 / 3) * T ** (-1 / 3) * lt ** (1 / 3)) and b == pytest.approx(6.3 ** (-1 / 3) * T ** (1 / 3) * lt ** (2 / 3))
    d, b = be_s_tuning(T, L, n_arms=k)
    assert d == pytest.approx(L ** -0.4 * k ** -0.6 * T ** -0.2 * (lt * math.log(k)) ** 0.2)
    assert b == pytest.approx(L ** -0.2 * math.sqrt(d * T * lt * math.log(k) / k))
    # the paper's Theorem 6.2 settings: k = 20, T = 1e6 -> Delta 0.0220, Delta T 22,017, B 213.5
    d, b = be_s_tuning(10**6, 1.0, 20)
    assert (round(d, 4), round(d * 10**6), round(b, 1)) == (0.022, 22017, 213.5)
    # the multipliers of traps T4/T17 scale only B
    p = BES(n_arms=2, horizon=T, L=L, one_armed=True, budget_const=math.sqrt(6), sigma=0.5)
    assert p.budget_ == pytest.approx(be_s_tuning(T, L)[1] * math.sqrt(6) * 0.5)
    assert p.epoch_length_ == round(be_s_tuning(T, L)[0] * T)
    # "auto": one-armed formula for Algorithm 1, k-aware for Algorithm 2
    assert BES(n_arms=5, horizon=T, L=L).epoch_length_ == round(be_s_tuning(T, L, 5)[0] * T)
    assert BES(n_arms=5, horizon=T, L=L, tuning="one-armed").epoch_length_ == round(be_s_tuning(T, L)[0] * T)


@pytest.mark.parametrize(
    "T, k, batch, gamma, batch_b, gamma_b",
    [(86400, 2, 25488, 0.00563, 16057, 0.00709), (10**6, 2, 130415, 0.00249, 82156, 0.00313), (10**7, 20, 9860169, 0.00188, 1338231, 0.00510)],
)
def test_rexp3_tuning_matches_the_spec_table(T, k, batch, gamma, batch_b, gamma_b):
    got_batch, got_gamma = rexp3_tuning(T, k, 0.05, form="printed")
    assert got_batch == pytest.approx(batch, abs=1) and got_gamma == pytest.approx(gamma, abs=1e-5)
    got_batch, got_gamma = rexp3_tuning(T, k, 0.05)
    assert got_batch == pytest.approx(batch_b, abs=1) and got_gamma == pytest.approx(gamma_b, abs=1e-5)
    assert rexp3_tuning(T, k, 0.05, form="printed")[0] <= T  # a batch longer than T means plain EXP3


def test_window_balances_drift_and_noise():
    tau = window_for(10**6, L=2.0)
    assert 2.0 * tau / 10**6 == pytest.approx(math.sqrt(2 * math.log(10**6) / tau), rel=1e-3)


# ------------------------------------------------------------------------------------------ BE by hand
def _play(policy, rewards_for):
    arms = []
    for t in range(1, policy.horizon + 1):
        a = policy.select()
        arms.append(a)
        policy.update(a, rewards_for(t, a))
    return arms


def test_one_armed_be_budget_and_epochs_by_hand():
    # T = 10, epochs of 4: rounds 1-4, 5-8, 9-10. B = 1.5, static mean 0.5.
    be = BudgetedExploration(n_arms=2, horizon=10, budget=1.5, epoch_length=4, one_armed=True, static_mean=0.5)
    ys = {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: -1.0, 7: 0.0, 8: 0.0, 9: -1.0, 10: 1.0}
    arms = _play(be, lambda t, a: ys[t])
    # epoch 1: centred sums -0.5, -1.0 (round 2: not < -1.5), 3: -0.5 ... never switches
    # epoch 2: +0.5, -1.0, -1.5 (not strictly below), -2.0 after round 8 (too late to matter)
    # epoch 3: -1.5 after round 9 (not strictly below): arm 1 again at round 10
    assert arms == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    be = BudgetedExploration(n_arms=2, horizon=10, budget=1.5, epoch_length=4, one_armed=True, static_mean=0.5)
    ys = {1: -1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.0, 6: 0.0, 7: 1.0, 8: 1.0, 9: -1.0, 10: 1.0}
    arms = _play(be, lambda t, a: ys[t] if a == 1 else 0.5)
    # epoch 1: -1.5, -1.0, ... no switch. epoch 2: -0.5, -1.0, -0.5, 0. epoch 3: -1.5 (not < -1.5)
    assert arms == [1] * 10
    be = BudgetedExploration(n_arms=2, horizon=10, budget=1.0, epoch_length=4, one_armed=True, static_mean=0.5)
    arms = _play(be, lambda t, a: ys[t] if a == 1 else 0.5)
    # B = 1: epoch 1 sum -1.5 < -1 after round 1 -> static arm for rounds 2-4; epoch 2: -0.5, -1.0, -0.5, 0.0;
    # epoch 3: round 9 sum -1.5 < -1 -> static arm in round 10
    assert arms == [1, 0, 0, 0, 1, 1, 1, 1, 1, 0]
    assert be._exploit.tolist() == [-1] and be._z.tolist() == [[0.0, 0.0]]  # reset after the last epoch


def test_k_armed_be_elimination_and_epochs_by_hand():
    # k = 3, T = 12, epochs of 6, B = 1. Rewards scripted per (round, arm).
    be = BudgetedExploration(n_arms=3, horizon=12, budget=1.0, epoch_length=6)
    table = {1: 1.0, 2: 0.0, 3: -1.0, 4: 1.0, 5: -1.0, 7: 0.0, 8: 0.0, 9: 0.0, 10: 0.0, 11: 1.0, 12: 0.0}
    arms = _play(be, lambda t, a: table.get(t, 0.0))
    # pass 1 (rounds 1-3): sums (1, 0, -1); arm 2 is 2 below the leader (> B): out. Arm 1 is 1 below: stays (strict).
    # pass 2 (rounds 4-5): sums (2, -1): arm 1 out. Round 6: one arm left -> arm 0.
    # epoch 2 resets: passes at rounds 7-9 and 10-12 (the second fits exactly: 10 + 3 - 1 = 12), no elimination.
    assert arms == [0, 1, 2, 0, 1, 0, 0, 1, 2, 0, 1, 2]
    assert be._alive.tolist() == [[True, True, True]] and be._pass_pos.tolist() == [0]


def test_k_armed_be_plays_the_leader_when_a_pass_does_not_fit():
    # k = 3, T = 10, epochs of 5, B large: rounds 1-3 one pass, rounds 4-5 cannot hold a pass -> leader.
    be = BudgetedExploration(n_arms=3, horizon=10, budget=100.0, epoch_length=5)
    table = {1: 0.0, 2: 1.0, 3: 0.0, 6: 1.0, 7: 0.0, 8: 1.0}
    arms = _play(be, lambda t, a: table.get(t, 0.0))
    assert arms == [0, 1, 2, 1, 1, 0, 1, 2, 0, 0]  # epoch 2: tie (1, 0, 1) -> lowest index


def test_update_with_an_arm_be_did_not_ask_for_does_not_count():
    be = BudgetedExploration(n_arms=3, horizon=10, budget=1.0, epoch_length=10)
    assert be.select() == 0
    be.update(2, -5.0)
    assert be._z.tolist() == [[0.0, 0.0, 0.0]] and be.select() == 0


def test_one_armed_be_rejects_more_than_two_arms_and_bad_static_means():
    with pytest.raises(InvalidParameterError):
        BudgetedExploration(n_arms=3, horizon=10, budget=1.0, epoch_length=5, one_armed=True)
    with pytest.raises(InvalidParameterError):
        BudgetedExploration(n_arms=2, horizon=10, budget=1.0, epoch_length=5, one_armed=True, static_mean=[0.1, 0.2]).reset(3)


# ------------------------------------------------------------------------------------------ compiled vs plain
def _plain_actions(env, policy, T, n_runs, seeds):
    env.reset(n_runs, seed=seeds[0])
    policy.reset(n_runs, seed=seeds[1])
    actions = np.empty((n_runs, T), dtype=np.int64)
    regret = np.zeros(n_runs)
    for t in range(T):
        a = policy.select_batch()
        step = env.step(a)
        policy.update_batch(a, step.feedback)
        actions[:, t] = a
        regret += step.regret
    return actions, regret


def _cases():
    T = 1500
    sin = SinusoidArms(horizon=T, amplitude_scale=2.5, amplitude_sd=0.01)
    grid = ClickCurveArms(grid=np.clip(0.5 + 0.3 * np.sin(np.linspace(0, 6, 41)[None] + np.arange(4)[:, None]), 0, 1), horizon=T)
    return [
        ("BE-S one-armed", sin, lambda e: BES(n_arms=2, horizon=T, L=98.7, one_armed=True, static_mean=e.static_means())),
        ("BE-NS k-armed", sin, lambda e: BENS(n_arms=2, horizon=T, L=6.3, budget_const=0.2)),
        ("BE-S k-armed, 4 arms", grid, lambda e: BES(n_arms=4, horizon=T, L=5.0, budget_const=0.1)),
        ("Rexp3", sin, lambda e: SmoothRexp3(n_arms=2, horizon=T, variation_budget=50.0, reward_min=-1.0)),
        ("Rexp3, 4 arms", grid, lambda e: SmoothRexp3(n_arms=4, horizon=T, variation_budget=50.0, batch_form="besbes")),
        ("SW-UCB", grid, lambda e: SmoothSWUCB(n_arms=4, horizon=T, window=100)),
        ("D-UCB", sin, lambda e: SmoothDUCB(n_arms=2, horizon=T, discount=0.99, scale=2.0)),
    ]


@pytest.mark.parametrize("label, env, make", _cases(), ids=[c[0] for c in _cases()])
def test_compiled_and_plain_agree_round_for_round(label, env, make):
    T, n_runs = env.horizon, 3
    seeds = (np.random.SeedSequence(7), np.random.SeedSequence(8))
    env.reset(n_runs, seed=seeds[0])
    plain_actions, plain_regret = _plain_actions(env, make(env), T, n_runs, seeds)
    env.reset(n_runs, seed=seeds[0])
    policy = make(env).reset(n_runs, seed=seeds[1])
    actions = np.zeros((n_runs, T), dtype=np.int64)
    regret_at, _, _ = run_loop(env, policy, checkpoint_grid(T, T), block=256, actions=actions)
    np.testing.assert_array_equal(actions, plain_actions)
    np.testing.assert_allclose(regret_at[:, -1], plain_regret, rtol=1e-12, atol=1e-9)
    assert len(np.unique(plain_actions)) > 1  # a real test: the policy switches arms


def test_simulate_picks_the_compiled_loop_and_it_keeps_the_plain_regret_book():
    T = 800
    env = SinusoidArms(horizon=T, amplitude_scale=2.5, amplitude_sd=0.01)
    env.reset(2, seed=3)
    policy = BENS(n_arms=2, horizon=T, L=6.3, one_armed=True, static_mean=env.static_means())
    assert policy.compiled_loop(env) is run_loop and policy.compiled_loop(BernoulliArms(means=[0.1, 0.2])) is None
    a = simulate(env, policy, T, n_runs=2, seed=5, n_checkpoints=50)
    assert "optimal" not in a.totals  # the compiled loop ran (it keeps no info sums)
    env.reset(2, seed=3)
    b = simulate(env, policy, T, n_runs=2, seed=5, n_checkpoints=50, backend="python")
    assert "optimal" in b.totals
    np.testing.assert_array_equal(a.rounds, b.rounds)
    np.testing.assert_allclose(a.regret, b.regret, atol=1e-9)
    np.testing.assert_array_equal(a.counts, b.counts)


# ------------------------------------------------------------------------------------------ statistical
def test_one_armed_be_on_constant_arms_matches_the_per_epoch_bounds():
    T = 200_000
    good = ClickCurveArms(grid=[[0.0, 0.0], [0.5, 0.5]], horizon=T, noise="rademacher")
    be = BudgetedExploration(n_arms=2, horizon=T, budget=60.0, epoch_length=20_000, one_armed=True, static_mean=0.0)
    res = simulate(good, be, T, n_runs=4, seed=1)
    assert res.final_regret.max() == 0.0  # mu_1 = +0.5 > 0: the budget is never spent (Lemma E.2)
    bad = ClickCurveArms(grid=[[0.0, 0.0], [-0.5, -0.5]], horizon=T, noise="rademacher")
    res = simulate(bad, be, T, n_runs=4, seed=1)
    per_epoch = res.final_regret / 10
    # negative epochs cost at most B + 1 in reward; in pseudo-regret 0.5 per pull of arm 1, about (B+1)/0.5 pulls
    assert np.all(per_epoch <= 0.5 * (60 + 1) / 0.5 * 1.3) and np.all(per_epoch > 20)


def test_slope_check_instance_orders_be_s_below_be_ns():
    T = 10**6
    env = SinusoidArms(horizon=T, amplitude_scale=2.5, amplitude_sd=0.01)
    out = {}
    for name, cls, L in (("BE-S", BES, 98.7), ("BE-NS", BENS, 6.28)):
        env.reset(6, seed=11)
        out[name] = simulate(env, cls(n_arms=2, horizon=T, L=L, one_armed=True, static_mean=env.static_means()), T, n_runs=6, seed=(np.random.SeedSequence(11), np.random.SeedSequence(12))).final_regret
    # spec calibration at 1e6: BE-S ~14.1k, BE-NS ~20.8k
    assert out["BE-S"].mean() < 0.85 * out["BE-NS"].mean()
    assert 8_000 < out["BE-S"].mean() < 20_000 and 14_000 < out["BE-NS"].mean() < 30_000


# ------------------------------------------------------------------------------------------ environments
def test_sinusoid_instances_and_constants():
    env = SinusoidArms(horizon=10_000, amplitude_scale=2.5, amplitude_sd=0.0, nu_range=(2.5, 5.0))
    env.reset(50, seed=0)
    nu, amp, _ = env._params.T
    np.testing.assert_allclose(amp, 2.5 / nu**2)
    grid = np.stack([env._means_at(t)[:, 1] for t in range(1, 10_001)], axis=1)  # (runs, T) on x = t / T
    l1, l2 = holder_constants(grid)
    L1, L2 = env.holder_constants()
    assert l1 <= L1 * 1.001 and 0.99 * L2 < l2 < 1.01 * L2  # sup |mu''| = A (2 pi nu)^2 = 2.5 (2 pi)^2 for every nu
    assert np.all(grid >= 0) and np.all(grid <= 2 * amp[:, None] + 1e-12)
    env = SinusoidArms(horizon=100, seed=0).reset(1000)
    assert abs(env.static_means().mean() - np.mean(0.25 / env._params[:, 0] ** 2)) < 1e-3  # s.d. 0.001, not variance


def test_click_curves_interpolate_and_amplify():
    env = ClickCurveArms(grid=[[0.0, 1.0, 0.0], [0.5, 0.5, 0.5]], horizon=4).reset()
    np.testing.assert_allclose(env._means_at(1), [[0.5, 0.5]])  # x = 1/4 -> halfway up the first segment
    np.testing.assert_allclose(env._means_at(2), [[1.0, 0.5]])
    amp = ClickCurveArms(grid=[[0.01, 0.02], [0.03, 0.02]], horizon=4, amplify=10.0)
    np.testing.assert_allclose(amp.curves(), [[0.4, 0.5], [0.6, 0.5]])
    with pytest.raises(InvalidParameterError):
        ClickCurveArms(grid=[[0.1, 1.5]], horizon=3)


def test_smoothing_recovers_a_known_rate_curve():
    rng = np.random.default_rng(0)
    t = rng.random(200_000)
    truth = 0.05 + 0.03 * np.sin(2 * np.pi * t)
    clicks = rng.random(t.size) < truth
    x = np.linspace(0, 1, 101)
    est = smooth_click_rates(t, clicks, x, bandwidth=0.05)
    assert np.max(np.abs(est - (0.05 + 0.03 * np.sin(2 * np.pi * x)))) < 0.006
    shrunk = smooth_click_rates(t[:50], clicks[:50], x, bandwidth=0.05, prior_rate=0.2, prior_strength=1e9)
    np.testing.assert_allclose(shrunk, 0.2, atol=1e-6)


def test_obd_log_is_read_from_the_package_and_turned_into_curves():
    pytest.importorskip("obp")
    log = obd_click_log()
    assert len(log) == 10_000 and int(log["click"].sum()) == 38 and log["item_id"].nunique() == 80
    assert log["timestamp"].is_monotonic_increasing and (log["propensity_score"] == 0.0125).all()
    env = OBDClickCurves(horizon=1000, n_arms=5)
    c = env.curves()
    assert c.shape == (5, 2001) and 0.0 < c.min() and c.max() < 0.1
    counts = log.groupby("item_id")["click"].sum()
    assert all(counts[i] == counts.max() or counts[i] >= sorted(counts)[-5] for i in env.item_ids)
    # a curve is higher where its item's clicks are: mean over the impressions of a click vs a non-click
    ts = log["timestamp"].astype("int64").to_numpy().astype(float)
    x = (ts - ts.min()) / (ts.max() - ts.min())
    top = log["item_id"].to_numpy() == env.item_ids[0]
    at = np.interp(x[top], np.linspace(0, 1, 2001), c[0])
    clicked = log["click"].to_numpy()[top] == 1
    assert at[clicked].mean() > at[~clicked].mean()


def test_ctr_standin_has_realistic_click_rates():
    env = CTRStandIn(horizon=1000, n_arms=20)
    c = env.curves()
    assert 0.02 < c.mean() < 0.06 and c.max() < 0.2
    best = c.argmax(axis=0)
    assert 1 <= np.count_nonzero(np.diff(best)) <= 40  # a handful of best-arm switches over the day


# ------------------------------------------------------------------------------------------ runner + hook
def test_reproduce_pipeline_writes_slopes_and_named_scenarios(tmp_path):
    from genbandit.experiments.config import load_config
    from genbandit.experiments.runner import run_experiment

    raw = load_config("smooth").source
    cfg = dict(raw)
    cfg["n_runs"] = 2
    cfg["n_checkpoints"] = 10
    cfg["scenarios"] = [dict(raw["scenarios"][0], horizons=[2000, 20000])]
    cfg.pop("quick", None)
    out = run_experiment(load_config(cfg), tmp_path, progress=False)
    assert not out["failed"]
    recs = out["summary"]
    names = {(r["scenario"], r["policy"], r["metric"]) for r in recs}
    assert ("slope-check:T=20000", "BE-S", "final_regret") in names
    for policy in ("BE-S", "BE-NS", "Rexp3", "SW-UCB", "D-UCB"):
        assert ("slope-check", policy, "slope") in names
    report = (tmp_path / "report.md").read_text()
    assert "Our slopes beside the paper's" in report and (tmp_path / "figures" / "loglog-slope-check.png").exists()
