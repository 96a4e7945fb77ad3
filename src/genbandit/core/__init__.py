"""The contract (policy, environment), validation, RNG handling, the registries and the simulator.

``core`` imports no other part of genbandit: the layers above register into it.
"""

from .base import Environment, Policy, Step
from .registry import ENVIRONMENTS, METRICS, POLICIES, REPRODUCTIONS, Registry, register_environment, register_metric, register_policy
from .rng import check_random_state, spawn_seeds
from .validation import GenbanditError, InvalidInputError, InvalidParameterError

__all__ = [
    "Environment",
    "Policy",
    "Step",
    "Registry",
    "ENVIRONMENTS",
    "METRICS",
    "POLICIES",
    "REPRODUCTIONS",
    "register_environment",
    "register_metric",
    "register_policy",
    "check_random_state",
    "spawn_seeds",
    "GenbanditError",
    "InvalidInputError",
    "InvalidParameterError",
]
