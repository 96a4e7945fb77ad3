"""``reproduce banditspec``: E0's unit, the losslessness check; the report hook is in :mod:`.banditspec`.

E1-E5 and the serving scenarios run through the generic unit (:func:`genbandit.experiments.units.run_unit`):
their environments end each run when its response is complete, offer the per-prompt oracle's arms
(``fastest_fixed_arms``) and the regret's reference stopping times, and the metrics (``stopping_time``,
``mat``, ``tokens_per_second``, ``regret_decomposition``, ``improvement``) are registered with them in
:mod:`genbandit.envs.speculative`. E0 plays through the same engine and then tests the law of the
decoded outputs, which is not a bandit quantity.
"""

from __future__ import annotations

import time

import numpy as np

from ..envs.speculative import ToyLMSpeculative
from .units import Unit, UnitResult, simulate_unit

__all__ = ["e0_unit", "losslessness_pvalues"]


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
    """E0: decode the toy LM with one policy (the engine, every run a prompt) and test its output law against plain decoding."""
    start = time.perf_counter()
    env, _, res = simulate_unit(unit, progress)
    lengths, _ = env.outputs()
    tests = losslessness_pvalues(env)
    stopping_time, tokens = res.stopping_time, res.totals["tokens"]
    violations = float(((stopping_time < lengths / (env.max_length + 1)) | (stopping_time > lengths)).sum())
    metrics = {
        "stopping_time": stopping_time.astype(float).tolist(),
        "mat": (tokens / np.maximum(stopping_time, 1)).tolist(),
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
