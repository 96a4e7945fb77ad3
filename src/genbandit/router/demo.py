"""Try the router with no LLM: three real LLMs' logged outcomes as local upstreams, and a client that plays them.

The ``paretobandit`` package ships 3,609 real prompts (MMLU, GSM8K, MBPP, BIG-Bench Hard and more),
each with the reward in [0, 1] and the dollar cost that three LLMs (Llama-3.1-8B, Mistral-Large,
Gemini-2.5-Pro) got on it (:func:`genbandit.envs.prompts.load_paretobandit`). Here:

- :func:`upstream_app` is one OpenAI-compatible server that answers those prompts under each of the
  three model ids with that model's logged reward and cost, in the text and as the extra field
  ``genbandit_demo`` of the completion (there is no answer text in the log);
- :func:`run_demo` starts it and a router in front of it, both on 127.0.0.1, plays the prompts in a
  random order through the router with the ``openai`` client (``model="auto"``), sends each logged
  reward back as feedback, and prints how the router's reward, spend and traffic compare with
  calling each model alone on the same prompts.

The router learns ``reward - 5 x dollar cost`` (``cost_weight = 5`` and each model's mean logged
cost per request, the cost-aware ParetoBandit scenario of ``reproduce pak-ucb``). ``genbandit serve
--demo`` is the command line over :func:`run_demo`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, TextIO

import httpx
import numpy as np
import openai
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..core.validation import InvalidParameterError
from ..envs.prompts import load_paretobandit
from .app import create_app, prompt_of
from .config import load_router_config
from .errors import RouterError

__all__ = ["LoggedOutcomes", "upstream_app", "demo_config", "serve_in_thread", "run_demo", "PRICE"]

#: Reward units per dollar in the utility the demo router learns (reward - PRICE x cost).
PRICE = 5.0
#: Concurrent clients playing the prompts.
CLIENTS = 4


@dataclass
class LoggedOutcomes:
    """The logged table: ``prompts[i]`` got ``rewards[i, g]`` and cost ``costs[i, g]`` dollars from ``model_ids[g]``."""

    prompts: list[str]
    rewards: np.ndarray
    costs: np.ndarray
    model_ids: list[str]
    sources: list[str]
    _rows: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rows = {p: i for i, p in enumerate(self.prompts)}

    @classmethod
    def paretobandit(cls) -> "LoggedOutcomes":
        """The stream the ``paretobandit`` package ships (both of its files)."""
        return cls(*load_paretobandit("all"))

    @property
    def names(self) -> list[str]:
        """Short model names for the router (``"mistralai/mistral-large-2512"`` -> ``"mistral-large-2512"``)."""
        return [m.rsplit("/", 1)[-1] for m in self.model_ids]

    def row_of(self, prompt: str) -> int | None:
        """The row of ``prompt`` in the table, or ``None``."""
        return self._rows.get(prompt)


def _openai_error(status: int, message: str, code: str):
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status_code=status)


def upstream_app(table: LoggedOutcomes):
    """An OpenAI-compatible server (``/v1/chat/completions``, ``/v1/models``) answering from ``table``.

    The model of the request picks the column (any of ``table.model_ids``), the last user message
    the row. A prompt outside the table gets an answer that says so, without ``genbandit_demo``.
    """
    app = FastAPI(title="genbandit demo upstream", docs_url=None, redoc_url=None, openapi_url=None)
    column = {m: g for g, m in enumerate(table.model_ids)}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "paretobandit-log"} for m in table.model_ids]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
            prompt = prompt_of(body.get("messages"))
        except (ValueError, UnicodeDecodeError, RouterError) as exc:
            return _openai_error(400, f"Not a chat completion request: {exc}", "invalid_request")
        model = body.get("model")
        if model not in column:
            return _openai_error(404, f"Unknown model {model!r}; this demo upstream serves {', '.join(table.model_ids)}.", "model_not_found")
        row, g = table.row_of(prompt), column[model]
        if row is None:
            logged = None
            text = f"{model} has no logged outcome for this prompt: this demo upstream knows only the {len(table.prompts):,} ParetoBandit prompts."
        else:
            logged = {"reward": float(table.rewards[row, g]), "cost": float(table.costs[row, g]), "source": table.sources[row]}
            text = (f"The log holds no answer text, only what {model} scored on this {logged['source']} prompt: "
                    f"reward {logged['reward']:.2f}, cost ${logged['cost']:.6f}.")
        base = {"id": f"chatcmpl-demo-{secrets.token_hex(6)}", "created": int(time.time()), "model": model, "genbandit_demo": logged}
        if body.get("stream"):
            chunks = [{"role": "assistant", "content": text}, {}]
            events = [
                "data: " + json.dumps({**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": "stop" if not d else None}]}) + "\n\n"
                for d in chunks
            ]
            return StreamingResponse(iter(events + ["data: [DONE]\n\n"]), media_type="text/event-stream")
        return {**base, "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    return app


def demo_config(upstream_url: str, table: LoggedOutcomes, *, store_path: str, key: str, port: int = 8000, embedding: str = "hashing") -> str:
    """The demo router's config (TOML): one model per column of ``table``, all served at ``upstream_url``.

    Each model's ``cost`` is its mean logged dollar cost per request. ``embedding="hashing"`` embeds
    prompts by feature hashing (no model: the router starts in seconds); ``"minilm"`` uses
    all-MiniLM-L6-v2, with its vectors cached on disk for the next run.

    >>> text = demo_config("http://127.0.0.1:9001/v1", LoggedOutcomes.paretobandit(), store_path="router.db", key="KEY")
    >>> print(text[: text.index("[[models]]", 200)].strip())
    [server]
    host = "127.0.0.1"
    port = 8000
    cost_weight = 5.0
    upstream_timeout_s = 30.0
    <BLANKLINE>
    [[models]]
    name = "llama-3.1-8b-instruct"
    base_url = "http://127.0.0.1:9001/v1"
    model = "meta-llama/llama-3.1-8b-instruct"
    cost = 2.8933832086e-05
    """
    if embedding == "hashing":
        emb = ['kind = "hashing"', "dim = 256"]
    elif embedding == "minilm":
        from ..embeddings import default_cache_dir

        emb = ['kind = "sentence-transformers"', f"cache_dir = {json.dumps(str(default_cache_dir().parent / 'router-demo'))}"]
    else:
        raise InvalidParameterError(f"The demo's embedding must be 'hashing' or 'minilm'. Got {embedding!r} instead.")
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", f"cost_weight = {PRICE!r}", "upstream_timeout_s = 30.0", ""]
    for g, (name, model_id) in enumerate(zip(table.names, table.model_ids)):
        cost = round(float(table.costs[:, g].mean()), 15)
        lines += ["[[models]]", f"name = {json.dumps(name)}", f"base_url = {json.dumps(upstream_url)}", f"model = {json.dumps(model_id)}", f"cost = {cost!r}", ""]
    lines += ["[policy]", 'name = "RFF-UCB"', "params = { seed = 0 }", "", "[embedding]", *emb, ""]
    lines += ["[store]", f"path = {json.dumps(store_path)}", 'synchronous = "normal"', "", "[auth]", f"admin_keys = [{json.dumps(key)}]"]
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_in_thread(app, port: int = 0, timeout_s: float = 120.0) -> Iterator[str]:
    """Run an ASGI app on uvicorn in a thread on 127.0.0.1 (a free port if ``port`` is 0); yields its URL."""
    import uvicorn

    port = port or _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise InvalidParameterError(f"Could not start a server on 127.0.0.1:{port} (is the port taken? see the log above).")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def _wait_for_stop() -> None:
    """Block until Ctrl-C or SIGTERM (so that the servers shut down and the temporary store is removed)."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(1.0):
            pass


