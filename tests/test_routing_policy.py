"""The router's default policy (EvidenceThompson): exact moments, the evidence fit, its behaviour, warm start and the budget pacer."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from genbandit import InvalidInputError, simulate
from genbandit.core.base import Policy
from genbandit.envs.prompts import ArrayReplay, Setup4Synthetic
from genbandit.experiments.metrics import compute_metric
from genbandit.policies._stats import argmax_random_ties
from genbandit.policies.classic import ThompsonSampling
from genbandit.policies.kernel import RFFUCB
from genbandit.policies.routing import EvidenceThompson, evidence_ridge


def _unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _direct(policy, X, arms, y, g):
    """Posterior mean and variance of model g at the rows of policy's last contexts, by a fresh dense solve."""
    Phi = policy._features_one(0, X[arms == g])
    Pc, yc = Phi - Phi.mean(0), y[arms == g] - y[arms == g].mean()
    A = Pc.T @ Pc + policy._lam[0, g] * np.eye(Phi.shape[1])
    return Phi.mean(0), np.linalg.solve(A, Pc.T @ yc), np.linalg.inv(A)


def test_online_moments_and_inverse_equal_a_direct_solve():
    rng = np.random.default_rng(0)
    d, n = 5, 300
    policy = EvidenceThompson(n_arms=2, n_features=d, n_components=30, bandwidth_sample=16, max_prompts=0, seed=0)
    X = _unit_rows(rng, n, d)
    arms = rng.integers(2, size=n)
    y = X[:, 0] * (arms == 0) + 0.1 * rng.normal(size=n)
    for i in range(n):
        policy.update(int(arms[i]), float(y[i]), context=X[i])
    for g in range(2):
        phibar, theta, Ainv = _direct(policy, X, arms, y, g)
        assert policy._n[0, g] == (arms == g).sum()
        assert np.allclose(policy._ybar[0, g], y[arms == g].mean())
        assert np.allclose(policy._phibar[0, g], phibar)
        assert np.allclose(policy._theta[0, g], theta, atol=1e-8)
        assert np.allclose(policy._Cinv[0, g], np.triu(Ainv), atol=1e-8)  # the upper triangle: the one kept
    # the context matters for model 0 only: its evidence keeps more effective parameters and slopes ten times larger
    # (model 1's slope precision leans on the pooled one, two pseudo-parameters' worth, so its gamma is not near 0)
    assert policy._gamma[0, 0] > 1.5 * policy._gamma[0, 1]
    assert np.linalg.norm(policy._theta[0, 0]) > 10 * np.linalg.norm(policy._theta[0, 1])


def test_context_free_mean_undoes_the_selection_of_the_per_prompt_steps_by_inverse_propensity_weights():
    """Where the per-prompt steps send a model the prompts hard for the other, its own mean is far below its mean over the
    prompts; the base draw's mean, its outcomes weighted by q(g) / p(g | x) (stabilised inverse-propensity weights), is close
    to it, from the few rounds it was the base draw's choice at the other prompts; its variance is the noise over the
    effective sample size plus one pseudo-round."""
    rng = np.random.default_rng(3)
    d = 6
    centres = rng.normal(size=(3, d))
    mu = np.array([[0.2, 0.5], [0.9, 0.9], [0.9, 0.9]])  # prompt type x model: a hard type where model 1 is better, two tied
    policy = EvidenceThompson(n_arms=2, n_features=d, n_components=30, bandwidth_sample=16, max_prompts=0, seed=0)
    for _ in range(1500):
        c = rng.integers(3)
        x = centres[c] + 0.1 * rng.normal(size=d)
        arm = policy.select(x)
        policy.update(arm, float(mu[c, arm] + 0.05 * rng.normal()), context=x)
    truth, raw, weighted = mu[:, 1].mean(), policy._ybar[0, 1], policy._weighted[0, 1, 2]
    assert policy._n[0, 1] > 300 and truth - raw > 0.2  # model 1 was played on the hard prompts mostly
    assert abs(weighted - truth) < 0.06
    W, W2 = policy._weighted[0, :, 0], policy._weighted[0, :, 1]
    assert W[1] < 0.1 * policy._n[0, 1]  # its plays sent by the per-prompt steps weigh little
    _, _, value, spread, noise, _, _ = policy._scores(centres[:1])
    size = W**2 / W2
    grand = policy._ybar[0] @ policy._n[0] / policy._n[0].sum()
    np.testing.assert_allclose(value[0], (grand + size * policy._weighted[0, :, 2]) / (size + 1.0), rtol=1e-12)
    np.testing.assert_allclose(spread[0], noise[0] / (size + 1.0), rtol=1e-12)


def test_evidence_ridge_finds_noise_and_switches_slopes_off_without_signal():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 10))
    for signal, expect_gamma in ((1.0, (9.0, 10.0)), (0.0, (0.0, 1.0))):
        y = signal * X @ rng.normal(size=10) + 0.3 * rng.normal(size=400)
        Xc, yc = X - X.mean(0), y - y.mean()
        e, V = np.linalg.eigh(Xc.T @ Xc)
        lam, s2, gamma = evidence_ridge(e, V.T @ (Xc.T @ yc), float(yc @ yc), 400)
        assert expect_gamma[0] <= gamma <= expect_gamma[1]
        assert 0.07 < s2 < 0.11  # 0.3^2 = 0.09


def test_evidence_ridge_with_a_noise_prior_does_not_collapse_onto_interpolation():
    """Fewer rows than features: the bare fixed point interpolates (noise and lambda to ~0); pseudo-rounds of pooled noise keep it a fit."""
    rng = np.random.default_rng(4)
    n, D = 12, 40
    X, y = rng.normal(size=(n, D)), 0.3 * rng.normal(size=n)  # pure noise, variance 0.09
    Xc, yc = X - X.mean(0), y - y.mean()
    e, V = np.linalg.eigh(Xc.T @ Xc)
    bare = evidence_ridge(e, V.T @ (Xc.T @ yc), float(yc @ yc), n)
    lam, s2, gamma = evidence_ridge(e, V.T @ (Xc.T @ yc), float(yc @ yc), n, pool=0.09, dof=2.0)
    assert bare[1] < 1e-6 and bare[2] > n - 1.5  # the collapse: every residual degree of freedom spent
    assert 0.03 < s2 < 0.15 and gamma < n / 2 and lam > 1.0


