"""``genbandit serve --config router.toml``: run the router on uvicorn; ``genbandit serve --demo``: try it with no LLM.

FastAPI and uvicorn are imported only when the command runs, so ``genbandit --help`` works
without the ``router`` extra.
"""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="run the model router (HTTP, OpenAI-compatible) from a router config (TOML), or its demo")
    serve.add_argument("--config", help="router config (TOML); see genbandit.router.config")
    serve.add_argument("--host", help="address to listen on (default: [server] host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: [server] port, 8000)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    demo = serve.add_argument_group("demo (no LLM needed: three real LLMs' logged outcomes on 127.0.0.1; see genbandit.router.demo)")
    demo.add_argument("--demo", action="store_true", help="start demo upstreams and a router, and play logged prompts through it")
    demo.add_argument("--demo-requests", type=int, default=1500, help="prompts to play (default 1500, at most 3609)")
    demo.add_argument("--demo-seconds", type=float, default=60.0, help="stop playing after this many seconds (default 60)")
    demo.add_argument("--demo-embedding", default="hashing", choices=["hashing", "minilm"],
                      help="how the router embeds prompts: feature hashing (starts at once) or all-MiniLM-L6-v2 (cached on disk)")
    demo.add_argument("--demo-exit", action="store_true", help="stop when the play ends (default: keep serving until Ctrl-C)")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import resource
    import sys
    from ..core.validation import InvalidParameterError

    if args.demo:
        if args.config or args.host:
            raise InvalidParameterError("--demo makes its own config and listens on 127.0.0.1 only: drop --config and --host.")
        from .demo import run_demo

        run_demo(port=8000 if args.port is None else args.port, requests=args.demo_requests, seconds=args.demo_seconds,
                 embedding=args.demo_embedding, keep_serving=not args.demo_exit)
        return 0
    if not args.config:
        raise InvalidParameterError("genbandit serve needs --config router.toml (or --demo to try it with no LLM).")

    import uvicorn
    from threadpoolctl import threadpool_limits

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
    # NumPy's BLAS keeps a thread per core for the policy's matrix updates; at these sizes they only spin against the
    # event loop for the CPU: with one, a feedback took 0.66 ms of CPU instead of 6.3 ms (RFF-UCB, 2 busy cores).
    threadpool_limits(1, user_api="blas")
    if config.embedding.kind == "sentence-transformers":
        # Each copy of the model ([embedding] threads) runs its forward passes on one thread. Torch's default, a thread
        # per core, spins against the event loop (and the load) for the CPU, and every operator waits for its slowest
        # thread: on 2 busy cores a forward pass on two threads ran at a tenth of its speed on one.
        import torch

        torch.set_num_threads(1)
    # One process per router: replicas are separate processes sharing a Redis store.
    uvicorn.Server(server_config(create_app(config), config, host=args.host, port=args.port, log_level=args.log_level)).run()
    return 0
