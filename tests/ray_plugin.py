"""A policy registered by a module outside genbandit, as a user's package would register one.

tests/test_ray_backend.py runs it on Ray: workers are fresh processes, so the sweep succeeds only
if the backend makes them import this module first.
"""

from genbandit.core.registry import POLICIES
from genbandit.policies.classic import RandomPolicy


class PluginRandom(RandomPolicy):
    """Uniform random choice, registered from outside genbandit (a test plug-in)."""

    name = "ray-test-plugin-random"


if PluginRandom.name not in POLICIES:  # pytest may import this file twice under two names
    POLICIES.register(PluginRandom)
