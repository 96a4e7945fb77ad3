"""The router without HTTP: embed a prompt, choose a model with a contextual policy, learn from feedback.

:class:`Router` is what the HTTP app wraps, and what a Python program can use directly. It is
safe to call from many threads. The in-memory policy is always the store's snapshot with the
feedback log after it folded in, in log order (see :mod:`genbandit.router.store`).
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
import time
import uuid
from numbers import Real
from typing import Any, Callable

import numpy as np

from ..core.base import Policy
from ..core.registry import POLICIES
from ..core.validation import InvalidParameterError
from .config import RouterConfig
from .embedders import make_embedder, unit_norm
from .errors import InvalidValue, PayloadTooLarge, UnknownModel
from .store import Decision, Store, open_store

__all__ = ["Router", "resolve_policy_class"]

log = logging.getLogger("genbandit.router")


def resolve_policy_class(name: str) -> type[Policy]:
    """A registered policy by name, or a user's class by ``"package.module:Class"``."""
    if ":" in name:
        module, _, qualname = name.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise InvalidParameterError(f"Router config error in [policy] name: cannot import {name!r}: {exc}") from exc
        if not (isinstance(obj, type) and issubclass(obj, Policy)):
            raise InvalidParameterError(f"Router config error in [policy] name: {name!r} is not a genbandit Policy.")
        cls = obj
    else:
        cls = POLICIES.get(name)
    if not cls.contextual or cls.action_kind != "arm":
        raise InvalidParameterError(f"The router needs a contextual policy that chooses one arm; {cls.__name__} is not one.")
    return cls


