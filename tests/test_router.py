"""The router in process: config, learning, idempotent feedback, bad input, restart from the log, metrics, CLI."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")
pytest.importorskip("redis")

import contextlib
import json
import subprocess
import sys
import time

import numpy as np
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from router_helpers import ROOT, DisjointLinUCB, write_config

from genbandit.core.validation import InvalidParameterError
from genbandit.router import Router, create_app, load_router_config
from genbandit.router.errors import DecisionExpired, FeedbackConflict
from genbandit.router.store import SQLiteStore

MODELS = [{"name": "small", "base_url": "http://127.0.0.1:9/v1", "cost": 0.1}, {"name": "large", "base_url": "http://127.0.0.1:9/v1", "cost": 1.0}]
FB = {"x-api-key": "fb-key"}
READ = {"x-api-key": "read-key"}
ADMIN = {"authorization": "Bearer admin-key"}


def make_config(tmp_path, **kw):
    kw.setdefault("models", MODELS)
    return load_router_config(write_config(tmp_path / "router.toml", **{"store": {"path": str(tmp_path / "state.db")}, **kw}))


def learned(state: dict) -> dict:
    """The learned arrays of a state dict (the RNG and round counter aside)."""
    return {k: v for k, v in state["state"].items() if k not in ("_t",)}


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    "raw, message",
    [
        ({"models": [{"name": "a", "base_url": "http://x"}]}, "at least two models"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "a", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}}, "unique"),
        ({"models": [{"name": "auto", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}}, "asks the router"),
        ({"models": [{"name": "a", "base_url": "ftp://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}}, "http"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}]}, "feedback or admin key"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "stor": {}}, "unknown key"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "server": {"reward_range": [1, 0]}}, "low < high"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "policy": {"params": {"n_arms": 3}}}, "fills them in"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "embedding": {"kind": "hashing"}}, "dim"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "embedding": {"threads": 0}}, r"\[embedding\] threads: must be an integer >= 1"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "embedding": {"backend": "tvm"}}, r"\[embedding\] backend: must be 'auto', 'onnx' or 'torch'"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "embedding": {"backend": "onnx", "precision": "bfloat16"}}, r"\[embedding\] precision: must be 'float32', 'bfloat16' \(torch backend\) or 'int8'"),
        ({"models": [{"name": "a", "base_url": "http://x"}, {"name": "b", "base_url": "http://y"}], "auth": {"admin_keys": ["k"]}, "embedding": {"backend": "torch", "precision": "int8"}}, r"\[embedding\] precision: must be"),
    ],
)
def test_config_errors_are_clear(raw, message):
    with pytest.raises(InvalidParameterError, match=message):
        load_router_config(raw)


def test_non_contextual_policy_and_changed_config_are_refused(tmp_path):
    with pytest.raises(InvalidParameterError, match="contextual"):
        Router(make_config(tmp_path, policy="UCB1"))
    Router(make_config(tmp_path)).close()
    with pytest.raises(InvalidParameterError, match=r"different policy or configuration \(differing: beta\)"):
        Router(make_config(tmp_path, params={"beta": 2.0}))


# ------------------------------------------------------------------------------------------ learning
def test_routes_by_prompt_after_feedback(tmp_path):
    """Planted: arm 0 is right for context e1, arm 1 for e2 (a single best model would be wrong half the time)."""
    router = Router(make_config(tmp_path, params={"beta": 0.3, "seed": 0}, embedding={"kind": "none", "dim": 2}))
    e = {0: [1.0, 0.0], 1: [0.0, 1.0]}
    truth = {0: [1.0, 0.0], 1: [0.0, 1.0]}  # truth[context][arm]
    given = np.zeros((2, 2))  # hand-kept sum of reward * context per arm
    for t in range(40):
        c = t % 2
        d = router.route(embedding=e[c])
        out = router.feedback(d.id, truth[c][d.arm])
        assert out["status"] == "accepted" and out["model"] == ["small", "large"][d.arm]
        given[d.arm] += truth[c][d.arm] * np.array(e[c])
    picks = {c: [router.route(embedding=e[c]).arm for _ in range(10)] for c in (0, 1)}
    assert picks == {0: [0] * 10, 1: [1] * 10}
    # The policy learned exactly the log: b_arm = sum of reward * context (cost_weight is 0 here).
    np.testing.assert_allclose(router.policy._b[0], given, atol=1e-12)
    assert router.policy.t == 40 and router.store.log_length() == 40
    stats = router.stats()
    assert stats["decisions"] == 60 and stats["feedback"] == 40 and len(stats["recent"]) == 50
    router.close()


def test_cost_weight_changes_what_the_policy_learns(tmp_path):
    router = Router(make_config(tmp_path, server={"cost_weight": 0.5, "reward_range": [-1.0, 1.0]}, embedding={"kind": "none", "dim": 2}))
    d = router.route(embedding=[3.0, 4.0], model="large")  # forced, still learned from
    assert d.forced and d.arm == 1 and np.allclose(d.context, [0.6, 0.8])
    router.feedback(d.id, 0.9)
    np.testing.assert_allclose(router.policy._b[0, 1], (0.9 - 0.5 * 1.0) * np.array([0.6, 0.8]))
    assert router.stats()["models"][1]["mean_reward"] == pytest.approx(0.9)  # stats show the reward as given
    router.close()


def test_feedback_is_idempotent_and_conflicts_change_nothing(tmp_path):
    router = Router(make_config(tmp_path))
    d = router.route(embedding=[1, 2, 3, 4])
    assert router.feedback(d.id, 0.25)["status"] == "accepted"
    before = router.policy.state_dict()
    assert router.feedback(d.id, 0.25)["status"] == "duplicate"
    with pytest.raises(FeedbackConflict):
        router.feedback(d.id, 0.75)
    assert router.policy.state_dict() == before and router.policy.t == 1 and router.store.log_length() == 1
    assert {i: c["feedback"] for i, c in router.store.counters().items()} == {d.arm: 1}
    router.close()


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"])
def test_racing_feedback_for_one_decision_counts_once(tmp_path, store_kind):
    """16 threads send feedback for the same decisions at once (group commit batches them): one wins per decision."""
    from concurrent.futures import ThreadPoolExecutor

    from router_helpers import redis_server

    with contextlib.ExitStack() as stack:
        store = {"path": str(tmp_path / "s.db")}
        if store_kind == "redis":
            store = {"kind": "redis", "url": stack.enter_context(redis_server()), "prefix": "race"}
        router = Router(make_config(tmp_path, store=store))
        ids = [router.route(embedding=[1, 0, 0, i + 1]).id for i in range(8)]

        def send(job):
            did, reward = job
            try:
                return router.feedback(did, reward)["status"]
            except FeedbackConflict:
                return "conflict"

        jobs = [(did, 0.5) for did in ids for _ in range(4)] + [(did, 0.25) for did in ids for _ in range(2)]
        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(send, jobs))
        assert outcomes.count("accepted") == 8
        assert outcomes.count("duplicate") + outcomes.count("conflict") == len(jobs) - 8
        assert router.policy.t == 8 and router.store.log_length() == 8 and sum(c["feedback"] for c in router.store.counters().values()) == 8
        router.close()


def test_expired_decisions_are_refused(tmp_path):
    now = [1000.0]
    router = Router(make_config(tmp_path, server={"decision_ttl_s": 60.0}), clock=lambda: now[0])
    d = router.route(embedding=[1, 0, 0, 0])
    now[0] += 61.0
    with pytest.raises(DecisionExpired):
        router.feedback(d.id, 1.0)
    assert router.policy.t == 0 and router.store.log_length() == 0
    router.close()


def test_default_policy_is_evidence_thompson_and_learns_by_prompt(tmp_path):
    """The default policy (no [policy] table): EvidenceThompson over real prompt embeddings' stand-in, two planted prompt kinds."""
    path = write_config(tmp_path / "router.toml", models=MODELS, embedding={"kind": "none", "dim": 2}, store={"path": str(tmp_path / "s.db")})
    path.write_text(path.read_text().replace('[policy]\nname = "router_helpers:DisjointLinUCB"\nparams = {  }\n', ""))
    config = load_router_config(path)
    assert config.policy.name == "evidence-thompson" and config.policy.params == {}
    router = Router(config)
    assert type(router.policy).name == "evidence-thompson" and router.policy.n_features == 2 and router.policy.n_arms == 2
    x, z = [1.0, 0.0], [0.0, 1.0]
    for t in range(60):
        ctx = (x, z)[t % 2]
        d = router.route(embedding=ctx)
        router.feedback(d.id, 1.0 if d.arm == t % 2 else 0.0)
    assert [router.route(embedding=x).arm for _ in range(5)] == [0] * 5
    assert [router.route(embedding=z).arm for _ in range(5)] == [1] * 5
    live = router.policy.state_dict()
    router.store.close()  # crash
    again = Router(config)
    assert learned(again.policy.state_dict()) == learned(live) and again.policy.t == 60
    again.close()


