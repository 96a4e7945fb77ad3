"""genbandit: choose among generative models and their inference configurations online, with bandits.

The public surface, in one place: the contract, the simulator, the registry and every built-in
policy and environment. Family modules (``genbandit.policies.<family>``) add theirs.
"""

from .core import (
    ENVIRONMENTS,
    POLICIES,
    Environment,
    GenbanditError,
    InvalidInputError,
    InvalidParameterError,
    Policy,
    Step,
    check_random_state,
    register_environment,
    register_policy,
)
from .core.simulator import SimulationResult, simulate
from .envs import AdversarialTable, BernoulliArms, GaussianArms, PiecewiseStationary, SwitchingArms
from .policies import EXP3, KLUCB, UCB1, EpsilonGreedy, GaussianThompsonSampling, RandomPolicy, ThompsonSampling

__version__ = "0.1.0"

__all__ = [
    "ENVIRONMENTS",
    "POLICIES",
    "Environment",
    "GenbanditError",
    "InvalidInputError",
    "InvalidParameterError",
    "Policy",
    "Step",
    "SimulationResult",
    "check_random_state",
    "register_environment",
    "register_policy",
    "simulate",
    "AdversarialTable",
    "BernoulliArms",
    "GaussianArms",
    "PiecewiseStationary",
    "SwitchingArms",
    "EXP3",
    "KLUCB",
    "UCB1",
    "EpsilonGreedy",
    "GaussianThompsonSampling",
    "RandomPolicy",
    "ThompsonSampling",
]
