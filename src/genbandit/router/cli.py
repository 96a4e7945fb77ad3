"""``genbandit serve --config router.toml``: run the router on uvicorn.

FastAPI and uvicorn are imported only when the command runs, so ``genbandit --help`` works
without the ``router`` extra.
"""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="run the model router (HTTP, OpenAI-compatible) from a router config (TOML)")
    serve.add_argument("--config", required=True, help="router config (TOML); see genbandit.router.config")
    serve.add_argument("--host", help="address to listen on (default: [server] host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: [server] port, 8000)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .config import load_router_config

    config = load_router_config(args.config)
    app = create_app(config)
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    # One process per router: replicas are separate processes sharing a Redis store.
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, access_log=False, timeout_graceful_shutdown=10)
    return 0
