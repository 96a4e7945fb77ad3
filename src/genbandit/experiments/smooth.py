"""``reproduce smooth``: the report hook (log-log slopes, the paper's table beside ours).

The units are the standard ones (:func:`~genbandit.experiments.units.run_unit`): ``simulate`` plays
the smooth policies through their compiled loop. Scenario ``params`` may hold the run budget of
:data:`~genbandit.experiments.config.RUN_BUDGET_KEYS` (the longest horizons run fewer instances);
policy params may say ``L = "L1"`` or ``L = "L2"`` (the environment's Hölder constants), and the
one-armed BE gets the environment's static-arm means, Rexp3 its reward range and the UCBs their
bonus scale from the environment's ``policy_arguments()``.
"""

from __future__ import annotations

import math

import numpy as np

from .report import ReportContext, format_mean
from .units import build_environment

__all__ = ["report", "fit_slope", "PAPER_SLOPES"]


#: The paper's slopes as printed (label order in the text swapped, see docs/smooth.md) and the
#: log-corrected targets: the slopes of the bounds' rates (Thms 5.2 and 5.4) with their log factors, over the same T range.
PAPER_SLOPES = {
    "sinusoid": {"source": "Fig. 3 (sinusoid, 1e6-1e8)", "BE-NS": 0.69, "BE-S": 0.63, "target": {"BE-NS": 0.6875, "BE-S": 0.625}},
    "obd-real": {"source": "Fig. 6 (Yahoo R6B smoothed, 1e6-1e8)", "BE-NS": 0.686, "BE-S": 0.620, "target": {"BE-NS": 0.6875, "BE-S": 0.625}},
    "ctr-standin": {"source": "Fig. 6 (Yahoo R6B smoothed, 1e6-1e8)", "BE-NS": 0.686, "BE-S": 0.620, "target": {"BE-NS": 0.6875, "BE-S": 0.625}},
    "slope-check": {"source": "log-corrected targets (1e5-1e8)", "BE-NS": None, "BE-S": None, "target": {"BE-NS": 0.690, "BE-S": 0.627}},
}


def fit_slope(horizons, regrets) -> float:
    """Least-squares slope of log10(regret) on log10(T).

    >>> round(fit_slope([1e4, 1e6], [10.0, 1000.0]), 3)
    1.0
    """
    return float(np.polyfit(np.log10(np.asarray(horizons, float)), np.log10(np.asarray(regrets, float)), 1)[0])


def _curves(ctx: ReportContext, scenario: str) -> dict[str, list[tuple[int, np.ndarray]]]:
    out: dict[str, list[tuple[int, np.ndarray]]] = {}
    for r in ctx.results:
        if r.error is None and r.scenario.split(":T=")[0] == scenario and r.regret.size:
            out.setdefault(r.policy, []).append((r.horizon, r.regret[:, -1]))
    return {p: sorted(v, key=lambda x: x[0]) for p, v in out.items()}


def _bootstrap_ci(points, rng, n_boot: int = 400) -> tuple[float, float]:
    slopes = []
    hs = [h for h, _ in points]
    for _ in range(n_boot):
        means = [v[rng.integers(0, v.size, v.size)].mean() for _, v in points]
        if min(means) > 0:
            slopes.append(fit_slope(hs, means))
    return (float(np.percentile(slopes, 2.5)), float(np.percentile(slopes, 97.5))) if slopes else (math.nan, math.nan)


