"""Experiments: configs, the unit grid, backends, metrics and reports."""

from .config import ExperimentConfig, load_config
from .metrics import register_metric
from .report import ReportContext
from .runner import plan_units, register_backend, run_experiment
from .units import Unit, UnitResult, run_unit

__all__ = ["ExperimentConfig", "ReportContext", "Unit", "UnitResult", "load_config", "plan_units", "register_backend", "register_metric", "run_experiment", "run_unit"]
