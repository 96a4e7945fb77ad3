"""Policies, one module per family. Importing this package registers the built-in policies.

Find an algorithm by its paper: ``classic`` (yardsticks), ``speculative`` (BanditSpec), ``speculative_serving`` (its serving variant),
``rising`` (TI-UCB), ``paretobandit`` (ParetoBandit's router, its package), ``combinatorial`` (MP-CSB), ``kernel`` (PAK-UCB / RFF-UCB), ``smooth``
(Budgeted Exploration).
"""

from . import combinatorial, kernel, paretobandit, rising, routing, smooth, speculative, speculative_serving  # noqa: F401  (registration)
from .classic import EXP3, KLUCB, UCB1, EpsilonGreedy, GaussianThompsonSampling, RandomPolicy, ThompsonSampling

__all__ = ["EXP3", "KLUCB", "UCB1", "EpsilonGreedy", "GaussianThompsonSampling", "RandomPolicy", "ThompsonSampling"]
