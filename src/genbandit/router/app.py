"""The router's HTTP face: an ASGI app over :class:`~genbandit.router.service.Router`.

========================  ======  ==============================================================
endpoint                  key     what it does
========================  ======  ==============================================================
POST /v1/route            client  ``{"prompt"}`` or ``{"embedding"}`` (or ``"messages"``) -> decision id and model
POST /v1/feedback         fb      ``{"decision_id", "reward"}``; idempotent (the same reward twice counts once)
POST /v1/chat/completions client  OpenAI chat format; ``model = "auto"`` routes, a model's name forces it;
                                  forwards to the upstream and returns its answer unchanged (streamed when
                                  ``stream`` is true), with ``x-genbandit-decision-id`` and ``x-genbandit-model``
GET  /v1/models           client  the OpenAI model list: ``auto`` and every configured model
GET  /v1/stats            read    pulls, feedback and mean reward per model; the newest decisions; spend against
                                  the [budget] target when there is one
GET  /v1/decisions/{id}   read    one decision: model, time, reward
GET  /v1/admin/state      admin   the policy's ``state_dict``
POST /v1/admin/snapshot   admin   save the policy state to the store now
GET  /openapi.json        read    this API's OpenAPI description (only with ``[server] docs = true``)
GET  /metrics             none    Prometheus text format (this replica's counters)
GET  /healthz             none    200 when the store answers, 503 otherwise
========================  ======  ==============================================================

"client" keys are only checked when ``[auth] client_keys`` is not empty; an admin key works
everywhere. Refusals are OpenAI-style JSON errors (``{"error": {"message", "type", "code"}}``)
and change nothing: 400 malformed, truncated or too deeply nested JSON, 401 missing or wrong key,
404 unknown path, model or decision, 405 wrong method, 408 body too slow, 409 a different reward for
a decision that has one, 410 expired decision, 413 body or prompt too large, 422 invalid values
(NaN or out-of-range reward, wrong embedding size, degenerate embedding), 429 too many decisions
awaiting feedback, 503 the store does not answer.

The router's own endpoints are served by a small ASGI layer (:class:`_Api`) in front of FastAPI's stack:
JSON in and out through orjson, no per-request validation models, the store written by its own
thread. Anything else (routers added with ``app.include_router``) goes to FastAPI.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import httpx
import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from .config import AuthSpec, RouterConfig, ServerSpec
from .errors import BadRequest, InvalidValue, PayloadTooLarge, RequestTimeout, RouterError, Unauthorized
from .dashboard import dashboard_routes
from .service import Router

__all__ = ["create_app", "require_read_access", "server_config", "prompt_of"]

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
        self.budget = Gauge("genbandit_router_budget_target_cost", "[budget] target mean cost per request", registry=r)
        self.mean_cost = Gauge("genbandit_router_mean_cost", "Mean cost per request the policy has learned from", registry=r)
        self.price = Gauge("genbandit_router_cost_price", "The budget pacer's price of a budget-sized cost, in reward", registry=r)


# ------------------------------------------------------------------------------------------ keys
class _Keys:
    """Which keys open which role: client, feedback, read, admin (an admin key opens every role)."""

    def __init__(self, auth: AuthSpec) -> None:
        enc = lambda keys: tuple(k.encode() for k in keys)  # noqa: E731
        self.roles = {
            "client": enc(auth.client_keys + auth.admin_keys) if auth.client_keys else None,
            "feedback": enc(auth.feedback_keys + auth.admin_keys),
            "read": enc(auth.read_keys + auth.admin_keys),
            "admin": enc(auth.admin_keys),
            "none": None,
        }

    def require(self, role: str, given: bytes | None, what: str) -> None:
        keys = self.roles[role]
        if keys is None:
            return
        if not given or not any(hmac.compare_digest(given, k) for k in keys):
            raise Unauthorized(f"{what} needs a valid {role} API key (Authorization: Bearer KEY, or X-API-Key: KEY).")


def _given_key(headers) -> bytes | None:
    """The key of a request from its raw ASGI headers (``x-api-key``, or ``authorization: Bearer``)."""
    auth = None
    for name, value in headers:
        if name == b"x-api-key" and value:
            return value
        if name == b"authorization":
            auth = value
    return auth[7:].strip() if auth is not None and auth[:7].lower() == b"bearer " else None


def require_read_access(request: Request) -> None:
    """FastAPI dependency: refuse (401) a request without a read-only or admin key.

    For pages added to the router's app (``app.include_router(..., dependencies=[Depends(require_read_access)])``).
    """
    request.app.state.keys.require("read", _given_key(request.scope["headers"]), "This page")


# ------------------------------------------------------------------------------------------ request bodies
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN, _CLOSE = np.zeros(256, np.int32), np.zeros(256, np.int32)
_OPEN[[ord("["), ord("{")]] = 1
_CLOSE[[ord("]"), ord("}")]] = 1


def json_depth(body: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count).

    >>> json_depth(b'{"a": [1, {"b": "[[["}]}'), json_depth(b'"x"')
    (3, 0)
    """
    bare = np.frombuffer(_STRING.sub(b"", body), np.uint8)
    return int(np.cumsum(_OPEN[bare] - _CLOSE[bare]).max(initial=0))


