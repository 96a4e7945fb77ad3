"""No input gets a 500: hostile bodies, one client's bad prompt among good ones, a truncated body, Redis down."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("redis")
pytest.importorskip("fastapi")

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from router_helpers import redis_server, serve_in_thread, wait_until, write_config

from genbandit.router import Router, create_app, load_router_config
from genbandit.router.errors import InvalidValue
from genbandit.router.store import RedisStore

MODELS = [{"name": "small", "base_url": "http://127.0.0.1:9/v1"}, {"name": "large", "base_url": "http://127.0.0.1:9/v1"}]
FB = {"x-api-key": "fb-key"}
READ = {"x-api-key": "read-key"}
ADMIN = {"x-api-key": "admin-key"}
DIM = 16


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One router (hashing embedder, SQLite) for the whole module, with a decision awaiting feedback and one rewarded."""
    tmp = tmp_path_factory.mktemp("robust")
    cfg = load_router_config(write_config(tmp / "router.toml", models=MODELS, embedding={"kind": "hashing", "dim": DIM},
                                          store={"path": str(tmp / "state.db")}, server={"max_json_depth": 32}))
    router = Router(cfg)
    with TestClient(create_app(cfg, router=router)) as c:
        c.did = c.post("/v1/route", json={"prompt": "a fresh prompt"}).json()["decision_id"]
        done = c.post("/v1/route", json={"prompt": "a rewarded prompt"}).json()["decision_id"]
        assert c.post("/v1/feedback", json={"decision_id": done, "reward": 1.0}, headers=FB).status_code == 200
        yield c
    router.close()


def snapshot_of(c) -> tuple:
    """Everything a request could change: the policy state, the stats and the recent decisions."""
    return c.get("/v1/admin/state", headers=ADMIN).json(), c.get("/v1/stats", headers=READ).json()


def deep(n: int) -> bytes:
    return b'{"decision_id": "x", "reward": ' + b"[" * n + b"]" * n + b"}"


