"""MP-CSB: oracles, GenCTS, GenLBINFV and the duplicated baselines (spec section 4.4)."""

from __future__ import annotations

import pytest

pytest.importorskip("cvxpy")
pytest.importorskip("networkx")
pytest.importorskip("ot")

import itertools

import cvxpy as cp
import networkx as nx
import numpy as np
import ot

from genbandit.core.simulator import simulate
from genbandit.core.validation import InvalidInputError, InvalidParameterError
from genbandit.envs.combinatorial import KnapsackSemiBandit, TransportSemiBandit, flip_schedule
from genbandit.oracles import KnapsackActions, TransportActions, decompose, decompose_batch, solve_knapsack, solve_transport, transport_plans
from genbandit.oracles.action_sets import round_two_demanders, systematic_sample
from genbandit.policies.combinatorial import CTSDup, CUCB, GenCTS, GenLBINFV, LBINFVDup, hybrid_regularizer, newton_ftrl, pack_samples

B1 = {"kind": "transport", "supply": [1, 4, 5], "demand": [4, 6]}
C_B1 = np.random.default_rng(0).uniform(0.1, 0.5, (3, 2))


# ----------------------------------------------------------------------------- oracles
def _brute_transport(cost, u, v):
    plans = transport_plans(u, v)
    return plans[np.argmin(plans @ cost.ravel())]


def _flow_transport(cost, u, v):
    g = nx.DiGraph()
    for x, ux in enumerate(u):
        g.add_node(("s", x), demand=-int(ux))
    for y, vy in enumerate(v):
        g.add_node(("t", y), demand=int(vy))
    for x in range(len(u)):
        for y in range(len(v)):
            g.add_edge(("s", x), ("t", y), weight=int(round(cost[x, y] * 1e6)))
    flow = nx.min_cost_flow(g)
    return np.array([[flow[("s", x)][("t", y)] for y in range(len(v))] for x in range(len(u))]).ravel()


@pytest.mark.parametrize("seed", range(12))
def test_transport_oracle_matches_pot_flow_and_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_sup, n_dem = rng.integers(2, 4, size=2)
    u = rng.integers(1, 5, size=n_sup)
    v = rng.multinomial(u.sum() - n_dem, np.ones(n_dem) / n_dem) + 1
    cost = rng.random((n_sup, n_dem))
    plan = solve_transport(cost, u, v)
    assert plan.dtype == np.int64 and (plan.sum(1) == u).all() and (plan.sum(0) == v).all()
    best = (_brute_transport(cost, u, v) @ cost.ravel())
    emd = ot.emd(u.astype(float), v.astype(float), cost)
    flow = _flow_transport(cost, u, v)
    assert plan.ravel() @ cost.ravel() == pytest.approx(best, abs=1e-9)
    assert (emd * cost).sum() == pytest.approx(best, abs=1e-9)
    assert flow @ cost.ravel() == pytest.approx(best, abs=1e-5)
    assert np.allclose(emd, np.round(emd))  # network simplex: integral, unlike Sinkhorn


def test_two_demander_greedy_and_enumeration_match_lp():
    rng = np.random.default_rng(3)
    space = TransportActions([3, 7, 2, 5], [8, 9])
    theta = rng.random((40, 8))
    greedy = space._solve(theta)
    listed = space.best(theta)
    for row, a, b in zip(theta, greedy, listed):
        lp = solve_transport(row.reshape(4, 2), space.supply, space.demand).ravel()
        assert a @ row == pytest.approx(lp @ row) == pytest.approx(b @ row)
    dup = space.duplicate()
    assert dup.n_arms == 17 * 2 and dup.plans() is None  # C(17, 8) plans: only the greedy oracle
    z = dup.best(rng.random((5, dup.n_arms)))
    assert dup.contains(z).all()


