"""Policies, one module per family. Importing this package registers the built-in policies."""

from .classic import EXP3, KLUCB, UCB1, EpsilonGreedy, GaussianThompsonSampling, RandomPolicy, ThompsonSampling

__all__ = ["EXP3", "KLUCB", "UCB1", "EpsilonGreedy", "GaussianThompsonSampling", "RandomPolicy", "ThompsonSampling"]
from . import kernel  # noqa: F401
