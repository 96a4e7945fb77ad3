"""``reproduce pak-ucb``: runners and the report hook for prompt-aware model selection (Hu, Leung & Farnia 2025).

The curve scenarios are standard units: the OtB and OPR curves against rounds (the paper's figures)
come from the ``Step.info`` sums the engine records at its checkpoints, and a ``best-single``
policy without an ``arm`` takes the environment's best single model from its ``policy_arguments()``.
One runner of its own, :func:`runtime_unit`, times ``select`` + ``update`` alone (the environment
excluded) per block of rounds, with BLAS pinned to one thread, for the run-time comparison (Figure 20).

The hook :func:`report` draws the curves, the run-time curve, the headroom analysis of the real
streams (how much any router could gain over the best single model) and the acceptance checks.
"""

from __future__ import annotations

import numpy as np

from ..core.simulator import simulate
from .metrics import compute_metric
from .offpolicy import ridge_fit_predict
from .report import ReportContext
from .units import Unit, UnitResult, build_environment, build_policy

__all__ = ["runtime_unit", "report", "headroom"]


def runtime_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """Time ``select`` + ``update`` per block of rounds (the environment excluded), one run, BLAS on one thread.

    The loop is :func:`~genbandit.core.simulator.simulate`'s, which books the policy's own time at
    its checkpoints; ``extras["block_rounds"]`` are the checkpoints closing 20 equal blocks of rounds
    and ``extras["ms_per_round"]`` the mean milliseconds per round in each block.
    """
    from threadpoolctl import threadpool_limits

    env = build_environment(unit.scenario, unit.horizon)
    policy = build_policy(unit.policy, env, unit.horizon)
    T = unit.horizon
    n_blocks = min(20, T)
    with threadpool_limits(1):
        result = simulate(env, policy, T, n_runs=1, seed=unit.seeds(), n_checkpoints=2 * n_blocks, time_policy=True,
                          progress=progress, description=f"{unit.scenario_name} / {unit.policy.label}")
    ends = np.unique(np.searchsorted(result.rounds, np.linspace(0, T, n_blocks + 1).astype(int)[1:]))
    block_rounds = result.rounds[ends]
    spent = result.policy_seconds[ends]
    metrics = {
        **{name: compute_metric(name, result, env, policy) for name in ("opr", "otb", "mean_reward")},
        "seconds_per_decision": spent[-1] / T,
        "total_seconds": spent[-1],
    }
    extras = {"block_rounds": block_rounds.tolist(), "ms_per_round": (1e3 * np.diff(spent, prepend=0.0) / np.diff(block_rounds, prepend=0)).tolist()}
    return UnitResult(unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=T, n_runs=1,
                      rounds=block_rounds, regret=result.regret[:, ends], reward=result.reward[:, ends],
                      metrics={k: np.atleast_1d(np.asarray(v, dtype=float)).tolist() for k, v in metrics.items()},
                      extras=extras, wall_time=float(spent[-1]))