@pytest.mark.parametrize("bounds", [None, [1, 3, 2, 4]])
def test_knapsack_dp_matches_brute_force(bounds):
    rng = np.random.default_rng(7)
    weights, capacity = [3, 4, 5, 2], 13
    space = KnapsackActions(weights, capacity, bounds)
    plans = space.plans()
    values = rng.normal(0.3, 0.4, size=(50, 4))
    got = solve_knapsack(values, weights, capacity, bounds)
    assert space.contains(got).all()
    assert np.allclose((got * values).sum(1), (values @ plans.T).max(1))
    assert np.all(got[values <= 0] == 0)


def test_knapsack_duplicate_copies_and_expand():
    space = KnapsackActions([2, 3, 4, 5, 7], 20)
    dup = space.duplicate()
    assert dup.n_arms == 27 and dup.caps.max() == 1
    a = np.array([[2, 1, 0, 1, 1]])
    z = space.expand(a)
    assert (np.eye(5, dtype=int)[dup.owner].T @ z[0]).tolist() == a[0].tolist() and dup.contains(z).all()


# ----------------------------------------------------------------------------- regularizer and FTRL step
def test_regularizer_derivatives_match_finite_differences():
    n, gamma = np.array([1.0, 4.0, 5.0, 30.0]), np.log(10000)
    for u in (0.01, 0.3, 0.77, 0.99):
        x = u * n
        h = 1e-6 * n
        d1 = (hybrid_regularizer(x + h, n, gamma) - hybrid_regularizer(x - h, n, gamma)) / (2 * h)
        d2 = (hybrid_regularizer(x + h, n, gamma, 1) - hybrid_regularizer(x - h, n, gamma, 1)) / (2 * h)
        assert np.allclose(d1, hybrid_regularizer(x, n, gamma, 1), rtol=1e-6)
        assert np.allclose(d2, hybrid_regularizer(x, n, gamma, 2), rtol=1e-5)
        assert np.all(hybrid_regularizer(x, n, gamma, 2) > 0) and np.all(hybrid_regularizer(x, n, gamma) >= 0)
    # the corrected eq. 9: phi_i(n_i) = n_i * gamma, and phi_i has its minimum 0 at x = n_i / ... only for gamma = 0 at x = n_i
    assert np.allclose(hybrid_regularizer(n, n, gamma), n * gamma)
    assert hybrid_regularizer(np.array([2.0]), np.array([4.0]), 0.0)[0] == pytest.approx(4 * (0.5 - 1 - np.log(0.5)))


@pytest.mark.parametrize("spec", [B1, {"kind": "transport", "supply": [2, 1, 3], "demand": [1, 2, 3]}])
def test_newton_solution_satisfies_kkt_and_matches_cvxpy(spec):
    space = TransportActions(spec["supply"], spec["demand"])
    rng = np.random.default_rng(1)
    gamma = np.log(10000)
    n = space.caps.astype(float)
    c = rng.uniform(0, 40, size=(3, space.n_arms))
    beta = rng.uniform(1.2, 3.0, size=(3, space.n_arms))
    x0 = np.tile(space.interior_point(), (3, 1))
    x = newton_ftrl(c, beta, x0, n, space.A, gamma)
    for r in range(3):
        assert np.abs(space.A @ x[r] - space.b).max() < 1e-9
        assert np.all(x[r] > 0) and np.all(x[r] < n)
        g = c[r] + beta[r] * hybrid_regularizer(x[r], n, gamma, 1)
        w, *_ = np.linalg.lstsq(space.A.T, g, rcond=None)
        assert np.abs(g - space.A.T @ w).max() < 1e-8 * max(1.0, np.abs(g).max())  # g in range(A^T)
        z = cp.Variable(space.n_arms)
        bn = beta[r] * n
        objective = c[r] @ cp.multiply(n, z) + cp.sum(cp.multiply(bn, z - 1 - cp.log(z))) + gamma * cp.sum(cp.multiply(bn, z - cp.entr(1 - z)))
        cp.Problem(cp.Minimize(objective), [space.A @ cp.multiply(n, z) == space.b]).solve(solver=cp.CLARABEL)
        assert np.abs(z.value * n - x[r]).max() < 1e-4