HOSTILE = [
    # (name, path, raw body, headers, status)
    ("nested 100,000 deep", "/v1/feedback", deep(100_000), FB, 400),
    ("nested 33 deep", "/v1/route", b'{"prompt": "hi", "x": ' + b"[" * 33 + b"]" * 33 + b"}", {}, 400),
    ("brackets inside strings are not nesting", "/v1/route", b'{"prompt": "' + b"[" * 100 + b'", "model": "nope"}', {}, 404),
    ("a 400-digit integer reward", "/v1/feedback", b'{"decision_id": "DID", "reward": 1' + b"0" * 399 + b"}", FB, 400),
    ("an embedding holding 10^400", "/v1/route", b'{"embedding": [1' + b"0" * 400 + b", 0" * (DIM - 1) + b"]}", {}, 400),
    ("a lone surrogate in the decision id", "/v1/feedback", b'{"decision_id": "\\ud800", "reward": 1.0}', FB, 400),
    ("a lone surrogate in a prompt", "/v1/route", b'{"prompt": "hello \\udc00 world"}', {}, 400),
    ("a lone surrogate in a chat message", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', {}, 400),
    ("an embedding of 1e300s (its norm overflows)", "/v1/route", json.dumps({"embedding": [1e300] * DIM}).encode(), {}, 422),
    ("an embedding of subnormals", "/v1/route", json.dumps({"embedding": [5e-324] * DIM}).encode(), {}, 422),
    ("a zero embedding", "/v1/route", json.dumps({"embedding": [0.0] * DIM}).encode(), {}, 422),
    ("invalid UTF-8", "/v1/route", b'{"prompt": "\xff\xfe"}', {}, 400),
    ("a truncated body", "/v1/feedback", b'{"decision_id": "DID", "rew', FB, 400),
    ("an empty body", "/v1/route", b"", {}, 400),
    ("a feedback field named by a lone surrogate", "/v1/feedback", b'{"decision_id": "DID", "reward": 1, "\\udfff": 1}', FB, 400),
    ("a decision id too long", "/v1/feedback", json.dumps({"decision_id": "a" * 129, "reward": 1.0}).encode(), FB, 422),
    ("a decision id with a control character", "/v1/feedback", json.dumps({"decision_id": "ab\ncd", "reward": 1.0}).encode(), FB, 422),
]


@pytest.mark.parametrize("name, path, body, headers, status", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_get_a_4xx_in_openai_shape_and_change_nothing(served, name, path, body, headers, status):
    before = snapshot_of(served)
    r = served.post(path, content=body.replace(b"DID", served.did.encode()), headers={"content-type": "application/json", **headers})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["code"] and error["type"]
    assert snapshot_of(served) == before


@pytest.mark.parametrize(
    "method, path, headers, status, code",
    [
        ("get", "/nowhere", {}, 404, "not_found"),
        ("get", "/v1/route", {}, 405, "method_not_allowed"),
        ("delete", "/v1/stats", READ, 405, "method_not_allowed"),
        ("get", "/v1/decisions/%ED%A0%80", READ, 404, "decision_not_found"),
        ("get", "/v1/decisions/" + "f" * 200, READ, 404, "decision_not_found"),
        ("get", "/openapi.json", READ, 404, "not_found"),  # docs are off by default
        ("get", "/docs", READ, 404, "not_found"),
    ],
)
def test_unknown_paths_and_methods_are_openai_errors(served, method, path, headers, status, code):
    r = getattr(served, method)(path, headers=headers)
    assert r.status_code == status and r.json()["error"]["code"] == code


def test_degenerate_embeddings_are_refused_in_process(tmp_path):
    cfg = load_router_config(write_config(tmp_path / "r.toml", models=MODELS, embedding={"kind": "none", "dim": 3}, store={"path": str(tmp_path / "s.db")}))
    router = Router(cfg)
    for bad in ([1e300] * 3, [5e-324] * 3, [10**400, 0, 0], [0, 0, 0], [float("nan"), 1, 1], [True, 1, 1]):
        with pytest.raises(InvalidValue):
            router.route(embedding=bad)
    for bad_reward in (10**400, float("inf"), "1", None):
        with pytest.raises(InvalidValue):
            router.feedback("0" * 32, bad_reward)
    with pytest.raises(InvalidValue):
        router.feedback("\ud800", 1.0)
    np.testing.assert_allclose(router.route(embedding=[1e-150, 1e-150, 0]).context, [2**-0.5, 2**-0.5, 0])  # tiny, its norm normal: learned
    assert router.store.log_length() == 0 and router.stats()["decisions"] == 1
    router.close()


class _Exploding:
    """An embedding model that fails on texts holding 'BOOM' (a stand-in for any per-text failure)."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        if any("BOOM" in t for t in texts):
            raise ValueError("cannot embed this text")
        return np.array([[1.0 + len(t) % 3, 1.0, 0.5] for t in texts])


def test_one_clients_bad_prompt_fails_no_other_request_in_its_batch(tmp_path):
    from genbandit.router.embedders import _Batched

    cfg = load_router_config(write_config(tmp_path / "r.toml", models=MODELS, embedding={"kind": "none", "dim": 3}, store={"path": str(tmp_path / "s.db")}))
    inner = _Exploding()
    router = Router(cfg, embedder=_Batched([inner]))
    with serve_in_thread(create_app(cfg, router=router)) as url:
        # 60 bad prompts (a lone surrogate, or one the model fails on) among 7 clients' good ones, all at once.
        bodies = [{"prompt": f"good prompt {i}"} for i in range(175)]
        bodies += [{"prompt": "BOOM " * (i % 3 + 1)} for i in range(30)] + [{"prompt": "bad \ud800"} for _ in range(30)]
        rng = np.random.default_rng(0)
        rng.shuffle(bodies)

        def post(body):
            data = json.dumps(body).encode()  # json.dumps writes the lone surrogate as \ud800, as a hostile client would
            with httpx.Client(base_url=url, timeout=30) as c:
                return body["prompt"], c.post("/v1/route", content=data, headers={"content-type": "application/json"}).status_code

        with ThreadPoolExecutor(67) as pool:
            outcomes = list(pool.map(post, bodies))
    router.close()
    by_kind = {kind: [status for prompt, status in outcomes if prompt.startswith(kind)] for kind in ("good", "BOOM", "bad")}
    assert by_kind == {"good": [200] * 175, "BOOM": [422] * 30, "bad": [400] * 30}


def test_a_body_cut_midway_is_a_400_not_a_server_error(tmp_path):
    cfg = load_router_config(write_config(tmp_path / "r.toml", models=MODELS, store={"path": str(tmp_path / "s.db")}))
    with serve_in_thread(create_app(cfg)) as url:
        port = int(url.rsplit(":", 1)[1])
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"POST /v1/route HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"embedding\": [1, 2")
                s.shutdown(socket.SHUT_WR)  # the client goes away mid-body
                s.recv(4096)
        metrics = httpx.get(url + "/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
    assert samples[("genbandit_router_requests_total", (("endpoint", "/v1/route"), ("status", "400")))] == 3
    assert not [k for k in samples if k[0] == "genbandit_router_requests_total" and dict(k[1])["status"].startswith("5")]


def test_redis_down_gives_503_in_openai_shape_and_recovers(tmp_path):
    with redis_server() as redis_url:
        cfg = load_router_config(write_config(tmp_path / "r.toml", models=MODELS, store={"kind": "redis", "url": redis_url, "prefix": "outage"}))
        router = Router(cfg, store=RedisStore(redis_url, "outage", timeout_s=0.3))
        with TestClient(create_app(cfg, router=router)) as c:
            did = c.post("/v1/route", json={"embedding": [1, 0, 0, 0]}).json()["decision_id"]
            redis.Redis.from_url(redis_url).execute_command("CLIENT", "PAUSE", 3000, "ALL")  # Redis stops answering ...
            for method, path, kwargs in [("post", "/v1/route", {"json": {"embedding": [1, 0, 0, 0]}}),
                                         ("post", "/v1/feedback", {"json": {"decision_id": did, "reward": 1.0}, "headers": FB}),
                                         ("get", "/v1/stats", {"headers": READ}), ("get", "/healthz", {})]:
                r = getattr(c, method)(path, **kwargs)
                assert r.status_code == 503, (path, r.text)
                assert path == "/healthz" or r.json()["error"]["code"] == "store_unavailable"
        # ... and once it answers again, so does the router.
            wait_until(lambda: c.get("/healthz").status_code == 200, timeout=10, what="redis back")
            assert c.post("/v1/feedback", json={"decision_id": did, "reward": 1.0}, headers=FB).json()["status"] == "accepted"
        router.close()


# ------------------------------------------------------------------------------------------ property-based
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
FIELDS = st.sampled_from(["prompt", "embedding", "messages", "model", "decision_id", "reward", "stream"])
BODIES = st.one_of(JSON, st.dictionaries(FIELDS, JSON, max_size=4))
ENDPOINTS = st.sampled_from([("post", "/v1/route", {}), ("post", "/v1/feedback", FB), ("post", "/v1/chat/completions", {}),
                             ("post", "/v1/admin/snapshot", ADMIN), ("get", "/v1/stats", READ), ("get", "/v1/models", {}), ("get", "/healthz", {}),
                             ("get", "/v1/decisions/x", READ), ("post", "/nowhere", {})])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(endpoint=ENDPOINTS, body=BODIES, surrogate=st.booleans())
def test_arbitrary_json_never_gets_a_5xx_nor_changes_state(served, endpoint, body, surrogate):
    method, path, headers = endpoint
    before = snapshot_of(served)
    raw = json.dumps(body, allow_nan=False).encode()
    if surrogate:
        raw = raw.replace(b'"', b'"\\ud800', 1)
    r = served.request(method.upper(), path, content=raw, headers={"content-type": "application/json", **headers})
    assert r.status_code < 500 or (path == "/v1/chat/completions" and r.status_code == 502), r.text  # 502: its upstream is down
    if r.status_code >= 400:
        assert r.json()["error"]["code"]
    if path != "/v1/route" and path != "/v1/chat/completions" or r.status_code >= 400:
        assert snapshot_of(served) == before