# ------------------------------------------------------------------------------------------ persistence
def test_restart_replays_the_log_after_the_snapshot(tmp_path):
    """A crash (no final snapshot) loses nothing: snapshot + log replay rebuild the same state."""
    cfg = make_config(tmp_path, store={"path": str(tmp_path / "state.db"), "snapshot_every": 7}, params={"seed": 3})
    router = Router(cfg)
    rng = np.random.default_rng(0)
    for _ in range(30):
        d = router.route(embedding=rng.normal(size=4).tolist())
        router.feedback(d.id, float(rng.uniform()))
    live = router.policy.state_dict()
    router.store.close()  # a crash: no final snapshot
    with SQLiteStore(str(tmp_path / "state.db"))._reader() as conn:
        assert conn.execute("SELECT cursor FROM snapshot").fetchone()[0] == 28  # snapshots at 7, 14, 21, 28
    again = Router(cfg)
    assert again.policy.t == 30
    assert learned(again.policy.state_dict()) == learned(live)
    again.close()


# ------------------------------------------------------------------------------------------ HTTP, bad input
@pytest.fixture
def client(tmp_path):
    now = [1000.0]
    cfg = make_config(
        tmp_path,
        embedding={"kind": "hashing", "dim": 16},
        server={"max_prompt_chars": 200, "max_body_bytes": 4000, "decision_ttl_s": 60.0},
    )
    router = Router(cfg, clock=lambda: now[0])
    with TestClient(create_app(cfg, router=router)) as c:
        c.now = now
        yield c
    router.close()