def test_evidence_ridge_with_a_pooled_slope_precision_borrows_it_where_its_own_rows_say_little():
    """12 rows, 40 features, slopes of precision 100: alone the evidence puts the precision anywhere from 70 to 1,900;
    with two pseudo-parameters at the precision the other models found (100) it stays within a factor of two of it."""
    own, pooled = [], []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        n, D = 12, 40
        X = rng.normal(size=(n, D))
        y = X @ (0.1 * rng.normal(size=D)) + 0.3 * rng.normal(size=n)
        Xc, yc = X - X.mean(0), y - y.mean()
        e, V = np.linalg.eigh(Xc.T @ Xc)
        for out, kw in ((own, {}), (pooled, {"alpha_pool": 100.0, "alpha_dof": 2.0})):
            lam, s2, _ = evidence_ridge(e, V.T @ (Xc.T @ yc), float(yc @ yc), n, pool=0.09, dof=2.0, **kw)
            out.append(lam / s2)
    assert max(own) > 1000.0
    assert all(50.0 < alpha < 200.0 for alpha in pooled)


@pytest.mark.parametrize("lam0", [0.05, 40.0])
def test_a_refit_without_eigenvectors_matches_the_eigendecomposition(lam0):
    """From ``(C + lambda_0 I)^-1`` alone, the tridiagonal refit finds the eigendecomposition's lambda, noise, gamma,
    ``(C + lambda I)^-1`` and theta, whether lambda moves down from ``lambda_0`` or up, with ``C`` short of full rank."""
    from genbandit.policies import routing

    rng = np.random.default_rng(3)
    D, n = 30, 20
    Phi = rng.normal(size=(n, D)) / np.sqrt(D)
    y = Phi @ (0.3 * rng.normal(size=D)) + 0.2 * rng.normal(size=n)
    Pc, yc = Phi - Phi.mean(0), y - y.mean()
    policy = EvidenceThompson(n_arms=2, n_features=4, n_components=D, seed=0)
    policy.reset(1)
    policy._Cinv[0, 0] = np.triu(np.linalg.inv(Pc.T @ Pc + lam0 * np.eye(D)))
    policy._lam[0, 0] = lam0
    data = (Pc.T @ yc, float(yc @ yc), n, min(lam0, 1.0), {"pool": 0.05, "dof": 2.0, "alpha_pool": 0.0, "alpha_dof": 2.0})
    shifted = routing._shifted_fit(policy._Cinv[0, 0], lam0, *data)
    eigen = policy._eigen_fit(0, 0, None, *data)
    assert (shifted[0] - lam0) * (1 if lam0 < 1 else -1) > 0  # lambda moved up from 0.05, down from 40
    np.testing.assert_allclose(shifted[:3], eigen[:3], rtol=1e-10)
    np.testing.assert_allclose(shifted[3], eigen[3], rtol=1e-10, atol=1e-12 * np.abs(eigen[3]).max())
    np.testing.assert_allclose(shifted[4], eigen[4], rtol=1e-10, atol=1e-12 * np.abs(eigen[4]).max())
    assert not np.tril(shifted[3], -1).any()  # the upper triangle only, as the kernels keep it


def test_fit_logged_equals_updating_row_by_row():
    rng = np.random.default_rng(2)
    d, n = 6, 120
    X, arms, y = _unit_rows(rng, n, d), rng.integers(3, size=n), rng.random(n)
    one = EvidenceThompson(n_arms=3, n_features=d, n_components=25, bandwidth_sample=20, seed=4)
    for i in range(n):
        one.update(int(arms[i]), float(y[i]), context=X[i])
    bulk = EvidenceThompson(n_arms=3, n_features=d, n_components=25, bandwidth_sample=20, seed=4).fit_logged(X[:70], arms[:70], y[:70])
    bulk.fit_logged(X[70:], arms[70:], y[70:])
    for g in range(3):
        one._refit(0, g)
        bulk._refit(0, g)
    assert np.array_equal(one._n, bulk._n)
    for name in ("_ybar", "_syy"):
        assert np.allclose(getattr(one, name), getattr(bulk, name))
    short = EvidenceThompson(n_arms=3, n_features=d, n_components=25, bandwidth_sample=200, seed=4).fit_logged(X, arms, y)
    assert short._bandwidth[0] == 0 and len(short._buffer[0]) == n  # too few rows for the median heuristic: they wait
    assert np.array_equal(short._n[0], np.bincount(arms, minlength=3))


def test_fit_logged_then_rows_equal_rows_then_fit_logged_under_one_bandwidth():
    rng = np.random.default_rng(3)
    d = 4
    X, arms, y = _unit_rows(rng, 90, d), rng.integers(2, size=90), rng.random(90)
    a = EvidenceThompson(n_arms=2, n_features=d, n_components=15, bandwidth_sample=30, seed=0).fit_logged(X[:30], arms[:30], y[:30])
    b = EvidenceThompson(n_arms=2, n_features=d, n_components=15, bandwidth_sample=30, seed=0).fit_logged(X[:30], arms[:30], y[:30])
    for i in range(30, 90):
        a.update(int(arms[i]), float(y[i]), context=X[i])
    b.fit_logged(X[30:], arms[30:], y[30:])
    for name in ("_n", "_ybar", "_syy", "_phibar", "_cxy"):
        assert np.allclose(getattr(a, name), getattr(b, name), atol=1e-8), name
    # each model's slope precision leans on the one pooled over models, as the refits along each path left them: refitted
    # in turn, both reach the same joint fixed point
    for _ in range(25):
        for g in range(2):
            a._refit(0, g)
            b._refit(0, g)
    for name in ("_lam", "_theta", "_Cinv"):
        assert np.allclose(getattr(a, name), getattr(b, name), rtol=1e-6, atol=1e-8), name