def parse_json_object(body: bytes, max_depth: int) -> dict:
    """The JSON object a request body holds, or :class:`BadRequest` (nothing else is raised)."""
    if body.count(b"[") + body.count(b"{") > max_depth and json_depth(body) > max_depth:
        raise BadRequest(f"The request body nests arrays and objects more than {max_depth} deep.")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON (UTF-8, without NaN, lone surrogates or numbers beyond 64 bits): {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    return data


class _Gone(Exception):
    """The client went away before its body arrived in full."""


async def _read_body(receive, headers, sv: ServerSpec) -> bytes:
    limit = sv.max_body_bytes
    for name, value in headers:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise PayloadTooLarge(f"The request body has {int(value)} bytes; the limit is {limit}.")
    body = bytearray()
    try:
        async with asyncio.timeout(sv.body_timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Gone()
                body += message.get("body", b"")
                if len(body) > limit:
                    raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.")
                if not message.get("more_body"):
                    return bytes(body)
    except TimeoutError:
        raise RequestTimeout(f"The request body did not arrive in full within {sv.body_timeout_s:g} s.") from None


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


# ------------------------------------------------------------------------------------------ responses
def _json(status: int, payload: Any, headers: dict | None = None) -> tuple[int, bytes, list]:
    try:
        body = orjson.dumps(payload)
    except TypeError:  # integers beyond 64 bits (a policy's RNG state)
        body = json.dumps(payload).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return status, body, raw


def _error_payload(exc: RouterError) -> dict:
    return {"error": {"message": str(exc), "type": exc.type, "code": exc.code}}


def _openai_error(status: int, message: str, type_: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "code": code}}, status_code=status)


@dataclass(frozen=True)
class _Stream:
    """A streamed upstream answer: its status and headers, its body chunks, and how to close it."""

    status: int
    headers: list
    chunks: Any
    close: Callable[[], Awaitable]


@dataclass(frozen=True)
class _Endpoint:
    handler: Callable[..., Awaitable]
    role: str
    what: str  # the first line of its OpenAPI summary, and the subject of a 401
    body: bool  # whether it reads a JSON body


