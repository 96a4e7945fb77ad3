"""The contract (policy, environment), validation, RNG handling, the registry and the simulator."""

from .base import Environment, Policy, Step
from .registry import ENVIRONMENTS, POLICIES, register_environment, register_policy
from .rng import check_random_state, spawn_seeds
from .validation import GenbanditError, InvalidInputError, InvalidParameterError

__all__ = [
    "Environment",
    "Policy",
    "Step",
    "ENVIRONMENTS",
    "POLICIES",
    "register_environment",
    "register_policy",
    "check_random_state",
    "spawn_seeds",
    "GenbanditError",
    "InvalidInputError",
    "InvalidParameterError",
]