class _Player:
    """Plays prompts through the router with ``clients`` threads; records and prints what happened."""

    def __init__(self, router_url: str, key: str, table: LoggedOutcomes, order: np.ndarray, deadline: float, report_every: int, out: TextIO) -> None:
        self.table, self.order, self.deadline, self.report_every, self.out = table, order, deadline, report_every, out
        self.client = openai.OpenAI(base_url=router_url + "/v1", api_key=key, max_retries=0, timeout=30.0)
        self.http = httpx.Client(base_url=router_url, headers={"authorization": f"Bearer {key}"}, timeout=30.0)
        self._next = iter(range(len(order)))
        self._lock = threading.Lock()
        self.rows: list[int] = []
        self.arms: list[int] = []
        self.rewards: list[float] = []
        self.costs: list[float] = []
        self._arm_of = {name: g for g, name in enumerate(table.names)}

    def _take(self) -> int | None:
        with self._lock:
            if time.monotonic() > self.deadline:
                return None
            return next(self._next, None)

    def _one(self, row: int) -> None:
        raw = self.client.chat.completions.with_raw_response.create(model="auto", messages=[{"role": "user", "content": self.table.prompts[row]}])
        logged = raw.parse().model_extra["genbandit_demo"]
        feedback = self.http.post("/v1/feedback", json={"decision_id": raw.headers["x-genbandit-decision-id"], "reward": logged["reward"]})
        feedback.raise_for_status()
        with self._lock:
            self.rows.append(row)
            self.arms.append(self._arm_of[raw.headers["x-genbandit-model"]])
            self.rewards.append(logged["reward"])
            self.costs.append(logged["cost"])
            if len(self.rows) % self.report_every == 0:
                self.report()

    def _client_loop(self) -> None:
        while (i := self._take()) is not None:
            self._one(int(self.order[i]))

    def play(self, clients: int, every_s: float = 1.0) -> None:
        """Play until the prompts or the time run out; every ``every_s`` seconds, read the dashboard's
        data (so that its charts hold the whole run even when nobody had the page open)."""
        with ThreadPoolExecutor(clients, thread_name_prefix="demo-client") as pool:
            futures = [pool.submit(self._client_loop) for _ in range(clients)]
            while True:
                done, running = wait(futures, timeout=every_s, return_when=FIRST_EXCEPTION)
                self.http.get("/dashboard/data").raise_for_status()
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    self.deadline = 0.0  # the other clients stop after their current prompt
                    raise failed[0].exception()
                if not running:
                    return

    def header(self) -> None:
        names = "  ".join(f"{n:>20}" for n in self.table.names)
        traffic = " ".join(f"{n.split('-')[0][:8]:>8}" for n in self.table.names)
        print(f"{'requests':>8} | {'router':>14} | {names} | traffic, last {self.report_every} requests", file=self.out)
        print(f"{'':>8} | {'reward   $/1k':>14} | " + "  ".join(f"{'alone: reward   $/1k':>20}" for _ in self.table.names) + f" | {traffic}", file=self.out)

    def report(self) -> None:
        rows = np.asarray(self.rows)
        alone = "  ".join(f"{self.table.rewards[rows, g].mean():>13.3f} {1000 * self.table.costs[rows, g].mean():>6.2f}" for g in range(len(self.table.names)))
        last = np.bincount(np.asarray(self.arms[-self.report_every :]), minlength=len(self.table.names)) / min(len(rows), self.report_every)
        share = " ".join(f"{s:>8.0%}" for s in last)
        print(f"{len(rows):>8} | {np.mean(self.rewards):>6.3f} {1000 * np.mean(self.costs):>7.2f} | {alone} | {share}", file=self.out, flush=True)


