"""Turn unit results into results.parquet, summary.json, figures/*.png and report.md.

summary.json is a list of records ``{"scenario", "policy", "metric", "mean", "stderr", "n_runs"}``
(``stderr`` is null for a metric measured once per unit). Every reproduction writes this schema.
Report hooks (``hooks = ["module:function"]`` in a config) receive a :class:`ReportContext` and
add sections, records and figures of their own.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .config import ExperimentConfig  # noqa: E402
from .units import UnitResult  # noqa: E402

__all__ = ["ReportContext", "write_outputs", "summary_record", "format_mean"]


def summary_record(scenario: str, policy: str, metric: str, values: Any) -> dict:
    """A summary.json record from per-run ``values`` (a single value gives a null stderr)."""
    arr = np.asarray(values, dtype=float).ravel()
    arr = arr[np.isfinite(arr)]
    mean = float(arr.mean()) if arr.size else None
    stderr = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else None
    return {"scenario": scenario, "policy": policy, "metric": metric, "mean": mean, "stderr": stderr, "n_runs": int(arr.size)}


def format_mean(mean: float | None, stderr: float | None) -> str:
    """``1.23e+03 ± 4.5`` style, with significant digits that match the magnitude."""
    if mean is None:
        return "n/a"
    text = _fmt(mean)
    return text if stderr is None else f"{text} ± {_fmt(stderr)}"


def _fmt(x: float) -> str:
    if x == 0 or 1e-3 <= abs(x) < 1e6:
        return f"{x:.4g}"
    return f"{x:.3g}"


@dataclass
class ReportContext:
    """What a report hook sees and extends."""

    config: ExperimentConfig
    out_dir: Path
    results: list[UnitResult]
    records: list[dict]
    meta: dict
    sections: list[tuple[str, str]] = field(default_factory=list)

    @property
    def figure_dir(self) -> Path:
        path = self.out_dir / "figures"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def frame(self) -> pd.DataFrame:
        """Every successful unit's curves, tidy."""
        frames = [r.frame() for r in self.results if r.error is None]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def metric(self, scenario: str, policy: str, metric: str) -> dict | None:
        """The summary record for (scenario, policy, metric), if any."""
        for rec in self.records:
            if (rec["scenario"], rec["policy"], rec["metric"]) == (scenario, policy, metric):
                return rec
        return None

    def add_record(self, scenario: str, policy: str, metric: str, values: Any) -> dict:
        rec = summary_record(scenario, policy, metric, values)
        self.records.append(rec)
        return rec

    def add_section(self, title: str, markdown: str) -> None:
        self.sections.append((title, markdown))

    def savefig(self, fig: plt.Figure, name: str) -> str:
        """Save ``fig`` as figures/NAME.png and return the path relative to the report."""
        path = self.figure_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return f"figures/{path.name}"


def write_outputs(config: ExperimentConfig, results: list[UnitResult], out: Path, meta: dict) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    ok = [r for r in results if r.error is None]
    frames = [r.frame() for r in ok]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["scenario", "policy", "horizon", "run", "round", "regret", "reward"])
    frame.to_parquet(out / "results.parquet", index=False)

    records = [summary_record(r.scenario, r.policy, name, values) for r in ok for name, values in r.metrics.items()]
    ctx = ReportContext(config=config, out_dir=out, results=results, records=records, meta=meta)
    figures = _standard_figures(ctx)
    for hook in config.hooks:
        module, _, name = hook.partition(":")
        getattr(importlib.import_module(module), name)(ctx)

    (out / "summary.json").write_text(json.dumps(ctx.records, indent=1))
    (out / "report.md").write_text(_render(ctx, figures))
    return ctx.records


def _standard_figures(ctx: ReportContext) -> dict[str, list[str]]:
    """Regret against rounds (mean ± stderr band) per scenario; final regret against T for sweeps."""
    figures: dict[str, list[str]] = {}
    ok = [r for r in ctx.results if r.error is None and r.regret.size]
    for scenario in ctx.config.scenarios:
        paths = []
        mine = [r for r in ok if r.scenario.split(":T=")[0] == scenario.name or r.scenario == scenario.name]
        if not mine:
            continue
        longest = max(r.horizon for r in mine)
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for r in (r for r in mine if r.horizon == longest):
            mean = r.regret.mean(axis=0)
            se = r.regret.std(axis=0, ddof=1) / math.sqrt(r.n_runs) if r.n_runs > 1 else np.zeros_like(mean)
            (line,) = ax.plot(r.rounds, mean, label=r.policy)
            ax.fill_between(r.rounds, mean - se, mean + se, color=line.get_color(), alpha=0.2, linewidth=0)
        if scenario.loglog:
            ax.set_xscale("log")
            if all(r.regret[:, -1].mean() > 0 for r in mine):
                ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_ylabel("cumulative regret")
        ax.set_title(f"{scenario.name} (T={longest}, {mine[0].n_runs} runs, mean ± stderr)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(ctx.savefig(fig, f"regret-{_file_name(scenario.name)}"))
        if scenario.sweep:
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            for policy in dict.fromkeys(r.policy for r in mine):
                pts = sorted((r.horizon, r.regret[:, -1].mean()) for r in mine if r.policy == policy)
                xs, ys = np.array(pts).T
                ax.plot(xs, np.maximum(ys, 1e-9), marker="o", label=policy)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("horizon T")
            ax.set_ylabel("final regret")
            ax.set_title(f"{scenario.name}: regret at T")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, which="both")
            paths.append(ctx.savefig(fig, f"final-regret-vs-T-{_file_name(scenario.name)}"))
        figures[scenario.name] = paths
    return figures


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)