# ----------------------------------------------------------------------------- sampling with mean x
def test_face_walking_decomposition_is_a_valid_convex_combination():
    rng = np.random.default_rng(2)
    for space in (TransportActions([1, 4, 5], [4, 6]), TransportActions([10, 20, 30], [25, 35]), TransportActions([2, 1, 3], [1, 2, 3])):
        plans = space.plans()
        lam = rng.dirichlet(np.full(len(plans), 0.3), size=20)
        x = lam @ plans
        x[0] = 0.999999 * plans[0] + 0.000001 * plans[-1]  # next to a vertex: the numerically hard case
        w, comps = decompose_batch(x, space)
        for r in range(20):
            keep = w[r] > 0
            assert np.all(w[r] >= 0) and w[r].sum() == pytest.approx(1.0)
            assert keep.sum() <= space.n_arms + 1
            assert space.contains(comps[r][keep]).all()
            assert np.abs(w[r] @ comps[r] - x[r]).max() < 1e-6


def test_face_walk_without_enumeration_uses_lp_faces():
    space = TransportActions([2, 1, 3], [1, 2, 3])
    x = space.plans()[[0, 5, 9]].mean(axis=0).astype(float)
    space._plans = None  # as if the set were too large to list: faces come from HiGHS
    w, comps = decompose(x, space)
    assert space.contains(comps).all() and np.abs(w @ comps - x).max() < 1e-9 and len(w) <= space.n_arms + 1


def test_systematic_rounding_is_feasible_and_unbiased():
    rng = np.random.default_rng(5)
    space = TransportActions([10, 20, 30], [25, 35])
    x = rng.dirichlet(np.ones(216), size=1) @ space.plans()
    draws = round_two_demanders(np.repeat(x, 40000, axis=0), space.supply, rng)
    assert space.contains(draws).all()
    assert np.all(draws >= np.floor(x)) and np.all(draws <= np.ceil(x))
    assert np.abs(draws.mean(axis=0) - x[0]).max() < 0.01
    z = systematic_sample(np.full((3, 4), 0.75), rng)
    assert z.sum(axis=1).tolist() == [3, 3, 3]


# ----------------------------------------------------------------------------- estimator and learning rates
@pytest.mark.parametrize("cls,sampler", [(GenLBINFV, "rounding"), (GenLBINFV, "decomposition"), (LBINFVDup, "rounding")])
def test_loss_estimator_is_unbiased(cls, sampler):
    runs = 40000
    policy = cls(n_arms=6, action_set=B1, horizon=1000, sampler=sampler, seed=3).reset(n_runs=runs)
    env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=C_B1.tolist(), seed=4).reset(n_runs=runs)
    x = policy.learning_space.interior_point() * 0.5 + 0.5 * (policy.learning_space.plans()[3] if cls is GenLBINFV else policy.learning_space.interior_point())
    policy._x = np.tile(x, (runs, 1))
    policy._q = np.full((runs, policy.learning_space.n_arms), 0.3)
    if sampler == "rounding":
        z = round_two_demanders(policy._x, policy.learning_space.supply, policy._rng)
    else:
        w, comps = decompose(x, policy.learning_space)
        z = comps[policy._rng.choice(len(w), size=runs, p=w)]
    actions = policy._play(z)
    policy._update(actions, env.step(actions).feedback, None)
    owner = policy.learning_space.owner if cls is LBINFVDup else np.arange(6)
    est = policy._lhat.mean(axis=0)
    se = policy._lhat.std(axis=0) / np.sqrt(runs)
    assert np.all(np.abs(est - C_B1.ravel()[owner]) < 5 * se + 1e-3)
    # a wrong estimator (dividing by the number of units instead of x) is biased by far more than that
    wrong = (policy._q[0] + np.where(z > 0, (policy._sums - z * policy._q) / np.maximum(z, 1), 0)).mean(axis=0)
    assert np.abs(wrong - C_B1.ravel()[owner]).max() > 10 * se.max()


