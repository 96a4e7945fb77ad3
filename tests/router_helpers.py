"""Helpers for the router tests: a user-defined contextual policy, loopback servers, redis-server.

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import shutil
import socket
import subprocess
import sys
import threading
import time
from numbers import Integral, Real
from pathlib import Path

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
import uvicorn  # noqa: F401 - imported here (with the CLI below) so that forked router processes start at once
import numpy as np

import genbandit.cli  # noqa: F401
import genbandit.router.app  # noqa: F401
from genbandit.core.base import Policy
from genbandit.core.validation import Interval

ROOT = Path(__file__).resolve().parents[1]


class DisjointLinUCB(Policy):
    """Per-arm ridge regression with an upper-confidence bonus (Li et al. 2010, disjoint LinUCB).

    A user's own contextual policy, written against the Policy contract and *not* registered: the
    router loads it by ``"router_helpers:DisjointLinUCB"``. Unplayed arms come first.
    """

    name = "Disjoint-LinUCB (test)"
    contextual = True
    _parameter_constraints = {
        "n_features": [Interval(Integral, 1, None, "left")],
        "alpha": [Interval(Real, 0, None, "neither")],
        "beta": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, n_arms: int, n_features: int, alpha: float = 1.0, beta: float = 1.0, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.alpha = alpha
        self.beta = beta
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        k, d = self.n_arms, self.n_features
        self._A_inv = np.tile(np.eye(d) / self.alpha, (n_runs, k, 1, 1))
        self._b = np.zeros((n_runs, k, d))
        self._n = np.zeros((n_runs, k), dtype=np.int64)

    def _index(self, x: np.ndarray) -> np.ndarray:
        h = np.einsum("rkij,rj->rki", self._A_inv, x)
        mean = np.einsum("rki,rki->rk", h, self._b)
        return mean + self.beta * np.sqrt(np.maximum(np.einsum("rki,ri->rk", h, x), 0.0))

    def _select(self, contexts: np.ndarray | None) -> np.ndarray:
        index = np.where(self._n == 0, np.inf, self._index(contexts))
        best = index == index.max(axis=1, keepdims=True)
        return np.array([self._rng.choice(np.flatnonzero(row)) for row in best], dtype=np.int64)

    def _update(self, actions: np.ndarray, feedback: np.ndarray, contexts: np.ndarray | None) -> None:
        runs = np.arange(len(actions))
        a_inv = self._A_inv[runs, actions]
        h = np.einsum("rij,rj->ri", a_inv, contexts)
        denom = 1.0 + np.einsum("ri,ri->r", h, contexts)
        self._A_inv[runs, actions] = a_inv - np.einsum("ri,rj->rij", h, h) / denom[:, None, None]
        self._b[runs, actions] += feedback[:, None] * contexts
        self._n[runs, actions] += 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            out = predicate()
            if out:
                return out
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


@contextlib.contextmanager
def serve_in_thread(app, port: int | None = None, router_config=None):
    """Run an ASGI app on uvicorn in a thread on 127.0.0.1; yields its base URL.

    With ``router_config``, uvicorn runs as ``genbandit serve`` runs it (the ``[server]`` limits applied).
    """

    from genbandit.router.app import server_config

    port = port or free_port()
    if router_config is not None:
        config = server_config(app, router_config, host="127.0.0.1", port=port, log_level="warning")
    else:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=120, what="uvicorn to start")
    if not server.started:
        raise RuntimeError("the server did not start (see the log above)")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def upstream_app(label: str):
    """A small OpenAI-compatible upstream: answers '<label>:<model> heard: <last user text>'."""
    app = FastAPI()
    app.state.seen = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.seen.append(body)
        if request.headers.get("authorization") != f"Bearer key-{label}":
            return JSONResponse({"error": {"message": "bad upstream key", "type": "auth", "code": "invalid_api_key"}}, 401)
        text = f"{label}:{body['model']} heard: {body['messages'][-1]['content']}"
        base = {"id": f"chatcmpl-{label}", "created": 1700000000, "model": body["model"]}
        if body.get("stream"):

            def chunks():
                for i, word in enumerate(text.split(" ")):
                    delta = {"content": (" " if i else "") + word}
                    if i == 0:
                        delta["role"] = "assistant"
                    yield "data: " + json.dumps({**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}) + "\n\n"
                yield "data: " + json.dumps({**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(chunks(), media_type="text/event-stream")
        return {
            **base,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
        }

    return app


class RedisServer:
    """A real redis-server on a loopback port, started and killed at will (kill -9 included)."""

    def __init__(self, appendonly: bool = False, data_dir: Path | None = None) -> None:
        self.exe = shutil.which("redis-server")
        assert self.exe, "redis-server is not installed (apt-get install -y redis-server)"
        self.port, self.appendonly, self.data_dir = free_port(), appendonly, data_dir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes"]
        if self.appendonly:  # every write fsynced before Redis answers it
            args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.data_dir)]
        else:
            args += ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        wait_until(lambda: redis.Redis.from_url(self.url).ping(), what="redis-server")
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def redis_server(appendonly: bool = False, data_dir: Path | None = None):
    """A real redis-server on a free loopback port (no persistence unless ``appendonly``); yields the :class:`RedisServer`'s URL."""
    server = RedisServer(appendonly, data_dir).start()
    try:
        yield server.url
    finally:
        server.stop()


