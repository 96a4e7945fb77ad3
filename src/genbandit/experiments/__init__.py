"""Experiments: configs, the unit grid, backends, metrics and reports (loaded on first use)."""

from .._lazy import lazy_exports

_EXPORTS = {
    "genbandit.experiments.config": ("ExperimentConfig", "load_config"),
    "genbandit.core.registry": ("register_metric",),
    "genbandit.experiments.report": ("ReportContext",),
    "genbandit.experiments.runner": ("plan_units", "register_backend", "run_experiment"),
    "genbandit.experiments.units": ("Unit", "UnitResult", "run_unit"),
}

__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
