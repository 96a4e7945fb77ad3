"""The router without HTTP: embed a prompt, choose a model with a contextual policy, learn from feedback.

:class:`Router` is what the HTTP app wraps, and what a Python program can use directly. It is
safe to call from many threads. The in-memory policy is always the store's snapshot with the
feedback log after it folded in, in log order (see :mod:`genbandit.router.store`).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import math
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from numbers import Real
from typing import Any, Callable

import numpy as np

from ..core.base import Policy
from ..core.registry import POLICIES
from ..core.serialization import differing_settings
from ..core.validation import InvalidParameterError
from ..policies.propensity import action_probabilities
from .config import RouterConfig
from .embedders import make_embedder, unit_norm
from .errors import DecisionNotFound, InvalidValue, PayloadTooLarge, UnknownModel
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

    What is learned is bound to model *names*: the store gives each name an id once, and the policy
    state is saved with the models (ids, in arm order) and the cost offsets it was learned with.
    Starting with another order, an added or removed model, or other costs rebuilds the policy from
    the feedback log (a fresh policy with one arm per configured model, folding every logged feedback
    of a configured model with today's cost); a model that disappears while another appears is
    refused unless the new one says ``renamed_from``.

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
        # Threads for the embedding model (concurrent prompts queue there and are embedded in one batch)
        # and, with a remote store, for the store's calls: off the event loop.
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="genbandit-router")
        self.n_arms = len(config.models)
        self._by_name = {m.name: i for i, m in enumerate(config.models)}
        sw = config.server
        self._offsets = [sw.cost_weight * m.cost for m in config.models]
        self._lock = threading.RLock()
        self.replica_id = uuid.uuid4().hex[:12]

        cls = resolve_policy_class(config.policy.name)
        if cls.reward_range is not None:
            lo, hi = sw.reward_range
            if any(lo - off < cls.reward_range[0] or hi - off > cls.reward_range[1] for off in self._offsets):
                raise InvalidParameterError(
                    f"{cls.__name__} learns rewards in {list(cls.reward_range)}, but this config can give it "
                    f"reward - cost_weight * cost outside that range (reward_range {list(sw.reward_range)})."
                )
        params = dict(config.policy.params)
        self.budget = config.budget.target_cost
        if self.budget is not None:
            if "budget" not in inspect.signature(cls.__init__).parameters:
                raise InvalidParameterError(f"[budget] needs a policy that keeps a budget (a 'budget' parameter); {cls.__name__} has none.")
            params["budget"] = self.budget
        fresh = cls(n_arms=self.n_arms, n_features=self.dim, **params)
        self._compile_ahead(fresh)
        if config.warm_start.path:  # the store keeps it only if it is new (init_snapshot)
            self.fold_logged(fresh, config.warm_start)
        self.store = store if store is not None else open_store(config.store, recent_size=max(200, sw.recent_decisions))
        ids = self.store.register_models(config.model_names, self._renames())
        self._ids = [ids[name] for name in config.model_names]  # store id of each arm
        self._index_of_id = {i: arm for arm, i in enumerate(self._ids)}
        self._name_of_id = {i: name for name, i in ids.items()}
        self._values_by_id = [self._offsets[self._index_of_id[i]] if i in self._index_of_id else 0.0 for i in range(max(ids.values()) + 1)]

        doc, cursor = self.store.init_snapshot(self._document(fresh.state_dict()))
        layout, state = self._read_document(doc)
        self._check_compatible(state, fresh.state_dict())
        rebuild = layout != self._layout()
        if rebuild:
            was = [self._name_of_id.get(i, f"#{i}") for i in layout["ids"]]
            log.warning("router %s: the models or costs changed (%s, offsets %s -> %s, offsets %s): rebuilding the policy from the feedback log",
                        self.replica_id, was, layout["offsets"], config.model_names, self._offsets)
            self.policy, self._cursor = fresh, self.store.log_start
        else:
            self.policy, self._cursor = cls.from_state_dict(state), cursor
        self._snapshot_cursor = self._cursor
        self._since_snapshot = 0
        replayed = self.sync()
        if rebuild:
            self.snapshot(force=True, replace=True)
        log.info("router %s: %s over %d models, %d feedback(s) replayed from the log", self.replica_id, cls.__name__, self.n_arms, replayed)

    def _compile_ahead(self, policy: Policy, rounds: int = 64) -> None:
        """Play a throwaway copy of ``policy`` on random contexts before serving.

        Policies with compiled kernels (numba compiles each at its first call: seconds on a fresh
        install, most of a second from the on-disk cache) would otherwise make the first requests
        wait; some kernels run only once every model has been tried, hence a few dozen rounds.
        """
        rng = np.random.default_rng(0)
        copy = policy.clone(seed=0) if "seed" in policy.get_params() else policy.clone()
        copy.reset(1)
        lo, hi = self.config.server.reward_range
        for t in range(rounds + 4 * self.n_arms):
            context = rng.standard_normal(self.dim)
            context /= np.linalg.norm(context)
            copy.probabilities(context)
            arm = copy.select(context)
            reward = float(rng.uniform(lo, hi)) - self._offsets[arm]
            copy.update(arm, reward if self.budget is None else {"reward": reward, "cost": self.config.models[arm].cost}, context)

    # ------------------------------------------------------------------ models in the store
    def _renames(self) -> dict[str, str]:
        """``{new: old}`` for the renames still to apply; refuses a model swapped for another without one."""
        known = self.store.model_ids()
        if not known:
            return {}
        renames = {m.name: m.renamed_from for m in self.config.models if m.renamed_from is not None and m.name not in known}
        for new, old in renames.items():
            if old not in known:
                raise InvalidParameterError(
                    f"[[models]] {new!r} says renamed_from = {old!r}, but the store has never seen a model {old!r} "
                    f"(it knows {', '.join(sorted(known))})."
                )
        doc = self.store.read_snapshot()
        if doc is None:  # stopped between naming its models and saving its first snapshot
            return renames
        layout, _ = self._read_document(doc)
        by_id = {i: name for name, i in known.items()}
        active = [by_id[i] for i in layout["ids"] if i in by_id]
        gone = [n for n in active if n not in self._by_name and n not in renames.values()]
        added = [n for n in self.config.model_names if n not in known and n not in renames]
        if gone and added:
            raise InvalidParameterError(
                f"The store learned about {', '.join(map(repr, gone))}, which this config no longer has, and this config adds "
                f"{', '.join(map(repr, added))}. If a new model is an old one renamed, say so in its [[models]] table "
                f"(renamed_from = {gone[0]!r}) and what was learned moves with it. To replace a model with another, "
                "start once without the old one (its arm is dropped), then add the new one (it starts unlearned)."
            )
        return renames

    def _layout(self) -> dict:
        return {"ids": list(self._ids), "offsets": list(self._offsets)}

    def _document(self, state: dict) -> dict:
        """What a snapshot stores: the policy state and the models and costs it was learned with."""
        return {"layout": self._layout(), "policy": state}

    def _read_document(self, doc: dict) -> tuple[dict, dict]:
        if "layout" in doc:
            return doc["layout"], doc["policy"]
        # A store written before snapshots named their models: its arms were the config's order then.
        n = int(doc.get("params", {}).get("n_arms", self.n_arms))
        return {"ids": list(range(n)), "offsets": list(self._offsets) if n == self.n_arms else []}, doc

    @staticmethod
    def _check_compatible(stored: dict, fresh: dict) -> None:
        differ = differing_settings(stored, fresh, ignore=("n_arms",))  # models may come and go: the log replays them
        if differ:
            theirs, ours = ({k: v for k, v in (state.get("params") or {}).items() if k in differ} for state in (stored, fresh))
            raise InvalidParameterError(
                f"The store holds the state of a different policy or configuration (differing: {', '.join(differ)}): "
                f"{stored.get('policy')} with {theirs}, where this config makes {fresh['policy']} with {ours}. "
                "Point the router at a fresh store (another [store] path or prefix) to start over."
            )

    def model_name(self, store_id: int) -> str:
        """The name of the model with this store id (also for a model no longer configured)."""
        return self._name_of_id.get(store_id, f"#{store_id}")

    # ------------------------------------------------------------------ learning from the log
    def sync(self) -> int:
        """Fold log entries written since the last sync (by any replica) into the policy.

        Each entry teaches its model's arm ``reward - cost_weight * cost``; entries of models no
        longer configured are passed over.
        """
        applied = 0
        with self._lock:
            while True:
                entries = self.store.read_log(self._cursor)
                for e in entries:
                    arm = self._index_of_id.get(e.arm)
                    if arm is not None:
                        value = e.reward - self._offsets[arm]
                        self.policy.update(arm, value if self.budget is None else {"reward": value, "cost": self.config.models[arm].cost}, e.context)
                    self._cursor = e.cursor
                applied += len(entries)
                self._since_snapshot += len(entries)
                if len(entries) < 1000:
                    return applied

    def fold_logged(self, policy: Policy, spec) -> int:
        """Fold the logged table of ``[warm_start]`` into ``policy`` with its ``fit_logged``; returns the rows."""
        import pandas as pd

        if not hasattr(policy, "fit_logged"):
            raise InvalidParameterError(f"[warm_start] needs a policy that folds logged rows (fit_logged); {type(policy).__name__} has none.")
        path = spec.path
        frame = pd.read_parquet(path) if str(path).endswith((".parquet", ".pq")) else pd.read_csv(path)
        need = [c for c in (spec.prompt_column or spec.embedding_column, spec.model_column, spec.reward_column, spec.cost_column) if c]
        missing = [c for c in need if c not in frame]
        if missing:
            raise InvalidParameterError(f"[warm_start] {path} has no column(s) {', '.join(missing)}; columns: {list(frame.columns)}.")
        unknown = sorted(set(frame[spec.model_column].astype(str)) - set(self._by_name))
        if unknown:
            raise InvalidParameterError(f"[warm_start] {path} names models that are not in [[models]]: {', '.join(unknown)}.")
        arms = frame[spec.model_column].astype(str).map(self._by_name).to_numpy(dtype=np.int64)
        if spec.embedding_column:
            raw = [json.loads(v) if isinstance(v, str) else v for v in frame[spec.embedding_column]]
            contexts = np.stack([unit_norm(np.asarray(v, dtype=float)) for v in raw])
        else:
            if self.embedder is None:
                raise InvalidParameterError("[warm_start] with prompts needs an embedder ([embedding] kind is 'none'): give embedding_column.")
            contexts = np.asarray(self.embedder.encode(frame[spec.prompt_column].astype(str).tolist()), dtype=float)
        rewards = frame[spec.reward_column].to_numpy(dtype=float)
        model_costs = np.array([m.cost for m in self.config.models])
        costs = frame[spec.cost_column].to_numpy(dtype=float) if spec.cost_column else model_costs[arms]
        values = rewards - self.config.server.cost_weight * model_costs[arms]
        policy.fit_logged(contexts, arms, values, costs)
        log.info("router %s: %d logged rows of %s folded into the initial state", self.replica_id, len(frame), path)
        return len(frame)

    def snapshot_due(self) -> bool:
        return self._since_snapshot >= self.config.store.snapshot_every

    def snapshot(self, force: bool = False, replace: bool = False) -> bool:
        """Save the policy state to the store if enough feedback came since the last save (or ``force``)."""
        with self._lock:
            if not force and not self.snapshot_due():
                return False
            if self._cursor == self._snapshot_cursor and not replace:
                return False
            doc, cursor = self._document(self.policy.state_dict()), self._cursor
            self._since_snapshot = 0
            self._snapshot_cursor = cursor
        saved = self.store.save_snapshot(doc, cursor, replace=replace)
        log.info("router %s: snapshot at log position %s %s", self.replica_id, cursor, "saved" if saved else "already newer in the store")
        return saved

    # ------------------------------------------------------------------ the API
    def model_index(self, name: Any) -> int:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            known = ", ".join([self.config.server.route_name, *self._by_name])
            shown = name if isinstance(name, str) and _is_text(name) else "(not a model name)"
            raise UnknownModel(f"Unknown model {shown!r}. Known models: {known}.") from None

    def context_for(self, prompt: str | None = None, embedding: Any = None) -> np.ndarray:
        """The policy's context: ``embedding`` (unit-normed) if given, else the embedded ``prompt``."""
        if embedding is not None:
            if not isinstance(embedding, (list, tuple)) or not (
                set(map(type, embedding)) <= {float, int} or all(isinstance(v, Real) and not isinstance(v, bool) for v in embedding)
            ):
                raise InvalidValue("'embedding' must be a list of numbers.")
            if len(embedding) != self.dim:
                raise InvalidValue(f"'embedding' must have {self.dim} numbers. Got {len(embedding)}.")
            try:
                x = np.asarray(embedding, dtype=float)
            except OverflowError:
                raise InvalidValue("'embedding' holds a number too large for a 64-bit float.") from None
            with np.errstate(over="ignore", under="ignore"):
                norm = float(np.linalg.norm(x))
            if not np.all(np.isfinite(x)) or not math.isfinite(norm) or norm < _TINY:
                raise InvalidValue(
                    "'embedding' must be finite, with a length (Euclidean norm) that is a normal 64-bit float: "
                    f"not zero, not subnormal, not overflowing. Got norm {norm!r}."
                )
            return x / norm
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidValue("Give a non-empty 'prompt' string (or an 'embedding').")
        if len(prompt) > self.config.server.max_prompt_chars:
            raise PayloadTooLarge(f"The prompt has {len(prompt)} characters; the limit is {self.config.server.max_prompt_chars}.")
        if not _is_text(prompt):
            raise InvalidValue("'prompt' must be valid Unicode text; it holds a lone surrogate.")
        if self.embedder is None:
            raise InvalidValue("This router takes precomputed embeddings only ([embedding] kind = 'none'): send 'embedding'.")
        try:
            return np.asarray(self.embedder.encode([prompt]), dtype=float)[0]
        except Exception as exc:  # noqa: BLE001 - this prompt cannot be embedded: the client hears why, the log keeps the trace
            log.warning("could not embed a prompt of %d characters", len(prompt), exc_info=True)
            raise InvalidValue(f"The prompt could not be embedded: {type(exc).__name__}: {exc}") from None

    def _decide(self, context: np.ndarray, forced: int | None) -> Decision:
        """Choose (or take the forced model) and record the propensity: the probability the policy gave its choice.

        Exact for a policy with ``probabilities()``, else estimated from ``propensity_draws``
        selects on the same state (:func:`~genbandit.policies.propensity.action_probabilities`);
        ``None`` for a forced model or with ``propensity_draws = 0``.
        """
        draws = self.config.server.propensity_draws
        propensity = None
        with self._lock:
            self.sync()
            if forced is None:
                probs = action_probabilities(self.policy, context, n_draws=draws) if draws else None
                arm = self.policy.select(context)
                propensity = None if probs is None else float(probs[arm])
            else:
                arm = forced
        return Decision(id=uuid.uuid4().hex, arm=self._ids[int(arm)], context=context, created=self.clock(), forced=forced is not None,
                        propensity=propensity)

    def _put_args(self) -> tuple[float, float, int]:
        sv = self.config.server
        return 2 * sv.decision_ttl_s, sv.decision_ttl_s, sv.max_pending_decisions

    def route(self, prompt: str | None = None, *, embedding: Any = None, model: str | None = None) -> Decision:
        """Choose a model for a prompt (or a precomputed embedding) and persist the decision.

        ``model`` forces that model (the decision is still recorded, and its feedback still learned
        from). The decision's ``arm`` is the chosen model's store id: :meth:`model_name` names it.
        """
        forced = None if model is None else self.model_index(model)
        decision = self._decide(self.context_for(prompt, embedding), forced)
        self.store.put_decision(decision, *self._put_args())
        return decision

    async def aroute(self, prompt: str | None = None, *, embedding: Any = None, model: str | None = None) -> Decision:
        """:meth:`route` for an event loop: the embedding model and the store's waits run off the loop."""
        loop = asyncio.get_running_loop()
        if not self.store.in_process:
            return await loop.run_in_executor(self._pool, lambda: self.route(prompt, embedding=embedding, model=model))
        forced = None if model is None else self.model_index(model)
        if embedding is None and self.embedder is not None:
            context = await loop.run_in_executor(self._pool, self.context_for, prompt)
        else:
            context = self.context_for(prompt, embedding)
        decision = self._decide(context, forced)
        await self.store.put_decision_async(decision, *self._put_args())
        return decision

    def check_reward(self, reward: Any) -> float:
        if isinstance(reward, bool) or not isinstance(reward, Real):
            raise InvalidValue(f"'reward' must be a number. Got {_short(reward)} instead.")
        lo, hi = self.config.server.reward_range
        try:
            value = float(reward)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value) or not lo <= value <= hi:
            raise InvalidValue(f"'reward' must be a finite number in [{lo:g}, {hi:g}]. Got {_short(reward)} instead.")
        return value

    def _check_feedback(self, decision_id: Any, reward: Any) -> tuple[str, float, list[float]]:
        if not isinstance(decision_id, str) or not 0 < len(decision_id) <= 128 or not (decision_id.isascii() and decision_id.isprintable()):
            raise InvalidValue(f"'decision_id' must be a decision id (printable ASCII, at most 128 characters). Got {_short(decision_id)} instead.")
        reward = self.check_reward(reward)
        return decision_id, reward, [reward - off for off in self._values_by_id]

    def _feedback_result(self, status: str, arm: int, decision_id: str, reward: float) -> dict:
        return {"status": status, "decision_id": decision_id, "model": self.model_name(arm), "reward": reward}

    def feedback(self, decision_id: Any, reward: Any) -> dict:
        """Record the reward of a decision, durably, then learn from it. The same feedback twice counts once."""
        decision_id, reward, values = self._check_feedback(decision_id, reward)
        status, arm = self.store.append_feedback(decision_id, reward, values, self.clock(), self.config.server.decision_ttl_s)
        self.sync()
        self.snapshot()
        return self._feedback_result(status, arm, decision_id, reward)

    async def afeedback(self, decision_id: Any, reward: Any) -> dict:
        """:meth:`feedback` for an event loop: answers once the feedback is durable, like :meth:`feedback`."""
        loop = asyncio.get_running_loop()
        if not self.store.in_process:
            return await loop.run_in_executor(self._pool, self.feedback, decision_id, reward)
        decision_id, reward, values = self._check_feedback(decision_id, reward)
        status, arm = await self.store.append_feedback_async(decision_id, reward, values, self.clock(), self.config.server.decision_ttl_s)
        self.sync()
        if self.snapshot_due():
            await loop.run_in_executor(self._pool, self.snapshot)
        return self._feedback_result(status, arm, decision_id, reward)

    def get_decision(self, decision_id: Any) -> dict:
        """One decision as the API shows it; :class:`DecisionNotFound` if unknown."""
        d = None
        if isinstance(decision_id, str) and 0 < len(decision_id) <= 128 and decision_id.isascii() and decision_id.isprintable():
            d = self.store.get_decision(decision_id)
        if d is None:
            raise DecisionNotFound(f"Unknown decision id {_short(decision_id)}.")
        return {"decision_id": d.id, "model": self.model_name(d.arm), "created": d.created, "forced": d.forced, "reward": d.reward}

    def stats(self, recent: int | None = None) -> dict:
        """Pulls, feedback and mean reward per model (over all replicas), and the newest decisions."""
        self.sync()
        n = self.config.server.recent_decisions if recent is None else recent
        counters = self.store.counters()
        models = []
        for m, i in zip(self.config.models, self._ids):
            c = counters.get(i, {"pulls": 0, "feedback": 0, "reward_sum": 0.0})
            fb = c["feedback"]
            models.append({"name": m.name, "pulls": c["pulls"], "feedback": fb, "mean_reward": c["reward_sum"] / fb if fb else None, "cost": m.cost})
        recent_rows = [{**r, "model": self.model_name(r.pop("arm"))} for r in self.store.recent(n)] if n else []
        out = {
            "policy": type(self.policy).name or type(self.policy).__name__,
            "policy_rounds": self.policy.t,
            "log_position": self._cursor,
            "replica": self.replica_id,
            "store": self.store.kind,
            "decisions": sum(m["pulls"] for m in models),
            "feedback": sum(m["feedback"] for m in models),
            "models": models,
            "recent": recent_rows,
        }
        if self.budget is not None:
            paid = sum(m["feedback"] for m in models)
            spend = sum(m["feedback"] * m["cost"] for m in models)
            out["budget"] = {"target_cost": self.budget, "mean_cost": spend / paid if paid else None, "spend": spend, "price": self.price()}
        return out

    def price(self) -> float | None:
        """The policy's current price of a budget-sized cost (None without a budget)."""
        return None if self.budget is None else float(self.policy.price[0])

    def close(self) -> None:
        """Save a final snapshot and release the store."""
        try:
            self.sync()
            self.snapshot(force=True)
        finally:
            self.store.close()
            self._pool.shutdown(wait=False)


_TINY = float(np.finfo(float).tiny)


def _is_text(s: str) -> bool:
    """Whether ``s`` can be written as UTF-8 (no lone surrogates)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters, for error messages (it may be huge or hold surrogates)."""
    try:
        text = repr(value)
    except ValueError:  # an int too large to write in decimal
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 80 else text[:77] + "..."
