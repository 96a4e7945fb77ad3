"""Bounded resources (idle and slow connections, a connection cap, a pending-decision cap) and the key scheme."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import contextlib
import socket

import httpx
from fastapi import APIRouter, Depends
from router_helpers import redis_server, serve_in_thread, write_config

from genbandit.router import Router, create_app, load_router_config
from genbandit.router.app import require_read_access
from genbandit.router.errors import TooManyPending

MODELS = [{"name": "small", "base_url": "http://127.0.0.1:9/v1"}, {"name": "large", "base_url": "http://127.0.0.1:9/v1"}]
FB, READ, ADMIN = {"x-api-key": "fb-key"}, {"x-api-key": "read-key"}, {"x-api-key": "admin-key"}


def config(tmp_path, store=None, **server):
    return load_router_config(write_config(tmp_path / "router.toml", models=MODELS, store=store or {"path": str(tmp_path / "s.db")}, server=server))


def closed_by_server(sock: socket.socket, wait_s: float = 10.0) -> bool:
    """Whether the server closes ``sock`` (reads EOF) within ``wait_s``, reading whatever it answers before."""
    sock.settimeout(wait_s)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def test_idle_slow_and_surplus_connections_are_closed(tmp_path):
    cfg = config(tmp_path, header_timeout_s=0.5, keep_alive_s=0.5, body_timeout_s=0.5, max_connections=4)
    with serve_in_thread(create_app(cfg), router_config=cfg) as url:
        port = int(url.rsplit(":", 1)[1])
        connect = lambda: socket.create_connection(("127.0.0.1", port))  # noqa: E731
        with contextlib.ExitStack() as stack:
            idle = stack.enter_context(connect())  # sends nothing
            slow_head = stack.enter_context(connect())
            slow_head.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # ... and never ends its head
            slow_body = stack.enter_context(connect())
            slow_body.sendall(b"POST /v1/route HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"embedding\"")
            kept = stack.enter_context(connect())
            kept.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            # A fifth connection is over max_connections = 4: closed at once, answered nothing.
            surplus = stack.enter_context(connect())
            surplus.settimeout(5)
            assert surplus.recv(4096) == b""
            assert closed_by_server(idle) and closed_by_server(slow_head)
            slow_body.settimeout(5)
            answer = slow_body.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer
            assert closed_by_server(slow_body)
            assert closed_by_server(kept)  # answered, then idle past keep-alive
        # The slots are free again.
        assert httpx.get(url + "/healthz").status_code == 200


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"])
def test_pending_decisions_are_capped_with_429(tmp_path, store_kind):
    with contextlib.ExitStack() as stack:
        store = {"kind": "redis", "url": stack.enter_context(redis_server()), "prefix": "cap"} if store_kind == "redis" else None
        now = [1000.0]
        cfg = config(tmp_path, store=store, max_pending_decisions=3, decision_ttl_s=60.0)
        router = Router(cfg, clock=lambda: now[0])
        ids = [router.route(embedding=[1, 0, 0, 0]).id for _ in range(3)]
        with pytest.raises(TooManyPending, match="3 decisions are waiting for feedback"):
            router.route(embedding=[1, 0, 0, 0])
        router.feedback(ids[0], 1.0)  # feedback frees a slot ...
        ids.append(router.route(embedding=[1, 0, 0, 0]).id)
        with pytest.raises(TooManyPending):
            router.route(embedding=[1, 0, 0, 0])
        now[0] += 61.0  # ... and so does expiry
        router.route(embedding=[1, 0, 0, 0])
        assert router.stats()["decisions"] == 5
        router.close()
        # After a restart the count is the same (SQLite reloads it from the file; Redis keeps it).
        router = Router(cfg, clock=lambda: now[0])
        router.route(embedding=[1, 0, 0, 0])
        router.route(embedding=[1, 0, 0, 0])
        with pytest.raises(TooManyPending):
            router.route(embedding=[1, 0, 0, 0])
        router.close()


def test_pending_cap_answers_429_over_http(tmp_path):
    cfg = config(tmp_path, max_pending_decisions=2)
    with serve_in_thread(create_app(cfg), router_config=cfg) as url, httpx.Client(base_url=url) as c:
        assert [c.post("/v1/route", json={"embedding": [1, 0, 0, 0]}).status_code for _ in range(2)] == [200, 200]
        r = c.post("/v1/route", json={"embedding": [1, 0, 0, 0]})
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_pending_decisions"


def test_each_key_opens_its_role_and_admin_opens_all(tmp_path):
    cfg = config(tmp_path, docs=True)
    app = create_app(cfg)
    page = APIRouter()

    @page.get("/dashboard-like")
    def dashboard_like():
        return {"ok": True}

    app.include_router(page, dependencies=[Depends(require_read_access)])
    with serve_in_thread(app, router_config=cfg) as url, httpx.Client(base_url=url) as c:
        did = c.post("/v1/route", json={"embedding": [1, 0, 0, 0]}).json()["decision_id"]
        reads = [("get", "/v1/stats", None), ("get", f"/v1/decisions/{did}", None), ("get", "/openapi.json", None), ("get", "/dashboard-like", None)]
        for method, path, body in reads:
            assert c.request(method, path).status_code == 401, path
            assert c.request(method, path, headers=FB).status_code == 401, path
            assert c.request(method, path, headers=READ).status_code == 200, path
            assert c.request(method, path, headers=ADMIN).status_code == 200, path
        assert c.post("/v1/feedback", json={"decision_id": did, "reward": 1.0}, headers=READ).status_code == 401
        assert c.get("/v1/admin/state", headers=READ).status_code == 401
        assert c.post("/v1/feedback", json={"decision_id": did, "reward": 1.0}, headers=ADMIN).json()["status"] == "accepted"
        spec = c.get("/openapi.json", headers=READ).json()
        assert {"/v1/route", "/v1/feedback", "/v1/stats", "/v1/decisions/{decision_id}", "/dashboard-like"} <= set(spec["paths"])
        assert c.get("/v1/stats", headers={"authorization": "Bearer read-key"}).json()["feedback"] == 1