class _Api:
    """Pure ASGI app serving the router's endpoints; everything else goes to the wrapped app (FastAPI).

    Every answer is timed and counted in ``/metrics`` by endpoint and status; a client that goes
    away mid-body is counted as 400, an unexpected exception as 500 (and logged).
    """

    def __init__(self, app, config: RouterConfig, holder: dict, metrics: _Metrics, keys: _Keys) -> None:
        self.app, self.config, self.sv, self.holder, self.metrics, self.keys = app, config, config.server, holder, metrics, keys
        self.endpoints: dict[tuple[str, str], _Endpoint] = {
            ("POST", "/v1/route"): _Endpoint(self.route, "client", "Routing", True),
            ("POST", "/v1/feedback"): _Endpoint(self.feedback, "feedback", "Feedback", True),
            ("POST", "/v1/chat/completions"): _Endpoint(self.chat, "client", "Chat completion", True),
            ("GET", "/v1/models"): _Endpoint(self.models, "client", "The model list", False),
            ("GET", "/v1/stats"): _Endpoint(self.stats, "read", "Stats", False),
            ("GET", "/v1/decisions/{decision_id}"): _Endpoint(self.decision, "read", "A decision", False),
            ("GET", "/v1/admin/state"): _Endpoint(self.admin_state, "admin", "The policy state", False),
            ("POST", "/v1/admin/snapshot"): _Endpoint(self.admin_snapshot, "admin", "A snapshot", False),
            ("GET", "/metrics"): _Endpoint(self.prometheus, "none", "Prometheus metrics", False),
            ("GET", "/healthz"): _Endpoint(self.healthz, "none", "Health", False),
        }
        self.paths = {path for _, path in self.endpoints}

    @property
    def router(self) -> Router:
        return self.holder["router"]

    def _match(self, path: str) -> tuple[str | None, str | None]:
        """(endpoint template, decision id) for a request path; (None, None) for paths not ours."""
        if path in self.paths:
            return path, None
        if path.startswith("/v1/decisions/") and "/" not in path[14:]:
            return "/v1/decisions/{decision_id}", path[14:]
        return None, None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        template, arg = self._match(scope["path"])
        if template is None:
            await self._other(scope, receive, send, start)
            return
        status, streamed = 500, False
        try:
            endpoint = self.endpoints.get((scope["method"], template))
            if endpoint is None:
                allowed = sorted(m for m, p in self.endpoints if p == template)
                answer = _json(405, {"error": {"message": f"{template} takes {', '.join(allowed)}.", "type": "invalid_request_error", "code": "method_not_allowed"}})
            else:
                answer = await self._serve(endpoint, scope, receive, arg)
            if isinstance(answer, _Stream):
                streamed = True
                status = await self._stream(answer, send, template, start)
                return
            status, body, headers = answer
        except _Gone:
            status, body, headers = _json(400, _error_payload(BadRequest("The request body was cut short: the client disconnected.")))
        except Exception:  # noqa: BLE001 - never an HTML page or a dropped connection; the cause goes to the log
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            status, body, headers = _json(500, {"error": {"message": "Internal error (logged by the router).", "type": "server_error", "code": "internal_error"}})
        finally:
            if not streamed:
                self.metrics.requests.labels(template, str(status)).inc()
        self.metrics.latency.labels(template).observe(time.perf_counter() - start)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _serve(self, endpoint: _Endpoint, scope, receive, arg):
        try:
            self.keys.require(endpoint.role, _given_key(scope["headers"]), endpoint.what)
            if endpoint.body:
                body = parse_json_object(await _read_body(receive, scope["headers"], self.sv), self.sv.max_json_depth)
                return await endpoint.handler(body)
            return await (endpoint.handler(arg) if arg is not None else endpoint.handler())
        except RouterError as exc:
            extra = {"connection": "close"} if isinstance(exc, RequestTimeout) else None
            return _json(exc.status, _error_payload(exc), extra)

    async def _stream(self, answer: _Stream, send, template: str, start: float) -> int:
        status, headers, chunks, close = answer.status, answer.headers, answer.chunks, answer.close
        self.metrics.latency.labels(template).observe(time.perf_counter() - start)
        self.metrics.requests.labels(template, str(status)).inc()
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await close()
        return status

    async def _other(self, scope, receive, send, start: float) -> None:
        """Paths that are not the router's own (pages added to the app, unknown paths): counted as "other"."""
        status = [500]

        async def send_and_count(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                self.metrics.latency.labels("other").observe(time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            self.metrics.requests.labels("other", str(status[0])).inc()

    # -------------------------------------------------------------- endpoints
    async def _decide(self, prompt: Any = None, embedding: Any = None, model: Any = None):
        r = self.router
        if model is not None and model != self.sv.route_name:
            r.model_index(model)  # 404 before any work
        else:
            model = None
        decision = await r.aroute(prompt, embedding=embedding, model=model)
        name = r.model_name(decision.arm)
        self.metrics.decisions.labels(name, "true" if decision.forced else "false").inc()
        return decision, name

    async def route(self, body: dict):
        prompt = body.get("prompt")
        if prompt is None and body.get("embedding") is None and "messages" in body:
            prompt = prompt_of(body["messages"])
        decision, name = await self._decide(prompt, body.get("embedding"), body.get("model"))
        payload = {"decision_id": decision.id, "model": name, "forced": decision.forced, "created": decision.created}
        return _json(200, payload, {DECISION_HEADER: decision.id, MODEL_HEADER: name})

    async def feedback(self, body: dict):
        unknown = sorted(set(body) - {"decision_id", "reward"})
        if unknown:
            shown = ", ".join(repr(k).encode("utf-8", "backslashreplace").decode()[:40] for k in unknown[:5])
            raise InvalidValue(f"Unknown field(s) {shown}; feedback takes 'decision_id' and 'reward'.")
        out = await self.router.afeedback(body.get("decision_id"), body.get("reward"))
        self.metrics.feedback.labels(out["model"], out["status"]).inc()
        if out["status"] == "accepted":
            self.metrics.reward.labels(out["model"]).observe(out["reward"])
        return _json(200, out)

    async def _record_failure(self, decision_id: str) -> None:
        if self.sv.upstream_error_reward is not None:
            try:
                await self.router.afeedback(decision_id, self.sv.upstream_error_reward)
            except RouterError as exc:  # for example a client already gave feedback
                log.warning("could not record the upstream failure of %s: %s", decision_id, exc)

    async def chat(self, body: dict):
        model = body.get("model", self.sv.route_name)
        prompt = prompt_of(body.get("messages"))
        decision, name = await self._decide(prompt, None, model)
        spec = self.config.models[self.router.model_index(name)]
        headers = {DECISION_HEADER: decision.id, MODEL_HEADER: name}
        upstream_headers = {"content-type": "application/json"}
        if key := spec.api_key():
            upstream_headers["authorization"] = f"Bearer {key}"
        client: httpx.AsyncClient = self.holder["http"]
        payload = orjson.dumps({**body, "model": spec.model})
        start = time.perf_counter()
        stream = body.get("stream") is True
        try:
            request = client.build_request("POST", spec.base_url + "/chat/completions", content=payload, headers=upstream_headers)
            resp = await client.send(request, stream=stream)
        except httpx.HTTPError as exc:
            self.metrics.upstream.labels(name, "error").observe(time.perf_counter() - start)
            await self._record_failure(decision.id)
            message = f"The upstream of model {name!r} failed: {type(exc).__name__}: {exc}"
            return _json(502, {"error": {"message": message, "type": "upstream_error", "code": "upstream_unavailable"}}, headers)
        self.metrics.upstream.labels(name, "ok" if resp.status_code < 500 else "error").observe(time.perf_counter() - start)
        if resp.status_code >= 500:
            await self._record_failure(decision.id)
        raw = [(k.encode(), v.encode()) for k, v in headers.items()]
        if media_type := resp.headers.get("content-type"):
            raw.append((b"content-type", media_type.encode("latin-1")))
        if stream:
            return _Stream(resp.status_code, raw, resp.aiter_bytes(), resp.aclose)
        return resp.status_code, resp.content, raw + [(b"content-length", str(len(resp.content)).encode())]

    async def models(self):
        names = [self.sv.route_name, *self.config.model_names]
        return _json(200, {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "genbandit"} for n in names]})

    async def stats(self):
        return _json(200, await asyncio.to_thread(self.router.stats))

    async def decision(self, decision_id: str):
        return _json(200, await asyncio.to_thread(self.router.get_decision, decision_id))

    async def admin_state(self):
        r = self.router

        def state():
            r.sync()
            with r._lock:
                return {"log_position": r._cursor, "state": r.policy.state_dict()}

        return _json(200, await asyncio.to_thread(state))

    async def admin_snapshot(self):
        return _json(200, {"saved": await asyncio.to_thread(self.router.snapshot, True)})

    async def prometheus(self):
        body = generate_latest(self.metrics.registry)
        return 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(body)).encode())]

    async def healthz(self):
        r = self.router
        ok = await asyncio.to_thread(r.store.ping)
        body = {"status": "ok" if ok else "store unavailable", "store": r.store.kind, "replica": r.replica_id, "policy_rounds": r.policy.t}
        return _json(200 if ok else 503, body)

    def openapi_paths(self) -> dict:
        """The router's own endpoints, for ``/openapi.json``."""
        paths: dict = {}
        for (method, path), ep in self.endpoints.items():
            op: dict = {"summary": ep.what, "responses": {"200": {"description": "OK"}}}
            if ep.role != "none" and not (ep.role == "client" and self.keys.roles["client"] is None):
                op["security"] = [{"apiKey": []}]
            if ep.body:
                op["requestBody"] = {"content": {"application/json": {"schema": {"type": "object"}}}}
            paths.setdefault(path, {})[method.lower()] = op
        return paths


