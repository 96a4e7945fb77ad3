"""``reproduce ti-ucb``: the report hook.

Units are the standard ones: the environment's ``diagnostics()`` give the oracle arms and TI-UCB's and
Ser4's the resets per run, which ``run_unit`` keeps in ``extras`` beside the pulls of every run.

The hook sets the paper's qualitative claims beside our numbers, checks the acceptance
criteria and writes where our results differ from the paper's.
"""

from __future__ import annotations

import math

import numpy as np

from .report import ReportContext, format_mean

__all__ = ["report"]


_SW = ("SW-UCB", "SW-TS", "SW-KL-UCB")

_CLAIMS = {
    "two-arm": "TI-UCB has the lowest regret at the horizon; SW-UCB (and others) are better at the initial stage, then "
               "converge to the suboptimal arm and regret grows linearly (Fig. 3b).",
    "fifteen-arm": "TI-UCB has the lowest regret at the horizon (T = 1.5M); SW-TS's regret slope also starts to decrease, "
                   "but much later; R-ed-UCB shows no consistent advantage (Fig. 3d).",
    "learners": "IMDB analogue (Fig. 4b): TI-UCB beats all baselines at the horizon despite fluctuating curves; "
                "R-ed-UCB has not converged to the optimal arm by the horizon.",
    "llm-replay": "LLM selection (Fig. 5b): TI-UCB has the lowest cumulative regret and is not trapped by the API model's "
                  "high initial reward; the sliding-window algorithms outperform most other baselines.",
}


def _final(ctx: ReportContext, scenario: str) -> dict[str, dict]:
    return {r["policy"]: r for r in ctx.records if r["scenario"] == scenario and r["metric"] == "final_regret"}


def _ranking(finals: dict[str, dict]) -> list[str]:
    return sorted(finals, key=lambda p: finals[p]["mean"])