def write_config(path: Path, *, models: list[dict], policy: str = "router_helpers:DisjointLinUCB", params: dict | None = None,
                 embedding: dict | None = None, store: dict | None = None, server: dict | None = None) -> Path:
    """Write a router TOML config (small enough to build by hand)."""

    def value(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return repr(v)

    lines = ["[server]"] + [f"{k} = {value(v)}" for k, v in (server or {}).items()]
    for m in models:
        lines += ["", "[[models]]"] + [f"{k} = {value(v)}" for k, v in m.items()]
    lines += ["", "[policy]", f"name = {value(policy)}", f"params = {value(params or {})}"]
    lines += ["", "[embedding]"] + [f"{k} = {value(v)}" for k, v in (embedding or {"kind": "none", "dim": 4}).items()]
    lines += ["", "[store]"] + [f"{k} = {value(v)}" for k, v in (store or {}).items()]
    lines += ["", "[auth]", 'feedback_keys = ["fb-key"]', 'read_keys = ["read-key"]', 'admin_keys = ["admin-key"]']
    path.write_text("\n".join(lines) + "\n")
    return path


class _Child:
    """A router process started by fork (the test process has already imported everything, so it starts at once)."""

    def __init__(self, argv: list[str]) -> None:
        self.process = multiprocessing.get_context("fork").Process(target=_cli, args=(argv,), daemon=True)
        self.process.start()

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, no final snapshot."""
        os.kill(self.process.pid, signal.SIGKILL)

    def terminate(self) -> None:
        self.process.terminate()

    def wait(self, timeout: float | None = None) -> None:
        self.process.join(timeout)


def _cli(argv: list[str]) -> None:
    from genbandit.cli import main

    sys.exit(main(argv))


@contextlib.contextmanager
def router_process(config: Path, port: int | None = None):
    """``genbandit serve --config CONFIG`` in a child process on 127.0.0.1; yields (base URL, process)."""
    port = port or free_port()
    child = _Child(["serve", "--config", str(config), "--port", str(port), "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"

    def up():
        if not child.alive():
            raise RuntimeError(f"the router process exited with {child.process.exitcode}")
        return httpx.get(url + "/healthz", timeout=1).status_code == 200

    deadline = time.monotonic() + 60
    while True:
        try:
            if up():
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            child.kill()
            raise TimeoutError("the router process did not answer /healthz within 60 s")
        time.sleep(0.05)
    try:
        yield url, child
    finally:
        if child.alive():
            child.terminate()
            child.wait(15)
            if child.alive():
                child.kill()
                child.wait()
