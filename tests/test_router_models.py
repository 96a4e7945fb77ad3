"""What the router learned stays with model names: reorder, rename, add, remove, re-cost, on SQLite and Redis."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from router_helpers import redis_server, write_config

from genbandit.core.validation import InvalidParameterError
from genbandit.router import Router, load_router_config

X = [1.0, 0.0]  # the one kind of prompt of this test


def model(name: str, cost: float = 0.0, **extra) -> dict:
    return {"name": name, "base_url": "http://127.0.0.1:9/v1", "cost": cost, **extra}


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    with contextlib.ExitStack() as stack:
        if request.param == "redis":
            yield {"kind": "redis", "url": stack.enter_context(redis_server()), "prefix": "names"}
        else:
            yield {"path": str(tmp_path / "state.db")}


class Fleet:
    """Restarts of one router on one store with changing ``[[models]]``; keeps the feedback it gave."""

    def __init__(self, tmp_path, store: dict) -> None:
        self.tmp_path, self.store, self.given = tmp_path, store, []  # given: (model name, reward, context)
        self.router: Router | None = None

    def start(self, models: list[dict], cost_weight: float = 0.0) -> Router:
        if self.router is not None:
            self.router.close()
        server = {"cost_weight": cost_weight, "reward_range": [-1.0, 1.0]}
        path = write_config(self.tmp_path / "router.toml", models=models, embedding={"kind": "none", "dim": 2}, store=self.store,
                            server=server, params={"beta": 0.1, "seed": 0})
        self.router = Router(load_router_config(path))
        return self.router

    def teach(self, rewards: dict[str, float], n: int) -> None:
        r = self.router
        for _ in range(n):
            d = r.route(embedding=X)
            name = r.model_name(d.arm)
            r.feedback(d.id, rewards[name])
            self.given.append((name, rewards[name], np.array(X)))

    def expected_b(self) -> np.ndarray:
        """DisjointLinUCB's b vectors after learning every feedback given to a configured model, at today's costs."""
        r = self.router
        cw = r.config.server.cost_weight
        b = np.zeros((r.n_arms, 2))
        for name, reward, ctx in self.given:
            if name in r._by_name:
                m = r.config.models[r._by_name[name]]
                b[r._by_name[name]] += (reward - cw * m.cost) * ctx
        return b

    def picks(self, n: int = 10) -> list[str]:
        return [self.router.model_name(self.router.route(embedding=X).arm) for _ in range(n)]

    def stats(self) -> dict:
        return {m["name"]: (m["feedback"], m["mean_reward"]) for m in self.router.stats()["models"]}


def test_learning_follows_model_names(tmp_path, store):
    f = Fleet(tmp_path, store)
    f.start([model("cheap", 0.1), model("premium", 0.5)])
    f.teach({"cheap": 0.0, "premium": 1.0}, 12)
    assert f.picks() == ["premium"] * 10
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    before = f.stats()

    # Reordered: the same learning, under the same names.
    f.start([model("premium", 0.5), model("cheap", 0.1)])
    assert f.picks() == ["premium"] * 10
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    assert f.stats() == before

    # A model swapped for another, unsaid: refused, and nothing changes.
    with pytest.raises(InvalidParameterError, match="renamed_from = 'cheap'"):
        f.start([model("premium", 0.5), model("budget", 0.1)])
    f.router = None

    # Renamed, said: what was learned about "cheap" is now "budget"'s.
    f.start([model("premium", 0.5), model("budget", 0.1, renamed_from="cheap")])
    f.given = [("budget" if n == "cheap" else n, r, x) for n, r, x in f.given]
    assert f.stats() == {"premium": before["premium"], "budget": before["cheap"]}
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    f.start([model("premium", 0.5), model("budget", 0.1, renamed_from="cheap")])  # the line may stay: applied once
    assert f.stats()["budget"] == before["cheap"]

    # Added: a new arm, unlearned, explored first (DisjointLinUCB plays unplayed arms first); the others keep theirs.
    f.start([model("premium", 0.5), model("budget", 0.1), model("fresh", 0.2)])
    assert f.stats()["fresh"] == (0, None) and f.router.n_arms == 3
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    d = f.router.route(embedding=X)
    assert f.router.model_name(d.arm) == "fresh"
    f.router.feedback(d.id, 0.5)
    f.given.append(("fresh", 0.5, np.array(X)))

    # Removed: its arm goes, the rest stay as learned.
    f.start([model("fresh", 0.2), model("premium", 0.5)])
    assert f.router.n_arms == 2 and set(f.stats()) == {"fresh", "premium"} and f.stats()["premium"] == before["premium"]
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    assert f.router.policy.t == sum(1 for n, _, _ in f.given if n in ("fresh", "premium"))

    # Costs changed: the policy now learns reward - cost_weight * cost, from the same logged rewards.
    f.start([model("fresh", 0.2), model("premium", 1.5)], cost_weight=0.5)
    np.testing.assert_allclose(f.router.policy._b[0], f.expected_b(), atol=1e-12)
    assert f.router.policy._b[0, 1, 0] == pytest.approx(before["premium"][0] * (1.0 - 0.5 * 1.5))
    assert f.stats()["premium"] == before["premium"]  # stats show rewards as given
    f.router.close()


def test_a_model_named_back_by_renamed_from_must_exist(tmp_path, store):
    f = Fleet(tmp_path, store)
    f.start([model("a"), model("b")])
    f.teach({"a": 1.0, "b": 0.0}, 2)
    with pytest.raises(InvalidParameterError, match="never seen a model 'zzz'"):
        f.start([model("a"), model("c", renamed_from="zzz")])


def test_a_store_stopped_before_its_first_snapshot_starts(tmp_path, store):
    """A router killed between naming its models and saving its first snapshot leaves a store that still starts."""
    from genbandit.router.config import StoreSpec
    from genbandit.router.store import open_store

    spec = StoreSpec(**{k: v for k, v in store.items()})
    early = open_store(spec)
    early.register_models(["a", "b"], {})
    early.close()
    f = Fleet(tmp_path, store)
    f.start([model("a"), model("b")])
    f.teach({"a": 1.0, "b": 0.0}, 2)
    assert f.router.policy.t == 2
    f.router.close()