def run_demo(*, port: int = 8000, requests: int = 1500, seconds: float = 60.0, embedding: str = "hashing", keep_serving: bool = True,
             seed: int = 0, out: TextIO | None = None) -> dict:
    """Start the demo upstream and a router on 127.0.0.1, play ``requests`` prompts (at most ``seconds``), report.

    Returns a summary: the models, and per played prompt its row, the chosen arm, reward and cost.
    With ``keep_serving`` the servers stay up after the play until Ctrl-C (to look at the dashboard).
    """
    out = out or sys.stdout
    for name in ("httpx", "httpx2", "openai"):  # one INFO line per request would bury the progress lines
        logging.getLogger(name).setLevel(logging.WARNING)
    table = LoggedOutcomes.paretobandit()
    if not 1 <= requests <= len(table.prompts):
        raise InvalidParameterError(f"The demo plays 1 to {len(table.prompts)} prompts. Got {requests!r} instead.")
    if not seconds > 0:
        raise InvalidParameterError(f"The demo's time limit must be positive. Got {seconds!r} instead.")
    order = np.random.default_rng(seed).permutation(len(table.prompts))[:requests]
    key = "demo-" + secrets.token_urlsafe(12)
    report_every = max(50, requests // 12)
    with tempfile.TemporaryDirectory(prefix="genbandit-demo-") as tmp, serve_in_thread(upstream_app(table)) as upstream_url:
        path = Path(tmp) / "router.toml"
        path.write_text(demo_config(upstream_url + "/v1", table, store_path=str(Path(tmp) / "router.db"), key=key, port=port, embedding=embedding))
        config = load_router_config(path)
        with serve_in_thread(create_app(config), port) as router_url:
            print(f"Upstream (the ParetoBandit log, {len(table.prompts):,} real prompts; models {', '.join(table.names)}): {upstream_url}/v1", file=out)
            print(f"Router: {router_url}/v1   dashboard: {router_url}/dashboard#key={key}   key: {key}", file=out)
            print(f"Playing {requests} prompts (at most {seconds:g} s) with {CLIENTS} openai clients; the router learns "
                  f"reward - {PRICE:g} x dollar cost; feedback = the logged reward.\n", file=out, flush=True)
            player = _Player(router_url, key, table, order, time.monotonic() + seconds, report_every, out)
            player.header()
            start = time.monotonic()
            player.play(CLIENTS)
            elapsed = time.monotonic() - start
            if len(player.rows) % report_every:
                player.report()
            stats = player.http.get("/v1/stats").json()
            player.http.close()
            print(f"\n{len(player.rows)} prompts in {elapsed:.1f} s; the router's policy learned from {stats['policy_rounds']} feedbacks. "
                  "Decisions per model: " + ", ".join(f"{m['name']} {m['pulls']}" for m in stats["models"]), file=out, flush=True)
            if keep_serving:
                print(f"\nStill serving: {router_url}/dashboard#key={key} ; "
                      f"try: curl -s {router_url}/v1/stats -H 'authorization: Bearer {key}' . Ctrl-C to stop.", file=out, flush=True)
                _wait_for_stop()
    return {"models": table.names, "rows": player.rows, "arms": player.arms, "rewards": player.rewards, "costs": player.costs, "seconds": elapsed}