def test_routes_each_prompt_type_to_its_expert():
    env = Setup4Synthetic(setup="expert", contexts="gaussian", dim=12, n_prompts_per_category=40, seed=3)
    policy = EvidenceThompson(n_arms=5, n_features=12, seed=1)
    result = simulate(env, policy, 1500, n_runs=2, seed=5)
    otb = compute_metric("otb", result, env, policy)
    assert np.all(otb > 0.15)  # the best possible is about +0.32; the best single model's is 0


def test_pure_noise_context_costs_nothing_against_context_free_thompson():
    rng = np.random.default_rng(4)
    means = np.array([0.45, 0.6, 0.5])
    T, R = 1500, 8
    got = {}
    for name, make in (("ours", lambda: EvidenceThompson(n_arms=3, n_features=16, seed=2)), ("ts", lambda: ThompsonSampling(n_arms=3, seed=2))):
        policy = make().reset(R)
        total = np.zeros(R)
        draws = np.random.default_rng(9)
        for t in range(T):
            ctx = _unit_rows(rng, R, 16)
            arms = policy.select_batch(ctx) if policy.contextual else policy.select_batch()
            r = (draws.random(R) < means[arms]).astype(float)
            policy.update_batch(arms, r, ctx) if policy.contextual else policy.update_batch(arms, r)
            total += r
        got[name] = total.mean() / T
    assert got["ours"] >= got["ts"] - 0.01
    assert got["ours"] > 0.58


def test_a_recurring_prompt_goes_to_its_own_best_model():
    rng = np.random.default_rng(5)
    d = 8
    X = _unit_rows(rng, 40, d)
    # model 0 is the best single model (0.8 against 0.6 on 39 prompts of 40), but prompt 0 always fails on it and passes on model 1
    p = np.tile([0.8, 0.6], (40, 1))
    p[0] = [0.0, 1.0]
    policy = EvidenceThompson(n_arms=2, n_features=d, seed=0)
    for t in range(800):
        i = int(rng.integers(40))
        arm = policy.select(X[i])
        policy.update(arm, float(rng.random() < p[i, arm]), context=X[i])
    assert [policy.select(X[0]) for _ in range(20)].count(1) >= 19
    assert [policy.select(X[5]) for _ in range(20)].count(0) >= 15


def test_a_recurring_prompts_own_outcomes_sharpen_its_posterior_and_never_widen_it():
    rng = np.random.default_rng(7)
    d, n, prompts = 16, 1500, 300
    X = _unit_rows(rng, prompts, d)
    p = rng.uniform(0.0, 1.0, (prompts, 2))  # each prompt its own mean score: a per-prompt effect the kernel does not carry
    rows, arms = rng.integers(prompts, size=n), rng.integers(2, size=n)
    arms[rows == 0] = 0  # prompt 0 recurs, played on model 0 only
    y = p[rows, arms] + 0.1 * rng.standard_normal(n)
    cells, kernel = (EvidenceThompson(n_arms=2, n_features=d, max_prompts=m, seed=0).fit_logged(X[rows], arms, y) for m in (prompts, 0))
    mean, var = cells.posterior(X[:1])
    kernel_mean, kernel_var = kernel.posterior(X[:1])  # the same kernel posterior, no recurring-prompt cells: what a new prompt gets
    noise, within = kernel._work.out[4, 0], cells._within[0]  # each model's noise (at a recurring prompt the policy keeps s2_w there)
    within_prompt = (noise.max() + within[0]) / (1.0 + within[1])
    random_effect = noise - within_prompt
    assert random_effect[1] > kernel_var[0, 1]  # the prompt's random effect would more than double model 1's variance there
    assert np.isclose(mean[0, 1], kernel_mean[0, 1], rtol=1e-12) and var[0, 1] == kernel_var[0, 1]  # no outcome of model 1 at it
    assert var[0, 0] < 0.5 * kernel_var[0, 0] and abs(mean[0, 0] - y[rows == 0].mean()) < abs(kernel_mean[0, 0] - y[rows == 0].mean())
    assert np.allclose(cells._work.out[4, 0], within_prompt)  # the information-directed step measures an outcome against s2_w


def test_at_a_prompt_seen_before_information_directed_sampling_decides_where_the_base_draw_is_not_its_leader():
    from genbandit.policies._routing_numba import _given_base, information_directed
    # model 1 leads at the prompt by less than one posterior standard deviation of the difference: a new prompt keeps the
    # base draw (model 0), a prompt seen before (its posterior holds its own outcomes) goes to the information-directed law
    mean, var = np.array([[0.50, 0.55]]), np.array([[0.01, 0.01]])
    value, spread, noise = np.array([[0.5, 0.5]]), np.zeros((1, 2)), np.array([[0.05, 0.05]])
    new, seen = np.empty(2), np.empty(2)
    _given_base(mean, var, value, spread, noise, 0, 0, False, 4.0, 1.0, 1e-12, new)
    _given_base(mean, var, value, spread, noise, 0, 0, True, 4.0, 1.0, 1e-12, seen)
    assert new.tolist() == [1.0, 0.0]
    a, b, q = information_directed(mean[0], var[0], noise[0], 1e-12)
    expected = np.zeros(2)
    expected[a] += q
    expected[b] += 1.0 - q
    assert np.allclose(seen, expected) and seen[1] > 0.5
    _given_base(mean, var, value, spread, noise, 0, 1, True, 4.0, 1.0, 1e-12, seen)  # the base draw leads there: it plays
    assert seen.tolist() == [0.0, 1.0]


def test_initial_plays_play_every_model_that_often_first_and_the_law_says_so():
    rng = np.random.default_rng(6)
    policy = EvidenceThompson(n_arms=3, n_features=5, initial_plays=3, seed=0)
    played = []
    for t in range(9):
        x = _unit_rows(rng, 1, 5)[0]
        probs = policy.probabilities(x)
        arm = policy.select(x)
        assert probs[arm] > 0 and np.allclose(probs[probs > 0], 1.0 / (probs > 0).sum())  # uniform over those short of 3
        played.append(arm)
        policy.update(arm, 0.0 if arm == 0 else 1.0, context=x)  # model 0 fails: one play would settle it, three must come
    assert np.bincount(played, minlength=3).tolist() == [3, 3, 3]