def _render(ctx: ReportContext, figures: dict[str, list[str]]) -> str:
    from .. import __version__  # here, not at import: environments register metrics while genbandit initialises

    cfg, meta = ctx.config, ctx.meta
    lines = [f"# {cfg.title}", ""]
    if cfg.description:
        lines += [cfg.description.strip(), ""]
    lines += [
        f"- command: `{meta.get('command') or 'genbandit run'}`" + (" (quick mode)" if cfg.quick else ""),
        f"- generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by genbandit {__version__}, Python {meta.get('python')}, {meta.get('machine')}",
        f"- backend `{meta.get('backend')}`, wall time {meta.get('wall_time', 0):.1f} s" + (f", {meta['resumed_units']} units resumed from disk" if meta.get("resumed_units") else ""),
        f"- seed {cfg.seed}; every policy of a scenario sees the same environment draws",
        "",
        "## Setup",
        "",
        "| scenario | environment | parameters | horizon(s) | runs | policies |",
        "|---|---|---|---|---|---|",
    ]
    for s in cfg.scenarios:
        params = ", ".join(f"{k}={_short(v)}" for k, v in s.params.items())
        lines.append(
            f"| {s.name} | {s.environment or s.runner} | {params} | {', '.join(map(str, s.horizons))} | {s.n_runs} | {', '.join(p.label for p in s.policies)} |"
        )
    policy_rows = {p.label: p for s in cfg.scenarios for p in s.policies}
    lines += ["", "| policy | registered as | parameters |", "|---|---|---|"]
    for p in policy_rows.values():
        lines.append(f"| {p.label} | {p.policy} | {', '.join(f'{k}={_short(v)}' for k, v in p.params.items()) or 'defaults'} |")

    lines += ["", "## Results", ""]
    paper = {(p.scenario, p.policy, p.metric): p for p in cfg.paper}
    for scenario in cfg.scenarios:
        unit_names = list(dict.fromkeys(r.scenario for r in ctx.results if r.scenario.split(":T=")[0] == scenario.name))
        lines += [f"### {scenario.name}", ""]
        if scenario.description:
            lines += [scenario.description.strip(), ""]
        for unit_name in unit_names:
            metrics = list(dict.fromkeys(rec["metric"] for rec in ctx.records if rec["scenario"] == unit_name))
            if not metrics:
                continue
            has_paper = any((unit_name, p.label, m) in paper for p in scenario.policies for m in metrics)
            if len(unit_names) > 1:
                lines += [f"**{unit_name}**", ""]
            header = ["policy"] + [f"{m} (mean ± stderr)" for m in metrics] + (["paper"] if has_paper else [])
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            for p in scenario.policies:
                cells = [p.label]
                for m in metrics:
                    rec = ctx.metric(unit_name, p.label, m)
                    cells.append(format_mean(rec["mean"], rec["stderr"]) if rec else "n/a")
                if has_paper:
                    notes = [f"{m} {paper[(unit_name, p.label, m)].value:g} ({paper[(unit_name, p.label, m)].source})" for m in metrics if (unit_name, p.label, m) in paper]
                    cells.append("; ".join(notes) or "")
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        for path in figures.get(scenario.name, []):
            lines += [f"![{scenario.name}]({path})", ""]

    for title, body in ctx.sections:
        lines += [f"## {title}", "", body.strip(), ""]

    failed = [r for r in ctx.results if r.error is not None]
    if failed:
        lines += ["## Failed units", "", "These units raised; the rest of the sweep went on. Rerun the same command to retry them.", ""]
        for r in failed:
            last = r.error.strip().splitlines()[-1] if r.error else ""
            lines.append(f"- `{r.scenario}` / `{r.policy}`: {last}")
        lines.append("")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 48 else text[:45] + "..."
