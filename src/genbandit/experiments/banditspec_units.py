"""``reproduce banditspec``: the units of the BanditSpec experiments (E0-E5); the report hook is in :mod:`.banditspec`.

Stopping-time scenarios (E1-E4) run :func:`~genbandit.envs.speculative.run_banditspec`: every run
is one prompt, the policy starts empty for it, and the unit records per run the stopping time,
MAT, simulated tokens/s and the regret ``ST(policy) - ST(reference fixed arm)`` on the same draws.
Runner-only scenario parameters (taken out before the environment is built):

- ``group_size``: MAT and tokens/s are ratios of totals over groups of this many prompts (a data
  set pass), so a fixed arm's numbers are Table 1's round-weighted ones; default 1.
- ``regret_against``: ``"best-arm"`` (the arm of largest mean per prompt, paper eq. 1),
  ``"per-run-min"`` (the best fixed arm in hindsight per prompt, eq. 12, for E4) or
  ``"best-fixed"`` (the fixed arm with the least mean stopping time over the scenario, for E3).

Policy labels: ``fixed:<arm>`` (an arm name or index) plays one arm; ``oracle`` takes, per prompt,
the fixed arm with the least simulated time (the fewest rounds when costs are equal).
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..core.registry import POLICIES
from ..core.simulator import simulate
from ..envs.speculative import BanditSpecResult, ServingThroughput, ToyLMSpeculative, checkpoint_rounds, run_banditspec
from ..policies.speculative import FixedArm, ServingEXP3Spec, ServingUCBSpec
from .units import Unit, UnitResult, build_environment, build_policy

__all__ = ["stopping_time_unit", "serving_chain_unit", "e0_unit", "e5_unit", "losslessness_pvalues"]

_RUNNER_KEYS = ("group_size", "regret_against", "batch_sizes", "batches_per_size", "oracle_lengths")
_FIXED_CACHE: dict[str, list[BanditSpecResult]] = {}


def _split_params(unit: Unit) -> tuple[dict, dict]:
    params = dict(unit.scenario.params)
    runner = {k: params.pop(k) for k in _RUNNER_KEYS if k in params}
    return params, runner


def _environment(unit: Unit, params: dict):
    from dataclasses import replace

    return build_environment(replace(unit.scenario, params=params), unit.horizon)


def _unit_setup(unit: Unit) -> tuple[dict, object, int, np.random.SeedSequence, np.random.SeedSequence]:
    """(runner-only params, environment, runs, environment seed, policy seed) of a unit."""
    params, runner = _split_params(unit)
    env_seed, policy_seed = unit.seeds()
    return runner, _environment(unit, params), unit.scenario.n_runs, env_seed, policy_seed


def _fixed_arm_index(label: str, env) -> int:
    arm = label.split(":", 1)[1]
    names = list(getattr(env, "arm_names", ()) or ())
    if arm in names:
        return names.index(arm)
    return int(arm)


def _make_policy(unit: Unit, env):
    label, spec = unit.policy.label, unit.policy
    if spec.policy in ("fixed", "fixed-arm", "FixedArm") or label.startswith("fixed:"):
        arm = spec.params.get("arm", _fixed_arm_index(label, env) if label.startswith("fixed:") else 0)
        return FixedArm(n_arms=env.n_arms, arm=arm)
    return build_policy(spec, env, unit.horizon)


def _fixed_results(unit: Unit, env, n_runs: int, env_seed) -> list[BanditSpecResult]:
    """Every fixed arm on the scenario's draws (cached: every policy unit of a scenario needs them)."""
    key = json.dumps([unit.experiment, unit.scenario.name, unit.scenario.params, n_runs, unit.seed, unit.horizon], sort_keys=True, default=str)
    if key not in _FIXED_CACHE:
        _FIXED_CACHE.clear()  # one scenario at a time is enough
        if hasattr(env, "fixed_stopping_times"):  # stacked or replayed draws: no loop needed
            env.reset(n_runs, seed=env_seed)
            _FIXED_CACHE[key] = [_fixed_from_draws(env, a, st) for a, st in enumerate(env.fixed_stopping_times().T)]
        else:
            _FIXED_CACHE[key] = [run_banditspec(env, FixedArm(n_arms=env.n_arms, arm=a), n_runs=n_runs, seed=(env_seed, 0)) for a in range(env.n_arms)]
    return _FIXED_CACHE[key]


