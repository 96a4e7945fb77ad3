"""Off-policy estimates: exact values, agreement with full information, and the same numbers as OBP and Vowpal Wabbit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from genbandit import InvalidInputError, InvalidParameterError
from genbandit.experiments.evaluate import offpolicy_targets, read_decision_log
from genbandit.experiments.offpolicy import cross_fitted_reward_model, direct_method, doubly_robust, ips, snips
from genbandit.policies.classic import EXP3, FixedArm, ThompsonSampling
from genbandit.policies.kernel import LinUCB
from genbandit.policies.propensity import action_probabilities


# ---------------------------------------------------------------------------------------------
# A seeded full-information case: every model's outcome on every request, and a randomised logger
# ---------------------------------------------------------------------------------------------
def _full_information(seed: int = 0, n: int = 2000, d: int = 5, K: int = 3):
    """Contexts (n, d), every model's Bernoulli outcome U (n, K), a softmax logger's choices and propensities."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / math.sqrt(d)
    theta = rng.standard_normal((K, d))
    means = 1.0 / (1.0 + np.exp(-(2.0 * X @ theta.T + np.array([0.3, 0.0, -0.3]))))
    U = (rng.random((n, K)) < means).astype(float)
    logits = 1.5 * X @ rng.standard_normal((K, d)).T
    mu = np.exp(logits - logits.max(1, keepdims=True))
    mu /= mu.sum(1, keepdims=True)
    actions = np.array([rng.choice(K, p=row) for row in mu])
    return X, U, actions, mu[np.arange(n), actions]


def _write_log(path, X, U, actions, propensities, models):
    with open(path, "w") as fh:
        for i, a in enumerate(actions):
            fh.write(json.dumps({"decision_id": f"d{i}", "context": X[i].tolist(), "model": models[a], "propensity": float(propensities[i]),
                                 "reward": float(U[i, a]), "time": 1.7e9 + i}) + "\n")


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    X, U, actions, p = _full_information()
    path = tmp_path_factory.mktemp("log") / "decisions.jsonl"
    models = ["small", "medium", "large"]
    _write_log(path, X, U, actions, p, models)
    log = read_decision_log(path, models=models)
    q = cross_fitted_reward_model(log.contexts, log.actions, log.rewards, 3)
    return log, U, q


def test_the_log_reader_gives_back_what_was_logged(logged):
    log, U, _ = logged
    X, _, actions, p = _full_information()
    assert log.models == ["small", "medium", "large"] and np.allclose(log.contexts, X)
    assert np.array_equal(log.actions, actions) and np.allclose(log.propensities, p)
    assert np.allclose(log.rewards, U[np.arange(len(actions)), actions]) and log.skipped_no_reward == 0


def test_a_log_read_over_other_models_names_the_same_decisions(logged):
    log, _, _ = logged
    other = log.with_models(["large", "extra", "small", "medium"])
    assert [other.models[a] for a in other.actions] == [log.models[a] for a in log.actions]
    assert other.n_arms == 4 and np.array_equal(other.rewards, log.rewards)
    with pytest.raises(InvalidParameterError, match="medium"):
        log.with_models(["small", "large"])


@pytest.mark.parametrize("target_name", ["always:small", "always:medium", "always:large", "LinUCB"])
def test_ips_snips_and_dr_agree_with_the_full_information_value_within_their_standard_errors(logged, target_name):
    log, U, q = logged
    if target_name == "LinUCB":  # learns from the log as it walks it (a router warm-started from these logs)
        target = offpolicy_targets(LinUCB(n_arms=3, n_features=5, seed=0), log, log.rewards)
    else:
        target = offpolicy_targets(FixedArm(n_arms=3, arm=log.models.index(target_name.split(":")[1])), log, log.rewards)
    truth = float((target * U).sum(axis=1).mean())  # what the same decisions score with every outcome known
    found = {
        "ips": ips(log.rewards, log.actions, log.propensities, target),
        "snips": snips(log.rewards, log.actions, log.propensities, target),
        "dr": doubly_robust(log.rewards, log.actions, log.propensities, target, q),
    }
    for name, est in found.items():
        assert abs(est.value - truth) <= 2 * est.stderr, (name, est, truth)
        assert 0.005 < est.stderr < 0.08
    # the reward model takes out part of the variance: DR is tighter than IPS
    assert found["dr"].stderr < found["ips"].stderr


