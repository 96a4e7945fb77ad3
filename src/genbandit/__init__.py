"""genbandit: choose among generative models and their inference configurations online, with bandits.

The public surface, in one place: the contract, the simulator, the registries and the classic
policies and environments. Family modules (``genbandit.policies.<family>``) add theirs.

Names load on first use, so ``import genbandit`` is cheap; ``genbandit.UCB1`` imports the
classic policies when first touched.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

#: The module that defines each public name.
_EXPORTS = {
    "genbandit.core.base": ("Environment", "Policy", "Step"),
    "genbandit.core.registry": (
        "ENVIRONMENTS", "METRICS", "POLICIES", "REPRODUCTIONS", "register_environment", "register_metric", "register_policy",
    ),
    "genbandit.core.rng": ("check_random_state",),
    "genbandit.core.validation": ("GenbanditError", "InvalidInputError", "InvalidParameterError"),
    "genbandit.core.simulator": ("SimulationResult", "simulate"),
    "genbandit.envs.nonstationary": ("AdversarialTable", "PiecewiseStationary", "SwitchingArms"),
    "genbandit.envs.stochastic": ("BernoulliArms", "GaussianArms"),
    "genbandit.policies.classic": ("EXP3", "KLUCB", "UCB1", "EpsilonGreedy", "GaussianThompsonSampling", "RandomPolicy", "ThompsonSampling"),
}

__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