# ------------------------------------------------------------------------------------------ the app
class _RouterApp(FastAPI):
    """FastAPI, with the router's own endpoints (:class:`_Api`) answered before its middleware stack."""

    api: _Api

    async def __call__(self, scope, receive, send) -> None:
        await self.api(scope, receive, send)

    async def call_fastapi(self, scope, receive, send) -> None:
        await super().__call__(scope, receive, send)


def create_app(config: RouterConfig, *, router: Router | None = None, **router_options: Any) -> FastAPI:
    """The ASGI app. The :class:`Router` is built at startup (unless given) and closed at shutdown."""
    sv = config.server
    metrics = _Metrics()
    holder: dict = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        r = router if router is not None else await asyncio.to_thread(lambda: Router(config, **router_options))
        holder["router"] = app.state.router = r
        metrics.rounds.set_function(lambda: r.policy.t)
        if r.budget is not None:
            metrics.budget.set(r.budget)
            metrics.mean_cost.set_function(lambda: float(r.policy.mean_cost[0]))
            metrics.price.set_function(r.price)
        holder["http"] = httpx.AsyncClient(timeout=httpx.Timeout(sv.upstream_timeout_s, connect=min(10.0, sv.upstream_timeout_s)))
        try:
            yield
        finally:
            await holder["http"].aclose()
            if router is None:
                await asyncio.to_thread(r.close)

    app = _RouterApp(title="genbandit router", version="1", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.keys = keys = _Keys(config.auth)
    app.api = _Api(app.call_fastapi, config=config, holder=holder, metrics=metrics, keys=keys)

    @app.exception_handler(RouterError)
    async def _router_error(request: Request, exc: RouterError) -> JSONResponse:
        return JSONResponse(_error_payload(exc), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _openai_error(exc.status_code, str(exc.detail), "invalid_request_error", code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _openai_error(422, f"Invalid request: {exc.errors()}", "invalid_request_error", "invalid_value")

    if sv.docs:

        @app.get("/openapi.json", include_in_schema=False)
        async def openapi(request: Request):
            require_read_access(request)
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema["paths"] = {**app.api.openapi_paths(), **schema.get("paths", {})}
            schema.setdefault("components", {})["securitySchemes"] = {"apiKey": {"type": "http", "scheme": "bearer"}}
            return schema

    app.include_router(dashboard_routes(require_read_access))
    return app


# ------------------------------------------------------------------------------------------ the server
def _guarded_protocol(sv: ServerSpec) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the router's connection limits.

    A connection beyond ``max_connections`` is closed at once; a connection that has not sent a
    whole request head within ``header_timeout_s`` of opening (or within ``keep_alive_s +
    header_timeout_s`` of its last answer) is closed: idle and slowly-sent connections cannot pile up.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class Guarded(base):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > sv.max_connections:
                log.warning("closing a connection: %d are open, the limit is %d ([server] max_connections)", len(self.connections), sv.max_connections)
                transport.close()
                return
            self._arm(sv.header_timeout_s)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm(sv.keep_alive_s + sv.header_timeout_s)

        def connection_lost(self, exc) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self, delay: float) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            cycle = self.cycle

            def expire() -> None:
                if self.cycle is cycle and not self.transport.is_closing():
                    self.transport.close()

            self._head_timer = self.loop.call_later(delay, expire)

    return Guarded


def server_config(app, config: RouterConfig, *, host: str | None = None, port: int | None = None, log_level: str = "info"):
    """The ``uvicorn.Config`` that ``genbandit serve`` runs ``app`` with: the ``[server]`` limits applied."""
    import uvicorn

    sv = config.server
    return uvicorn.Config(
        app,
        host=host or sv.host,
        port=sv.port if port is None else port,
        http=_guarded_protocol(sv),
        timeout_keep_alive=sv.keep_alive_s,
        log_level=log_level,
        access_log=False,
        proxy_headers=False,  # the router does not use the client's address
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