def test_budget_pacer_keeps_mean_spend_near_the_target():
    rng = np.random.default_rng(6)
    means, costs = np.array([0.5, 0.7, 0.8]), np.array([0.1, 1.0, 3.0])
    for budget in (0.5, 1.5):
        policy = EvidenceThompson(n_arms=3, n_features=4, budget=budget, seed=1)
        spent = 0.0
        T = 3000
        for t in range(T):
            x = _unit_rows(rng, 1, 4)[0]
            arm = policy.select(x)
            policy.update(arm, {"reward": float(rng.random() < means[arm]), "cost": float(costs[arm])}, context=x)
            spent += costs[arm]
        assert abs(spent / T - budget) <= 0.05 * budget
        assert np.isclose(policy.spent[0], spent)


def test_feedback_with_a_budget_needs_reward_and_cost():
    policy = EvidenceThompson(n_arms=2, n_features=3, budget=1.0, seed=0)
    with pytest.raises(InvalidInputError, match="reward"):
        policy.update(0, 1.0, context=[1.0, 0.0, 0.0])
    with pytest.raises(InvalidInputError, match="cost"):
        policy.update(0, {"reward": 1.0, "cost": -1.0}, context=[1.0, 0.0, 0.0])
    with pytest.raises(InvalidInputError, match="fit_logged"):
        policy.fit_logged(np.ones(3), [0], [1.0])


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(7)
    X = _unit_rows(rng, 30, 5)
    policy = EvidenceThompson(n_arms=3, n_features=5, n_components=20, bandwidth_sample=10, seed=3)
    for t in range(80):
        x = X[t % 30]
        policy.update(policy.select(x), float(rng.random()), context=x)
    again = Policy.from_state_dict(policy.state_dict())
    picks = [(policy.select(X[i]), again.select(X[i])) for i in range(30)]
    assert all(a == b for a, b in picks)


@pytest.mark.parametrize("make", [
    lambda: EvidenceThompson(n_arms=3, n_features=5, n_components=20, bandwidth_sample=10, seed=3),
    lambda: RFFUCB(n_arms=3, n_features=5, seed=3),
], ids=["evidence-thompson", "rff-ucb"])
def test_a_pickled_or_copied_policy_after_a_select_continues_identically(make):
    """Pickled or deep-copied between a ``select`` and its ``update`` (a policy sent to a worker, say), the copy leaves the
    per-decision scratch behind (EvidenceThompson's compiled state cannot be pickled) and decides as the original does."""
    import copy
    import pickle

    rng = np.random.default_rng(9)
    X = _unit_rows(rng, 30, 5)
    policy = make()
    for t in range(60):
        policy.update(policy.select(X[t % 30]), float(rng.random()), context=X[t % 30])
    arm = policy.select(X[0])
    copies = [pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)]
    rewards = rng.random(30)
    for other in [policy, *copies]:
        other.update(arm, 0.5, context=X[0])
    picks = []
    for i in range(1, 30):
        chosen = [p.select(X[i]) for p in (policy, *copies)]
        picks.append(chosen)
        for p, a in zip((policy, *copies), chosen):
            p.update(a, float(rewards[i]), context=X[i])
    assert all(len(set(c)) == 1 for c in picks), picks


def test_a_state_saved_before_the_weighted_base_mean_loads_with_its_outcomes_at_weight_one():
    """A router's snapshot of the policy as it was (the regression-adjusted base mean: ``_Cinv_zbar``, no ``_weighted``) still
    loads, each model's outcomes so far weighing 1, and the policy goes on deciding."""
    from genbandit.core.serialization import to_jsonable

    rng = np.random.default_rng(8)
    X = _unit_rows(rng, 30, 5)
    policy = EvidenceThompson(n_arms=3, n_features=5, n_components=20, bandwidth_sample=10, seed=3)
    for t in range(80):
        policy.update(policy.select(X[t % 30]), float(rng.random()), context=X[t % 30])
    old = policy.state_dict()
    old["state"] = {k: v for k, v in old["state"].items() if k != "_weighted"}
    old["state"]["_Cinv_zbar"] = to_jsonable(np.zeros((1, 3, 20)))
    with pytest.raises(InvalidInputError, match="_Cinv_zbar"):
        Policy.from_state_dict(old)  # read as it is, the layout is refused, naming what differs
    again = EvidenceThompson.from_state_dict(old)
    n = policy._n[0].astype(float)
    np.testing.assert_array_equal(again._weighted[0], np.stack([n, n, policy._ybar[0]], axis=-1))
    assert all(again.select(X[i]) in (0, 1, 2) for i in range(10))


class _RecomputingRFFUCB(RFFUCB):
    """RFF-UCB as it was before features were cached: features recomputed in update, one Sherman-Morrison per run in a loop."""

    def _select(self, contexts):
        f = self._features(contexts)
        h = np.matmul(self._Ainv, f[:, None, :, None])[..., 0]
        mu, sd = (h * self._b).sum(-1), np.sqrt(np.maximum((h * f[:, None, :]).sum(-1), 0.0))
        return argmax_random_ties(np.where(self._counts == 0, np.inf, mu + self._eta() * sd), self._rng)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.shape[0])
        f = self._features(contexts)
        for r, arm in enumerate(actions):
            h = self._Ainv[r, arm] @ f[r]
            self._Ainv[r, arm] -= np.outer(h, h / (1.0 + f[r] @ h))
        self._b[rows, actions] += feedback[:, None] * f
        self._counts[rows, actions] += 1


@pytest.mark.parametrize("n_runs, feature_map", [(1, "cos-sin"), (3, "cos-phase")])
def test_rffucb_with_cached_features_decides_as_before(n_runs, feature_map):
    env = Setup4Synthetic(setup="expert", contexts="gaussian", dim=16, n_prompts_per_category=30, seed=2)
    params = dict(n_arms=5, n_features=16, n_components=60, feature_map=feature_map, sigma=1.0, seed=7)
    got = [simulate(env, cls(**params), 1500, n_runs=n_runs, seed=3) for cls in (RFFUCB, _RecomputingRFFUCB)]
    assert np.array_equal(got[0].counts, got[1].counts)
    assert np.array_equal(got[0].reward, got[1].reward)


