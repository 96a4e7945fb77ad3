"""The router as a real server on loopback: the openai client, concurrent load, kill -9, two replicas on Redis."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("openai")
pytest.importorskip("redis")
pytest.importorskip("uvicorn")

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
from router_helpers import redis_server, router_process, serve_in_thread, upstream_app, wait_until, write_config

from genbandit.router import create_app, load_router_config

FB = {"x-api-key": "fb-key"}
READ = {"x-api-key": "read-key"}
ADMIN = {"x-api-key": "admin-key"}


def test_openai_client_gets_routed_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("UP_KEY_ALPHA", "key-alpha")
    monkeypatch.setenv("UP_KEY_BETA", "key-beta")
    alpha, beta = upstream_app("alpha"), upstream_app("beta")
    with serve_in_thread(alpha) as alpha_url, serve_in_thread(beta) as beta_url:
        path = write_config(
            tmp_path / "router.toml",
            models=[
                {"name": "alpha", "base_url": alpha_url + "/v1", "model": "alpha-7b", "api_key_env": "UP_KEY_ALPHA"},
                {"name": "beta", "base_url": beta_url + "/v1", "model": "beta-70b", "api_key_env": "UP_KEY_BETA"},
                {"name": "gone", "base_url": "http://127.0.0.1:9/v1"},  # nothing listens there
            ],
            policy="RFF-UCB",
            params={"n_components": 50, "seed": 0},
            embedding={"kind": "sentence-transformers"},
            store={"path": str(tmp_path / "state.db")},
            server={"upstream_error_reward": 0.0, "upstream_timeout_s": 5.0},
        )
        text = path.read_text().replace('admin_keys = ["admin-key"]', 'admin_keys = ["admin-key"]\nclient_keys = ["client-key"]')
        path.write_text(text)
        config = load_router_config(path)
        with serve_in_thread(create_app(config)) as router_url:
            client = openai.OpenAI(base_url=router_url + "/v1", api_key="client-key", max_retries=0)
            messages = [{"role": "user", "content": "Write a haiku about routers."}]
            # A dead upstream: 502 in OpenAI's error shape, and the configured failure reward is recorded.
            with pytest.raises(openai.InternalServerError) as failed:
                client.chat.completions.create(model="gone", messages=messages)
            assert failed.value.status_code == 502
            gone_id = failed.value.response.headers["x-genbandit-decision-id"]
            assert httpx.get(f"{router_url}/v1/decisions/{gone_id}", headers=READ).json()["reward"] == 0.0

            # Routed: the untried models come first, so the answer is alpha's or beta's, unchanged.
            raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages)
            chosen, decision_id = raw.headers["x-genbandit-model"], raw.headers["x-genbandit-decision-id"]
            upstream_model = {"alpha": "alpha-7b", "beta": "beta-70b"}[chosen]
            assert raw.parse().choices[0].message.content == f"{chosen}:{upstream_model} heard: Write a haiku about routers."
            seen = (alpha if chosen == "alpha" else beta).state.seen[-1]
            assert seen["model"] == upstream_model and seen["messages"] == messages

            # Forced models, streaming: the chunks join to the upstream's text.
            with client.chat.completions.with_streaming_response.create(model="beta", messages=messages, stream=True) as resp:
                assert resp.headers["x-genbandit-model"] == "beta"
                streamed_id = resp.headers["x-genbandit-decision-id"]
                chunks = list(resp.parse())
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "beta:beta-70b heard: Write a haiku about routers."
            assert chunks[-1].choices[0].finish_reason == "stop"
            plain = client.chat.completions.create(model="alpha", messages=messages)
            assert plain.choices[0].message.content.startswith("alpha:alpha-7b heard:") and plain.usage.total_tokens == 8

            # Feedback on the routed answers teaches the policy.
            for did, reward in ((decision_id, 1.0), (streamed_id, 0.5)):
                r = httpx.post(router_url + "/v1/feedback", json={"decision_id": did, "reward": reward}, headers=FB)
                assert r.status_code == 200 and r.json()["status"] == "accepted"

            with pytest.raises(openai.NotFoundError):
                client.chat.completions.create(model="gpt-9", messages=messages)
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=router_url + "/v1", api_key="wrong", max_retries=0).chat.completions.create(model="auto", messages=messages)
            assert [m.id for m in client.models.list()] == ["auto", "alpha", "beta", "gone"]
            stats = httpx.get(router_url + "/v1/stats", headers=READ).json()
            assert stats["policy"] == "RFF-UCB" and stats["decisions"] == 4 and stats["policy_rounds"] == 3


def _sqlite_log(db):
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT decision_id, arm, value, context FROM feedback ORDER BY seq").fetchall()
    return {r[0]: (r[1], r[2], np.frombuffer(r[3], dtype="<f8")) for r in rows}


def _fold(entries, n_arms, dim):
    """What DisjointLinUCB's b vector must be after learning ``entries`` (arm, value, context)."""
    b = np.zeros((n_arms, dim))
    for arm, value, ctx in entries:
        b[arm] += value * ctx
    return b


