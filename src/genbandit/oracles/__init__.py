"""Combinatorial oracles: exact integer transport (LP, totally unimodular) and bounded knapsack (DP)."""

from .action_sets import (
    ActionSet,
    KnapsackActions,
    TransportActions,
    decompose,
    decompose_batch,
    make_action_set,
    sample_from_hull,
    systematic_sample,
)
from .knapsack import solve_knapsack
from .transport import solve_transport, transport_constraints, transport_plans

__all__ = [
    "ActionSet",
    "KnapsackActions",
    "TransportActions",
    "decompose",
    "decompose_batch",
    "sample_from_hull",
    "make_action_set",
    "solve_knapsack",
    "solve_transport",
    "systematic_sample",
    "transport_constraints",
    "transport_plans",
]