# ------------------------------------------------------------------------------------------ in the router
ROUTER_MODELS = [{"name": "small", "base_url": "http://127.0.0.1:9/v1", "cost": 0.1}, {"name": "large", "base_url": "http://127.0.0.1:9/v1", "cost": 1.0}]


def _router_config(tmp_path, extra: str = "", policy: str = "evidence-thompson"):
    from router_helpers import write_config

    from genbandit.router import load_router_config

    path = write_config(tmp_path / "router.toml", models=ROUTER_MODELS, policy=policy, embedding={"kind": "none", "dim": 2},
                        store={"path": str(tmp_path / "state.db")})
    path.write_text(path.read_text() + extra)
    return load_router_config(path)


def test_router_warm_start_folds_the_logged_table_once(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from genbandit.router import Router

    rng = np.random.default_rng(0)
    x, z = [1.0, 0.0], [0.0, 1.0]
    rows = [{"embedding": json.dumps(ctx), "model": name, "reward": float(rng.random() < p)}
            for _ in range(60) for ctx, p_small, p_large in ((x, 0.9, 0.2), (z, 0.1, 0.8)) for name, p in (("small", p_small), ("large", p_large))]
    pd.DataFrame(rows).to_csv(tmp_path / "logged.csv", index=False)
    config = _router_config(tmp_path, f'\n[warm_start]\npath = "{tmp_path / "logged.csv"}"\nembedding_column = "embedding"\n')
    router = Router(config)
    assert router.policy.t == len(rows) == 240
    assert [router.route(embedding=x).arm for _ in range(10)].count(0) >= 9
    assert [router.route(embedding=z).arm for _ in range(10)].count(1) >= 9
    router.close()
    again = Router(config)  # the store is not new: the table is not counted twice
    assert again.policy.t == 240
    again.close()


def test_router_budget_prices_cost_and_reports_spend(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from genbandit.router import Router, create_app

    config = _router_config(tmp_path, "\n[budget]\ntarget_cost = 0.4\n")
    router = Router(config)
    assert router.policy.budget == 0.4
    rng = np.random.default_rng(1)
    for t in range(1500):
        ctx = list(_unit_rows(rng, 1, 2)[0])
        d = router.route(embedding=ctx)
        router.feedback(d.id, float(rng.random() < (0.5 if d.arm == 0 else 0.8)))
    stats = router.stats()
    assert stats["budget"]["target_cost"] == 0.4 and abs(stats["budget"]["mean_cost"] - 0.4) < 0.04
    with TestClient(create_app(config, router=router)) as client:
        text = client.get("/metrics").text
    assert "genbandit_router_budget_target_cost 0.4" in text and "genbandit_router_mean_cost" in text
    router.close()


@pytest.mark.parametrize(
    "extra, policy, message",
    [
        ("\n[budget]\ntarget_cost = 0.4\n", "router_helpers:DisjointLinUCB", "keeps a budget"),
        ("\n[budget]\ntarget_cost = -1\n", "evidence-thompson", "must be > 0"),
        ("\n[warm_start]\nmodel_column = \"m\"\n", "evidence-thompson", "needs a path"),
    ],
)
def test_router_budget_and_warm_start_are_checked(tmp_path, extra, policy, message):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from genbandit.core.validation import InvalidParameterError
    from genbandit.router import Router

    with pytest.raises(InvalidParameterError, match=message):
        Router(_router_config(tmp_path, extra, policy=policy))


def test_router_default_group_replays_each_router_under_a_budget(tmp_path):
    """The reproduce pak-ucb group through the engine: router-default and ParetoBandit's package under one budget, on 80 real prompts."""
    pytest.importorskip("pareto_bandit")
    pytest.importorskip("sentence_transformers")
    from genbandit.experiments.config import load_config
    from genbandit.experiments.runner import plan_units
    from genbandit.experiments.units import run_unit

    config = load_config({
        "name": "router-default-test", "title": "t", "horizon": 80, "n_runs": 2, "seed": 0,
        "metrics": ["mean_reward", "mean_cost", "otb", "opr", "us_per_decision", "spend_over_budget"],
        "scenarios": [{"name": "real", "environment": "paretobandit-replay", "params": {"limit": 80, "cache_dir": str(tmp_path), "reveal_cost": True},
                       "policies": ["router-default", "ParetoBandit", "best-single"],
                       "policy_params": {"router-default": {"budget": 0.006}, "ParetoBandit": {"budget": 0.006}}}],
        "policies": [{"label": "router-default", "policy": "evidence-thompson"}, {"label": "ParetoBandit", "policy": "paretobandit"},
                     {"label": "best-single"}],
    })
    results = {u.policy.label: run_unit(u) for u in plan_units(config)}
    assert set(results) == {"router-default", "ParetoBandit", "best-single"}
    for label in ("router-default", "ParetoBandit"):
        assert results[label].error is None, results[label].error
        m = results[label].metrics
        assert len(m["mean_reward"]) == 2 and all(0.0 < v <= 1.0 for v in m["mean_reward"])
        assert all(0.0 < v < 5.0 for v in m["spend_over_budget"])
        assert m["us_per_decision"][0] > 0
    assert results["best-single"].metrics["otb"] == [0.0, 0.0]
    assert "spend_over_budget" not in results["best-single"].metrics  # no budget, no ratio to it
    # ParetoBandit's router and the best single model replay the stream exactly as the former replay loop did
    pareto, single = results["ParetoBandit"].metrics, results["best-single"].metrics
    assert pareto["mean_reward"] == pytest.approx([0.847375, 0.8565], rel=1e-12) and pareto["opr"] == [0.5, 0.4875]
    assert pareto["spend_over_budget"] == pytest.approx([0.8500208333333336, 0.8939430208333338], rel=1e-12)
    assert single["mean_reward"] == pytest.approx([0.9278125, 0.9278125], rel=1e-12) and single["opr"] == [0.6375, 0.6375]


def test_paretobandit_without_its_registry_prior_starts_knowing_nothing_about_the_models():
    """ParetoBandit's cold start carries its registry's +0.05 on the slow model (gemini-2.5-pro) and so plays it from the first
    round; ``registry_prior=False`` zeroes that bias and nothing else: the first plays spread over the models."""
    pytest.importorskip("pareto_bandit")
    from genbandit.policies.paretobandit import ParetoBanditRouter

    X = _unit_rows(np.random.default_rng(0), 1, 384)
    slow = "google/gemini-2.5-pro"
    firsts, bandits = {}, {}
    for prior in (True, False):
        policy = ParetoBanditRouter(n_arms=3, features="raw", registry_prior=prior, seed=0)
        policy.reset(12)
        firsts[prior] = [policy.models[a] for a in policy.select_batch(np.repeat(X, 12, axis=0))]
        bandits[prior] = policy.routers[0].bandit
    assert firsts[True] == [slow] * 12
    assert len(set(firsts[False])) == 3
    for prior, bias in ((True, 0.05), (False, 0.0)):
        assert {m: bandits[prior].theta[m][-1] for m in bandits[prior].models} == pytest.approx(
            {m: bias if m == slow else 0.0 for m in bandits[prior].models}, abs=1e-12)
    on, off = bandits[True], bandits[False]
    assert (on.alpha, on.gamma, on.dim, on.init_lambda) == (off.alpha, off.gamma, off.dim, off.init_lambda)
    assert all(np.array_equal(on.A[m], off.A[m]) for m in on.models)
    from genbandit.core.validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="registry_prior"):
        ParetoBanditRouter(n_arms=3, registry_prior=1, seed=0)


def test_paretobandit_loads_its_shipped_pca_silently_and_it_transforms_as_its_arrays_say():
    """The package's PCA was pickled by an older scikit-learn; the adapter silences the version warning because the loaded
    PCA's transform is still the projection its stored arrays define (checked here), and only that warning."""
    pytest.importorskip("pareto_bandit")
    import warnings

    from genbandit.policies.paretobandit import ParetoBanditRouter

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = ParetoBanditRouter(n_arms=3, features="pca", seed=0)
        X = _unit_rows(np.random.default_rng(1), 5, 384)
        policy.update(policy.select(X[0]), 0.5, X[0])
    pca = policy.feature_service.pca
    by_hand = (X - pca.mean_) @ pca.components_.T / (np.sqrt(pca.explained_variance_) if pca.whiten else 1.0)
    assert np.allclose(pca.transform(X), by_hand, rtol=1e-6, atol=1e-7)


def _trained_on_bernoulli_models():
    """An EvidenceThompson after 40 rounds on three Bernoulli models (0.4, 0.5, 0.6) with 4-d contexts, and a new context."""
    from genbandit.policies.routing import EvidenceThompson

    rng = np.random.default_rng(3)
    policy = EvidenceThompson(n_arms=3, n_features=4, n_components=20, bandwidth_sample=8, seed=0)
    for _ in range(40):
        x = rng.normal(size=4)
        arm = policy.select(x)
        policy.update(arm, float(rng.random() < (0.4, 0.5, 0.6)[arm]), x)
    return policy, rng.normal(size=4)


def _played(policy, rounds, rng, means=(0.4, 0.5, 0.6), costs=(1.0, 2.0, 4.0)):
    """``policy`` after ``rounds`` rounds on Bernoulli models with 4-d contexts (costs as feedback when it has a budget)."""
    for _ in range(rounds):
        x = rng.normal(size=4)
        arm = policy.select(x)
        reward = float(rng.random() < means[arm])
        policy.update(arm, reward if policy.budget is None else {"reward": reward, "cost": costs[arm]}, x)
    return policy


def _state(name):
    """(policy, context) in the states the propensity test covers."""
    rng = np.random.default_rng(11)
    make = lambda **kw: EvidenceThompson(n_arms=3, n_features=4, n_components=20, bandwidth_sample=8, seed=0, **kw)
    if name == "untried":  # one model played: the two others first, uniformly
        return _played(make(), 1, rng), rng.normal(size=4)
    if name == "cold":  # each model a few times: Beta laws with most of their mass at the ends of the range
        return _played(make(), 5, rng), rng.normal(size=4)
    if name == "trained":
        return _trained_on_bernoulli_models()
    if name == "peaked":  # 6,000 logged rounds, then 30 live ones: Beta laws a few thousandths wide
        policy = make()
        X = rng.normal(size=(6000, 4))
        arms = rng.integers(3, size=6000)
        policy.fit_logged(X, arms, (rng.random(6000) < np.array([0.5, 0.52, 0.51])[arms]).astype(float))
        return _played(policy, 30, rng, means=(0.5, 0.52, 0.51)), rng.normal(size=4)
    if name == "budget":
        return _played(make(budget=2.0), 60, rng), rng.normal(size=4)
    if name == "override_z None":  # per-prompt Thompson sampling: Gaussian draws
        return _played(make(override_z=None), 40, rng), rng.normal(size=4)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["untried", "cold", "trained", "peaked", "budget", "override_z None"])
