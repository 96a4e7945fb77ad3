"""The router's HTTP face: a FastAPI app over :class:`~genbandit.router.service.Router`.

========================  ======  ==============================================================
endpoint                  key     what it does
========================  ======  ==============================================================
POST /v1/route            client  ``{"prompt"}`` or ``{"embedding"}`` (or ``"messages"``) -> decision id and model
POST /v1/feedback         fb      ``{"decision_id", "reward"}``; idempotent (the same reward twice counts once)
POST /v1/chat/completions client  OpenAI chat format; ``model = "auto"`` routes, a model's name forces it;
                                  forwards to the upstream and returns its answer unchanged (streamed when
                                  ``stream`` is true), with ``x-genbandit-decision-id`` and ``x-genbandit-model``
GET  /v1/models           client  the OpenAI model list: ``auto`` and every configured model
GET  /v1/stats            fb      pulls, feedback and mean reward per model; the newest decisions
GET  /v1/decisions/{id}   fb      one decision: model, time, reward
GET  /v1/admin/state      admin   the policy's ``state_dict``
POST /v1/admin/snapshot   admin   save the policy state to the store now
GET  /metrics             none    Prometheus text format (this replica's counters)
GET  /healthz             none    200 when the store answers, 503 otherwise
========================  ======  ==============================================================

"client" keys are only checked when ``[auth] client_keys`` is not empty; "fb" accepts feedback
and admin keys. Refusals are OpenAI-style JSON errors (``{"error": {"message", "type",
"code"}}``) and change nothing: 400 malformed JSON, 401 missing or wrong key, 404 unknown model or
decision, 409 a different reward for a decision that has one, 410 expired decision, 413 body or
prompt too large, 422 invalid values (NaN or out-of-range reward, wrong embedding size).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from .config import RouterConfig
from .dashboard import dashboard_routes
from .errors import BadRequest, InvalidValue, PayloadTooLarge, RouterError, Unauthorized
from .service import Router

__all__ = ["create_app"]

log = logging.getLogger("genbandit.router")

DECISION_HEADER = "x-genbandit-decision-id"
MODEL_HEADER = "x-genbandit-model"


class _Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("genbandit_router_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "genbandit_router_request_seconds",
            "Time to answer (to the first byte for streams)",
            ["endpoint"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.decisions = Counter("genbandit_router_decisions", "Routing decisions by model", ["model", "forced"], registry=r)
        self.feedback = Counter("genbandit_router_feedback", "Feedback by model and outcome", ["model", "status"], registry=r)
        self.reward = Summary("genbandit_router_reward", "Rewards received by model", ["model"], registry=r)
        self.upstream = Histogram("genbandit_router_upstream_seconds", "Upstream answer time", ["model", "outcome"], registry=r)
        self.rounds = Gauge("genbandit_router_policy_rounds", "Feedbacks the in-memory policy has learned from", registry=r)


class _Measure:
    """Pure ASGI middleware: counts requests by endpoint and status, times them to the first byte."""

    def __init__(self, app, metrics: _Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_and_time(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                self.metrics.latency.labels(getattr(scope.get("route"), "path", "other")).observe(time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, send_and_time)
        finally:
            self.metrics.requests.labels(getattr(scope.get("route"), "path", "other"), str(status[0])).inc()


def _error(exc: RouterError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": str(exc), "type": exc.type, "code": exc.code}}, status_code=exc.status, headers=headers)


def _given_key(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key:
        return key
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def _require(request: Request, keys: tuple[str, ...], what: str) -> None:
    given = _given_key(request)
    if not given or not any(hmac.compare_digest(given.encode(), k.encode()) for k in keys):
        raise Unauthorized(f"{what} needs a valid API key (Authorization: Bearer KEY, or X-API-Key: KEY).")


async def _json_body(request: Request, limit: int) -> dict:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"The request body has {length} bytes; the limit is {limit}.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    return data


def prompt_of(messages: Any) -> str:
    """The text of the last user message of an OpenAI ``messages`` list (what the router embeds)."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise InvalidValue("'messages' must be a non-empty list of message objects.")
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
            if texts:
                return "\n".join(texts)
        raise InvalidValue("The last user message has no text content.")
    raise InvalidValue("'messages' has no user message to route on.")


