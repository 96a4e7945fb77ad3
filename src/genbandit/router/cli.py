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
    import resource
    import sys

    import uvicorn

    from .app import create_app, server_config
    from .config import load_router_config

    config = load_router_config(args.config)
    # Room for max_connections sockets besides the store's and the upstreams' (the soft limit is often 1,024).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = config.server.max_connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    # The SQLite writer thread waits on the event loop's thread for the GIL after each commit; a
    # 0.5 ms switch interval (not 5 ms) hands it over sooner, which shortens the latency tail.
    sys.setswitchinterval(0.0005)
    # One process per router: replicas are separate processes sharing a Redis store.
    uvicorn.Server(server_config(create_app(config), config, host=args.host, port=args.port, log_level=args.log_level)).run()
    return 0