def test_evidence_thompson_probabilities_are_the_law_of_its_select_and_leave_it_unchanged(name):
    """probabilities() (what the router logs as the propensity) is the law of select on the same state: chi-square
    against 6,000 selects at fixed seeds, and no select ever takes a model it gives probability 0."""
    from scipy.stats import chi2

    policy, x = _state(name)
    state = policy.state_dict()
    probs = policy.probabilities(x)
    assert policy.state_dict() == state  # the next select is the one it would have been
    assert probs.sum() == pytest.approx(1.0, abs=1e-12) and np.all(probs >= 0)
    clone = EvidenceThompson.from_state_dict(state)
    n = 6000
    picks = []
    for seed in range(n):
        clone._rng = np.random.default_rng(seed)
        picks.append(clone.select(x))
    counts = np.bincount(picks, minlength=3)
    assert np.all(counts[probs == 0] == 0)
    live = probs > 0
    stat = float((((counts - n * probs) ** 2)[live] / (n * probs[live])).sum())
    assert stat < chi2.ppf(0.999, max(live.sum() - 1, 1)), (probs, counts / n)
    if name == "untried":
        assert sorted(probs.tolist()) == [0.0, 0.5, 0.5]
    else:
        assert probs.max() < 0.999  # a real distribution in every other state