def _state(c):
    return c.get("/v1/admin/state", headers=ADMIN).json(), c.get("/v1/stats", headers=READ).json()


def test_http_round_trip(client):
    r = client.post("/v1/route", json={"prompt": "sort a list in python"})
    assert r.status_code == 200 and r.headers["x-genbandit-decision-id"] == r.json()["decision_id"]
    d = r.json()
    assert client.post("/v1/feedback", json={"decision_id": d["decision_id"], "reward": 1}, headers=FB).json()["status"] == "accepted"
    assert client.post("/v1/feedback", json={"decision_id": d["decision_id"], "reward": 1.0}, headers=FB).json()["status"] == "duplicate"
    assert client.get(f"/v1/decisions/{d['decision_id']}", headers=READ).json()["reward"] == 1.0
    r = client.post("/v1/route", json={"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "model": "large"})
    assert r.json()["model"] == "large" and r.json()["forced"] is True
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["auto", "small", "large"]
    stats = client.get("/v1/stats", headers=READ).json()
    assert stats["decisions"] == 2 and stats["feedback"] == 1 and stats["policy_rounds"] == 1
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.post("/v1/admin/snapshot", headers=ADMIN).json() == {"saved": True}


BAD_INPUTS = [
    # (name, method, path, kwargs, status)
    ("malformed JSON", "post", "/v1/feedback", {"content": b'{"decision_id": "x", ', "headers": FB}, 400),
    ("not an object", "post", "/v1/feedback", {"content": b"[1, 2]", "headers": FB}, 400),
    ("no key", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": 1.0}}, 401),
    ("wrong key", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": 1.0}, "headers": {"x-api-key": "nope"}}, 401),
    ("client key for stats", "get", "/v1/stats", {"headers": {"x-api-key": "nope"}}, 401),
    ("feedback key for stats", "get", "/v1/stats", {"headers": FB}, 401),
    ("read key for feedback", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": 1.0}, "headers": READ}, 401),
    ("feedback key for admin", "get", "/v1/admin/state", {"headers": FB}, 401),
    ("unknown decision", "post", "/v1/feedback", {"json": {"decision_id": "0" * 32, "reward": 1.0}, "headers": FB}, 404),
    ("expired decision", "post", "/v1/feedback", {"json": {"decision_id": "OLD", "reward": 1.0}, "headers": FB}, 410),
    ("NaN reward (not JSON)", "post", "/v1/feedback", {"content": b'{"decision_id": "DID", "reward": NaN}', "headers": FB}, 400),
    ("infinite reward (not JSON)", "post", "/v1/feedback", {"content": b'{"decision_id": "DID", "reward": Infinity}', "headers": FB}, 400),
    ("reward above range", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": 1.5}, "headers": FB}, 422),
    ("reward below range", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": -0.1}, "headers": FB}, 422),
    ("reward as text", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": "0.5"}, "headers": FB}, 422),
    ("reward as bool", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": True}, "headers": FB}, 422),
    ("no reward", "post", "/v1/feedback", {"json": {"decision_id": "DID"}, "headers": FB}, 422),
    ("extra field", "post", "/v1/feedback", {"json": {"decision_id": "DID", "reward": 1.0, "arm": 0}, "headers": FB}, 422),
    ("conflicting reward", "post", "/v1/feedback", {"json": {"decision_id": "DONE", "reward": 0.0}, "headers": FB}, 409),
    ("oversized prompt", "post", "/v1/route", {"json": {"prompt": "x" * 201}}, 413),
    ("oversized body", "post", "/v1/route", {"json": {"prompt": "x", "pad": "y" * 5000}}, 413),
    ("oversized chat prompt", "post", "/v1/chat/completions", {"json": {"model": "auto", "messages": [{"role": "user", "content": "x" * 201}]}}, 413),
    ("unknown model (route)", "post", "/v1/route", {"json": {"prompt": "hi", "model": "gpt-9"}}, 404),
    ("unknown model (chat)", "post", "/v1/chat/completions", {"json": {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}}, 404),
    ("model not a string", "post", "/v1/route", {"json": {"prompt": "hi", "model": ["small"]}}, 404),
    ("empty prompt", "post", "/v1/route", {"json": {"prompt": "   "}}, 422),
    ("embedding of the wrong size", "post", "/v1/route", {"json": {"embedding": [1.0, 2.0]}}, 422),
    ("NaN embedding (not JSON)", "post", "/v1/route", {"content": b'{"embedding": [NaN' + b", 0" * 15 + b"]}"}, 400),
    ("no messages", "post", "/v1/chat/completions", {"json": {"model": "auto"}}, 422),
    ("no user message", "post", "/v1/chat/completions", {"json": {"messages": [{"role": "system", "content": "hi"}]}}, 422),
]


def test_every_bad_input_gets_its_status_and_changes_nothing(client):
    old = client.post("/v1/route", json={"prompt": "an old prompt"}).json()["decision_id"]
    client.now[0] += 61.0  # `old` is now expired
    did = client.post("/v1/route", json={"prompt": "a fresh prompt"}).json()["decision_id"]
    done = client.post("/v1/route", json={"prompt": "a rewarded prompt"}).json()["decision_id"]
    assert client.post("/v1/feedback", json={"decision_id": done, "reward": 1.0}, headers=FB).status_code == 200
    before_state, before_stats = _state(client)
    ids = {"DID": did, "OLD": old, "DONE": done}
    for name, method, path, kwargs, status in BAD_INPUTS:
        if "json" in kwargs and "decision_id" in kwargs["json"]:
            kwargs = {**kwargs, "json": {**kwargs["json"], "decision_id": ids.get(kwargs["json"]["decision_id"], kwargs["json"]["decision_id"])}}
        if "content" in kwargs:
            kwargs = {**kwargs, "content": kwargs["content"].replace(b'"DID"', json.dumps(did).encode())}
        r = getattr(client, method)(path, **kwargs)
        assert r.status_code == status, (name, r.status_code, r.text)
        error = r.json()["error"]
        assert error["message"] and error["code"], name
        after_state, after_stats = _state(client)
        assert after_state == before_state, name
        assert {k: v for k, v in after_stats.items() if k != "recent"} == {k: v for k, v in before_stats.items() if k != "recent"}, name
        assert after_stats["recent"] == before_stats["recent"], name


def test_metrics_are_prometheus_text(client):
    for _ in range(3):
        d = client.post("/v1/route", json={"prompt": "hello", "model": "small"}).json()["decision_id"]
        client.post("/v1/feedback", json={"decision_id": d, "reward": 0.5}, headers=FB)
    client.post("/v1/feedback", json={"decision_id": d, "reward": 0.5}, headers=FB)
    r = client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(r.text) for s in fam.samples}
    assert samples[("genbandit_router_decisions_total", (("forced", "true"), ("model", "small")))] == 3
    assert samples[("genbandit_router_feedback_total", (("model", "small"), ("status", "accepted")))] == 3
    assert samples[("genbandit_router_feedback_total", (("model", "small"), ("status", "duplicate")))] == 1
    assert samples[("genbandit_router_reward_sum", (("model", "small"),))] == pytest.approx(1.5)
    assert samples[("genbandit_router_policy_rounds", ())] == 3
    assert samples[("genbandit_router_requests_total", (("endpoint", "/v1/route"), ("status", "200")))] == 3


# ------------------------------------------------------------------------------------------ CLI
def test_cli_serve_is_listed_and_needs_no_fastapi_until_it_runs(capsys):
    from genbandit.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out
    assert main(["serve", "--config", "/nonexistent.toml"]) == 2
    assert "No router config file" in capsys.readouterr().err
    code = "import sys, genbandit.router.cli, genbandit.router\nprint(sorted({'fastapi', 'uvicorn', 'httpx'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_user_policy_class_is_used(tmp_path):
    router = Router(make_config(tmp_path))
    assert isinstance(router.policy, DisjointLinUCB)
    router.close()


def test_batched_embedder_gives_every_caller_its_own_rows():
    from concurrent.futures import ThreadPoolExecutor

    from genbandit.router.embedders import HashingEmbedder, _Batched

    inner = HashingEmbedder(dim=32)
    batched = _Batched([inner], max_batch=5)
    texts = [[f"prompt number {i}", f"another {i} {i}"][: 1 + i % 2] for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(batched.encode, texts))
    for t, out in zip(texts, outs):
        np.testing.assert_allclose(out, inner.encode(t), rtol=0, atol=1e-12)


def test_batched_embedder_runs_a_batch_on_each_idle_copy():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from genbandit.router.embedders import HashingEmbedder, _Batched

    both_busy = threading.Barrier(2, timeout=10)  # a copy's first forward pass returns only once the other copy runs one too

    class Copy(HashingEmbedder):
        def __init__(self):
            super().__init__(dim=16)
            self.batches = []

        def encode(self, texts):
            self.batches.append(len(texts))
            if len(self.batches) == 1:
                both_busy.wait()
            return super().encode(texts)

    copies = [Copy(), Copy()]
    batched = _Batched(copies, window_s=0.0)
    texts = [[f"prompt {i}"] for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(batched.encode, texts))
    assert all(c.batches for c in copies) and sum(sum(c.batches) for c in copies) == 40
    for t, out in zip(texts, outs):
        np.testing.assert_allclose(out, copies[0].encode(t), rtol=0, atol=1e-12)


def test_batched_embedder_waits_for_callers_that_come_back_together():
    import threading

    from genbandit.router.embedders import HashingEmbedder, _Batched

    sizes, busy, release = [], threading.Event(), threading.Event()

    class Gated(HashingEmbedder):  # the first forward pass holds on until three more callers queue behind it
        def encode(self, texts):
            sizes.append(len(texts))
            if len(sizes) == 1:
                busy.set()
                release.wait(10)
            return super().encode(texts)

    batched = _Batched([Gated(dim=8)], window_s=5.0)

    def callers(n: int, gap_s: float) -> None:
        threads = [threading.Thread(target=batched.encode, args=([f"prompt {i}"],)) for i in range(n)]
        for t in threads:
            t.start()
            time.sleep(gap_s)
        if not release.is_set():
            while len(batched._queue) < n:
                time.sleep(0.001)
            release.set()
        for t in threads:
            t.join(10)

    first = threading.Thread(target=batched.encode, args=(["alone"],))
    first.start()
    assert busy.wait(10)
    callers(3, 0.0)  # queued while the model was busy: one batch of 3
    first.join(10)
    callers(3, 0.1)  # three callers back 0.1 s apart: the window (5 s) gathers them into one batch again
    assert sizes == [1, 3, 3]


def test_the_router_compiles_its_policy_before_the_first_request(tmp_path):
    """A fresh router (in a fresh process, so nothing was compiled before) has played a throwaway copy of the
    default policy: every compiled kernel is ready before the first request, and the served policy learned nothing."""
    config = tmp_path / "router.toml"
    write_config(config, models=MODELS, store={"path": str(tmp_path / "state.db")}, embedding={"kind": "none", "dim": 16}, policy="router-default")
    script = (
        "import sys; from genbandit.router.config import load_router_config; from genbandit.router.service import Router; "
        "from genbandit.policies import _routing_numba as k; "
        f"r = Router(load_router_config({str(config)!r})); "
        "names = ['prepare', 'decide', 'learn', 'override_laws', 'argmax_cells']; "  # the others run inside these
        "print(sorted(n for n in names if not getattr(k, n).signatures), int(r.policy.state_dict()['state']['_t'])); r.close()"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "0"]
