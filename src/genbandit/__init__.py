"""genbandit: choose among generative models and their inference configurations online, with bandits.

The public surface, in one place: the contract, the simulator, the registries and the classic
policies and environments. Family modules (``genbandit.policies.<family>``) add theirs.

Names load on first use, so ``import genbandit`` is cheap; ``genbandit.UCB1`` imports the
classic policies when first touched.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "Environment": "genbandit.core.base",
    "Policy": "genbandit.core.base",
    "Step": "genbandit.core.base",
    "ENVIRONMENTS": "genbandit.core.registry",
    "METRICS": "genbandit.core.registry",
    "POLICIES": "genbandit.core.registry",
    "REPRODUCTIONS": "genbandit.core.registry",
    "register_environment": "genbandit.core.registry",
    "register_metric": "genbandit.core.registry",
    "register_policy": "genbandit.core.registry",
    "check_random_state": "genbandit.core.rng",
    "GenbanditError": "genbandit.core.validation",
    "InvalidInputError": "genbandit.core.validation",
    "InvalidParameterError": "genbandit.core.validation",
    "SimulationResult": "genbandit.core.simulator",
    "simulate": "genbandit.core.simulator",
    "AdversarialTable": "genbandit.envs.nonstationary",
    "PiecewiseStationary": "genbandit.envs.nonstationary",
    "SwitchingArms": "genbandit.envs.nonstationary",
    "BernoulliArms": "genbandit.envs.stochastic",
    "GaussianArms": "genbandit.envs.stochastic",
    "EXP3": "genbandit.policies.classic",
    "KLUCB": "genbandit.policies.classic",
    "UCB1": "genbandit.policies.classic",
    "EpsilonGreedy": "genbandit.policies.classic",
    "GaussianThompsonSampling": "genbandit.policies.classic",
    "RandomPolicy": "genbandit.policies.classic",
    "ThompsonSampling": "genbandit.policies.classic",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