def test_argmax_laws_are_exact_where_the_answer_is_known():
    """The law of the largest draw: closed forms for two Gaussians and two Beta laws, and a dense quadrature otherwise."""
    from scipy import integrate, stats
    from scipy.special import ndtr

    from genbandit.policies.routing import beta_argmax_law, gaussian_argmax_law

    for m, s in (([0.0, 1.0], [1.0, 1.0]), ([0.3, 0.31], [1e-3, 2e-3]), ([5.0, -2.0], [0.1, 3.0])):
        law = gaussian_argmax_law(np.array(m), np.array(s))
        assert law[1] == pytest.approx(ndtr((m[1] - m[0]) / np.hypot(*s)), abs=2e-5)
    # P(Beta(a1, b1) > Beta(a0, b0)) for an integer a1: sum_(i < a1) B(a0 + i, b0 + b1) / ((b1 + i) B(1 + i, b1) B(a0, b0))
    from scipy.special import betaln

    a, b = np.array([2.0, 3.0]), np.array([3.0, 2.0])
    exact = sum(np.exp(betaln(a[0] + i, b[0] + b[1]) - np.log(b[1] + i) - betaln(1 + i, b[1]) - betaln(a[0], b[0])) for i in range(int(a[1])))
    assert beta_argmax_law(a, b)[1] == pytest.approx(exact, abs=1e-5)
    # three Beta laws, wide, skewed, and after thousands of rounds, against scipy's adaptive quadrature of int f_b prod F_j
    for a, b in (([2.0, 3.0, 4.0], [3.0, 3.0, 2.0]), ([0.7, 5.0, 1.5], [0.9, 2.0, 1.2]), ([3000.0, 2950.0, 100.0], [1000.0, 990.0, 30.0])):
        a, b = np.array(a), np.array(b)
        law = beta_argmax_law(a, b)
        for g in range(3):
            lo, hi = stats.beta.ppf([1e-13, 1 - 1e-13], a[g], b[g])
            f = lambda u, g=g, a=a, b=b: stats.beta.pdf(u, a[g], b[g]) * np.prod([stats.beta.cdf(u, a[j], b[j]) for j in range(3) if j != g])
            assert law[g] == pytest.approx(integrate.quad(f, lo, hi, limit=400, points=np.linspace(lo, hi, 20)[1:-1])[0], abs=1e-4)


def test_compiled_kernels_decide_as_their_plain_python_versions(monkeypatch):
    """The numba kernels and their plain-Python versions (``py_func``) give the same decisions and posteriors round for round."""
    from types import SimpleNamespace

    from genbandit.policies import _routing_numba, routing

    def play(policy, seed):
        rng = np.random.default_rng(seed)
        centres = rng.normal(size=(3, 6))
        picks = []
        for t in range(300):
            x = centres[t % 3] + (0.3 * rng.normal(size=6) if t % 2 else 0.0)  # every other prompt recurs exactly
            arm = policy.select(x)
            policy.update(arm, float(rng.random() < (0.2, 0.5, 0.8)[(arm + t) % 3]), x)
            picks.append(arm)
        return picks, policy.posterior(centres[:1])

    compiled = play(EvidenceThompson(n_arms=3, n_features=6, n_components=12, bandwidth_sample=8, seed=4), 1)
    names = ("prompt_terms", "scores", "posterior_terms", "prepare", "learn", "count_cell", "beta_laws", "recurring", "priced", "pace", "override",
             "override_laws", "decide", "context_free_draws", "_beta", "shifted_moments")
    plain = SimpleNamespace(SYMV=_routing_numba.SYMV, state=lambda **fields: SimpleNamespace(**fields),  # the plain kernels read its fields
                            **{name: getattr(_routing_numba, name).py_func for name in names})
    for name in ("prompt_terms", "scores", "posterior_terms", "recurring", "priced", "beta_laws",  # what the plain prepare calls
                 "prepare", "context_free_draws", "override", "_beta"):  # and the plain decide
        monkeypatch.setattr(_routing_numba, name, getattr(plain, name))
    policy = EvidenceThompson(n_arms=3, n_features=6, n_components=12, bandwidth_sample=8, seed=4)

    def bit_generator(address):  # in plain Python, numba's distributions draw from the NumPy bit generator itself (through ctypes)
        assert address == policy._rng.bit_generator.ctypes.bit_generator.value
        return policy._rng.bit_generator

    monkeypatch.setattr(_routing_numba, "_bit_generator", bit_generator)
    monkeypatch.setattr(routing, "_kernels", lambda: plain)
    python = play(policy, 1)
    assert compiled[0] == python[0]
    np.testing.assert_allclose(compiled[1], python[1], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.MT19937, np.random.Philox, np.random.SFC64])
def test_compiled_draws_are_numpys_numbers_and_leave_its_generator_where_numpy_would(bit_generator):
    """The compiled Beta and uniform draws take the numbers NumPy's Generator.beta and .random take from the same state, in every
    regime of the laws (Johnk's algorithm with powers that underflow, shapes at 1, the Gamma ratio), and leave the same state."""
    from genbandit.policies._routing_numba import context_free_draws

    rng = np.random.default_rng(5)
    lows = np.exp(rng.uniform(np.log(1e-6), 0.0, (400, 2, 3)))  # a, b <= 1: Johnk's algorithm, powers often below the least double
    mixed = np.exp(rng.uniform(np.log(1e-6), np.log(1e4), (400, 2, 3)))
    ones = np.where(rng.random((200, 2, 3)) < 0.5, 1.0, rng.uniform(0.5, 3.0, (200, 2, 3)))
    compiled, numpy_ = np.random.Generator(bit_generator(7)), np.random.Generator(bit_generator(7))
    address = compiled.bit_generator.ctypes.bit_generator.value
    for ab in np.concatenate([lows, mixed, ones]).reshape(-1, 2, 1, 3):
        draws = np.empty(4)
        context_free_draws(address, ab, 1, draws)
        expected = [numpy_.beta(a, b) for a, b in zip(ab[0, 0], ab[1, 0])] + [numpy_.random()]
        assert draws.tolist() == expected
    assert compiled.standard_normal(3).tolist() == numpy_.standard_normal(3).tolist()  # the generators go on alike
    assert compiled.bit_generator.random_raw(1000).tolist() == numpy_.bit_generator.random_raw(1000).tolist()