def _load(url, n_pairs, n_workers, seed, acked, stop=None):
    """``n_pairs`` route + feedback pairs from ``n_workers`` threads; acknowledged feedback goes into ``acked``."""
    lock = threading.Lock()

    def worker(w):
        rng = np.random.default_rng([seed, w])
        with httpx.Client(base_url=url, timeout=10) as c:
            for _ in range(n_pairs // n_workers):
                if stop is not None and stop.is_set():
                    return
                try:
                    x = rng.normal(size=8)
                    d = c.post("/v1/route", json={"embedding": x.tolist()}).json()
                    reward = float(rng.uniform())
                    r = c.post("/v1/feedback", json={"decision_id": d["decision_id"], "reward": reward}, headers=FB)
                except httpx.HTTPError:
                    return  # the server is gone
                if r.status_code == 200:
                    with lock:
                        acked[d["decision_id"]] = (d["model"], reward, x / np.linalg.norm(x))

    with ThreadPoolExecutor(n_workers) as pool:
        list(pool.map(worker, range(n_workers)))


def test_concurrent_load_then_kill9_loses_nothing_acknowledged(tmp_path):
    db = str(tmp_path / "state.db")
    models = [{"name": f"m{i}", "base_url": "http://127.0.0.1:9/v1"} for i in range(3)]
    path = write_config(tmp_path / "router.toml", models=models, embedding={"kind": "none", "dim": 8},
                        store={"path": db, "snapshot_every": 40})
    names = [m["name"] for m in models]
    acked: dict = {}
    with router_process(path) as (url, proc):
        # 1. Bounded concurrent load: every acknowledged feedback is in the policy state.
        start = time.monotonic()
        _load(url, 160, 8, 0, acked)
        assert len(acked) == 160 and time.monotonic() - start < 60
        state = httpx.get(url + "/v1/admin/state", headers=ADMIN).json()["state"]["state"]
        from genbandit.core.serialization import from_jsonable

        learned = from_jsonable(state)
        assert learned["_t"] == 160 and learned["_n"].sum() == 160
        expected = _fold([(names.index(m), r, x) for m, r, x in acked.values()], 3, 8)
        np.testing.assert_allclose(learned["_b"][0], expected, atol=1e-9)

        # 2. kill -9 in the middle of more load.
        stop = threading.Event()
        acked2: dict = {}
        loader = threading.Thread(target=_load, args=(url, 100000, 8, 1, acked2, stop))
        loader.start()
        wait_until(lambda: len(acked2) >= 60, timeout=60, what="acknowledged feedback under load")
        proc.kill()  # SIGKILL: no shutdown, no final snapshot
        proc.wait()
        loader.join(timeout=30)
        stop.set()
        assert not loader.is_alive() and len(acked2) >= 60

    log = _sqlite_log(db)
    lost = [d for d in list(acked) + list(acked2) if d not in log]
    assert lost == []
    with router_process(path) as (url, proc):
        state = from_jsonable(httpx.get(url + "/v1/admin/state", headers=ADMIN).json()["state"]["state"])
        assert state["_t"] == len(log)  # the restarted policy learned exactly the log ...
        np.testing.assert_allclose(state["_b"][0], _fold(log.values(), 3, 8), atol=1e-9)
        for did, (model, reward, _x) in list(acked2.items())[:20]:  # ... which holds every acknowledged feedback
            d = httpx.get(f"{url}/v1/decisions/{did}", headers=READ).json()
            assert (d["model"], d["reward"]) == (model, reward)
        stats = httpx.get(url + "/v1/stats", headers=READ).json()
        assert stats["feedback"] == len(log) and stats["policy_rounds"] == len(log)


@pytest.mark.parametrize(
    "policy, params",
    [("RFF-UCB", {"n_components": 50, "sigma": 1.0, "eta": 1.0, "seed": 0}), ("router_helpers:DisjointLinUCB", {"beta": 0.1, "seed": 0})],
    ids=["RFF-UCB", "user-policy"],
)
def test_two_replicas_on_one_redis_share_the_policy(tmp_path, policy, params):
    x = [1.0, 0.0]
    with redis_server() as redis_url:
        cfgs = []
        for name in ("a", "b"):
            cfgs.append(write_config(
                tmp_path / f"{name}.toml",
                models=[{"name": "good", "base_url": "http://127.0.0.1:9/v1"}, {"name": "bad", "base_url": "http://127.0.0.1:9/v1"}],
                policy=policy,
                params=params,
                embedding={"kind": "none", "dim": 2},
                store={"kind": "redis", "url": redis_url, "prefix": "test-router"},
            ))
        with router_process(cfgs[0]) as (url_a, _), router_process(cfgs[1]) as (url_b, _):
            with httpx.Client(timeout=10) as c:
                route = lambda url: c.post(url + "/v1/route", json={"embedding": x}).json()  # noqa: E731
                before = [route(url_b)["model"] for _ in range(20)]
                assert set(before) == {"good", "bad"}  # nothing learned: untried arms tie, broken at random
                # Feedback only to replica A: "good" earns 1, "bad" earns 0.
                given = 0
                while given < 10:
                    d = route(url_a)
                    reward = 1.0 if d["model"] == "good" else 0.0
                    assert c.post(url_a + "/v1/feedback", json={"decision_id": d["decision_id"], "reward": reward}, headers=FB).status_code == 200
                    given += 1
                after = [route(url_b)["model"] for _ in range(20)]
                assert after == ["good"] * 20
                # Replica B also takes feedback on A's decisions and sees A's counters; both hold one state.
                d = route(url_a)
                assert c.post(url_b + "/v1/feedback", json={"decision_id": d["decision_id"], "reward": 1.0}, headers=FB).json()["status"] == "accepted"
                assert c.post(url_a + "/v1/feedback", json={"decision_id": d["decision_id"], "reward": 1.0}, headers=FB).json()["status"] == "duplicate"
                sa, sb = (c.get(u + "/v1/admin/state", headers=ADMIN).json() for u in (url_a, url_b))
                assert sa["log_position"] == sb["log_position"] and sa["state"]["state"] == sb["state"]["state"]
                stats = c.get(url_b + "/v1/stats", headers=READ).json()
                assert stats["store"] == "redis" and stats["feedback"] == 11 and stats["decisions"] == 51
