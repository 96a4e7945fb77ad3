"""Experiments: configs, the unit grid, backends, metrics and reports (loaded on first use)."""

from .._lazy import lazy_exports

_EXPORTS = {
    "ExperimentConfig": "genbandit.experiments.config",
    "load_config": "genbandit.experiments.config",
    "register_metric": "genbandit.core.registry",
    "ReportContext": "genbandit.experiments.report",
    "plan_units": "genbandit.experiments.runner",
    "register_backend": "genbandit.experiments.runner",
    "run_experiment": "genbandit.experiments.runner",
    "Unit": "genbandit.experiments.units",
    "UnitResult": "genbandit.experiments.units",
    "run_unit": "genbandit.experiments.units",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