def test_doubly_robust_survives_a_wrong_reward_model_where_the_direct_method_does_not(logged):
    log, U, _ = logged
    target = np.tile([0.0, 0.0, 1.0], (log.actions.size, 1))
    truth = U[:, 2].mean()
    wrong = np.full((log.actions.size, 3), 0.9)  # far off every model's rate
    dm = direct_method(log.rewards, log.actions, log.propensities, target, wrong)
    dr = doubly_robust(log.rewards, log.actions, log.propensities, target, wrong)
    assert abs(dm.value - truth) > 0.3
    assert abs(dr.value - truth) <= 2 * dr.stderr


def test_estimators_on_a_hand_computed_case():
    r, a, p = [1.0, 0.0, 0.5], [0, 1, 1], [0.5, 0.25, 0.5]
    pi = [[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]]
    q = [[0.8, 0.2], [0.6, 0.4], [0.5, 0.5]]
    # w = [0.5/0.5, 1/0.25, 0/0.5] = [1, 4, 0]
    assert ips(r, a, p, pi).value == pytest.approx((1 * 1.0 + 4 * 0.0 + 0) / 3)
    assert snips(r, a, p, pi).value == pytest.approx(1.0 / 5)
    assert direct_method(r, a, p, pi, q).value == pytest.approx((0.5 + 0.4 + 0.5) / 3)
    # DR = DM + mean(w (r - q(x, a))) = (0.5 + 1 * 0.2) + (0.4 + 4 * (0 - 0.4)) + (0.5 + 0)
    assert doubly_robust(r, a, p, pi, q).value == pytest.approx((0.7 - 1.2 + 0.5) / 3)
    est = ips(r, a, p, pi)
    assert est.stderr == pytest.approx(np.std([1.0, 0.0, 0.0], ddof=1) / math.sqrt(3))


def test_bad_inputs_are_refused_with_a_clear_error():
    with pytest.raises(InvalidInputError, match="Propensities"):
        ips([1.0, 0.0], [0, 1], [0.5, 0.0], [[1, 0], [1, 0]])
    with pytest.raises(InvalidInputError, match="distribution"):
        ips([1.0, 0.0], [0, 1], [0.5, 0.5], [[1, 1], [1, 0]])
    with pytest.raises(InvalidInputError, match="ints in 0..1"):
        ips([1.0, 0.0], [0, 2], [0.5, 0.5], [[1, 0], [1, 0]])
    with pytest.raises(InvalidInputError, match="reward model"):
        doubly_robust([1.0, 0.0], [0, 1], [0.5, 0.5], [[1, 0], [1, 0]], [[0.5, 0.5]])


def test_the_log_reader_refuses_bad_rows(tmp_path):
    def write(rows):
        path = tmp_path / "log.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        return path

    ok = {"decision_id": "a", "context": [0.1, 0.2], "model": "m1", "propensity": 0.5, "reward": 1.0}
    with pytest.raises(InvalidParameterError, match="propensity"):
        read_decision_log(write([ok, {**ok, "propensity": 1.5}]))
    with pytest.raises(InvalidParameterError, match="'reward' must be a number"):
        read_decision_log(write([ok, {**ok, "reward": "good"}]))
    with pytest.raises(InvalidParameterError, match="unknown model"):
        read_decision_log(write([ok, {**ok, "model": "m9"}]), models=["m1", "m2"])
    with pytest.raises(InvalidParameterError, match="'context'"):
        read_decision_log(write([ok, {k: v for k, v in ok.items() if k != "context"}]))
    log = read_decision_log(write([ok, {**ok, "model": "m2", "propensity": None}, {**ok, "reward": None}]))
    assert log.models == ["m1", "m2"] and log.skipped_no_reward == 1 and np.isnan(log.propensities[1])