def create_app(config: RouterConfig, *, router: Router | None = None, **router_options: Any) -> FastAPI:
    """The ASGI app. The :class:`Router` is built at startup (unless given) and closed at shutdown."""
    sv, auth = config.server, config.auth
    feedback_keys = auth.feedback_keys + auth.admin_keys
    metrics = _Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        r = router if router is not None else await run_in_threadpool(lambda: Router(config, **router_options))
        app.state.router = r
        metrics.rounds.set_function(lambda: r.policy.t)
        app.state.http = httpx.AsyncClient(timeout=httpx.Timeout(sv.upstream_timeout_s, connect=min(10.0, sv.upstream_timeout_s)))
        try:
            yield
        finally:
            await app.state.http.aclose()
            if router is None:
                await run_in_threadpool(r.close)

    app = FastAPI(title="genbandit router", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.metrics = metrics

    @app.exception_handler(RouterError)
    async def _router_error(request: Request, exc: RouterError) -> JSONResponse:
        return _error(exc)

    app.add_middleware(_Measure, metrics=metrics)

    def _router(request: Request) -> Router:
        return request.app.state.router

    def _client(request: Request) -> None:
        if auth.client_keys:
            _require(request, auth.client_keys, "This endpoint")

    async def _decide(r: Router, prompt: Any = None, embedding: Any = None, model: Any = None):
        if model is not None and model != sv.route_name:
            r.model_index(model)  # 404 before any work
        else:
            model = None
        decision = await run_in_threadpool(lambda: r.route(prompt, embedding=embedding, model=model))
        name = config.models[decision.arm].name
        metrics.decisions.labels(name, str(decision.forced).lower()).inc()
        return decision, name

    @app.post("/v1/route")
    async def route(request: Request):
        _client(request)
        body = await _json_body(request, sv.max_body_bytes)
        prompt = body.get("prompt")
        if prompt is None and body.get("embedding") is None and "messages" in body:
            prompt = prompt_of(body["messages"])
        decision, name = await _decide(_router(request), prompt, body.get("embedding"), body.get("model"))
        return JSONResponse(
            {"decision_id": decision.id, "model": name, "forced": decision.forced, "created": decision.created},
            headers={DECISION_HEADER: decision.id, MODEL_HEADER: name},
        )

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        _require(request, feedback_keys, "Feedback")
        body = await _json_body(request, sv.max_body_bytes)
        unknown = sorted(set(body) - {"decision_id", "reward"})
        if unknown:
            raise InvalidValue(f"Unknown field(s) {', '.join(unknown)}; feedback takes 'decision_id' and 'reward'.")
        out = await run_in_threadpool(_router(request).feedback, body.get("decision_id"), body.get("reward"))
        metrics.feedback.labels(out["model"], out["status"]).inc()
        if out["status"] == "accepted":
            metrics.reward.labels(out["model"]).observe(out["reward"])
        return out

    async def _record_failure(r: Router, decision_id: str) -> None:
        if sv.upstream_error_reward is not None:
            try:
                await run_in_threadpool(r.feedback, decision_id, sv.upstream_error_reward)
            except RouterError as exc:  # for example a client already gave feedback
                log.warning("could not record the upstream failure of %s: %s", decision_id, exc)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        _client(request)
        body = await _json_body(request, sv.max_body_bytes)
        r = _router(request)
        prompt = prompt_of(body.get("messages"))
        decision, name = await _decide(r, prompt, None, body.get("model", sv.route_name))
        spec = config.models[decision.arm]
        headers = {DECISION_HEADER: decision.id, MODEL_HEADER: name}
        upstream_headers = {"content-type": "application/json"}
        if key := spec.api_key():
            upstream_headers["authorization"] = f"Bearer {key}"
        client: httpx.AsyncClient = request.app.state.http
        url = spec.base_url + "/chat/completions"
        payload = {**body, "model": spec.model}
        start = time.perf_counter()
        try:
            if body.get("stream"):
                resp = await client.send(client.build_request("POST", url, json=payload, headers=upstream_headers), stream=True)
            else:
                resp = await client.post(url, json=payload, headers=upstream_headers)
        except httpx.HTTPError as exc:
            metrics.upstream.labels(name, "error").observe(time.perf_counter() - start)
            await _record_failure(r, decision.id)
            message = f"The upstream of model {name!r} failed: {type(exc).__name__}: {exc}"
            return JSONResponse({"error": {"message": message, "type": "upstream_error", "code": "upstream_unavailable"}}, 502, headers)
        metrics.upstream.labels(name, "ok" if resp.status_code < 500 else "error").observe(time.perf_counter() - start)
        if resp.status_code >= 500:
            await _record_failure(r, decision.id)
        media_type = resp.headers.get("content-type")
        if body.get("stream"):
            return StreamingResponse(resp.aiter_bytes(), status_code=resp.status_code, media_type=media_type, headers=headers, background=BackgroundTask(resp.aclose))
        return Response(resp.content, status_code=resp.status_code, media_type=media_type, headers=headers)

    @app.get("/v1/models")
    async def models(request: Request):
        _client(request)
        names = [sv.route_name, *config.model_names]
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "genbandit"} for n in names]}

    @app.get("/v1/stats")
    async def stats(request: Request):
        _require(request, feedback_keys, "Stats")
        return await run_in_threadpool(_router(request).stats)

    app.include_router(dashboard_routes(lambda request: _require(request, feedback_keys, "The dashboard")))

    @app.get("/v1/decisions/{decision_id}")
    async def decision(request: Request, decision_id: str):
        _require(request, feedback_keys, "Decisions")
        r = _router(request)
        d = await run_in_threadpool(r.store.get_decision, decision_id)
        if d is None:
            from .errors import DecisionNotFound

            raise DecisionNotFound(f"Unknown decision id {decision_id!r}.")
        return {"decision_id": d.id, "model": config.models[d.arm].name, "created": d.created, "forced": d.forced, "reward": d.reward}

    @app.get("/v1/admin/state")
    async def admin_state(request: Request):
        _require(request, auth.admin_keys, "The admin API")
        r = _router(request)

        def state():
            r.sync()
            with r._lock:
                return {"log_position": r._cursor, "state": r.policy.state_dict()}

        return await run_in_threadpool(state)

    @app.post("/v1/admin/snapshot")
    async def admin_snapshot(request: Request):
        _require(request, auth.admin_keys, "The admin API")
        saved = await run_in_threadpool(_router(request).snapshot, True)
        return {"saved": saved}

    @app.get("/metrics")
    async def prometheus():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz(request: Request):
        r = _router(request)
        ok = await run_in_threadpool(r.store.ping)
        body = {"status": "ok" if ok else "store unavailable", "store": r.store.kind, "replica": r.replica_id, "policy_rounds": r.policy.t}
        return JSONResponse(body, status_code=200 if ok else 503)

    return app
