"""Simulators and real-data replays. Importing this package registers the built-in environments."""

from . import combinatorial, prompts, rising, smooth, speculative  # noqa: F401  (registration)
from .nonstationary import AdversarialTable, PiecewiseStationary, SwitchingArms
from .stochastic import BernoulliArms, GaussianArms

__all__ = ["AdversarialTable", "BernoulliArms", "GaussianArms", "PiecewiseStationary", "SwitchingArms"]