def _fixed_from_draws(env, arm: int, st: np.ndarray) -> BanditSpecResult:
    """What the loop would give for fixed ``arm`` (same draws), from the stopping times directly.

    The loop charges the arm's gap ``(mu* - mu_arm) / mu*`` every round a prompt is unfinished, so the
    regret curve at a checkpoint ``r`` is ``gap * min(r, st)``, on the loop's own checkpoints.
    """
    n = st.shape[0]
    means = env.mean_rewards()
    gap = (means.max(axis=1) - means[:, arm]) / means.max(axis=1)
    seconds = st * env.round_seconds(np.full(n, arm))
    counts = np.zeros((n, env.n_arms), dtype=np.int64)
    counts[:, arm] = st
    rounds = checkpoint_rounds(int(st.max()))
    curve = gap[:, None] * np.minimum(rounds[None, :], st[:, None])
    return BanditSpecResult(st, env.response_lengths().astype(float), seconds, counts, st * gap, rounds, curve)


def _grouped(values: np.ndarray, group: int) -> np.ndarray:
    n = values.shape[0] // group * group
    return values[:n].reshape(-1, group).sum(axis=1)


def stopping_time_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """One (scenario, policy) of E1-E4: the BanditSpec loop on every prompt of the scenario."""
    start = time.perf_counter()
    runner, env, n_runs, env_seed, policy_seed = _unit_setup(unit)
    fixed = _fixed_results(unit, env, n_runs, env_seed)
    fixed_st = np.stack([f.stopping_time for f in fixed], axis=1)
    fixed_sec = np.stack([f.seconds for f in fixed], axis=1)

    env.reset(n_runs, seed=env_seed)
    best_arms = env.best_arms()
    against = runner.get("regret_against", "best-arm" if best_arms is not None else "best-fixed")
    if against == "best-arm":
        reference = fixed_st[np.arange(n_runs), best_arms]
    elif against == "per-run-min":
        reference = fixed_st.min(axis=1)
    else:
        reference = fixed_st[:, int(fixed_st.mean(axis=0).argmin())]

    if unit.policy.label == "oracle":
        # per prompt, the fixed arm with the least simulated time (fewest rounds on ties)
        choice = np.argmin(fixed_sec + 1e-9 * fixed_st, axis=1)
        rows = np.arange(n_runs)
        pick = lambda attr: np.stack([getattr(f, attr) for f in fixed], axis=1)[rows, choice]  # noqa: E731
        st, tokens, seconds = pick("stopping_time"), pick("tokens"), pick("seconds")
        counts = np.bincount(choice, minlength=env.n_arms).tolist()
        decomposition = np.stack([f.regret for f in fixed], axis=1)[rows, choice]
        curve_rounds, curve = np.array([1]), decomposition[:, None]
    else:
        if unit.policy.label.startswith("fixed:"):  # already played on the same draws: no need to replay the loop
            res = fixed[_fixed_arm_index(unit.policy.label, env)]
        else:
            res = run_banditspec(env, _make_policy(unit, env), n_runs=n_runs, seed=(env_seed, policy_seed))
        st, tokens, seconds, decomposition = res.stopping_time, res.tokens, res.seconds, res.regret
        counts = res.counts.sum(axis=0).tolist()
        curve_rounds, curve = res.rounds, res.regret_curve

    group = int(runner.get("group_size", 1))
    metrics = {
        "stopping_time": st.astype(float),
        "final_regret": (st - reference).astype(float),
        "regret_decomposition": decomposition,
        "mat": _grouped(tokens, group) / np.maximum(_grouped(st.astype(float), group), 1),
        "tokens_per_second": _grouped(tokens, group) / np.maximum(_grouped(seconds, group), 1e-12),
    }
    wanted = unit.metrics or tuple(metrics)
    extras = {"counts": counts, "arm_names": list(getattr(env, "arm_names", ()) or range(env.n_arms)), "reference": against}
    return UnitResult(
        unit_id=unit.unit_id,
        scenario=unit.scenario_name,
        policy=unit.policy.label,
        horizon=unit.horizon,
        n_runs=n_runs,
        rounds=curve_rounds,
        regret=curve,
        reward=np.zeros_like(curve),
        metrics={k: np.atleast_1d(np.asarray(metrics[k], dtype=float)).tolist() for k in wanted if k in metrics},
        extras=extras,
        wall_time=time.perf_counter() - start,
    )


