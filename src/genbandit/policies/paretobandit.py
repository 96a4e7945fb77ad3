"""ParetoBandit's router (the ``paretobandit`` package) as a genbandit policy, to compare routers on one engine.

ParetoBandit (Tanner et al. 2025) routes a prompt with a LinUCB bandit over PCA-compressed sentence
embeddings and, with a budget, prices models through its ``BudgetPacer``. :class:`ParetoBanditRouter`
plays its ``BanditRouter`` as the package ships it (cold start, ``priors="none"``, no static cost
penalty), one router per run.
"""

from __future__ import annotations

import logging
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..core.base import Policy
from ..core.optional import import_optional
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.validation import Interval, InvalidInputError, Options, check_finite_array

__all__ = ["ParetoBanditRouter"]


@register_policy("paretobandit")
class ParetoBanditRouter(Policy):
    """ParetoBandit's ``BanditRouter`` (its package, cold start), optionally with its ``BudgetPacer``.

    Contexts are the prompts' embeddings (``n_features``-d, all-MiniLM-L6-v2 for the shipped
    stream). ``features="pca"`` routes on the package's shipped PCA of them (its default pipeline,
    26 features), ``"raw"`` on the embeddings themselves. With ``budget`` (a target mean dollar cost
    per request) each router runs the package's ``BudgetPacer`` in adaptive mode, which learns from
    the logged cost: feedback is then ``{"reward": r, "cost": c}``; without one a bare reward. Rewards
    are clipped to [0, 1], as the package does. ``arm_names`` are the model ids of the arms, in
    order (the package's own models by default). Each run's router is seeded from the policy's seed.

    ``registry_prior``: even with ``priors="none"`` the package's cold start is not blind. Its model
    registry gives each model a speed profile (the shipped one marks gemini-2.5-pro "slow"), and
    ``BanditRouter.create`` shifts a slow model's bias weight by the registry's ``slow_bias``, +0.05
    (``fast_bias`` and ``balanced_bias`` are 0): with the package's UCB weight of 0.01 the router plays
    the slow model from its first round. ``registry_prior=False`` sets the three biases to 0 through
    the package's own ``RouterConfig(registration=RegistrationConfig(...))``, nothing else changed (the
    same LinUCB, features, alpha and forgetting): a router that starts knowing nothing about the
    models, to compare with routers that do not either.

    The routers are the package's objects, which cannot be written to JSON; the learned state is
    the history of each run (routed features, feedback), and a policy restored from ``state_dict``
    rebuilds its routers by replaying it.

    >>> from genbandit.policies.paretobandit import ParetoBanditRouter
    >>> policy = ParetoBanditRouter(n_arms=3, n_features=384, features="raw", seed=0)
    >>> arm = policy.select(np.zeros(384)); _ = policy.update(arm, 0.8, np.zeros(384))
    >>> 0 <= arm < 3
    True
    """

    name = "ParetoBandit"
    contextual = True
    _parameter_constraints = {
        "n_features": [Interval(Integral, 1, None, "left")],
        "arm_names": [None, tuple, list],
        "features": [Options(("pca", "raw"))],
        "budget": [None, Interval(Real, 0, None, "neither")],
        "registry_prior": [bool],
    }

    def __init__(self, n_arms: int, n_features: int = 384, arm_names=None, features: str = "pca", budget: float | None = None,
                 registry_prior: bool = True, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.arm_names = arm_names
        self.features = features
        self.budget = budget
        self.registry_prior = registry_prior
        self.seed = seed

    # ----------------------------------------------------------------- the package's routers
    def _build_routers(self) -> None:
        pb = import_optional("pareto_bandit", "ParetoBanditRouter")
        from pareto_bandit.budget_pacer import BudgetPacer, PacingMode
        from pareto_bandit.config import DEFAULT_PCA_PATH

        logging.getLogger("pareto_bandit").setLevel(logging.ERROR)
        if self.features == "pca":
            self.feature_service = pb.FeatureService(custom_encoder=lambda key: self.pending[int(key)], pca_path=DEFAULT_PCA_PATH, embedding_dim=self.n_features)
            # the package ships its PCA pickled by an older scikit-learn, which warns on every load; a fitted PCA's transform is
            # arithmetic on its stored arrays, and the tests check the loaded one against that arithmetic, so the warning is noise
            from sklearn.exceptions import InconsistentVersionWarning

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InconsistentVersionWarning)
                self.feature_service.pca  # loaded now, not inside the first route
        else:
            self.feature_service = pb.FeatureService.for_precomputed(self.n_features)
        # the registry's speed-profile biases, the cold start's only knowledge of the models; None keeps the package's own
        neutral = pb.RegistrationConfig(fast_bias=0.0, slow_bias=0.0, balanced_bias=0.0)
        config = None if self.registry_prior else pb.RouterConfig(registration=neutral)
        self.routers = []
        for seed in self._router_seeds:
            pacer = None if self.budget is None else BudgetPacer(target_avg_spend_usd=self.budget, mode=PacingMode.ADAPTIVE)
            self.routers.append(pb.BanditRouter.create(feature_service=self.feature_service, priors="none", cost_penalty=0.0, budget_pacer=pacer,
                                                       bandit_seed=int(seed), config=config))
        models = list(self.arm_names) if self.arm_names is not None else list(self.routers[0].bandit.models)
        if len(models) != self.n_arms or set(models) != set(self.routers[0].bandit.models):
            raise InvalidInputError(f"ParetoBanditRouter's arms must be the package's models {sorted(self.routers[0].bandit.models)}. Got {models} instead.")
        self.models = models
        self.logs = [None] * len(self._router_seeds)
        for run, events in enumerate(self._history):  # a restored policy: replay what the routers saw
            for event in events:
                self._apply(run, *event)

    def _ready(self) -> None:
        if getattr(self, "routers", None) is None or len(self.routers) != self._n_runs:
            self._build_routers()

    def _features(self, contexts: np.ndarray) -> np.ndarray:
        x = np.asarray(contexts, dtype=np.float32)
        if self.features == "raw":
            return x
        self.pending = x
        return self.feature_service.extract_features_batch([str(r) for r in range(x.shape[0])])

    def _apply(self, run: int, kind: str, features: Any, arm: int = -1, reward: float = 0.0, cost: float | None = None) -> int:
        """Route (``kind="route"``) or learn (``"feedback"``) in run ``run``; the feedback's ``features`` are needed
        (and given) only for a model the router did not just route to."""
        router = self.routers[run]
        if kind == "route":
            model, self.logs[run] = router.route(np.asarray(features, dtype=np.float32 if self.features == "raw" else float))
            return self.models.index(model)
        log, self.logs[run] = self.logs[run], None
        if features is None:
            if cost is not None:
                log.cost_usd = cost  # the logged cost, as the package's own replay sets it
            router.process_feedback(log.request_id, float(np.clip(reward, 0.0, 1.0)))
        else:  # feedback for a model the router did not just route to
            router.update(self.models[arm], np.asarray(features, dtype=np.float32 if self.features == "raw" else float), float(np.clip(reward, 0.0, 1.0)))
        return arm

    # ----------------------------------------------------------------- the Policy interface
    def _init_state(self, n_runs: int) -> None:
        self._router_seeds = self._rng.integers(2**31, size=n_runs)
        self._history = [[] for _ in range(n_runs)]
        self.routers = None

    def _select(self, contexts):
        self._ready()
        features = self._features(contexts)
        arms = np.empty(self._n_runs, dtype=np.int64)
        for run in range(self._n_runs):
            self._history[run].append(("route", features[run].tolist()))
            arms[run] = self._apply(run, "route", features[run])
        return arms

    def _check_feedback(self, feedback: Any, actions: np.ndarray) -> Any:
        owner = type(self).__name__
        if not isinstance(feedback, dict):
            return check_finite_array("reward", feedback, (self._n_runs,), owner)
        if set(feedback) != {"reward", "cost"}:
            raise InvalidInputError(f"{owner} learns from a reward, or {{'reward': r, 'cost': c}}. Got {feedback!r} instead.")
        cost = check_finite_array("cost", feedback["cost"], (self._n_runs,), owner)
        if np.any(cost < 0):
            raise InvalidInputError(f"The cost of {owner} must be >= 0. Got {cost.tolist()} instead.")
        return {"reward": check_finite_array("reward", feedback["reward"], (self._n_runs,), owner), "cost": cost}

    def _update(self, actions, feedback, contexts):
        self._ready()
        rewards, costs = (feedback["reward"], feedback["cost"]) if isinstance(feedback, dict) else (feedback, None)
        routed = [log is not None and self.models.index(log.selected_model) == arm for log, arm in zip(self.logs, actions)]
        features = None if all(routed) else self._features(contexts)
        for run in range(self._n_runs):
            given = None if routed[run] else features[run].tolist()
            event = ("feedback", given, int(actions[run]), float(rewards[run]), None if costs is None else float(costs[run]))
            self._history[run].append(event)
            self._apply(run, *event)

    @classmethod
    def _check_examples(cls):
        import_optional("pareto_bandit", "ParetoBanditRouter")
        env = ENVIRONMENTS.create("paretobandit-replay", limit=40, seed=0)
        return [(cls(n_arms=3, n_features=384, seed=0), env), (cls(n_arms=3, n_features=384, features="raw", budget=0.005, seed=1), env),
                (cls(n_arms=3, n_features=384, registry_prior=False, seed=2), env)]
