"""``reproduce banditspec``: custom units for the BanditSpec loop (E0-E5) and the report hook.

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
import math
import time
import numpy as np

from ..core.registry import POLICIES
from ..envs.speculative import (
    TABLE1,
    TABLE1_ARMS,
    BanditSpecResult,
    ServingThroughput,
    Table1Replica,
    ToyLMSpeculative,
    checkpoint_rounds,
    run_banditspec,
)
from ..policies.speculative import FixedArm, ServingEXP3Spec, ServingUCBSpec
from .report import ReportContext, format_mean
from .units import Unit, UnitResult, build_environment

__all__ = ["stopping_time_unit", "e0_unit", "e5_unit", "report"]

_RUNNER_KEYS = ("group_size", "regret_against", "batch_sizes", "batches_per_size", "oracle_lengths")
_FIXED_CACHE: dict[str, list[BanditSpecResult]] = {}


def _split_params(unit: Unit) -> tuple[dict, dict]:
    params = dict(unit.scenario.params)
    runner = {k: params.pop(k) for k in _RUNNER_KEYS if k in params}
    return params, runner


def _environment(unit: Unit, params: dict):
    from dataclasses import replace

    return build_environment(replace(unit.scenario, params=params), unit.horizon)


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
    cls = POLICIES.get(spec.policy)
    params = dict(spec.params)
    params.setdefault("n_arms", env.n_arms)
    if "max_length" in cls._param_names() and hasattr(env, "max_length"):
        params.setdefault("max_length", env.max_length)
    return cls(**params)


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
    params, runner = _split_params(unit)
    env = _environment(unit, params)
    n_runs = unit.scenario.n_runs
    env_seed, policy_seed = unit.seeds()
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
    params, _ = _split_params(unit)
    env = _environment(unit, params)
    n_runs = unit.scenario.n_runs
    env_seed, policy_seed = unit.seeds()
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


# ----------------------------------------------------------------------------- report
_BENCH_TITLES = {"spec-bench": "Spec Bench", "alpaca": "Alpaca", "code-editor": "Code Editor", "debug-bench": "Debug Bench"}
_MODEL_TITLES = {"llama3": "LLaMA3-8B-Instruct", "qwen2": "Qwen2-7B-Instruct"}


def _rec(ctx: ReportContext, scenario: str, policy: str, metric: str) -> dict | None:
    return ctx.metric(scenario, policy, metric)


def _mean(ctx, scenario, policy, metric) -> float:
    rec = _rec(ctx, scenario, policy, metric)
    return float("nan") if rec is None or rec["mean"] is None else rec["mean"]


def _values(ctx: ReportContext, scenario: str, policy: str, metric: str) -> np.ndarray | None:
    for r in ctx.results:
        if r.error is None and r.scenario == scenario and r.policy == policy and metric in r.metrics:
            return np.asarray(r.metrics[metric], dtype=float)
    return None


def _best_fixed_tps(ctx: ReportContext, scenario: str) -> str:
    """The fixed arm with the largest mean tokens/s in ``scenario`` (a ``fixed:<arm>`` label)."""
    means = {f"fixed:{a}": _mean(ctx, scenario, f"fixed:{a}", "tokens_per_second") for a in TABLE1_ARMS}
    return max(means, key=lambda f: means[f] if np.isfinite(means[f]) else -1)


def _e1_section(ctx: ReportContext, checks: list) -> None:
    import matplotlib.pyplot as plt

    e1 = sorted({r.scenario for r in ctx.results if r.scenario.startswith("e1-a:N=")}, key=lambda s: int(s.split("=")[1]))
    if not e1:
        return
    policies = [p for p in ("UCBSpec", "EXP3Spec", "UCB1-style", "released-UCB", "oracle") if any(r.policy == p and r.scenario in e1 for r in ctx.results)]
    ns = [int(s.split("=")[1]) for s in e1]
    lines = ["| N | best fixed ST | " + " | ".join(f"{p} regret" for p in policies) + " |", "|---" * (len(policies) + 2) + "|"]
    for s, n in zip(e1, ns):
        best = min((_mean(ctx, s, p, "stopping_time"), p) for p in {r.policy for r in ctx.results if r.scenario == s and r.policy.startswith("fixed:")})
        cells = [format_mean(*(lambda rec: (rec["mean"], rec["stderr"]))(_rec(ctx, s, p, "final_regret"))) if _rec(ctx, s, p, "final_regret") else "n/a" for p in policies]
        lines.append(f"| {n} | {best[0]:.1f} ({best[1]}) | " + " | ".join(cells) + " |")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for p in policies:
        if p == "oracle":
            continue
        ys = [_mean(ctx, s, p, "final_regret") for s in e1]
        ax.plot(ns, ys, marker="o", label=p)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("response length N (tokens, log scale)")
    ax.set_ylabel("stopping-time regret (rounds)")
    ax.set_title("E1 instance A (L=6): regret against log N")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = ctx.savefig(fig, "e1-regret-vs-logN")
    text = (
        "Stopping-time regret `ST(policy) - ST(best fixed arm)` on the same draws (each arm's k-th pull "
        "gets the same sample whichever policy plays), mean ± stderr over prompts. Theory: UCBSpec "
        "O(log N), EXP3Spec O(sqrt N); the released rule is greedy after warm-up and can lock onto a "
        "wrong arm (linear).\n\n" + "\n".join(lines) + f"\n\n![E1 regret against log N]({path})"
    )
    small, big = "e1-a:N=1024", "e1-a:N=16384"
    if _rec(ctx, small, "UCBSpec", "final_regret") and _rec(ctx, big, "UCBSpec", "final_regret"):
        ratio = _mean(ctx, big, "UCBSpec", "final_regret") / _mean(ctx, small, "UCBSpec", "final_regret")
        ctx.add_record("e1-a", "UCBSpec", "regret_ratio_16384_over_1024", [ratio])
        checks.append(("E1-A: UCBSpec regret(N=16384) <= 2.5 x regret(N=1024)", ratio <= 2.5, f"ratio {ratio:.2f}"))
        if _rec(ctx, big, "released-UCB", "final_regret"):
            r_ratio = _mean(ctx, big, "released-UCB", "final_regret") / _mean(ctx, small, "released-UCB", "final_regret")
            ctx.add_record("e1-a", "released-UCB", "regret_ratio_16384_over_1024", [r_ratio])
            checks.append(("E1-A: released-UCB regret grows faster than UCBSpec's", r_ratio > ratio, f"growth x{r_ratio:.2f} vs x{ratio:.2f}"))
    ctx.add_section("E1: stopping-time regret against N (instance A)", text)


def _e2_section(ctx: ReportContext, checks: list) -> None:
    scenarios = [s.name for s in ctx.config.scenarios if s.name.startswith("e2:")]
    if not scenarios:
        return
    rows_by_model: dict[str, list[str]] = {}
    lines = []
    fixed = [f"fixed:{a}" for a in TABLE1_ARMS]
    for model in ("llama3", "qwen2"):
        benches = [b for b in _BENCH_TITLES if f"e2:{b}:{model}" in scenarios]
        if not benches:
            continue
        header = "| " + _MODEL_TITLES[model] + " | " + " | ".join(f"{_BENCH_TITLES[b]} MAT (ours / paper) | {_BENCH_TITLES[b]} tokens/s (ours / paper)" for b in benches) + " |"
        lines += [header, "|---" * (1 + 2 * len(benches)) + "|"]
        cell = lambda v, p: f"{v:.2f} / {p:.2f}" if np.isfinite(v) else f"n/a / {p:.2f}"  # noqa: E731
        row = ["Vanilla"]
        for b in benches:
            mat, tps = TABLE1[model][b]["vanilla"]
            row += [cell(1.0, mat), cell(tps, tps) + " (set)"]
        lines.append("| " + " | ".join(row) + " |")
        for label, paper_key in [(f, f.split(":")[1]) for f in fixed] + [("EXP3Spec", "EXP3Spec"), ("UCBSpec", "UCBSpec"), ("UCB1-style", None), ("released-UCB", None), ("UCBSpec-cr0.25", None), ("oracle", None)]:
            row = [label]
            for b in benches:
                s = f"e2:{b}:{model}"
                paper = TABLE1[model][b].get(paper_key) if paper_key else None
                for k, metric in enumerate(("mat", "tokens_per_second")):
                    v = _mean(ctx, s, label, metric)
                    row.append(cell(v, paper[k]) if paper else (f"{v:.2f}" if np.isfinite(v) else "n/a"))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        rows_by_model[model] = benches
    gains = ["| scenario | best fixed arm (tokens/s) | UCBSpec tokens/s | gain | paper gain over Eagle-2 | UCBSpec >= best fixed - 2 SE | EXP3Spec gain | UCBSpec-cr0.25 gain (sensitivity) |", "|---|---|---|---|---|---|---|---|"]
    all_ok = True
    detail = []
    for s in scenarios:
        _, bench, model = s.split(":")
        best = _best_fixed_tps(ctx, s)
        u = _values(ctx, s, "UCBSpec", "tokens_per_second")
        f = _values(ctx, s, best, "tokens_per_second")
        e = _values(ctx, s, "EXP3Spec", "tokens_per_second")
        if u is None or f is None:
            continue
        se = math.sqrt(u.var(ddof=1) / u.size + f.var(ddof=1) / f.size) if u.size > 1 else 0.0
        ok = u.mean() >= f.mean() - 2 * se
        all_ok &= bool(ok)
        paper_gain = TABLE1[model][bench]["UCBSpec"][1] / TABLE1[model][bench]["Eagle-2"][1] - 1
        gain = u.mean() / f.mean() - 1
        e_gain = (e.mean() / f.mean() - 1) if e is not None else float("nan")
        c = _values(ctx, s, "UCBSpec-cr0.25", "tokens_per_second")
        c_gain = (c.mean() / f.mean() - 1) if c is not None else float("nan")
        ctx.add_record(s, "UCBSpec", "gain_over_best_fixed", [gain])
        gains.append(f"| {s} | {best.split(':')[1]} ({f.mean():.1f}) | {u.mean():.1f} ± {u.std(ddof=1) / math.sqrt(u.size):.1f} | {gain:+.1%} | {paper_gain:+.1%} | {'yes' if ok else 'no'} (2 SE = {2 * se:.1f}) | {e_gain:+.1%} | {c_gain:+.1%} |")
        detail.append(f"{s}: {u.mean():.1f} vs {f.mean():.1f} (2 SE {2 * se:.1f})")
    if len(gains) > 2:
        checks.append(("E2: UCBSpec tokens/s >= best fixed arm's - 2 SE on every benchmark and model", all_ok, "; ".join(detail)))
    text = (
        "A replica of the paper's Table 1 (E2 of the spec). Fixed arms are calibrated to the table "
        "(MAT through the prompt mixture, tokens/s through a per-round cost of 1000 MAT / tokens_per_s ms), so "
        "their rows check the calibration; the bandit rows are what the simulation predicts, the paper's "
        "measured value beside ours. MAT and tokens/s are ratios of totals over groups of prompts; "
        "the table shows their means over groups.\n\n" + "\n".join(lines) + "\n" + "\n".join(gains)
    )
    ctx.add_section("E2: Table 1 replica (MAT and tokens/s, ours / paper)", text)


def _e2_length_section(ctx: ReportContext) -> None:
    """UCBSpec's gain over the best fixed arm as responses get longer (scenarios ``e2-length:...``)."""
    import matplotlib.pyplot as plt

    lengths: dict[tuple[str, str], dict[float, str]] = {}
    for sc in ctx.config.scenarios:
        if sc.name.startswith("e2-length:"):
            _, bench, model, median = sc.name.split(":")
            lengths.setdefault((bench, model), {})[float(median.split("=")[1])] = sc.name
    if not lengths:
        return
    main = next((sc for sc in ctx.config.scenarios if sc.name.startswith("e2:")), None)
    base_median = float((main.params if main else {}).get("response_median", Table1Replica().response_median))
    medians = sorted({base_median, *(m for cell in lengths.values() for m in cell)})
    header = " | ".join(f"median {m:,.0f}: UCBSpec / EXP3Spec / oracle" for m in medians)
    lines = [f"| scenario | paper's UCBSpec gain | {header} |", "|---|---|" + "---|" * len(medians)]
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for (bench, model), cell in lengths.items():
        cell = {base_median: f"e2:{bench}:{model}", **cell}
        gains = {}
        row = []
        for m in medians:
            scenario = cell.get(m)
            best = _mean(ctx, scenario, _best_fixed_tps(ctx, scenario), "tokens_per_second") if scenario else float("nan")
            g = {p: _mean(ctx, scenario, p, "tokens_per_second") / best - 1 if scenario else float("nan") for p in ("UCBSpec", "EXP3Spec", "oracle")}
            gains[m] = g["UCBSpec"]
            row.append(" / ".join(f"{v:+.1%}" if np.isfinite(v) else "n/a" for v in g.values()))
        paper = TABLE1[model][bench]["UCBSpec"][1] / TABLE1[model][bench]["Eagle-2"][1] - 1
        lines.append(f"| e2:{bench}:{model} | {paper:+.1%} | " + " | ".join(row) + " |")
        ax.plot(medians, [100 * gains[m] for m in medians], marker="o", label=f"{_BENCH_TITLES[bench]}, {model}")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks(medians, [f"{m:,.0f}" for m in medians])
    ax.minorticks_off()
    ax.set_xlabel("median response length (tokens)")
    ax.set_ylabel("UCBSpec tokens/s over the best fixed arm (%)")
    ax.set_title("E2 replica: UCBSpec's gain against response length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    path = ctx.savefig(fig, "e2-gain-vs-response-length")
    text = (
        "Not in the paper: the E2 replica with longer responses (lognormal, same spread), to see where UCBSpec's "
        f"exploration pays for itself. Gains are tokens/s over the best fixed arm of the same scenario; median {base_median:,.0f} "
        "is the main E2 table. The paper does not give its response lengths (it lengthened SpecBench's short "
        "responses with Mixture-of-Agents to get more arm pulls, App. G.1).\n\n"
        + "\n".join(lines) + f"\n\n![gain against response length]({path})"
    )
    ctx.add_section("E2 sensitivity: response length", text)


def _e5_section(ctx: ReportContext, checks: list) -> None:
    import matplotlib.pyplot as plt

    units = {r.policy: r for r in ctx.results if r.error is None and r.scenario == "e5"}
    if "oracle" not in units:
        return
    best = np.asarray(units["oracle"].metrics["improvement"])
    worst = np.asarray(units["oracle"].metrics["worst_improvement"])
    order = np.argsort(best, kind="stable")
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    x = np.arange(best.size)
    fixed_labels = [label for label in units if label.startswith("fixed:")]
    for k, label in enumerate(fixed_labels):
        shade = plt.cm.viridis(k / max(len(fixed_labels) - 1, 1))
        ax.plot(x, np.asarray(units[label].metrics["improvement"])[order], lw=0.7, ls=":", color=shade, label=f"gamma={label.split(':')[1]}")
    ax.plot(x, best[order], color="tab:blue", lw=2, label="oracle best")
    ax.plot(x, worst[order], color="black", lw=1, ls="--", label="oracle worst")
    for label, color in (("UCBSpec", "tab:red"), ("released-UCB", "tab:orange"), ("EXP3Spec", "tab:pink")):
        if label in units:
            ax.plot(x, np.asarray(units[label].metrics["improvement"])[order], color=color, lw=1.2, label=label)
    ax.set_xlabel("sample (sorted by the oracle best's improvement)")
    ax.set_ylabel("throughput / throughput(gamma=0)")
    ax.set_title("E5: serving throughput improvement (Figure 3-like)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    path = ctx.savefig(fig, "e5-sorted-improvement")
    rows = ["| policy | mean improvement | gap to oracle best `(best - policy)/best` | share of samples above the second-best fixed gamma |", "|---|---|---|---|"]
    fixed = np.stack([np.asarray(r.metrics["improvement"]) for label, r in units.items() if label.startswith("fixed:") and label != "fixed:0"], axis=1) if any(k.startswith("fixed:") for k in units) else None
    second = np.sort(fixed, axis=1)[:, -2] if fixed is not None and fixed.shape[1] > 1 else None
    for label, r in units.items():
        v = np.asarray(r.metrics["improvement"])
        gap = float(((best - v) / best).mean())
        above = f"{float((v > second).mean()):.0%}" if second is not None else "n/a"
        rows.append(f"| {label} | {v.mean():.3f} | {gap:.1%} | {above} |")
        ctx.add_record("e5", label, "gap_to_oracle", (best - v) / best)
    shape = f"oracle best rises from {best[order][0]:.2f} to {best[order][-1]:.2f}; worst from {np.sort(worst)[0]:.2f} to {np.sort(worst)[-1]:.2f}"
    if "fixed:4" in units:
        g4 = np.asarray(units["fixed:4"].metrics["improvement"])
        shape += f"; gamma=4 is below plain decoding on {float((g4 < 1).mean()):.0%} of the samples"
    text = (
        "Batches of 1 to 50 prompts (spec E5 cost model), arms gamma in {0,...,4}; improvement = tokens/s over plain "
        "decoding's expected tokens/s. UCBSpec and EXP3Spec are the serving variants (reward tokens/s "
        "normalised by the a-priori bound (max gamma + 1) B / T(min gamma, B)); released-UCB gets raw tokens/s. "
        f"Paper (Figure 3, LLaMA3, read off the repo's plot by the spec): best about 1.29 to 1.87, worst 0.93 to 1.55. Ours: {shape}.\n\n"
        + "\n".join(rows)
        + f"\n\n![E5 sorted improvement]({path})"
    )
    ctx.add_section("E5: serving throughput, sorted-sample improvement", text)


def _e0_section(ctx: ReportContext, checks: list) -> None:
    units = [r for r in ctx.results if r.error is None and r.scenario == "e0"]
    if not units:
        return
    rows = ["| policy | runs | mean length | mean ST | MAT | chi-square p (first 3 tokens) | chi-square p (length) | runs outside len/(L+1) <= ST <= len |", "|---|---|---|---|---|---|---|---|"]
    ok = True
    for r in units:
        m = r.metrics
        p3, pl, viol = m["p_first3"][0], m["p_length"][0], m["bound_violations"][0]
        ok &= viol == 0
        rows.append(f"| {r.policy} | {len(m['length'])} | {np.mean(m['length']):.2f} | {np.mean(m['stopping_time']):.2f} | {np.mean(m['mat']):.3f} | {p3:.3f} | {pl:.3f} | {int(viol)} |")
    pvals = [r.metrics[k][0] for r in units for k in ("p_first3", "p_length")]
    # Bonferroni over all tests: the family rejects at 1% only if some p < 0.01 / n_tests
    family = min(pvals) * len(pvals)
    ok_family = family >= 0.01
    checks.append(("E0: output law of every policy equals plain decoding (chi-square, 1% level, Bonferroni)", ok_family, f"min p = {min(pvals):.3g} over {len(pvals)} tests"))
    checks.append(("E0: len/(L+1) <= ST <= len on every run (Prop. 3.1)", ok, "violations: " + ", ".join(f"{r.policy} {int(r.metrics['bound_violations'][0])}" for r in units)))
    text = (
        "Toy Markov LM (20 tokens + EOS, E[len] about 64), three drafts of different quality, L=4, exact speculative "
        "sampling (Algorithm 6). The output law of BanditSpec with any policy must be the target's own (Prop. 3.1): "
        "Pearson chi-square of the first three tokens and of the binned length against the exact law of plain decoding.\n\n"
        + "\n".join(rows)
    )
    ctx.add_section("E0: losslessness of speculative sampling under the bandits", text)


def _table_section(ctx: ReportContext, prefix: str, title: str, note: str) -> None:
    scen = [s.name for s in ctx.config.scenarios if s.name.startswith(prefix)]
    if not scen:
        return
    lines = ["| scenario | policy | stopping time | regret | MAT | tokens/s |", "|---|---|---|---|---|---|"]
    for s in scen:
        for p in dict.fromkeys(r.policy for r in ctx.results if r.scenario == s and r.error is None):
            cells = []
            for metric in ("stopping_time", "final_regret", "mat", "tokens_per_second"):
                rec = _rec(ctx, s, p, metric)
                cells.append(format_mean(rec["mean"], rec["stderr"]) if rec else "n/a")
            lines.append(f"| {s} | {p} | " + " | ".join(cells) + " |")
    ctx.add_section(title, note + "\n\n" + "\n".join(lines))


def _e4_extra(ctx: ReportContext) -> str:
    rows = ["| scenario | EXP3Spec regret | Thm 5.3 bound | runs where Assumption 5.2 fails (ST <= min_i ST_i) |", "|---|---|---|---|"]
    for s in [s for s in ctx.config.scenarios if s.name.startswith("e4")]:
        v = _values(ctx, s.name, "EXP3Spec", "final_regret")
        if v is None:
            continue
        n = int(s.params.get("response_length", 1024))
        big_l, k = int(s.params.get("max_length", 6)), len(s.params.get("accept", [0, 0, 0, 0]))
        st_min = _mean(ctx, s.name, "oracle", "stopping_time")
        bound = 2 * big_l * min(math.sqrt(n * k * math.log(k)), 2 * big_l * k * math.log(k) + math.sqrt(st_min * k * math.log(k)))
        rows.append(f"| {s.name} | {v.mean():.1f} ± {v.std(ddof=1) / math.sqrt(v.size):.1f} | {bound:.0f} | {float((v <= 0).mean()):.0%} |")
    return "\n".join(rows)


def report(ctx: ReportContext) -> None:
    """Table 1 layout, E1 growth, E0 losslessness, E3/E4 tables, E5 curves, acceptance."""
    checks: list[tuple[str, bool, str]] = []
    _e1_section(ctx, checks)
    _table_section(ctx, "e1-b", "E1 instance B (close gaps, L=4)", "Arms at mu* - Delta, Delta in {0.05, 0.1, 0.25, 0.5}; mu* = 3.94.")
    _e2_section(ctx, checks)
    _e2_length_section(ctx)
    _table_section(ctx, "e3", "E3: drift inside a response", "Copy and free-text regimes alternate (geometric segments, mean 64 tokens); regret against the fixed arm with the least mean stopping time. Assumption 4.1 fails here.")
    _table_section(ctx, "e4", "E4: oblivious replay (greedy / adversarial analysis)", "Tables fixed before play; regret = ST(policy) - min_i ST(fixed i) per prompt (eq. 12).\n\n" + _e4_extra(ctx))
    _e5_section(ctx, checks)
    _e0_section(ctx, checks)
    if checks:
        lines = ["| criterion | holds | measured |", "|---|---|---|"] + [f"| {name} | {'yes' if ok else 'NO'} | {detail} |" for name, ok, detail in checks]
        ctx.add_section("Acceptance checks", "\n".join(lines))
    for name, ok, _ in checks:
        ctx.add_record("acceptance", name, "holds", [float(ok)])