def report(ctx: ReportContext) -> None:
    """Log-log regret against T with fitted slopes, our slopes beside the paper's, acceptance checks."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    slopes: dict[str, dict[str, tuple[float, float, float]]] = {}
    for scenario in ctx.config.scenarios:
        curves = _curves(ctx, scenario.name)
        if not curves or len(scenario.horizons) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6.6, 4.4))
        slopes[scenario.name] = {}
        for policy, points in curves.items():
            hs = np.array([h for h, _ in points], float)
            means = np.array([v.mean() for _, v in points])
            ses = np.array([v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else 0.0 for _, v in points])
            if len(points) < 2 or means.min() <= 0:
                continue
            s = fit_slope(hs, means)
            lo, hi = _bootstrap_ci(points, rng)
            slopes[scenario.name][policy] = (s, lo, hi)
            ctx.add_record(scenario.name, policy, "slope", [s])
            line = ax.errorbar(hs, means, yerr=ses, marker="o", ms=3, capsize=2, label=f"{policy}: slope {s:.3f}")
            coef = np.polyfit(np.log10(hs), np.log10(means), 1)
            ax.plot(hs, 10 ** np.polyval(coef, np.log10(hs)), "--", lw=0.8, color=line[0].get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("horizon T")
        ax.set_ylabel("mean pseudo-regret at T")
        ax.set_title(f"{scenario.name}: regret against T (dashed: least-squares fits)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        path = ctx.savefig(fig, f"loglog-{scenario.name}")
        rows = ["| policy | fitted slope | 95% bootstrap CI | " + " | ".join(f"T={h:.0e}" for h in sorted({h for p in curves.values() for h, _ in p})) + " |"]
        all_h = sorted({h for p in curves.values() for h, _ in p})
        rows.append("|---|---|---|" + "---|" * len(all_h))
        for policy, points in curves.items():
            by_h = dict(points)
            s = slopes[scenario.name].get(policy)
            cells = [format_mean(float(by_h[h].mean()), float(by_h[h].std(ddof=1) / math.sqrt(by_h[h].size)) if by_h[h].size > 1 else None) + f" (n={by_h[h].size})" if h in by_h else "" for h in all_h]
            rows.append(f"| {policy} | {s[0]:.3f} | [{s[1]:.3f}, {s[2]:.3f}] | " + " | ".join(cells) + " |" if s else f"| {policy} | n/a | | " + " | ".join(cells) + " |")
        text = (scenario.description + "\n\n" if scenario.description else "") + f"![log-log]({path})\n\n" + "\n".join(rows)
        ctx.add_section(f"{scenario.name}: regret against T", text)

    # ---- the click-rate curves the click-log scenarios replay
    for scenario in ctx.config.scenarios:
        if scenario.environment not in ("ctr-standin", "obd-click-curves", "obd-real"):
            continue
        env = build_environment(scenario, max(scenario.horizons))
        raw = np.asarray(env.grid, dtype=float)
        used = env.curves()
        x = np.linspace(0, 1, raw.shape[1])
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for a in range(raw.shape[0]):
            label = f"item {env.item_ids[a]}" if hasattr(env, "item_ids") else f"arm {a}"
            axes[0].plot(x, raw[a], lw=1, label=label)
            axes[1].plot(x, used[a], lw=1, label=label)
        axes[0].set_title(f"{scenario.name}: smoothed click rates")
        axes[1].set_title("as replayed (mean rewards)")
        for ax in axes:
            ax.set_xlabel("x = t / T")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        path = ctx.savefig(fig, f"curves-{scenario.name}")
        l1, l2 = env.holder_constants()
        ctx.add_section(
            f"{scenario.name}: the curves",
            f"![curves]({path})\n\nMean click rate {raw.mean():.4f} (arms {', '.join(f'{m:.4f}' for m in raw.mean(axis=1))}); "
            f"replayed curves' Hölder constants sup|mu'| = {l1:.3g}, sup|mu''| = {l2:.3g} (finite differences on {raw.shape[1]} points).",
        )

    # ---- our slopes beside the paper's
    lines = [
        "| scenario | policy | our slope | paper's slope (as mapped) | log-corrected target | paper source |",
        "|---|---|---|---|---|---|",
    ]
    for scen, per in slopes.items():
        ref = PAPER_SLOPES.get(scen, {})
        for policy in ("BE-S", "BE-NS", "Rexp3", "SW-UCB", "D-UCB"):
            if policy not in per:
                continue
            paper = ref.get(policy)
            target = ref.get("target", {}).get(policy)
            lines.append(
                f"| {scen} | {policy} | {per[policy][0]:.3f} | {'' if paper is None else paper} | {'' if target is None else target} | {ref.get('source', '') if policy in ('BE-S', 'BE-NS') else ''} |"
            )
    explanation = (
        "The paper prints its slopes as \"BE-S and BE-NS ... 0.686 and 0.620\" (and 0.698/0.625, and \"0.69 and "
        "0.63\" for Fig. 3). Taken in that order BE-S would be the steeper policy, which contradicts its own theorems: "
        "with log factors, BE-S's regret T^(3/5) log^(2/5) T has a local log-log slope 3/5 + (2/5)/ln T and BE-NS's "
        "T^(2/3) log^(1/3) T has 2/3 + (1/3)/ln T, so a least-squares line over 1e6-1e8 should sit near 0.625 for BE-S and "
        "0.6875 for BE-NS. The printed numbers match these targets within 0.02 once the labels are swapped, "
        "so we read them as BE-NS ≈ 0.69 and BE-S ≈ 0.62-0.63. The Fig. 6 numbers come from Yahoo R6B, which we cannot "
        "obtain; they are shown beside our OBD and stand-in curves only as the paper's counterpart, not as the same data.\n\n"
    )
    ctx.add_section("Our slopes beside the paper's", explanation + "\n".join(lines))

    # ---- acceptance on the slope-check instance
    sc = slopes.get("slope-check", {})
    curves = _curves(ctx, "slope-check")
    if sc:
        checks = []
        if "BE-S" in sc:
            checks.append(f"- BE-S fitted slope {sc['BE-S'][0]:.3f} within [0.60, 0.66]: **{'holds' if 0.60 <= sc['BE-S'][0] <= 0.66 else 'does not hold'}**")
        if "BE-NS" in sc:
            checks.append(f"- BE-NS fitted slope {sc['BE-NS'][0]:.3f} within [0.66, 0.72]: **{'holds' if 0.66 <= sc['BE-NS'][0] <= 0.72 else 'does not hold'}**")
        if "BE-S" in curves and "BE-NS" in curves:
            s_by, ns_by = dict(curves["BE-S"]), dict(curves["BE-NS"])
            rows = []
            ok = True
            for h in sorted(set(s_by) & set(ns_by)):
                if h < 10**6:
                    continue
                a, b = s_by[h], ns_by[h]
                se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size) if min(a.size, b.size) > 1 else float("nan")
                below = a.mean() < b.mean()
                ok &= below
                rows.append(f"T={h:.0e}: BE-S {a.mean():.4g} vs BE-NS {b.mean():.4g} (difference {(b.mean() - a.mean()) / se:.1f} s.e.)")
            checks.append(f"- BE-S below BE-NS at every T >= 1e6: **{'holds' if ok and rows else 'does not hold'}** ({'; '.join(rows)})")
            if len(curves["BE-S"]) >= 4:
                local = []
                for policy in ("BE-S", "BE-NS"):
                    pts = curves[policy]
                    hs = np.array([h for h, _ in pts], float)
                    ms = np.array([v.mean() for _, v in pts])
                    sel = hs >= hs.max() / 10.0 - 1
                    if sel.sum() >= 2:
                        local.append(f"{policy} {fit_slope(hs[sel], ms[sel]):.3f}")
                checks.append("- local slope over the last decade: " + ", ".join(local))
        ctx.add_section("Acceptance checks (slope-check instance)", "\n".join(checks))
