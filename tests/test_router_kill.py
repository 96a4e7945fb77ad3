"""kill -9 under load, several times: no acknowledged feedback is ever lost (SQLite; a router replica on Redis with append-only)."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("redis")
pytest.importorskip("fastapi")

import asyncio
import json
import os
import signal
import sqlite3

import httpx
import numpy as np
import redis
from router_helpers import RedisServer, router_process, write_config

from genbandit.core.serialization import from_jsonable

FB = {"x-api-key": "fb-key"}
ADMIN = {"x-api-key": "admin-key"}
MODELS = [{"name": f"m{i}", "base_url": "http://127.0.0.1:9/v1"} for i in range(3)]
IN_FLIGHT = 300  # feedbacks sent at once in each round
KILL_AFTER = 40  # acknowledgements before the kill


async def _post(port: int, path: str, body: dict, headers: dict) -> tuple[int, dict] | None:
    """One POST on its own connection; None when the server went away before answering in full."""
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\n{head}content-length: {len(data)}\r\n\r\n".encode() + data)
        raw = await reader.read()
        writer.close()
    except OSError:
        return None
    status_line, _, rest = raw.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    if not status_line.startswith(b"HTTP/1.1 "):
        return None
    try:
        return int(status_line[9:12]), json.loads(payload)
    except ValueError:  # cut mid-answer
        return None


async def _round(port: int, pid: int, seed: int, kill_redis=None) -> tuple[list[str], int]:
    """Route IN_FLIGHT decisions, then send their feedback all at once and kill -9 after KILL_AFTER acknowledgements.

    Returns the acknowledged decision ids, and how many feedbacks were sent.
    """
    rng = np.random.default_rng(seed)
    sem = asyncio.Semaphore(32)

    async def route():
        async with sem:
            return await _post(port, "/v1/route", {"embedding": rng.normal(size=8).tolist()}, {})

    routed = await asyncio.gather(*(route() for _ in range(IN_FLIGHT)))
    ids = [out[1]["decision_id"] for out in routed if out and out[0] == 200]
    assert len(ids) == IN_FLIGHT
    acked: list[str] = []

    async def feedback(did: str):
        out = await _post(port, "/v1/feedback", {"decision_id": did, "reward": float(rng.uniform())}, FB)
        if out is not None and out[0] == 200 and out[1]["status"] == "accepted":
            acked.append(did)
            if len(acked) == KILL_AFTER:
                (kill_redis or (lambda: os.kill(pid, signal.SIGKILL)))()

    await asyncio.gather(*(feedback(did) for did in ids))
    return acked, len(ids)


def _check_restart(path, logged: set[str], acked: list[str]) -> dict:
    """Restart the router: it learned exactly the log, and the log holds every acknowledged feedback."""
    lost = [d for d in acked if d not in logged]
    with router_process(path) as (url, _):
        state = from_jsonable(httpx.get(url + "/v1/admin/state", headers=ADMIN).json()["state"]["state"])
    return {"acknowledged": len(acked), "lost": len(lost), "logged": len(logged), "policy_rounds": int(state["_t"])}


def test_kill9_under_load_loses_no_acknowledged_feedback_sqlite(tmp_path):
    db = tmp_path / "state.db"
    path = write_config(tmp_path / "r.toml", models=MODELS, embedding={"kind": "none", "dim": 8}, store={"path": str(db), "snapshot_every": 50})
    acked: list[str] = []
    for kill in range(4):
        with router_process(path) as (url, child):
            port = int(url.rsplit(":", 1)[1])
            got, sent = asyncio.run(_round(port, child.process.pid, kill))
            child.wait(10)
            assert not child.alive() and KILL_AFTER <= len(got) < sent  # killed with feedback still in flight
            acked += got
    with sqlite3.connect(db) as conn:
        logged = {r[0] for r in conn.execute("SELECT decision_id FROM feedback")}
    out = _check_restart(path, logged, acked)
    print("SQLite, 4 kills:", out)
    assert out["lost"] == 0 and out["policy_rounds"] == out["logged"] >= out["acknowledged"]


def test_kill9_under_load_loses_no_acknowledged_feedback_redis_appendonly(tmp_path):
    server = RedisServer(appendonly=True, data_dir=tmp_path).start()
    try:
        path = write_config(tmp_path / "r.toml", models=MODELS, embedding={"kind": "none", "dim": 8},
                            store={"kind": "redis", "url": server.url, "prefix": "kill", "snapshot_every": 50})
        acked: list[str] = []
        for kill in range(3):  # kill -9 the router replica
            with router_process(path) as (url, child):
                got, sent = asyncio.run(_round(port=int(url.rsplit(":", 1)[1]), pid=child.process.pid, seed=kill))
                child.wait(10)
                assert not child.alive() and KILL_AFTER <= len(got) < sent
                acked += got
        with router_process(path) as (url, child):  # then kill -9 Redis itself under load, and restart it from its append-only file
            got, sent = asyncio.run(_round(int(url.rsplit(":", 1)[1]), child.process.pid, 3, kill_redis=server.kill))
            assert KILL_AFTER <= len(got) < sent
            acked += got
            server.start()
        logged = {f[b"decision"].decode() for _, f in redis.Redis.from_url(server.url).xrange("kill:log")}
        out = _check_restart(path, logged, acked)
        print("Redis (appendfsync always), 3 router kills and 1 Redis kill:", out)
        assert out["lost"] == 0 and out["policy_rounds"] == out["logged"] >= out["acknowledged"]
    finally:
        server.stop()