# ---------------------------------------------------------------------------------------------
# Headroom: how much could any router gain over the best single model on a logged stream?
# ---------------------------------------------------------------------------------------------
def headroom(X: np.ndarray, U: np.ndarray, n_folds: int = 5, alphas: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0), seed: int = 0,
             groups: np.ndarray | None = None) -> dict:
    """Mean utility of the best single model, of full-information routing by cross-validated ridge
    regression on the embeddings (each fold routed by per-model ridge fits on the other folds, the
    ridge penalty picked on the training folds), and of the per-prompt oracle.

    ``X`` ``(N, d)`` embeddings, ``U`` ``(N, G)`` utilities, ``groups`` ``(N,)`` a prompt id per
    row: rows of one prompt (the same text, or trials of it) always fall in the same fold, so no
    fold is routed by a fit that saw its own prompts. By default every row is its own group.
    With fewer than ``4 n_folds`` groups (each fit picks its penalty on 4 inner folds) no router is
    fitted and ``cv_ridge_routing`` is ``None``.
    """
    rng = np.random.default_rng(seed)
    N, G = U.shape
    ids = np.arange(N) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    members = np.split(np.argsort(ids, kind="stable"), np.cumsum(np.bincount(ids))[:-1])  # rows of each group
    best_single = int(U.mean(0).argmax())
    room = {"best_single_arm": best_single, "best_single": float(U[:, best_single].mean()), "cv_ridge_routing": None,
            "oracle": float(U.max(1).mean()), "per_model": U.mean(0).tolist()}
    if len(members) < 4 * n_folds:
        return room

    def rows(group_ids: np.ndarray) -> np.ndarray:
        return np.concatenate([members[g] for g in group_ids])

    group_folds = np.array_split(rng.permutation(len(members)), n_folds)
    folds = [rows(g) for g in group_folds]

    def fit_predict(train: np.ndarray, test: np.ndarray, alpha: float) -> np.ndarray:
        return ridge_fit_predict(X[train], U[train], X[test], alpha)

    chosen = np.empty(N, dtype=np.int64)
    for k, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != k])
        inner = [rows(g) for g in np.array_split(np.concatenate([f for j, f in enumerate(group_folds) if j != k]), 4)]
        scores = []
        for alpha in alphas:  # pick alpha by routed utility on inner folds
            got = 0.0
            for j, val in enumerate(inner):
                fit = np.concatenate([f for i, f in enumerate(inner) if i != j])
                pick = fit_predict(fit, val, alpha).argmax(1)
                got += U[val, pick].sum()
            scores.append(got)
        chosen[test] = fit_predict(train, test, alphas[int(np.argmax(scores))]).argmax(1)
    room["cv_ridge_routing"] = float(U[np.arange(N), chosen].mean())
    return room


# ---------------------------------------------------------------------------------------------
# Report hook
# ---------------------------------------------------------------------------------------------
def _value(ctx: ReportContext, scenario: str, policy: str, metric: str) -> float | None:
    rec = ctx.metric(scenario, policy, metric)
    return None if rec is None else rec["mean"]


def _curves(ctx: ReportContext) -> None:
    import matplotlib.pyplot as plt

    curve_results = [r for r in ctx.results if r.error is None and "best_single_reward" in r.extras.get("info_curves", {})]
    scenarios = list(dict.fromkeys(r.scenario for r in curve_results))
    if not scenarios:
        return
    lines = []
    for scenario in scenarios:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for r in (r for r in curve_results if r.scenario == scenario):
            info = {key: np.asarray(curve) for key, curve in r.extras["info_curves"].items()}
            axes[0].plot(r.rounds, (r.reward.mean(axis=0) - info["best_single_reward"]) / r.rounds, label=r.policy)
            axes[1].plot(r.rounds, info["optimal"] / r.rounds, label=r.policy)
        axes[0].axhline(0, color="k", lw=0.8)
        axes[0].set_ylabel("OtB(t): mean score minus best single model's")
        axes[1].set_ylabel("OPR(t): share of rounds on the prompt's best model")
        for ax in axes:
            ax.set_xlabel("round")
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=7, ncol=2)
        fig.suptitle(f"{scenario}: running OtB and OPR (mean over runs)")
        lines += [f"![{scenario} OtB and OPR]({ctx.savefig(fig, f'otb-opr-{scenario}')})", ""]
    ctx.add_section("OtB and OPR against rounds", "\n".join(lines))