def test_information_directed_step_leaves_a_weak_wide_model_alone_and_tries_it_when_close():
    """Where a per-prompt Thompson draw would try the weak model with a wide posterior, information-directed sampling does not."""
    from genbandit.policies._routing_numba import information_directed

    def law(mean, var, noise):
        a, b, q = information_directed(np.array(mean), np.array(var), np.array(noise), 1e-12)
        out = np.zeros(len(mean))
        out[a] += q
        out[b] += 1.0 - q
        return out

    rng = np.random.default_rng(0)
    mean, var, noise = [0.71, 0.893, 0.884], [0.13**2, 0.021**2, 0.015**2], [0.018, 0.010, 0.007]  # the weak model 0.18 below
    thompson = np.bincount((np.array(mean) + np.sqrt(var) * rng.standard_normal((4000, 3))).argmax(1), minlength=3) / 4000
    assert law(mean, var, noise)[0] == 0.0 and thompson[0] > 0.05
    # the same wide model, nearly as good: now what it would teach outweighs its gap, and it is tried
    assert law([0.885, 0.893, 0.884], var, noise)[0] > 0.05
    # two equally good models: the one whose outcome teaches more (wider posterior, same noise) is played
    assert law([0.5, 0.5], [0.01, 0.04], [0.1, 0.1]).tolist() == [0.0, 1.0]


def test_a_recurring_prompts_kept_features_change_no_decision_and_no_state(monkeypatch):
    """A prompt that recurs has its features kept and reused, the same numbers: decisions, propensities and every learned array as
    a policy that computes them each time, in one run and in three, with contexts equal to a kept one only to single precision
    (the same prompt key), whose own features are computed."""
    from genbandit.policies.routing import _key

    rng = np.random.default_rng(3)
    prompts = rng.normal(size=(12, 6))
    rows = rng.integers(0, 12, 400)
    nudged = rng.random(400) < 0.1
    X = prompts[rows] + np.where(nudged, 1e-12, 0.0)[:, None]  # one in ten off by far less than single precision
    assert _key(X[nudged][0]) == _key(prompts[rows[nudged][0]]) and X[nudged][0].tobytes() != prompts[rows[nudged][0]].tobytes()

    def play(runs, keep):
        policy = EvidenceThompson(n_arms=3, n_features=6, n_components=16, bandwidth_sample=8, seed=5).reset(runs)
        if not keep:
            monkeypatch.setattr(policy, "_keep_features", lambda *args: None)
        picks, laws, reused = [], [], 0
        for t, x in enumerate(X):
            contexts = np.repeat(x[None], runs, axis=0)
            laws.append(policy._probabilities(contexts))
            arms = policy.select_batch(contexts)
            reused += int(policy._work.known.sum())
            policy.update_batch(arms, np.array([float((7 * t + 3 * r + a) % 5 < 2) for r, a in enumerate(arms)]), contexts)
            picks.append(arms.tolist())
        return picks, np.array(laws), {k: v for k, v in vars(policy).items() if isinstance(v, np.ndarray)}, reused

    for runs in (1, 3):
        kept, plain = play(runs, True), play(runs, False)
        assert kept[3] > 100 * runs and plain[3] == 0  # features reused in most rounds, and never without keeping them
        assert kept[0] == plain[0]
        np.testing.assert_array_equal(kept[1], plain[1])
        for name, value in kept[2].items():
            np.testing.assert_array_equal(value, plain[2][name], err_msg=name)


def test_probabilities_and_the_next_select_share_one_computation():
    """The router calls probabilities(x) then select(x): the features and scores are computed once, and select is unchanged."""
    policy, x = _trained_on_bernoulli_models()
    alone = EvidenceThompson.from_state_dict(policy.state_dict()).select(x)
    policy.probabilities(x)
    cached = policy._last
    assert policy.select(x) == alone
    assert policy._last is cached  # select reused the features and scores
    policy.update(alone, 1.0, x)
    assert policy._last is None  # learning clears them


@pytest.mark.parametrize("dear_mean", [0.7, 0.9])
def test_budget_pacer_spends_the_budget_whether_the_dearer_model_is_worse_or_better(dear_mean):
    """The dual price is free in sign: where the dearer model is worse (or looks it after unlucky outcomes), the price turns
    into a subsidy large enough to buy it, so every order spends the budget. A price floored at a subsidy of 1% of the
    reward range spends 40-68% of the budget of 0.3 where the dearer model is worse, and a log price with its origin at
    1e-4 reward lags to 106% where it is better."""
    rng = np.random.default_rng(3)
    N, d = 2000, 8
    X = _unit_rows(rng, N, d)
    R = (rng.random((N, 2)) < np.array([0.8, dear_mean])).astype(float)
    C = np.broadcast_to([0.1, 1.0], (N, 2)).copy()
    for budget in (0.3, 0.55, 0.8):
        env = ArrayReplay(X, R, C, reveal_cost=True)
        policy = EvidenceThompson(n_arms=2, n_features=d, budget=budget, seed=0)
        result = simulate(env, policy, N, n_runs=6, seed=(0, 1), n_checkpoints=2)
        spend = compute_metric("mean_cost", result, env, policy) / budget
        assert np.all(np.abs(spend - 1.0) <= 0.05), (budget, spend)