def serving_chain_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """One (scenario, policy) of the serving scenario: every run a server answering a chain of responses.

    The engine plays the policy on :class:`~genbandit.envs.speculative.Table1Serving` until every
    server has answered its responses (the environment's ``done`` is the stop condition); the
    policy's state is never reset between responses. Per server: simulated tokens/s over the
    whole chain, MAT and rounds. ``fixed:<arm>`` plays one arm; every policy serves the same prompts.
    """
    start = time.perf_counter()
    _, env, n_runs, env_seed, policy_seed = _unit_setup(unit)
    res = simulate(env, _make_policy(unit, env), env.n_responses * env.max_response, n_runs=n_runs, seed=(env_seed, policy_seed),
                   stop=env.done, progress=progress, description=unit.unit_id)
    tokens, seconds = res.totals["tokens"], res.totals["seconds"]
    metrics = {"tokens_per_second": tokens / np.maximum(seconds, 1e-12), "mat": tokens / np.maximum(res.stopping_time, 1),
               "stopping_time": res.stopping_time.astype(float)}
    extras = {"counts": res.counts.sum(axis=0).tolist(), "arm_names": list(env.arm_names), "responses_per_run": env.n_responses}
    return UnitResult(
        unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=unit.horizon, n_runs=n_runs,
        rounds=res.rounds, regret=res.regret, reward=res.reward,
        metrics={k: np.asarray(v, dtype=float).tolist() for k, v in metrics.items() if not unit.metrics or k in unit.metrics},
        extras=extras, wall_time=time.perf_counter() - start,
    )


# ----------------------------------------------------------------------------- E0
def _chi_square(observed: np.ndarray, expected: np.ndarray) -> tuple[float, int, float]:
    """Pearson's test with cells of expected count < 5 pooled: (statistic, dof, p-value)."""
    from scipy import stats

    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:  # fold a small pooled cell into the largest one
        obs, exp = obs[:-1].copy(), exp[:-1].copy()
        obs[exp.argmax()] += observed[~keep].sum()
        exp[exp.argmax()] += expected[~keep].sum()
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = obs.size - 1
    return stat, dof, float(stats.chi2.sf(stat, dof))


