"""The experiment runner: config -> grid of units -> results on disk -> figures, report, summary.

One runner serves every family and every backend. Units are written to ``OUT/units/`` as they
finish, so an interrupted sweep resumes from what it already has.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from tqdm.auto import tqdm

from ..core.validation import InvalidParameterError
from .config import ExperimentConfig
from .units import Unit, UnitResult, run_unit

__all__ = ["plan_units", "run_experiment", "BACKENDS", "register_backend", "local_backend", "available_backends"]

Backend = Callable[[list[Unit], dict], Iterator[UnitResult]]
BACKENDS: dict[str, Backend] = {}


def register_backend(name: str) -> Callable[[Backend], Backend]:
    """Decorator: a backend maps a list of units to their results, yielded as they finish."""

    def decorate(fn: Backend) -> Backend:
        BACKENDS[name] = fn
        return fn

    return decorate


@register_backend("local")
def local_backend(units: list[Unit], options: dict) -> Iterator[UnitResult]:
    """Run units one after the other in this process (each unit already vectorises over runs)."""
    for unit in units:
        yield run_unit(unit, progress=options.get("progress", False))


def plan_units(config: ExperimentConfig) -> list[Unit]:
    """Every (scenario, horizon, policy) cell of the config, in config order."""
    return [
        Unit(
            experiment=config.name,
            scenario=scenario,
            policy=policy,
            horizon=horizon,
            seed=config.seed,
            metrics=scenario.metrics if scenario.metrics is not None else config.metrics,
            n_checkpoints=config.n_checkpoints,
        )
        for scenario in config.scenarios
        for horizon in scenario.horizons
        for policy in scenario.policies
    ]


def run_experiment(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    backend: str = "local",
    backend_options: dict | None = None,
    resume: bool = True,
    progress: bool = True,
    command: str | None = None,
) -> dict:
    """Run ``config`` and write results.parquet, summary.json, figures/ and report.md to ``out_dir``.

    Returns ``{"summary": records, "failed": [unit ids], "out_dir": path}``.
    """
    if backend not in BACKENDS:
        _load_optional_backends()
    if backend not in BACKENDS:
        raise InvalidParameterError(f"Unknown backend {backend!r}. Known backends: {', '.join(sorted(BACKENDS))}.")
    out = Path(out_dir)
    unit_dir = out / "units"
    units = plan_units(config)
    started = time.perf_counter()

    results: dict[str, UnitResult] = {}
    if resume:
        for unit in units:
            previous = UnitResult.load(unit_dir, unit.unit_id)
            if previous is not None and previous.error is None:
                results[unit.unit_id] = previous
    todo = [u for u in units if u.unit_id not in results]
    options = {"progress": progress, **(backend_options or {})}
    stream = BACKENDS[backend](todo, options)
    # closing(): on an interrupt the backend's cleanup (cancelling remote tasks) runs at once
    with tqdm(total=len(units), initial=len(results), desc=config.name, unit="unit", disable=not progress) as bar, contextlib.closing(stream):
        for result in stream:
            result.save(unit_dir)
            results[result.unit_id] = result
            bar.set_postfix_str(f"{result.scenario} / {result.policy}", refresh=False)
            bar.update(1)

    ordered = [results[u.unit_id] for u in units if u.unit_id in results]
    from .report import write_outputs  # matplotlib loads only when there is something to draw

    summary = write_outputs(
        config,
        ordered,
        out,
        meta={
            "command": command or "",
            "backend": backend,
            "wall_time": time.perf_counter() - started,
            "python": sys.version.split()[0],
            "machine": f"{platform.machine()}, {_cpu_count()} cores",
            "resumed_units": len(units) - len(todo),
        },
    )
    failed = [r.unit_id for r in ordered if r.error is not None]
    return {"summary": summary, "failed": failed, "out_dir": str(out)}


def _cpu_count() -> int:
    import os

    return os.cpu_count() or 1


def available_backends() -> list[str]:
    """Names of every backend, the optional ones included (they say what they need when used)."""
    _load_optional_backends()
    return sorted(BACKENDS)


def _load_optional_backends() -> None:
    """Backends that need optional packages register themselves when their module is imported."""
    import importlib

    for module in ("genbandit.experiments.ray_backend",):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