def _runtime(ctx: ReportContext) -> dict:
    import matplotlib.pyplot as plt

    timed = [r for r in ctx.results if r.error is None and "ms_per_round" in r.extras]
    if not timed:
        return {}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rows = ["| policy | horizon | total s (select+update) | ms per decision | OPR |", "|---|---|---|---|---|"]
    out: dict[str, dict] = {}
    for r in timed:
        ax.plot(r.extras["block_rounds"], r.extras["ms_per_round"], marker="o", ms=3, label=f"{r.policy} (T={r.horizon})")
        total = r.metrics["total_seconds"][0]
        rows.append(f"| {r.policy} | {r.horizon} | {total:.1f} | {1e3 * total / r.horizon:.3f} | {r.metrics['opr'][0]:.3f} |")
        out[r.policy] = {"total": total, "opr": r.metrics["opr"][0], "horizon": r.horizon, "curve": r.extras["ms_per_round"]}
    ax.set_xlabel("round")
    ax.set_ylabel("ms per round (select + update, block mean)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    path = ctx.savefig(fig, "runtime-vs-rounds")
    text = (
        "Wall time of `select` + `update` alone (the environment's draws excluded), one run, BLAS pinned to one thread, "
        "measured per block of rounds. Exact PAK-UCB-RBF keeps (K + alpha I)^-1 per arm and grows it by a Schur-complement "
        "block update: O(n_g^2) per round, so its cost climbs with t. RFF-UCB-RBF keeps a (2D x 2D) inverse per arm "
        "updated by Sherman-Morrison: O(G D^2) per round, flat in t. Absolute times depend on the machine and its load; "
        "the ratio compares two policies that ran in the same process, one after the other.\n\n" + "\n".join(rows) + f"\n\n![run time]({path})"
    )
    exact = out.get("PAK-UCB-RBF")
    rff = out.get("RFF-UCB-RBF")
    if exact and rff:
        ratio = exact["total"] / max(rff["total"], 1e-12)
        ctx.add_record("runtime", "RFF-UCB-RBF", "speedup_vs_exact", [ratio])
        text += f"\n\nRFF-UCB-RBF is **{ratio:.1f}x** faster per decision than exact PAK-UCB-RBF over {rff['horizon']} rounds; OPR {rff['opr']:.3f} vs {exact['opr']:.3f}."
        out["ratio"] = ratio
    ctx.add_section("Run time against rounds (Figure 20)", text)
    return out


def _headroom(ctx: ReportContext) -> dict:
    from .units import build_environment as _build

    found: dict[str, dict] = {}
    rooms: dict[str, dict] = {}  # scenarios on the same stream share one headroom analysis
    lines = []
    for scenario in ctx.config.scenarios:
        if scenario.environment not in ("paretobandit-replay", "paretobandit", "prompt-table"):
            continue
        env = _build(scenario, scenario.horizons[-1])
        stream = repr((scenario.environment, sorted(scenario.params.items())))
        room = rooms[stream] = rooms.get(stream) or headroom(env.embeddings(), env.utilities(), groups=np.asarray(env.prompts))
        found[scenario.name] = room
        if room["cv_ridge_routing"] is None:
            lines += [f"**{scenario.name}**: {env.utilities().shape[0]} prompts are too few to cross-validate a router on; no headroom analysis.", ""]
            continue
        gap = room["cv_ridge_routing"] - room["best_single"]
        lines += [
            f"**{scenario.name}** (utility = reward - {env.price:g} x dollar cost; {env.utilities().shape[0]} prompts): "
            f"best single model {env.models[room['best_single_arm']]} {room['best_single']:.4f}; "
            f"full-information routing by 5-fold cross-validated ridge on the same MiniLM embeddings {room['cv_ridge_routing']:.4f} "
            f"({100 * gap / abs(room['best_single']):+.2f}% over the best single model); per-prompt oracle {room['oracle']:.4f} "
            "(unreachable: it knows every model's outcome on every prompt).",
            "",
            "| policy | mean utility | vs best single | share of the CV-ridge headroom taken | OPR |",
            "|---|---|---|---|---|",
        ]
        same = _value(ctx, scenario.name, "best-single", "mean_reward")
        base = room["best_single"] if same is None else same
        if same is not None:
            lines[-2] = lines[-2].replace("| vs best single |", "| vs best single (same prompts) |")
        for p in scenario.policies:
            mean = _value(ctx, scenario.name, p.label, "mean_reward")
            opr = _value(ctx, scenario.name, p.label, "opr")
            if mean is None:
                continue
            share = (mean - base) / gap if gap > 0 else float("nan")
            ctx.add_record(scenario.name, p.label, "headroom_share", [share])
            lines.append(f"| {p.label} | {mean:.4f} | {mean - base:+.4f} | {share:+.2f} | {opr:.3f} |")
        lines.append("")
        for key in ("best_single", "cv_ridge_routing", "oracle"):
            ctx.add_record(scenario.name, f"headroom:{key}", "mean_reward", [room[key]])
    if lines:
        ctx.add_section(
            "Headroom on the real streams",
            "How much could prompt-aware routing gain here at all? Each policy's mean utility is shown against the best "
            "single model and against full-information routing (a ridge model per LLM fitted on every logged outcome of "
            "the training folds, a luxury no bandit has). The share is (policy - best single) / (CV ridge - best single); "
            "when the headroom is a fraction of a percent, a share near zero or below is what exploration costs, not a bug.\n\n"
            + "\n".join(lines),
        )
    return found


def _acceptance(ctx: ReportContext, runtime: dict, room: dict) -> None:
    rows = ["| criterion | measured | holds |", "|---|---|---|"]

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("yes" if ok else "**no**")

    for scenario in ctx.config.scenarios:
        if not scenario.name.startswith("setup4-") or scenario.runner and "runtime" in scenario.runner:
            continue
        otb = {p.label: _value(ctx, scenario.name, p.label, "otb") for p in scenario.policies}
        if None in (otb.get("PAK-UCB-poly3"), otb.get("RFF-UCB-RBF"), otb.get("LinUCB")):
            continue
        ok = otb["PAK-UCB-poly3"] > 0 and otb["RFF-UCB-RBF"] > 0 and otb["LinUCB"] <= 0
        rows.append(
            f"| {scenario.name}: PAK-UCB-poly3 and RFF-UCB-RBF OtB > 0, LinUCB not | "
            f"{otb['PAK-UCB-poly3']:+.4f}, {otb['RFF-UCB-RBF']:+.4f}, LinUCB {otb['LinUCB']:+.4f} | {verdict(ok)} |"
        )
    for name, info in room.items():
        rff = _value(ctx, name, "RFF-UCB-RBF", "mean_reward")
        lin = _value(ctx, name, "LinUCB", "mean_reward")
        if rff is None or lin is None:
            continue
        # the best single model on the same replayed prompts (the best-single policy), else on the whole stream
        best = _value(ctx, name, "best-single", "mean_reward") or info["best_single"]
        ok_lin = rff >= lin
        ok_best = rff >= 0.99 * best if best > 0 else rff >= best - 0.01 * abs(best)
        rows.append(f"| {name}: RFF-UCB mean utility >= LinUCB's | {rff:.4f} vs {lin:.4f} | {verdict(ok_lin)} |")
        rows.append(f"| {name}: RFF-UCB >= 99% of the best single model | {rff:.4f} vs 0.99 x {best:.4f} = {0.99 * best:.4f} | {verdict(ok_best)} |")
    if "ratio" in runtime:
        exact, rff = runtime["PAK-UCB-RBF"], runtime["RFF-UCB-RBF"]
        rows.append(
            f"| {rff['horizon']} rounds, 5 arms: RFF-UCB-RBF >= 10x faster than exact PAK-UCB-RBF | {runtime['ratio']:.1f}x | {verdict(runtime['ratio'] >= 10)} |"
        )
        rows.append(f"| ... with OPR within 0.05 | {rff['opr']:.3f} vs {exact['opr']:.3f} | {verdict(abs(rff['opr'] - exact['opr']) <= 0.05)} |")
    ctx.add_section(
        "Acceptance checks",
        "Measured in this run (the side-by-side with ParetoBandit, MABWiser and Vowpal Wabbit is in "
        "`benchmarks/pak_ucb_peers.py`, see docs/pak-ucb.md).\n\n" + "\n".join(rows),
    )


def report(ctx: ReportContext) -> None:
    """OtB/OPR curves, run time against rounds, headroom on the real streams, acceptance checks."""
    _curves(ctx)
    runtime = _runtime(ctx)
    room = _headroom(ctx)
    _acceptance(ctx, runtime, room)
