"""PAK-UCB family: exact identities against direct solves, RFF convergence, environments, small acceptance checks."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from genbandit import InvalidInputError, InvalidParameterError, simulate
from genbandit.envs.prompts import ParetoBanditReplay, PromptTable, Setup4Synthetic, load_paretobandit
from genbandit.experiments.metrics import compute_metric
from genbandit.policies.kernel import (
    KernelUCB,
    LinUCB,
    NaiveKRR,
    PAKUCB,
    RFFUCB,
    BestSingle,
    SupPAKUCB,
    SupRFFUCB,
    default_eta,
    kernel_matrix,
    rff_features,
)


def _unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _direct_krr(X, v, Y, kernel, alpha, **kw):
    """mu and sigma of eq. (Compute_UCB) by a fresh dense solve."""
    K = kernel_matrix(X, X, kernel, **kw)
    Ky = kernel_matrix(X, Y, kernel, **kw)
    kyy = np.diag(kernel_matrix(Y, Y, kernel, **kw))
    inv = np.linalg.inv(K + alpha * np.eye(len(X)))
    mu = Ky.T @ inv @ v
    var = kyy - np.einsum("iy,ij,jy->y", Ky, inv, Ky)
    return mu, np.sqrt(np.maximum(var, 0) / alpha), inv


@pytest.mark.parametrize(
    "kernel, params",
    [("poly3", dict(gamma=5.0, normalize_kernel=False)), ("poly3", dict(gamma=10.0)), ("rbf", dict(sigma=0.7)), ("linear", dict(normalize_kernel=False))],
)
def test_incremental_krr_equals_direct_solve(kernel, params):
    rng = np.random.default_rng(0)
    d, n_arms, alpha = 6, 3, 0.7
    policy = PAKUCB(n_arms=n_arms, n_features=d, kernel=kernel, alpha=alpha, seed=0, **params)
    X = _unit_rows(rng, 90, d) * rng.uniform(0.5, 1.5, (90, 1))  # not all unit norm
    arms = rng.integers(n_arms, size=90)
    v = rng.normal(size=90)
    Y = _unit_rows(rng, 7, d)
    kw = {k: params[k] for k in ("gamma", "sigma") if k in params}
    kw["normalize"] = params.get("normalize_kernel", True)
    for i in range(90):
        policy.update(int(arms[i]), float(v[i]), context=X[i])
        if i % 29 == 28 or i == 89:
            for g in range(n_arms):
                mine = arms[: i + 1] == g
                mu, sd, inv = _direct_krr(X[: i + 1][mine], v[: i + 1][mine], Y, kernel, alpha, **kw)
                model = policy._models[0][g]
                got_mu, got_sd = policy._krr_predict(model, Y)
                assert np.allclose(model["Kinv"], inv, rtol=1e-8, atol=1e-10)
                assert np.allclose(got_mu, mu, rtol=1e-8, atol=1e-10)
                assert np.allclose(got_sd, sd, rtol=1e-8, atol=1e-10)


def test_dual_equals_primal_for_the_linear_kernel():
    """k_y'(K + aI)^-1 v == phi'(Phi'Phi + aI)^-1 Phi'v and alpha^-1/2 sqrt(k - k'Kinv k) == sqrt(phi' A^-1 phi)."""
    rng = np.random.default_rng(1)
    X, v, y = rng.normal(size=(25, 4)), rng.normal(size=25), rng.normal(size=(1, 4))
    policy = PAKUCB(n_arms=1, n_features=4, kernel="linear", normalize_kernel=False, alpha=2.0)
    for x, r in zip(X, v):
        policy.update(0, r, context=x)
    mu, sd = policy._krr_predict(policy._models[0][0], y)
    A = X.T @ X + 2.0 * np.eye(4)
    assert mu[0] == pytest.approx(float(y[0] @ np.linalg.solve(A, X.T @ v)), rel=1e-9)
    assert sd[0] == pytest.approx(math.sqrt(float(y[0] @ np.linalg.solve(A, y[0]))), rel=1e-9)


@pytest.mark.parametrize("feature_map", ["cos-sin", "cos-phase"])
def test_rff_kernel_estimate_converges_to_the_exact_kernel(feature_map):
    rng = np.random.default_rng(2)
    d, sigma = 10, 1.0
    X = _unit_rows(rng, 30, d)
    exact = kernel_matrix(X, X, "rbf", sigma=sigma)
    errors = []
    for D in (20, 200, 2000, 20000):
        omega = rng.standard_normal((D, d)) / sigma
        phase = rng.uniform(0, 2 * np.pi, D)
        F = rff_features(X, omega, phase, feature_map)
        errors.append(np.abs(F @ F.T - exact).max())
    assert errors == sorted(errors, reverse=True)
    # error ~ 1/sqrt(D): 1000x more features, about 30x smaller error (margin: 10x)
    assert errors[-1] < errors[0] / 10 and errors[-1] < 0.05


def test_rff_updates_equal_batch_ridge_and_features_have_unit_norm():
    rng = np.random.default_rng(3)
    d = 5
    policy = RFFUCB(n_arms=2, n_features=d, n_components=30, sigma=0.8, alpha=1.5, seed=4)
    X, v, arms = _unit_rows(rng, 60, d), rng.normal(size=60), rng.integers(2, size=60)
    for x, r, g in zip(X, v, arms):
        policy.update(int(g), float(r), context=x)
    F = policy._features(X)  # run 0's features for every row: broadcast omega over rows
    F = rff_features(X, policy._omega[0], policy._phase[0], "cos-sin")
    assert np.allclose((F * F).sum(1), 1.0)
    y = _unit_rows(rng, 1, d)
    f = rff_features(y, policy._omega[0], policy._phase[0], "cos-sin")[0]
    mu, sd = policy.ucb(y)
    for g in range(2):
        P = F[arms == g]
        A = P.T @ P + 1.5 * np.eye(60)
        assert np.allclose(policy._Ainv[0, g], np.linalg.inv(A), atol=1e-8)
        assert mu[0, g] == pytest.approx(float(f @ np.linalg.solve(A, P.T @ v[arms == g])), abs=1e-8)
        assert sd[0, g] == pytest.approx(math.sqrt(float(f @ np.linalg.solve(A, f))), abs=1e-8)
        # Alg. 5 line 11 form equals sqrt(phi'A^-1 phi) for the unit-norm cos/sin map
        alg5 = math.sqrt((1 - f @ np.linalg.solve(A, P.T @ P @ f)) / 1.5)
        assert sd[0, g] == pytest.approx(alg5, abs=1e-8)


def test_centred_rff_fits_residuals_around_each_arms_running_mean():
    rng = np.random.default_rng(5)
    d = 4
    centred = RFFUCB(n_arms=2, n_features=d, n_components=20, sigma=0.7, center=True, seed=6)
    plain = RFFUCB(n_arms=2, n_features=d, n_components=20, sigma=0.7, seed=6)
    X, v, arms = _unit_rows(rng, 40, d), 0.9 + 0.05 * rng.normal(size=40), rng.integers(2, size=40)
    for x, r, g in zip(X, v, arms):
        centred.update(int(g), float(r), context=x)
        plain.update(int(g), float(r), context=x)
    F = rff_features(X, centred._omega[0], centred._phase[0], "cos-sin")
    y = _unit_rows(rng, 1, d)
    f = rff_features(y, centred._omega[0], centred._phase[0], "cos-sin")[0]
    mu, sd = centred.ucb(y)
    mu_plain, sd_plain = plain.ucb(y)
    for g in range(2):
        P, s = F[arms == g], v[arms == g]
        m = s.mean()
        direct = m + float(f @ np.linalg.solve(P.T @ P + np.eye(40), P.T @ (s - m)))
        assert mu[0, g] == pytest.approx(direct, abs=1e-8)
        assert sd[0, g] == pytest.approx(sd_plain[0, g], abs=1e-12)  # the width does not change
        assert abs(mu[0, g] - m) < abs(mu_plain[0, g] - m)  # far from 0.9 without centring, near it with


class _BatchedPathRFFUCB(RFFUCB):
    """RFF-UCB with one run through the batched numpy path instead of the compiled one."""

    _compiled_single_run = False


@pytest.mark.parametrize("feature_map, center, sigma", [("cos-sin", False, 5.0), ("cos-sin", True, 0.5), ("cos-phase", False, 0.5), ("cos-phase", True, 5.0)])
def test_compiled_rffucb_decides_as_the_batched_path_round_for_round(feature_map, center, sigma):
    """A router's size (3 arms, 384-d prompts, 200 frequencies), 2,000 rounds on the same prompts and the same rewards."""
    rng = np.random.default_rng(11)
    X, W = _unit_rows(rng, 500, 384), rng.normal(size=(384, 3))
    noise = 0.3 * rng.normal(size=(2000, 3))
    policies = [cls(n_arms=3, n_features=384, n_components=200, feature_map=feature_map, sigma=sigma, center=center, seed=2)
                for cls in (RFFUCB, _BatchedPathRFFUCB)]
    arms = np.empty((2, 2000), dtype=int)
    for t in range(2000):
        x = X[t % 500]
        for k, policy in enumerate(policies):
            arms[k, t] = a = policy.select(x)
            policy.update(a, float(np.tanh(2.0 * x @ W[:, a]) + noise[t, a]), context=x)
    assert np.array_equal(arms[0], arms[1])
    assert min(np.bincount(arms[0], minlength=3)) > 50  # every arm is played, so every update path ran
    compiled, batched = policies
    assert np.allclose(compiled._Ainv, batched._Ainv, rtol=0, atol=1e-12)
    assert np.allclose(compiled._b, batched._b, rtol=0, atol=1e-10)
    assert np.array_equal(compiled._counts, batched._counts)
    assert compiled._rng.random() == batched._rng.random()  # the same random numbers were drawn
    assert np.allclose(compiled.ucb(X[:1]), batched.ucb(X[:1]), rtol=0, atol=1e-10)


def test_linucb_is_ridge_on_prompt_joined_with_one_hot_arm():
    rng = np.random.default_rng(5)
    policy = LinUCB(n_arms=3, n_features=4, alpha=1.0, eta=0.0, seed=0)
    X, v, arms = rng.normal(size=(40, 4)), rng.normal(size=40), rng.integers(3, size=40)
    for x, r, g in zip(X, v, arms):
        policy.update(int(g), float(r), context=x)
    Z = np.hstack([X, np.eye(3)[arms]])
    theta = np.linalg.solve(Z.T @ Z + np.eye(7), Z.T @ v)
    assert np.allclose(policy._Ainv[0] @ policy._b[0], theta, atol=1e-9)
    y = rng.normal(size=4)
    scores = [np.r_[y, np.eye(3)[g]] @ theta for g in range(3)]
    assert policy.select(y) == int(np.argmax(scores))


def test_linucb_plays_every_arm_once_before_its_index():
    # Arm 0 has a large observed reward; the index alone would replay it, but arms 1 and 2 were never played.
    policy = LinUCB(n_arms=3, n_features=2, eta=0.0, seed=0)
    policy.update(0, 10.0, context=[1.0, 0.0])
    first = policy.select([1.0, 0.0])
    assert first in (1, 2)
    policy.update(first, 0.0, context=[1.0, 0.0])
    assert policy.select([1.0, 0.0]) == 3 - first
    policy.update(3 - first, 0.0, context=[1.0, 0.0])
    assert policy.select([1.0, 0.0]) == 0


def test_kernelucb_matches_a_direct_solve_on_joint_inputs():
    rng = np.random.default_rng(6)
    policy = KernelUCB(n_arms=2, n_features=3, alpha=1.0, seed=0)
    X, v, arms = _unit_rows(rng, 30, 3), rng.normal(size=30), rng.integers(2, size=30)
    for x, r, g in zip(X, v, arms):
        policy.update(int(g), float(r), context=x)
    Z = np.hstack([X, np.eye(2)[arms]])
    y = _unit_rows(rng, 1, 3)
    Zy = np.hstack([np.repeat(y, 2, 0), np.eye(2)])
    mu, sd, _ = _direct_krr(Z, v, Zy, "poly3", 1.0, gamma=1.0)
    got_mu, got_sd = policy._krr_predict(policy._models[0], Zy)
    assert np.allclose(got_mu, mu, atol=1e-9) and np.allclose(got_sd, sd, atol=1e-9)


def test_defaults_follow_appendix_c4():
    assert default_eta(2) == pytest.approx(2.9604, abs=1e-4)
    assert default_eta(3) == pytest.approx(3.0943, abs=1e-4)
    p = PAKUCB(n_arms=5, n_features=3)
    assert (p.kernel, p.gamma, p.alpha, p._eta()) == ("poly3", 5.0, 1.0, pytest.approx(3.2552, abs=1e-4))
    r = RFFUCB(n_arms=5, n_features=3)
    assert (r.n_components, r.feature_map, r.sigma, r._n_out()) == (200, "cos-sin", 5.0, 400)
    assert RFFUCB(n_arms=2, n_features=3, feature_map="cos-phase")._n_out() == 200
    assert NaiveKRR(n_arms=2, n_features=3)._eta() == 0.0
    with pytest.raises(InvalidParameterError):
        PAKUCB(n_arms=2, n_features=3, kernel="sigmoid")
    with pytest.raises(InvalidParameterError):
        BestSingle(n_arms=2, arm=2)


def test_bad_context_is_rejected_and_changes_nothing():
    policy = PAKUCB(n_arms=2, n_features=3, seed=0)
    policy.update(0, 1.0, context=[1.0, 0.0, 0.0])
    before = policy._models[0][0]["Kinv"].copy()
    for bad in ([1.0, 0.0], [np.nan, 0.0, 0.0]):
        with pytest.raises(InvalidInputError):
            policy.update(0, 1.0, context=bad)
    with pytest.raises(InvalidInputError):
        policy.select()
    assert np.array_equal(policy._models[0][0]["Kinv"], before)


def test_sup_pak_ucb_stores_only_exploration_rounds_in_stage_sets():
    env = Setup4Synthetic(setup="swap2", contexts="gaussian", dim=6, n_prompts_per_category=10, seed=0)
    for cls in (SupPAKUCB, SupRFFUCB):
        policy = cls(n_arms=2, n_features=6, horizon=64, seed=0, **({"n_components": 20} if cls is SupRFFUCB else {}))
        simulate(env, policy, 64, n_runs=2, seed=1)
        M = policy._n_stages()
        assert M == 6
        if cls is SupPAKUCB:
            stored = sum(m["X"].shape[0] for run in policy._models for stage in run for m in stage)
        else:
            stored = int(policy._counts.sum())
        # every round starts at stage 1 with empty sets (infinite width): the early rounds are stored
        assert 2 * 2 <= stored <= 2 * 64


# ---------------------------------------------------------------------------------------------
# Environments and metrics
# ---------------------------------------------------------------------------------------------
def test_paretobandit_stream_loads_with_costs_and_utilities():
    pytest.importorskip("pareto_bandit")
    texts, rewards, costs, models, sources = load_paretobandit()
    assert len(texts) == rewards.shape[0] > 3500 and rewards.shape[1] == 3
    assert np.all((rewards >= 0) & (rewards <= 1)) and np.all(costs >= 0)
    assert "mbpp" in sources and "mmlu" in sources
    env = ParetoBanditReplay(price=5.0)
    assert np.allclose(env.utilities(), rewards - 5.0 * costs)
    # Gemini-2.5-Pro (the most expensive model) is best on quality alone; a price of 5/$ changes that
    assert int(rewards.mean(0).argmax()) == 2 and int(env.utilities().mean(0).argmax()) != 2


def test_best_single_has_zero_otb_and_opr_counts_ties(tmp_path):
    pytest.importorskip("sentence_transformers")
    frame = pd.DataFrame({"prompt": ["a", "b", "c", "d"], "m1": [1.0, 0.0, 0.5, 1.0], "m2": [0.0, 1.0, 0.5, 0.0]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    env = PromptTable(path=str(tmp_path / "t.csv"), cache_dir=str(tmp_path / "cache"), seed=0)
    assert env.best_single_arm == 0
    result = simulate(env, BestSingle(n_arms=2, arm=0), 4, n_runs=3, seed=0)
    assert np.allclose(compute_metric("otb", result, env, None), 0.0)
    # every prompt once per run: m1 is best on a, d and tied on c -> 3/4
    assert np.allclose(compute_metric("opr", result, env, None), 0.75)
    assert np.allclose(compute_metric("mean_reward", result, env, None), 2.5 / 4)
    with pytest.raises(InvalidParameterError):
        PromptTable(path=str(tmp_path / "t.csv"), prompt_column="text").n_arms


def test_setup4_tables_follow_the_specified_means():
    env = Setup4Synthetic(setup="expert", contexts="gaussian", dim=8, n_prompts_per_category=40, n_responses=200, seed=0).reset()
    labels = np.repeat(np.arange(5), 40)
    means = env._means
    for c in range(5):
        assert np.all(means[labels == c].argmax(1) == c)  # the expert wins its prompt type
        assert means[labels == c, c].mean() == pytest.approx(0.80 + (0.03 if c == 0 else 0), abs=0.03)
    assert env.best_single_arm == 0


# ---------------------------------------------------------------------------------------------
# Acceptance at small scale (gaussian-cluster contexts; the MiniLM versions run in `reproduce pak-ucb`)
# ---------------------------------------------------------------------------------------------
def test_per_arm_kernel_ucb_beats_the_best_single_model_and_linucb_does_not():
    env = Setup4Synthetic(setup="expert", contexts="gaussian", dim=16, n_prompts_per_category=60, seed=3)
    otb = {}
    policies = {
        "PAK-UCB-poly3": PAKUCB(n_arms=5, n_features=16),
        "RFF-UCB-RBF": RFFUCB(n_arms=5, n_features=16, n_components=100),
        "LinUCB": LinUCB(n_arms=5, n_features=16),
        "best-single": BestSingle(n_arms=5, arm=0),
    }
    for name, policy in policies.items():
        result = simulate(env, policy, 800, n_runs=2, seed=11)
        otb[name] = float(compute_metric("otb", result, env, policy).mean())
    assert otb["best-single"] == 0.0
    # measured (seeded): PAK-UCB-poly3 +0.025, RFF-UCB-RBF +0.11, LinUCB -0.017; the ceiling is about +0.32
    assert otb["PAK-UCB-poly3"] > 0.01 and otb["RFF-UCB-RBF"] > 0.05
    assert otb["LinUCB"] < 0.0
    assert min(otb["PAK-UCB-poly3"], otb["RFF-UCB-RBF"]) > otb["LinUCB"] + 0.03


def test_headroom_of_routing_finds_a_planted_split_and_no_gain_without_one():
    from genbandit.experiments.kernel import headroom

    rng = np.random.default_rng(0)
    X = _unit_rows(rng, 400, 4)
    planted = np.stack([0.5 + 0.4 * np.sign(X[:, 0]), np.full(400, 0.6)], axis=1)
    room = headroom(X, planted)
    assert room["best_single_arm"] == 1 and room["best_single"] == pytest.approx(0.6)
    # the oracle gets 0.75; a linear ridge routes most x0 > 0 prompts right (measured 0.72)
    assert room["cv_ridge_routing"] > 0.68 and room["oracle"] == pytest.approx(planted.max(1).mean())
    flat = np.stack([np.full(400, 0.7), np.full(400, 0.5)], axis=1) + 0.01 * rng.normal(size=(400, 2))
    room = headroom(X, flat)
    assert room["cv_ridge_routing"] == pytest.approx(room["best_single"], abs=0.005)


def test_standard_and_runtime_units_record_what_the_report_needs(tmp_path):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("pareto_bandit")
    from genbandit.experiments.config import load_config
    from genbandit.experiments.runner import run_experiment

    raw = {
        "name": "pak-ucb-mini",
        "horizon": 60,
        "n_runs": 2,
        "metrics": ["mean_reward", "otb", "opr", "seconds_per_decision"],
        "hooks": ["genbandit.experiments.kernel:report"],
        "scenarios": [
            {"name": "setup4-mini", "environment": "setup4-synthetic",
             "params": {"setup": "swap2", "contexts": "gaussian", "dim": 6, "n_prompts_per_category": 10}},
            {"name": "setup4-runtime", "environment": "setup4-synthetic", "runner": "genbandit.experiments.kernel:runtime_unit",
             "params": {"setup": "expert", "contexts": "gaussian", "dim": 6, "n_prompts_per_category": 10}, "n_runs": 1,
             "policies": ["PAK-UCB-RBF", "RFF-UCB-RBF"], "metrics": ["opr", "seconds_per_decision", "total_seconds"]},
        ],
        "policies": [
            {"label": "PAK-UCB-RBF", "policy": "PAK-UCB", "params": {"kernel": "rbf"}},
            {"label": "RFF-UCB-RBF", "policy": "RFF-UCB", "params": {"n_components": 20}},
            {"label": "LinUCB"},
            {"label": "best-single"},
        ],
    }
    out = run_experiment(load_config(raw), tmp_path, progress=False)
    assert out["failed"] == []
    records = {(r["scenario"], r["policy"], r["metric"]): r["mean"] for r in out["summary"]}
    assert records[("setup4-mini", "best-single", "otb")] == 0.0  # the environment gave best-single its best model
    unit = json.loads(next((tmp_path / "units").glob("setup4-runtime__RFF*.json")).read_text())
    assert len(unit["extras"]["block_rounds"]) == 20 and unit["extras"]["block_rounds"][-1] == 60
    assert unit["metrics"]["total_seconds"][0] > 0 and all(ms > 0 for ms in unit["extras"]["ms_per_round"])
    assert ("setup4-runtime", "RFF-UCB-RBF", "speedup_vs_exact") in records or ("runtime", "RFF-UCB-RBF", "speedup_vs_exact") in records
    report = (tmp_path / "report.md").read_text()
    assert "OtB and OPR against rounds" in report and "Run time against rounds" in report and "Acceptance checks" in report
    assert (tmp_path / "figures" / "runtime-vs-rounds.png").exists()


@pytest.mark.parametrize("n_runs", [1, 3])
def test_rffucb_probabilities_are_exact_and_the_next_select_agrees(n_runs):
    """Exact propensities for the router's log: one-hot on the UCB leader, split evenly over ties (untried arms);
    the compiled one-run path and the batched path agree, and select takes the arm they name."""
    rng = np.random.default_rng(0)
    policy = RFFUCB(n_arms=3, n_features=8, seed=0)
    policy.reset(n_runs)
    x = rng.standard_normal((n_runs, 8))
    assert policy._probabilities(x) == pytest.approx(np.full((n_runs, 3), 1 / 3))
    for _ in range(60):
        x = rng.standard_normal((n_runs, 8))
        probs = policy._probabilities(x)
        arms = policy._select(x)
        assert np.all(probs[np.arange(n_runs), arms] > 0)
        policy._learn(arms, rng.uniform(size=n_runs), x)
    assert probs.max(axis=1) == pytest.approx(np.ones(n_runs))  # every arm tried: no ties left