def test_ls_prediction_learning_rates_and_alpha_bounds():
    env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=C_B1.tolist(), seed=0)
    policy = GenLBINFV(n_arms=6, action_set=B1, horizon=500, seed=0)
    env.reset(n_runs=2)
    policy.reset(n_runs=2)
    history_a, history_s = [], []
    beta_prev = policy._beta2.copy()
    for _ in range(200):
        a = policy.select_batch()
        fb = env.step(a).feedback
        policy.update_batch(a, fb)
        history_a.append(a)
        history_s.append(fb.sum(axis=2))
        assert np.all(policy._beta2 >= beta_prev) and np.all(policy._beta2 - beta_prev <= 1 / policy.gamma + 1e-12)  # alpha in [0, 1]
        beta_prev = policy._beta2.copy()
    A, S = np.sum(history_a, axis=0), np.sum(history_s, axis=0)
    # LS: q minimises (m - 1/2)^2 + sum_s a_i(s) (m - k_i(s))^2, i.e. (1/2 + sum samples) / (1 + sum units)
    assert np.allclose(policy._prediction(), (0.5 + S) / (1 + A))


def test_gd_prediction_follows_eq_8():
    policy = GenLBINFV(n_arms=6, action_set=B1, horizon=100, mode="GD", eta=0.25, seed=0).reset()
    a = policy.select()
    fb = np.full((6, 5), 0.9)
    policy.update(a, fb)
    expect = np.where(a >= 1, 0.75 * 0.5 + 0.25 * 0.9, 0.5)
    assert np.allclose(policy._q_gd[0], expect)


# ----------------------------------------------------------------------------- GenCTS
def test_gencts_counts_samples_not_rounds():
    policy = GenCTS(n_arms=6, action_set=B1, seed=0).reset()
    total = np.zeros(6)
    ones = np.zeros(6)
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = policy.select()
        fb = (rng.random((6, 5)) < 0.3).astype(float)  # binary samples: the Bernoulli trick is exact
        policy.update(a, fb)
        mask = np.arange(5)[None, :] < a[:, None]
        total += a
        ones += (fb * mask).sum(axis=1)
    assert np.allclose(policy._p[0] + policy._q[0] - 2, total)
    assert np.allclose(policy._p[0] - 1, ones)


def test_duplicated_policies_route_samples_to_copies():
    policy = CTSDup(n_arms=6, action_set=B1, seed=0).reset()
    a = policy.select()
    fb = pack_samples(a, [[1.0] * k for k in a], n_max=5)
    policy.update(a, fb)
    z = policy._pending[0]
    assert np.array_equal(policy._p[0] - 1, z) and np.array_equal(policy._q[0] - 1, np.zeros(20))
    other = np.array([1, 0, 0, 4, 3, 2])  # not the selected plan: expanded onto the first copies
    policy.update(other, pack_samples(other, [[0.0] * k for k in other], n_max=5))
    assert policy._q[0].sum() - 20 == 10


# ----------------------------------------------------------------------------- validation and state
@pytest.mark.parametrize("cls,kw", [(GenCTS, {}), (CTSDup, {}), (CUCB, {}), (GenLBINFV, {"horizon": 100}), (LBINFVDup, {"horizon": 100})])
def test_bad_feedback_and_actions_raise_and_change_nothing(cls, kw):
    policy = cls(n_arms=6, action_set=B1, seed=0, **kw).reset()
    a = policy.select()
    good = np.full((6, 5), 0.2)
    before = policy.state_dict()
    for bad in (np.full((6, 5), np.nan), np.full((6, 5), np.inf), np.full((6, 4), 0.2), np.full((6, 5), 1.5)):
        with pytest.raises(InvalidInputError):
            policy.update(a, bad)
    with pytest.raises(InvalidInputError):
        policy.update(np.array([1, 0, 0, 4, 3, 3]), good)  # column sums 4 and 7: not a plan
    assert policy.state_dict() == before
    policy.update(a, good)
    clone = cls.from_state_dict(policy.state_dict())
    assert np.array_equal(clone.select(), policy.select())


