"""A live dashboard of a running router: ``/dashboard``, drawn in the browser from ``/dashboard/data``.

========================  ======  ==============================================================
endpoint                  key     what it is
========================  ======  ==============================================================
GET /dashboard            none    the page (HTML; no data in it, nothing loaded from elsewhere)
GET /dashboard/static/*   none    its script and style sheet, served from this package
GET /dashboard/data       read    ``/v1/stats`` (as ``stats``, the same numbers), per-model spend
                                  and reward intervals, and the history the charts draw
========================  ======  ==============================================================

The page asks for a key (or takes it from the address, ``/dashboard#key=KEY``: the part after
``#`` is never sent to a server), keeps it in the tab's session storage, and polls the data every two
seconds with ``Authorization: Bearer KEY``. Per model it shows decisions, feedback, mean reward with
a 95% interval, cost per request and spend; charts of decisions, mean reward (with its interval)
and spend over time; the newest decisions; and the policy's round count.

The history is kept in this replica's memory: one point each time the data is read and the
counters have changed since the last point, thinned to every second point (the newest kept) when
it grows past ``max_points``. So the charts cover the time since the page (or any client of
``/dashboard/data``) first read it on this replica.

The interval is Hoeffding's (Hoeffding 1963, Theorem 2) for rewards bounded in the router's
``reward_range`` ``[a, b]``: ``mean +- (b - a) sqrt(ln(2 / 0.05) / (2 n))`` over the ``n``
feedbacks of a model, clipped to the range. It treats a model's rewards as independent draws,
which a router choosing by past rewards only approximates.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from importlib import resources
from typing import Any, Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

__all__ = ["dashboard_routes", "DashboardHistory", "reward_interval"]

#: Confidence level of the reward intervals.
CONFIDENCE = 0.95

_ASSETS = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}
_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def reward_interval(mean: float | None, n: int, low: float, high: float, confidence: float = CONFIDENCE) -> list[float] | None:
    """Hoeffding's two-sided interval for the mean of ``n`` rewards in ``[low, high]``, clipped to it.

    >>> [round(v, 4) for v in reward_interval(0.9, 100, 0.0, 1.0)]
    [0.7642, 1.0]
    >>> reward_interval(None, 0, 0.0, 1.0) is None
    True
    """
    if mean is None or n <= 0:
        return None
    half = (high - low) * math.sqrt(math.log(2.0 / (1.0 - confidence)) / (2.0 * n))
    return [max(low, mean - half), min(high, mean + half)]


class DashboardHistory:
    """Per-model counters over time, bounded: what the dashboard's charts draw.

    >>> h = DashboardHistory(max_points=4)
    >>> stats = lambda n: {"decisions": n, "feedback": n, "models": [{"name": "a", "pulls": n, "feedback": n, "mean_reward": 0.5, "cost": 2.0}]}
    >>> for n in range(7):
    ...     _ = h.add(stats(n), (0.0, 1.0), now=float(n))
    >>> [p["t"] for p in h.points], h.points[-1]["models"]["a"]["spend"]
    ([0.0, 4.0, 6.0], 12.0)
    """

    def __init__(self, max_points: int = 600) -> None:
        self.max_points = max_points
        self.points: list[dict] = []
        self._lock = threading.Lock()

    def add(self, stats: dict, reward_range: tuple[float, float], now: float) -> dict:
        """Record ``stats`` (the output of ``Router.stats``) if its counters moved; the dashboard's data."""
        low, high = reward_range
        models = {
            m["name"]: {
                "pulls": m["pulls"],
                "feedback": m["feedback"],
                "mean_reward": m["mean_reward"],
                "interval": reward_interval(m["mean_reward"], m["feedback"], low, high),
                "spend": m["pulls"] * m["cost"],
            }
            for m in stats["models"]
        }
        with self._lock:
            last = self.points[-1] if self.points else None
            if last is None or (last["decisions"], last["feedback"]) != (stats["decisions"], stats["feedback"]):
                self.points.append({"t": now, "decisions": stats["decisions"], "feedback": stats["feedback"], "models": models})
                if len(self.points) > self.max_points:
                    self.points = self.points[::-2][::-1]  # every second point, the newest kept
            series = list(self.points)
        return {
            "stats": stats,
            "models": models,
            "series": series,
            "confidence": CONFIDENCE,
            "reward_range": [low, high],
            "now": now,
        }


def dashboard_routes(read_dependency: Callable[[Request], Any], max_points: int = 600) -> APIRouter:
    """The dashboard's routes, for ``app.include_router``.

    ``read_dependency(request)`` (plain or async) must raise for a request whose key may not read the
    router's stats; it guards ``/dashboard/data``. The router is ``request.app.state.router``.
    """
    history = DashboardHistory(max_points)

    async def read_access(request: Request) -> None:
        checked = read_dependency(request)
        if inspect.isawaitable(checked):
            await checked

    routes = APIRouter(include_in_schema=False)

    @routes.get("/dashboard")
    async def page() -> Response:
        return HTMLResponse(_asset("dashboard.html"), headers=_HEADERS)

    @routes.get("/dashboard/static/{name}")
    async def asset(name: str) -> Response:
        if name not in _ASSETS:
            error = {"message": f"No dashboard asset {name!r}.", "type": "invalid_request_error", "code": "not_found"}
            return JSONResponse({"error": error}, status_code=404)
        return Response(_asset(name), media_type=_ASSETS[name], headers=_HEADERS)

    @routes.get("/dashboard/data", dependencies=[Depends(read_access)])
    async def data(request: Request) -> dict:
        router = request.app.state.router
        stats = await run_in_threadpool(router.stats)
        return history.add(stats, router.config.server.reward_range, time.time())

    return routes