class Router:
    """Routes prompts among ``config.models`` with a contextual bandit policy.

    Parameters
    ----------
    config : RouterConfig
    store : Store, optional
        Defaults to the one ``config.store`` names.
    embedder : object with ``encode(list[str]) -> (n, dim)``, optional
        Defaults to the one ``config.embedding`` names (``None`` for ``kind = "none"``).
    clock : callable, optional
        Seconds since the epoch (``time.time``); decisions expire by it.
    """

    def __init__(self, config: RouterConfig, *, store: Store | None = None, embedder: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        if embedder is None:
            embedder, dim = make_embedder(config.embedding)
        else:
            dim = config.embedding.dim or int(np.asarray(embedder.encode(["warm-up"])).shape[1])
        self.embedder, self.dim = embedder, int(dim)
        self.n_arms = len(config.models)
        self._by_name = {m.name: i for i, m in enumerate(config.models)}
        sw = config.server
        self._values_offset = [sw.cost_weight * m.cost for m in config.models]
        self._lock = threading.RLock()
        self.replica_id = uuid.uuid4().hex[:12]

        cls = resolve_policy_class(config.policy.name)
        if cls.reward_range is not None:
            lo, hi = sw.reward_range
            if any(lo - off < cls.reward_range[0] or hi - off > cls.reward_range[1] for off in self._values_offset):
                raise InvalidParameterError(
                    f"{cls.__name__} learns rewards in {list(cls.reward_range)}, but this config can give it "
                    f"reward - cost_weight * cost outside that range (reward_range {list(sw.reward_range)})."
                )
        fresh = cls(n_arms=self.n_arms, n_features=self.dim, **config.policy.params)
        self.store = store if store is not None else open_store(config.store, recent_size=max(200, sw.recent_decisions))
        state, cursor = self.store.init_snapshot(fresh.state_dict())
        self._check_compatible(state, fresh.state_dict())
        self.policy = cls.from_state_dict(state)
        self._cursor = cursor
        self._snapshot_cursor = cursor
        self._since_snapshot = 0
        replayed = self.sync()
        log.info("router %s: %s over %d models, %d feedback(s) replayed from the log", self.replica_id, cls.__name__, self.n_arms, replayed)

    @staticmethod
    def _check_compatible(stored: dict, fresh: dict) -> None:
        if stored.get("policy") != fresh["policy"] or stored.get("params") != fresh["params"]:
            raise InvalidParameterError(
                "The store holds the state of a different policy or configuration "
                f"({stored.get('policy')} with {stored.get('params')}); this config makes {fresh['policy']} with {fresh['params']}. "
                "Point the router at a fresh store (another [store] path or prefix) to start over."
            )

    # ------------------------------------------------------------------ learning from the log
    def sync(self) -> int:
        """Fold log entries written since the last sync (by any replica) into the policy."""
        applied = 0
        with self._lock:
            while True:
                entries = self.store.read_log(self._cursor)
                for e in entries:
                    self.policy.update(e.arm, e.value, e.context)
                    self._cursor = e.cursor
                applied += len(entries)
                self._since_snapshot += len(entries)
                if len(entries) < 1000:
                    return applied

    def snapshot(self, force: bool = False) -> bool:
        """Save the policy state to the store if enough feedback came since the last save (or ``force``)."""
        with self._lock:
            if not force and self._since_snapshot < self.config.store.snapshot_every:
                return False
            if self._cursor == self._snapshot_cursor:
                return False
            state, cursor = self.policy.state_dict(), self._cursor
            self._since_snapshot = 0
            self._snapshot_cursor = cursor
        saved = self.store.save_snapshot(state, cursor)
        log.info("router %s: snapshot at log position %s %s", self.replica_id, cursor, "saved" if saved else "already newer in the store")
        return saved

    # ------------------------------------------------------------------ the API
    def model_index(self, name: str) -> int:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            known = ", ".join([self.config.server.route_name, *self._by_name])
            raise UnknownModel(f"Unknown model {name!r}. Known models: {known}.") from None

    def context_for(self, prompt: str | None = None, embedding: Any = None) -> np.ndarray:
        """The policy's context: ``embedding`` (unit-normed) if given, else the embedded ``prompt``."""
        if embedding is not None:
            if not isinstance(embedding, (list, tuple)) or not all(isinstance(v, Real) and not isinstance(v, bool) for v in embedding):
                raise InvalidValue("'embedding' must be a list of numbers.")
            x = np.asarray(embedding, dtype=float)
            if x.shape != (self.dim,):
                raise InvalidValue(f"'embedding' must have {self.dim} numbers. Got {x.size}.")
            if not np.all(np.isfinite(x)) or not np.any(x):
                raise InvalidValue("'embedding' must be finite and not all zero.")
            return unit_norm(x)
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidValue("Give a non-empty 'prompt' string (or an 'embedding').")
        if len(prompt) > self.config.server.max_prompt_chars:
            raise PayloadTooLarge(f"The prompt has {len(prompt)} characters; the limit is {self.config.server.max_prompt_chars}.")
        if self.embedder is None:
            raise InvalidValue("This router takes precomputed embeddings only ([embedding] kind = 'none'): send 'embedding'.")
        return np.asarray(self.embedder.encode([prompt]), dtype=float)[0]

    def route(self, prompt: str | None = None, *, embedding: Any = None, model: str | None = None) -> Decision:
        """Choose a model for a prompt (or a precomputed embedding) and persist the decision.

        ``model`` forces that model (the decision is still recorded, and its feedback still learned from).
        """
        forced = None if model is None else self.model_index(model)
        context = self.context_for(prompt, embedding)
        with self._lock:
            self.sync()
            arm = self.policy.select(context) if forced is None else forced
        decision = Decision(id=uuid.uuid4().hex, arm=int(arm), context=context, created=self.clock(), forced=forced is not None)
        self.store.put_decision(decision, keep_s=2 * self.config.server.decision_ttl_s)
        return decision

    def check_reward(self, reward: Any) -> float:
        if isinstance(reward, bool) or not isinstance(reward, Real):
            raise InvalidValue(f"'reward' must be a number. Got {reward!r} instead.")
        reward = float(reward)
        lo, hi = self.config.server.reward_range
        if not math.isfinite(reward) or not lo <= reward <= hi:
            raise InvalidValue(f"'reward' must be a finite number in [{lo:g}, {hi:g}]. Got {reward!r} instead.")
        return reward

    def feedback(self, decision_id: Any, reward: Any) -> dict:
        """Record the reward of a decision, durably, then learn from it. The same feedback twice counts once."""
        if not isinstance(decision_id, str) or not decision_id or len(decision_id) > 128:
            raise InvalidValue(f"'decision_id' must be a decision id string. Got {decision_id!r} instead.")
        reward = self.check_reward(reward)
        values = [reward - off for off in self._values_offset]
        status, arm = self.store.append_feedback(decision_id, reward, values, self.clock(), self.config.server.decision_ttl_s)
        self.sync()
        self.snapshot()
        return {"status": status, "decision_id": decision_id, "model": self.config.models[arm].name, "reward": reward}

    def stats(self, recent: int | None = None) -> dict:
        """Pulls, feedback and mean reward per model (over all replicas), and the newest decisions."""
        self.sync()
        n = self.config.server.recent_decisions if recent is None else recent
        c = self.store.counters(self.n_arms)
        models = []
        for i, m in enumerate(self.config.models):
            fb = c["feedback"][i]
            models.append(
                {
                    "name": m.name,
                    "pulls": c["pulls"][i],
                    "feedback": fb,
                    "mean_reward": c["reward_sum"][i] / fb if fb else None,
                    "cost": m.cost,
                }
            )
        names = self.config.model_names
        recent_rows = [{**r, "model": names[r.pop("arm")]} for r in self.store.recent(n)] if n else []
        return {
            "policy": type(self.policy).name or type(self.policy).__name__,
            "policy_rounds": self.policy.t,
            "log_position": self._cursor,
            "replica": self.replica_id,
            "store": self.store.kind,
            "decisions": sum(c["pulls"]),
            "feedback": sum(c["feedback"]),
            "models": models,
            "recent": recent_rows,
        }

    def close(self) -> None:
        """Save a final snapshot and release the store."""
        try:
            self.sync()
            self.snapshot(force=True)
        finally:
            self.store.close()