def _early_leader(ctx: ReportContext, scenario: str) -> tuple[str, int] | None:
    results = [r for r in ctx.results if r.error is None and r.scenario == scenario]
    if not results:
        return None
    r0 = results[0]
    column = int(np.searchsorted(r0.rounds, max(r0.horizon // 10, 1)))
    best = min(results, key=lambda r: r.regret[:, column].mean())
    return best.policy, int(r0.rounds[column])


def _wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    p, denom = successes / n, 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


_CALIBRATED = "TI-UCB (calibrated)"


def _calibrated_section(ctx: ReportContext) -> str:
    """Our variant beside TI-UCB: the two-arm ratio and trapped share, then no worse than TI-UCB elsewhere."""
    out = []
    finals = _final(ctx, "two-arm")
    others = {p: finals[p]["mean"] for p in ("SW-UCB", "SW-TS", "UCB1") if p in finals}
    units = {r.policy: r for r in ctx.results if r.error is None and r.scenario == "two-arm"}
    if _CALIBRATED in units and others:
        best_name = min(others, key=others.get)
        lines = []
        for name in ("TI-UCB", _CALIBRATED):
            if name not in units:
                continue
            unit = units[name]
            rec = ctx.add_record("two-arm", name, "regret_ratio_to_best_of_SW-UCB_SW-TS_UCB1", unit.regret[:, -1] / others[best_name])
            trapped = np.asarray(unit.extras["counts_per_run"]).argmax(axis=1) != unit.extras["best_arm"]
            ctx.add_record("two-arm", name, "trapped_share", trapped.astype(float))
            lo, hi = _wilson(int(trapped.sum()), trapped.size)
            lines.append(f"| {name} | {rec['mean']:.3f} ± {rec['stderr'] or 0.0:.3f} | {int(trapped.sum())} / {trapped.size} "
                         f"({trapped.mean():.0%}; 95% Wilson interval {lo:.1%} to {hi:.1%}) |")
        calib = ctx.metric("two-arm", _CALIBRATED, "regret_ratio_to_best_of_SW-UCB_SW-TS_UCB1")
        verdict = "HOLDS" if calib["mean"] + 2 * (calib["stderr"] or 0.0) <= 0.2 else "DOES NOT HOLD"
        out += [(f"**two-arm**: final regret over the best of SW-UCB, SW-TS and UCB1 ({best_name}), per run, and the runs "
                 f"trapped (most-pulled arm not the best fixed arm). Criterion ratio <= 0.2 for {_CALIBRATED}: **{verdict}**."), "",
                "| policy | ratio (mean ± s.e.) | trapped runs |", "|---|---|---|", *lines, ""]
    rows = []
    for scenario in ("fifteen-arm", "learners", "llm-replay"):
        finals = _final(ctx, scenario)
        if _CALIBRATED not in finals or "TI-UCB" not in finals:
            continue
        a, b = finals[_CALIBRATED], finals["TI-UCB"]
        diff = a["mean"] - b["mean"]
        se = math.sqrt((a["stderr"] or 0.0) ** 2 + (b["stderr"] or 0.0) ** 2)
        verdict = "no worse" if diff <= 2 * se else "WORSE"
        rows.append(f"| {scenario} | {format_mean(a['mean'], a['stderr'])} | {format_mean(b['mean'], b['stderr'])} | "
                    f"{diff:+,.1f} ± {se:,.1f} | {verdict} |")
    if rows:
        out += ["**The other scenarios**: no worse than TI-UCB within two standard errors of the difference?", "",
                f"| scenario | {_CALIBRATED} | TI-UCB | difference | verdict |", "|---|---|---|---|---|", *rows]
    return "\n".join(out)


def _claims_section(ctx: ReportContext) -> str:
    lines = ["| scenario | the paper says | ours: ranking by final regret (best first) | ours: lowest regret at T/10 |", "|---|---|---|---|"]
    for scenario, claim in _CLAIMS.items():
        finals = _final(ctx, scenario)
        if not finals:
            continue
        rank = _ranking(finals)
        early = _early_leader(ctx, scenario)
        lines.append(f"| {scenario} | {claim} | {' < '.join(rank)} | {f'{early[0]} (t = {early[1]})' if early else 'n/a'} |")
    return "\n".join(lines)


def _acceptance(ctx: ReportContext) -> str:
    out = []
    finals = _final(ctx, "two-arm")
    ti_unit = next((r for r in ctx.results if r.error is None and r.scenario == "two-arm" and r.policy == "TI-UCB"), None)
    others = {p: finals[p]["mean"] for p in ("SW-UCB", "SW-TS", "UCB1") if p in finals}
    if ti_unit is not None and others:
        best_name = min(others, key=others.get)
        # One ratio per TI-UCB run against the baseline's mean (whose standard error is ~1e-5 of it), so the
        # summary carries the ratio's standard error: TI-UCB's final regret is bimodal (some runs are trapped).
        ti_runs = ti_unit.regret[:, -1]
        ratios = ti_runs / others[best_name]
        rec = ctx.add_record("two-arm", "TI-UCB", "regret_ratio_to_best_of_SW-UCB_SW-TS_UCB1", ratios)
        ratio, se = rec["mean"], rec["stderr"] or 0.0
        verdict = "HOLDS" if ratio <= 0.2 else "DOES NOT HOLD"
        margin = ("clearly: ratio + 2 s.e. is below 0.2" if ratio + 2 * se <= 0.2 else
                  "clearly: ratio - 2 s.e. is above 0.2" if ratio - 2 * se > 0.2 else
                  "but within two standard errors of 0.2: more runs would decide it")
        most_pulled = np.asarray(ti_unit.extras["counts_per_run"]).argmax(axis=1)
        elsewhere = float(np.mean(most_pulled != ti_unit.extras["best_arm"]))
        out.append(f"1. Two-arm problem at T = {ti_unit.horizon:,} (paper: 200,000): TI-UCB's final regret "
                   f"{format_mean(finals['TI-UCB']['mean'], finals['TI-UCB']['stderr'])} over {ti_runs.size} runs (median "
                   f"{np.median(ti_runs):,.0f}) against the best of SW-UCB, SW-TS and UCB1 ({best_name}, "
                   f"{format_mean(others[best_name], finals[best_name]['stderr'])}): ratio {ratio:.3f} ± {se:.3f}, "
                   f"criterion <= 0.2: **{verdict}**, {margin}. In {elsewhere:.0%} of TI-UCB's runs the most-pulled arm is "
                   "not the best fixed arm (at T = 200,000: runs trapped on the fast, low arm by false alarms of the "
                   "change detection; see docs/ti-ucb.md).")
    rates = {r["policy"]: r for r in ctx.records if r["scenario"] == "learners" and r["metric"] == "best_final_arm_rate"}
    if "TI-UCB" in rates:
        ti = rates["TI-UCB"]["mean"]
        # the paper's baselines only: not TI-UCB's own sensitivity row or our variant
        best_base = max((p for p in rates if not p.startswith("TI-UCB")), key=lambda p: rates[p]["mean"], default=None)
        base = rates[best_base]["mean"] if best_base else float("nan")
        verdict = "HOLDS" if ti >= 0.8 and ti > base else "DOES NOT HOLD"
        shares = next((np.asarray(r.extras["counts"], dtype=float) for r in ctx.results
                       if r.error is None and r.scenario == "learners" and r.policy == "TI-UCB"), None)
        spread = f" TI-UCB's pull shares per arm: {' '.join(f'{c / shares.sum():.2f}' for c in shares)}." if shares is not None else ""
        out.append(f"2. Learner scenario: TI-UCB's best_final_arm_rate {ti:.2f} (criterion >= 0.8 and above every "
                   f"baseline; best baseline {best_base} {base:.2f}): **{verdict}** by the letter of the metric.{spread} "
                   "Read it with the pull shares: a near-uniform split means the most-pulled arm is decided by a few pulls.")
    return "\n".join(out) if out else "The scenarios the criteria need did not run."


def _pull_shares(ctx: ReportContext) -> str:
    lines = []
    for scenario in dict.fromkeys(r.scenario for r in ctx.results if r.error is None):
        results = [r for r in ctx.results if r.error is None and r.scenario == scenario]
        best = results[0].extras.get("best_arm")
        final = results[0].extras.get("best_final_arm")
        lines += [f"**{scenario}** (best fixed arm {best}, best converged arm {final})", "",
                  "| policy | share of pulls per arm | resets per run (TI-UCB: change detections; Ser4: random restarts) |", "|---|---|---|"]
        for r in results:
            counts = np.asarray(r.extras.get("counts", []), dtype=float)
            shares = " ".join(f"{c / counts.sum():.2f}" for c in counts) if counts.size else "n/a"
            resets = r.extras.get("resets_per_run")
            lines.append(f"| {r.policy} | {shares} | {np.mean(resets):.1f} |" if resets else f"| {r.policy} | {shares} | |")
        lines.append("")
    return "\n".join(lines)


def _differences(ctx: ReportContext) -> str:
    parts = []
    for scenario in ("two-arm", "fifteen-arm", "learners", "llm-replay"):
        finals = _final(ctx, scenario)
        if "TI-UCB" not in finals:
            continue
        rank = _ranking(finals)
        ahead = rank[: rank.index("TI-UCB")]
        if ahead:
            parts.append(f"- **{scenario}**: TI-UCB ranks {rank.index('TI-UCB') + 1} of {len(rank)}; ahead of it: "
                         + ", ".join(f"{p} ({format_mean(finals[p]['mean'], finals[p]['stderr'])})" for p in ahead)
                         + f"; TI-UCB {format_mean(finals['TI-UCB']['mean'], finals['TI-UCB']['stderr'])}. The paper reports TI-UCB lowest.")
        else:
            parts.append(f"- **{scenario}**: TI-UCB has the lowest final regret, as the paper reports.")
    sw = _final(ctx, "fifteen-arm")
    if sw:
        horizon = next((r.horizon for r in ctx.results if r.scenario == "fifteen-arm"), 0)
        beats = [p for p in _SW if p in sw and "TI-UCB" in sw and sw[p]["mean"] < sw["TI-UCB"]["mean"]]
        parts.append(f"- **Sliding windows on fifteen-arm at T = {horizon:,}** (a check at T = 300,000 found them ahead of "
                     f"TI-UCB): here {', '.join(beats) or 'none'} of {', '.join(_SW)} end below TI-UCB. "
                     "At the paper's horizon (1,500,000) see docs/ti-ucb.md, 'The sliding-window question', measured "
                     "with the run recorded there (benchmarks/rising_paper_horizon.toml asks it again).")
    return "\n".join(parts)


def _omega_section(ctx: ReportContext) -> str:
    """Fig. 6b analogue: TI-UCB's final regret against its window omega, with the best baselines as lines."""
    import matplotlib.pyplot as plt

    finals = _final(ctx, "omega-ablation")
    omegas = sorted(int(p.split("=")[1].rstrip(")")) for p in finals if p.startswith("TI-UCB (omega="))
    if not omegas:
        return ""
    recs = [finals[f"TI-UCB (omega={w})"] for w in omegas]
    means = np.array([r["mean"] for r in recs])
    errs = np.array([r["stderr"] or 0.0 for r in recs])
    baselines = {p: r["mean"] for p, r in _final(ctx, "llm-replay").items() if p != "TI-UCB"}
    shown = sorted(baselines, key=baselines.get)[:4]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.errorbar(omegas, means, yerr=2 * errs, marker="o", capsize=3, label="TI-UCB (2 s.e.)")
    for k, name in enumerate(shown):
        ax.axhline(baselines[name], ls="--", lw=1, color=plt.cm.tab10(k + 1), label=f"{name} (llm-replay)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("change-detection window omega")
    ax.set_ylabel("final regret (mean)")
    ax.set_title("omega ablation on the LLM stand-in (Fig. 6b analogue)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    path = ctx.savefig(fig, "omega-ablation")
    best = int(np.argmin(means))
    middle = [i for i, w in enumerate(omegas) if 1 < w < max(omegas)]
    ends = [i for i, w in enumerate(omegas) if w in (1, max(omegas))]
    mid = min(middle, key=lambda i: means[i]) if middle else best
    worse = [omegas[i] for i in ends if means[i] - 2 * errs[i] > means[mid] + 2 * errs[mid]]
    rows = ["| omega | final regret (mean ± stderr) |", "|---|---|"] + [f"| {w} | {format_mean(m, e)} |" for w, m, e in zip(omegas, means, errs)]
    verdict = ("holds" if len(worse) == len(ends) else "does not hold") + (
        f" (ends worse than the best mid-range omega, {omegas[mid]}, by more than 2 s.e.: {', '.join(map(str, worse)) or 'none'})")
    return (f"The paper (sec. 5.5, Fig. 6) finds TI-UCB best for omega in [2^1, 2^7] on its LLM experiment and worse at "
            f"both ends. Ours, on the LLM stand-in (invented curves): lowest regret at omega = {omegas[best]}. The "
            f"check (regret worse at omega = 1 and at the largest omega than at mid-range omega) {verdict}. Dashed lines: "
            f"the four best baselines of the `llm-replay` scenario (same environment, other draws).\n\n"
            + "\n".join(rows) + f"\n\n![omega ablation]({path})")


def report(ctx: ReportContext) -> None:
    """Acceptance criteria, claims beside ours, pull shares, and where we differ."""
    ctx.add_section("Acceptance criteria", _acceptance(ctx))
    calibrated = _calibrated_section(ctx)
    if calibrated:
        ctx.add_section("TI-UCB (calibrated), ours: a variant that false alarms cannot trap", calibrated)
    ctx.add_section("The paper's qualitative claims beside ours", _claims_section(ctx))
    ctx.add_section("Where our results differ from the paper's", _differences(ctx))
    omega = _omega_section(ctx)
    if omega:
        ctx.add_section("Change-detection window (omega) ablation", omega)
    ctx.add_section("Where the pulls went", _pull_shares(ctx))