def losslessness_pvalues(env: ToyLMSpeculative) -> dict[str, float]:
    """Chi-square p-values of the outputs of ``env``'s last runs against canonical decoding's law."""
    lengths, first3 = env.outputs()
    law, pmf = env.exact_distributions()
    keys = list(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    unknown = 0
    for row in map(tuple, first3.tolist()):
        if row in index:
            counts[index[row]] += 1
        else:
            unknown += 1
    probs = np.array([law[k] for k in keys])
    _, _, p_first3 = _chi_square(np.append(counts, unknown), np.append(probs, 0.0) * lengths.size)
    edges = np.unique(np.round(np.geomspace(1, 512, 14)).astype(int))
    cdf = np.concatenate([[0.0], np.cumsum(pmf)])
    expected = np.diff(cdf[edges]).tolist() + [1.0 - cdf[edges[-1]]]
    observed = np.histogram(lengths, bins=np.append(edges, np.iinfo(np.int64).max))[0]
    _, _, p_len = _chi_square(observed.astype(float), np.asarray(expected) * lengths.size)
    return {"p_first3": p_first3, "p_length": p_len, "impossible_outputs": float(unknown)}


def e0_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """E0: decode the toy LM with one policy and test its output law against plain decoding."""
    start = time.perf_counter()
    _, env, n_runs, env_seed, policy_seed = _unit_setup(unit)
    policy = _make_policy(unit, env)
    res = run_banditspec(env, policy, n_runs=n_runs, seed=(env_seed, policy_seed))
    lengths, _ = env.outputs()
    tests = losslessness_pvalues(env)
    big_l = env.max_length
    violations = float(((res.stopping_time < lengths / (big_l + 1)) | (res.stopping_time > lengths)).sum())
    metrics = {
        "stopping_time": res.stopping_time.astype(float).tolist(),
        "mat": res.mat.tolist(),
        "length": lengths.astype(float).tolist(),
        "p_first3": [tests["p_first3"]],
        "p_length": [tests["p_length"]],
        "bound_violations": [violations],
    }
    return UnitResult(
        unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=unit.horizon, n_runs=1,
        rounds=np.array([1]), regret=np.zeros((1, 1)), reward=np.zeros((1, 1)),
        metrics=metrics, extras={"counts": res.counts.sum(axis=0).tolist()}, wall_time=time.perf_counter() - start,
    )  # fmt: skip


# ----------------------------------------------------------------------------- E5
def _serving_policy(unit: Unit, env: ServingThroughput):
    label = unit.policy.label
    if label.startswith("fixed:"):
        return FixedArm(n_arms=env.n_arms, arm=list(env.lengths).index(int(label.split(":", 1)[1])))
    params = dict(unit.policy.params)
    params.pop("max_length", None)
    if unit.policy.policy in ("UCBSpec",):
        return ServingUCBSpec(n_arms=env.n_arms, max_reward=env.max_throughput(), **params)
    if unit.policy.policy in ("EXP3Spec",):
        return ServingEXP3Spec(n_arms=env.n_arms, max_reward=env.max_throughput(), **params)
    return POLICIES.create(unit.policy.policy, n_arms=env.n_arms, **params)


def e5_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """E5: every (batch size, random batch) sample of the serving replica, improvement over gamma = 0.

    ``UCBSpec`` and ``EXP3Spec`` run their serving variants (throughput normalised by the
    environment's a-priori bound); ``released-UCB`` gets raw tokens/s as in the released code;
    ``oracle`` is the best fixed gamma in ``oracle_lengths`` (1..4, as in Figure 3) per sample, and
    its unit also records the worst one.
    """
    start = time.perf_counter()
    params, runner = _split_params(unit)
    sizes = runner.get("batch_sizes", list(range(1, 51)))
    per_size = int(runner.get("batches_per_size", 10))
    oracle_lengths = runner.get("oracle_lengths", [1, 2, 3, 4])
    env_root, policy_root = unit.seeds()
    env_seeds, policy_seeds = env_root.spawn(len(sizes)), policy_root.spawn(len(sizes))
    improvement, worst, batch, chosen = [], [], [], []
    for b, env_seed, policy_seed in zip(sizes, env_seeds, policy_seeds):
        env = ServingThroughput(batch_size=int(b), **params)
        base = env.plain_throughput()
        if unit.policy.label == "oracle":
            arms = [list(env.lengths).index(g) for g in oracle_lengths]
            tps = np.stack([run_banditspec(env, FixedArm(n_arms=env.n_arms, arm=a), n_runs=per_size, seed=(env_seed, 0)).tokens_per_second for a in arms], axis=1)
            improvement.extend((tps.max(axis=1) / base).tolist())
            worst.extend((tps.min(axis=1) / base).tolist())
            chosen.extend(np.asarray(oracle_lengths)[tps.argmax(axis=1)].tolist())
        else:
            res = run_banditspec(env, _serving_policy(unit, env), n_runs=per_size, seed=(env_seed, policy_seed))
            improvement.extend((res.tokens_per_second / base).tolist())
            chosen.extend(np.asarray(env.lengths)[res.counts.argmax(axis=1)].tolist())
        batch.extend([int(b)] * per_size)
    metrics = {"improvement": improvement}
    if worst:
        metrics["worst_improvement"] = worst
    return UnitResult(
        unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=unit.horizon, n_runs=len(improvement),
        rounds=np.array([1]), regret=np.zeros((len(improvement), 1)), reward=np.zeros((len(improvement), 1)),
        metrics=metrics, extras={"batch_size": batch, "gamma": chosen}, wall_time=time.perf_counter() - start,
    )  # fmt: skip