def test_parameters_are_checked():
    with pytest.raises(InvalidParameterError):
        GenCTS(n_arms=5, action_set=B1)
    with pytest.raises(InvalidParameterError):
        GenLBINFV(n_arms=5, action_set={"kind": "knapsack", "weights": [1, 2, 3, 4, 5], "capacity": 6}, horizon=10)
    with pytest.raises(InvalidParameterError):
        GenLBINFV(n_arms=6, action_set=B1, horizon=10, mode="XY")


# ----------------------------------------------------------------------------- environments
def test_corrupted_comparator_and_adversarial_blocks():
    env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], costs=C_B1.tolist(), regime="corrupted", horizon=10000, seed=0).reset()
    plans = transport_plans([1, 4, 5], [4, 6])
    assert env._best[0].tolist() == plans[np.argmax(plans @ C_B1.ravel())].tolist()  # a* = argmax a . c
    flips = flip_schedule("adversarial", 10000)
    edges = np.flatnonzero(np.diff(flips.astype(int))) + 1
    assert edges[0] == 10 and edges[1] == 26 and len(edges) >= 8


def test_knapsack_environment_regret_and_feedback():
    env = KnapsackSemiBandit(weights=[2, 3, 4, 5, 7], capacity=20, means=[0.10, 0.17, 0.26, 0.30, 0.45], seed=0).reset(n_runs=2)
    step = env.step(np.array([[0, 0, 5, 0, 0], [10, 0, 0, 0, 0]]))
    assert step.regret.round(6).tolist() == [0.0, 0.3]
    assert step.feedback.shape == (2, 5, 10) and np.all(step.feedback[0, 2, 5:] == 0) and np.all(step.feedback[1, 1:] == 0)
    with pytest.raises(InvalidInputError):
        env.step(np.array([[0, 0, 6, 0, 0], [0, 0, 0, 0, 0]]))


# ----------------------------------------------------------------------------- end to end
def test_gencts_beats_cts_dup_on_b1():
    env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], cost_seed=0)
    gen = simulate(env, GenCTS(n_arms=6, action_set=B1), 2000, n_runs=20, seed=(1, 2)).final_regret
    dup = simulate(env, CTSDup(n_arms=6, action_set=B1), 2000, n_runs=20, seed=(1, 3)).final_regret
    assert gen.mean() < 0.7 * dup.mean()


def test_genlbinfv_survives_the_switch_that_breaks_gencts():
    env = TransportSemiBandit(supply=[1, 4, 5], demand=[4, 6], cost_seed=0, regime="corrupted", switch_round=300, horizon=1500)
    lb = simulate(env, GenLBINFV(n_arms=6, action_set=B1, horizon=1500), 1500, n_runs=4, seed=(1, 2)).final_regret
    ts = simulate(env, GenCTS(n_arms=6, action_set=B1), 1500, n_runs=4, seed=(1, 3)).final_regret
    assert lb.mean() < 0.5 * ts.mean()


def test_knapsack_gencts_learns_the_best_filling():
    env = KnapsackSemiBandit(weights=[2, 3, 4, 5, 7], capacity=20, means=[0.10, 0.17, 0.26, 0.30, 0.45])
    res = simulate(env, GenCTS(n_arms=5, action_set=env.action_set), 1500, n_runs=6, seed=(0, 1))
    assert res.totals["optimal"].mean() / 1500 > 0.5


def test_brute_force_plan_count_matches_spec():
    assert len(transport_plans([1, 4, 5], [4, 6])) == 9
    assert len(TransportActions([1, 4, 5], [4, 6]).duplicate().plans()) == 210
    assert len(transport_plans([10, 20, 30], [25, 35])) == 216
    assert sum(1 for _ in itertools.combinations(range(10), 4)) == 210
