"""Prompt-aware model routing over HTTP: a contextual bandit in front of several LLM endpoints.

:class:`Router` (no HTTP) embeds a prompt, chooses a model with any registered contextual policy
(default RFF-UCB) and learns from feedback; :func:`create_app` wraps it in an OpenAI-compatible
FastAPI app; ``genbandit serve --config router.toml`` runs that app on uvicorn. State lives in
SQLite (default) or Redis (several replicas sharing one policy); see :mod:`.store`.

``create_app`` needs the ``router`` extra (FastAPI, uvicorn, httpx, prometheus-client); it is
imported on first use.
"""

from __future__ import annotations

from typing import Any

from .config import RouterConfig, load_router_config
from .service import Router

__all__ = ["Router", "RouterConfig", "load_router_config", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