# ---------------------------------------------------------------------------------------------
# Propensities of policies that do not expose them
# ---------------------------------------------------------------------------------------------
def test_monte_carlo_propensity_of_thompson_sampling_matches_the_posterior_and_leaves_the_policy_as_it_was():
    from scipy import integrate, stats

    ts = ThompsonSampling(n_arms=2, seed=3)
    for reward in (1.0, 1.0, 0.0):
        ts.update(0, reward)
    for reward in (1.0, 0.0, 0.0, 0.0):
        ts.update(1, reward)
    # P(Beta(3, 2) > Beta(2, 4)) by quadrature
    exact = integrate.quad(lambda x: stats.beta.pdf(x, 3, 2) * stats.beta.cdf(x, 2, 4), 0, 1)[0]
    twin = ThompsonSampling.from_state_dict(ts.state_dict())
    probs = action_probabilities(ts, n_draws=4000)
    assert abs(probs[0] - exact) < 3 * math.sqrt(exact * (1 - exact) / 4000)
    assert [ts.select() for _ in range(20)] == [twin.select() for _ in range(20)]  # the draws did not move its RNG
    assert action_probabilities(EXP3(n_arms=3, seed=0)).tolist() == pytest.approx([1 / 3] * 3)  # exact where exposed


# ---------------------------------------------------------------------------------------------
# Anchors: Open Bandit Pipeline and Vowpal Wabbit give the same numbers on the same logged data
# ---------------------------------------------------------------------------------------------
def test_same_numbers_as_open_bandit_pipeline(logged):
    ope = pytest.importorskip("obp.ope")
    log, _, q = logged
    target = offpolicy_targets(LinUCB(n_arms=3, n_features=5, seed=0), log, log.rewards)
    kw = {"reward": log.rewards, "action": log.actions, "pscore": log.propensities, "action_dist": target[:, :, None]}
    assert ips(log.rewards, log.actions, log.propensities, target).value == pytest.approx(
        ope.InverseProbabilityWeighting().estimate_policy_value(**kw), abs=1e-12)
    assert snips(log.rewards, log.actions, log.propensities, target).value == pytest.approx(
        ope.SelfNormalizedInverseProbabilityWeighting().estimate_policy_value(**kw), abs=1e-12)
    assert direct_method(log.rewards, log.actions, log.propensities, target, q).value == pytest.approx(
        ope.DirectMethod().estimate_policy_value(action_dist=target[:, :, None], estimated_rewards_by_reg_model=q[:, :, None]), abs=1e-12)
    assert doubly_robust(log.rewards, log.actions, log.propensities, target, q).value == pytest.approx(
        ope.DoublyRobust().estimate_policy_value(**kw, estimated_rewards_by_reg_model=q[:, :, None]), abs=1e-12)


def test_same_ips_as_vowpal_wabbit_off_policy_evaluation(logged):
    pyvw = pytest.importorskip("vowpalwabbit.pyvw")
    log, _, _ = logged
    for arm in range(3):
        target = np.zeros((log.actions.size, 3))
        target[:, arm] = 1.0
        ours = ips(log.rewards, log.actions, log.propensities, target).value
        vw = pyvw.Workspace("--cb 3 --eval --cb_type ips --quiet")
        try:
            for i, a in enumerate(log.actions):  # "<evaluated action> <logged action>:<cost>:<probability> | features"; cost = -reward
                feats = " ".join(f"x{j}:{v:.6f}" for j, v in enumerate(log.contexts[i]))
                vw.learn(f"{arm + 1} {a + 1}:{-float(log.rewards[i])!r}:{float(log.propensities[i])!r} | {feats}")
            theirs = -vw.get_sum_loss() / vw.get_weighted_examples()
        finally:
            vw.finish()
        assert ours == pytest.approx(theirs, abs=1e-6)
