"""Router throughput and latency on loopback, and in-process decision time beside ParetoBandit's.

Run by hand (not in CI), from the repository root::

    PYTHONPATH=src python benchmarks/router_bench.py --requests 3000 --model-requests 300 --inproc 500 --out docs/router_benchmark.json

What it measures (every request goes to 127.0.0.1 only, and every phase is bounded in count and time):

1. In process (NumPy's BLAS on one thread, as in ``genbandit serve``): ``Router.route`` on a
   precomputed 384-d embedding (``--policy``, default the router's default: select, the recorded
   propensity, decision write to SQLite) and ``Router.feedback`` (durable log append + policy
   update), the policy's ``select`` alone, ParetoBandit's ``BanditRouter.route`` /
   ``process_feedback`` on the same vectors (its ``FeatureService.for_precomputed``: no PCA, no
   encoder), and all-MiniLM-L6-v2 alone on the MiniLM phase's prompts in batches of one per client,
   for each ``--minilm`` setting (backend, precision, threads: copies of the model, each on one
   thread taking the next batch, as ``genbandit serve`` runs them), with its CPU time per text.
2. Over HTTP, ``genbandit serve`` in a child process: ``/v1/route`` with precomputed embeddings,
   then ``/v1/feedback`` for those decisions, from ``--concurrency`` keep-alive connections; then,
   for each ``--minilm`` setting, ``/v1/route`` with prompt text embedded by the real
   all-MiniLM-L6-v2 model (a fresh server per setting). The load generator
   runs in its own process (raw HTTP/1.1 over asyncio streams, on uvloop when installed), so that
   its cost is not the server's.

Decisions per second are completed requests divided by the phase's wall time; each HTTP phase also
reports the server process's CPU time per request. The run also reports HTTP routes/s over
in-process routes/s and over ``select``/s, and MiniLM routes/s over the model's own texts/s: on a
shared machine the absolute numbers follow its load, the ratios and the CPU per request much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TOPICS = ["a Python function that merges two sorted lists", "the causes of the French Revolution", "a haiku about autumn rain",
          "how vaccines train the immune system", "a SQL query for the top five customers by revenue", "the proof that sqrt(2) is irrational",
          "a polite email declining a meeting", "the difference between TCP and UDP", "a recipe for vegetable curry", "Bayes' theorem with an example"]
ASKS = ["Write {}.", "Explain {} to a beginner.", "Summarise {} in three sentences.", "Give me {} and explain each step carefully, with examples.",
        "Translate into French: {}.", "What are common mistakes with {}?"]


def prompts(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [ASKS[rng.integers(len(ASKS))].format(TOPICS[rng.integers(len(TOPICS))]) + f" (request {i})" for i in range(n)]


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values), q)) if len(values) else float("nan")


def summary(lat_s: list[float], wall: float) -> dict:
    ms = [x * 1e3 for x in lat_s]
    return {"n": len(ms), "per_second": len(ms) / wall if wall > 0 else float("nan"), "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "wall_s": wall}


# ------------------------------------------------------------------------------------------ in process
def in_process(vectors: np.ndarray, n: int, tmp: Path, policy: str) -> dict:
    from genbandit.router import Router, load_router_config

    config = load_router_config({
        "models": [{"name": m, "base_url": "http://127.0.0.1:9/v1"} for m in ("small", "medium", "large")],
        "policy": {"name": policy},
        "embedding": {"kind": "none", "dim": vectors.shape[1]},
        "store": {"path": str(tmp / "inproc.db"), "snapshot_every": 10**9},
        "auth": {"feedback_keys": ["k"]},
    })
    router = Router(config)
    rng = np.random.default_rng(1)
    xs = [vectors[i % len(vectors)] for i in range(n)]
    out = {}
    t_route, decisions = timed(lambda x: router.route(embedding=x.tolist()), xs)
    t_fb, _ = timed(lambda d: router.feedback(d.id, float(rng.uniform())), decisions)
    t_sel, _ = timed(router.policy.select, xs)
    ids = [router.route(embedding=x.tolist()).id for x in xs]
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        t_par = [t for lat, _ in pool.map(lambda did: timed(lambda d: router.feedback(d, 0.5), [did]), ids) for t in lat]
    wall = time.perf_counter() - start
    name = type(router.policy).__name__
    out[f"genbandit route ({name}, SQLite write)"] = summary(t_route, sum(t_route))
    out["genbandit feedback (durable append + update)"] = summary(t_fb, sum(t_fb))
    out["genbandit feedback from 8 threads (group commit)"] = summary(t_par, wall)
    out[f"genbandit policy.select alone ({name})"] = summary(t_sel, sum(t_sel))
    router.close()

    try:
        from pareto_bandit import BanditRouter, FeatureService
    except ImportError:
        return out
    reg = {"small": {"blended_cost_per_m": 0.2}, "medium": {"blended_cost_per_m": 1.0}, "large": {"blended_cost_per_m": 5.0}}
    pb = BanditRouter(model_registry=reg, feature_service=FeatureService.for_precomputed(vectors.shape[1]), bandit_seed=0)
    t_route, routed = timed(pb.route, xs)
    t_fb, _ = timed(lambda r: pb.process_feedback(r[1].request_id, float(rng.uniform())), routed)
    out["ParetoBandit route (LinUCB, in memory)"] = summary(t_route, sum(t_route))
    out["ParetoBandit process_feedback"] = summary(t_fb, sum(t_fb))
    return out


def timed(fn, items) -> tuple[list[float], list]:
    """Seconds each ``fn(item)`` took, and what it returned."""
    latencies, results = [], []
    for item in items:
        t0 = time.perf_counter()
        results.append(fn(item))
        latencies.append(time.perf_counter() - t0)
    return latencies, results


# ------------------------------------------------------------------------------------------ over HTTP
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(config: dict, tmp: Path, name: str) -> tuple[subprocess.Popen, str]:
    import httpx

    lines = ['[[models]]\nname = "small"\nbase_url = "http://127.0.0.1:9/v1"', '[[models]]\nname = "medium"\nbase_url = "http://127.0.0.1:9/v1"',
             '[[models]]\nname = "large"\nbase_url = "http://127.0.0.1:9/v1"']
    lines.append("[embedding]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in config["embedding"].items()))
    lines.append(f'[store]\npath = "{tmp / (name + ".db")}"\nsynchronous = "{config.get("synchronous", "full")}"')
    lines.append(f'[policy]\nname = "{config["policy"]}"')
    if config.get("server"):
        lines.append("[server]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in config["server"].items()))
    lines.append('[auth]\nfeedback_keys = ["bench-key"]')
    path = tmp / f"{name}.toml"
    path.write_text("\n\n".join(lines) + "\n")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src")), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "genbandit.cli", "serve", "--config", str(path), "--port", str(port), "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the router exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the router did not start")


def _request(path: str, body: bytes, headers: dict | None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{extra}content-length: {len(body)}\r\n\r\n").encode() + body


async def _drive(port: int, path: str, bodies: list[bytes], concurrency: int, max_seconds: float, headers: dict | None):
    """``concurrency`` keep-alive connections, each sending its next request when the last is answered."""
    latencies: list[float] = []
    answers: list = [None] * len(bodies)
    queue = iter(range(len(bodies)))
    deadline = time.monotonic() + max_seconds

    async def worker():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in queue:
                if time.monotonic() > deadline:
                    return
                t0 = time.perf_counter()
                writer.write(_request(path, bodies[i], headers))
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
                body = await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                status = int(head[9:12])
                if status != 200:
                    raise RuntimeError(f"{path} answered {status}: {body[:200]!r}")
                answers[i] = body
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start, answers


def _load_process(port: int, path: str, bodies: list[bytes], concurrency: int, max_seconds: float, headers: dict | None):
    """Runs in the load generator's own process: raw HTTP/1.1 over asyncio streams (uvloop when installed)."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    cpu = time.process_time()
    latencies, wall, answers = runner(_drive(port, path, bodies, concurrency, max_seconds, headers))
    return latencies, wall, answers, time.process_time() - cpu


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) process ``pid`` has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(pool, url: str, bodies: list[dict], path: str, concurrency: int, max_seconds: float, headers: dict | None = None,
          server: subprocess.Popen | None = None) -> tuple[dict, list]:
    """Send ``bodies`` to ``url + path`` from the load generator process; (summary, parsed answers).

    With ``server``, the summary also holds the CPU time that process used per answered request
    (``server_cpu_ms``): what a request costs the server, which a busy machine changes far less
    than it changes requests per second. ``client_cpu_ms`` is the load generator's CPU time per
    request: the two together bound the requests per second that the machine's cores can carry.
    """
    port = int(url.rsplit(":", 1)[1])
    encoded = [json.dumps(b).encode() for b in bodies]
    before = cpu_seconds(server.pid) if server is not None else None
    latencies, wall, answers, client_cpu = pool.submit(_load_process, port, path, encoded, concurrency, max_seconds, headers).result()
    out = {**summary(latencies, wall), "client_cpu_ms": 1e3 * client_cpu / max(len(latencies), 1)}
    if before is not None:
        out["server_cpu_ms"] = 1e3 * (cpu_seconds(server.pid) - before) / max(len(latencies), 1)
    return out, [None if a is None else json.loads(a) for a in answers]


def over_http(vectors: np.ndarray, texts: list[str], args, tmp: Path) -> dict:
    out = {}
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        proc, url = start_server({"embedding": {"kind": "none", "dim": int(vectors.shape[1])}, "policy": args.policy}, tmp, "precomputed")
        try:
            warm = [{"embedding": vectors[i % len(vectors)].tolist()} for i in range(200)]
            drive(pool, url, warm, "/v1/route", args.concurrency, 60)
            bodies = [{"embedding": vectors[i % len(vectors)].tolist()} for i in range(args.requests)]
            out["/v1/route, precomputed embedding"], answers = drive(pool, url, bodies, "/v1/route", args.concurrency, args.max_seconds, server=proc)
            rng = np.random.default_rng(2)
            fb = [{"decision_id": a["decision_id"], "reward": float(rng.uniform())} for a in answers if a]
            out["/v1/feedback"], _ = drive(pool, url, fb, "/v1/feedback", args.concurrency, args.max_seconds, {"x-api-key": "bench-key"}, server=proc)
        finally:
            proc.terminate()
            proc.wait(30)
        for variant in args.minilm if args.model_requests else []:
            proc, url = start_server({"embedding": {"kind": "sentence-transformers", **variant}, "policy": args.policy}, tmp, "minilm")
            try:
                drive(pool, url, [{"prompt": t} for t in texts[:40]], "/v1/route", args.concurrency, 120)
                bodies = [{"prompt": texts[(i + 40) % len(texts)]} for i in range(args.model_requests)]
                out[f"/v1/route, prompt embedded by all-MiniLM-L6-v2 ({label(variant)})"], _ = drive(
                    pool, url, bodies, "/v1/route", args.concurrency, args.max_seconds, server=proc)
            finally:
                proc.terminate()
                proc.wait(30)
    return out


def minilm_variant(text: str) -> dict:
    """``backend=onnx,threads=2`` -> the [embedding] keys of one MiniLM phase (backend, precision, threads)."""
    variant = {"backend": "torch", "precision": "float32", "threads": 1}
    for pair in text.split(","):
        key, _, value = pair.partition("=")
        if key not in variant:
            raise argparse.ArgumentTypeError(f"--minilm takes backend=..., precision=... and threads=...; got {pair!r}")
        variant[key] = int(value) if key == "threads" else value
    return variant


def label(variant: dict) -> str:
    return f"{variant['backend']}, {variant['precision']}, {variant['threads']} thread{'s' if variant['threads'] > 1 else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per precomputed-embedding phase")
    parser.add_argument("--model-requests", type=int, default=300, help="requests in the real-model phase")
    parser.add_argument("--inproc", type=int, default=1000, help="calls per in-process measurement")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--policy", default="evidence-thompson", help="the router's [policy] name (default: the router's default)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time bound of each HTTP phase")
    parser.add_argument("--minilm", type=minilm_variant, action="append",
                        help="an [embedding] setting of the MiniLM phases, e.g. backend=onnx,threads=2 (repeatable; default: backend=torch and backend=onnx)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    args.minilm = args.minilm or [minilm_variant("backend=torch"), minilm_variant("backend=onnx")]

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from threadpoolctl import threadpool_limits

    from genbandit.embeddings import SentenceEmbedder

    threadpool_limits(1, user_api="blas")  # as genbandit serve runs (its server has the same limit)

    texts = prompts(max(args.model_requests + 20, 500))
    load_before = os.getloadavg()
    embedder = SentenceEmbedder(cache_dir=False)
    vectors = embedder.encode(texts[:500]).astype(float)
    with tempfile.TemporaryDirectory() as tmp:
        results = {"in_process": in_process(vectors, args.inproc, Path(tmp), args.policy), "http": over_http(vectors, texts, args, Path(tmp))}
    import torch

    k = args.concurrency
    batches = [texts[40 + i : 40 + i + k] for i in range(0, args.model_requests, k)]
    results["minilm_http_over_forward"] = {}
    torch.set_num_threads(1)  # as genbandit serve runs it: [embedding] threads copies of the model, each on one thread
    for variant in args.minilm if args.model_requests else []:
        # The model alone on the prompts of the HTTP phase, in batches of one per client, each copy taking the next batch: that phase's ceiling.
        copies = [SentenceEmbedder(cache_dir=False, **{**variant, "threads": 1}) for _ in range(variant["threads"])]
        for alone in copies:
            alone.encode(texts[:k])
        todo, cpu = iter(batches), time.process_time()
        start = time.perf_counter()
        with ThreadPoolExecutor(len(copies)) as pool:
            lat = [t for part in pool.map(lambda alone: timed(alone.encode, todo)[0], copies) for t in part]
        wall = time.perf_counter() - start
        results["in_process"][f"all-MiniLM-L6-v2 alone, batches of {k} ({label(variant)}) (per second: texts)"] = {
            **summary(lat, wall), "n": sum(map(len, batches)), "per_second": sum(map(len, batches)) / wall,
            "cpu_ms_per_text": 1e3 * (time.process_time() - cpu) / sum(map(len, batches))}
        results["minilm_http_over_forward"][label(variant)] = (
            results["http"][f"/v1/route, prompt embedded by all-MiniLM-L6-v2 ({label(variant)})"]["per_second"]
            / results["in_process"][f"all-MiniLM-L6-v2 alone, batches of {k} ({label(variant)}) (per second: texts)"]["per_second"])
    inproc = results["in_process"]
    http_route = results["http"]["/v1/route, precomputed embedding"]["per_second"]
    results["http_over_in_process"] = http_route / next(s["per_second"] for k, s in inproc.items() if k.startswith("genbandit route"))
    results["http_over_select"] = http_route / next(s["per_second"] for k, s in inproc.items() if k.startswith("genbandit policy.select"))
    results["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(), "load_before": load_before, "load_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "concurrency": args.concurrency, "policy": args.policy,
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    print(f"machine: {results['machine']}")
    print("\n| in process | calls | per second | median (µs) | p99 (µs) |\n|---|---|---|---|---|")
    for name, s in results["in_process"].items():
        print(f"| {name} | {s['n']} | {s['per_second']:.0f} | {s['p50_ms'] * 1e3:.0f} | {s['p99_ms'] * 1e3:.0f} |")
    print(f"\n| over HTTP (loopback, {args.concurrency} concurrent clients) | requests | per second | p50 (ms) | p99 (ms) | server CPU per request (ms) "
          "| load generator CPU per request (ms) |\n|---|---|---|---|---|---|---|")
    for name, s in results["http"].items():
        print(f"| {name} | {s['n']} | {s['per_second']:.0f} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['server_cpu_ms']:.2f} | {s['client_cpu_ms']:.2f} |")
    print(f"\nHTTP routes/s over in-process routes/s (same run): {results['http_over_in_process']:.2f}; over policy.select/s: {results['http_over_select']:.2f}")
    for name, s in results["in_process"].items():
        if "cpu_ms_per_text" in s:
            print(f"{name}: {s['cpu_ms_per_text']:.2f} ms of CPU per text")
    for name, ratio in results["minilm_http_over_forward"].items():
        print(f"MiniLM routes/s over HTTP over the model's own texts/s in batches of {args.concurrency} ({name}): {ratio:.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


# ------------------------------------------------------------------------------------------ overhead beside LiteLLM
def overhead(argv: list[str]) -> int:
    """``--overhead``: the latency a proxy adds to a chat completion, genbandit beside the LiteLLM proxy.

    One local OpenAI-compatible upstream (``genbandit.router.demo.upstream_app``: answers each of the
    ParetoBandit prompts at once from the logged table) in its own process; in front of it, in their own
    processes, ``genbandit serve`` (the demo's config: three models at that upstream, feature-hashing
    embedding, SQLite) and ``litellm --config`` (one model at that upstream, one worker, its master key).
    The same chat completions go to the upstream directly, through genbandit (the model forced, and
    routed with ``model="auto"``: embedding, policy and the decision written to SQLite) and through
    LiteLLM, from 1, 4 and 16 concurrent clients, in one run; the targets take turns in rounds, and each
    statistic is the median over the rounds. Added latency is a percentile through the proxy minus the
    same percentile direct.
    """
    import httpx

    from genbandit.router.demo import LoggedOutcomes, demo_config

    parser = argparse.ArgumentParser(prog="router_bench.py --overhead", description=overhead.__doc__.splitlines()[0])
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--requests", type=int, default=600, help="chat completions per target and concurrency, over all rounds")
    parser.add_argument("--rounds", type=int, default=3, help="the targets take turns this many times per concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time bound of each measurement")
    parser.add_argument("--litellm", default="litellm", help="the LiteLLM proxy's command (pip install 'litellm[proxy]')")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    litellm = shutil.which(args.litellm)
    if litellm is None:
        parser.error(f"no LiteLLM proxy command {args.litellm!r}: pip install 'litellm[proxy]' (or give its path with --litellm)")

    table = LoggedOutcomes.paretobandit()
    model, name = table.model_ids[1], table.names[1]
    master_key = "sk-bench-" + os.urandom(16).hex()
    python_path = os.pathsep.join(str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", str(ROOT / "src")).split(os.pathsep))
    env = {**os.environ, "PYTHONPATH": python_path, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # the servers run in a temporary folder
    upstream_code = ("import sys, uvicorn\nfrom genbandit.router.demo import LoggedOutcomes, upstream_app\n"
                     "uvicorn.run(upstream_app(LoggedOutcomes.paretobandit()), host='127.0.0.1', port=int(sys.argv[1]), log_level='warning', access_log=False)")
    ports = {k: free_port() for k in ("upstream", "genbandit", "litellm")}
    urls = {k: f"http://127.0.0.1:{p}" for k, p in ports.items()}
    load_before = os.getloadavg()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        config = Path(tmp) / "router.toml"
        config.write_text(demo_config(urls["upstream"] + "/v1", table, store_path=str(Path(tmp) / "router.db"), key="bench-admin", port=ports["genbandit"]))
        (Path(tmp) / "litellm.yaml").write_text(
            f"model_list:\n  - model_name: {name}\n    litellm_params:\n      model: openai/{model}\n      api_base: {urls['upstream']}/v1\n"
            f"      api_key: unused\nlitellm_settings:\n  telemetry: false\ngeneral_settings:\n  master_key: {master_key}\n")
        commands = {
            "upstream": [sys.executable, "-c", upstream_code, str(ports["upstream"])],
            "genbandit": [sys.executable, "-m", "genbandit.cli", "serve", "--config", str(config), "--log-level", "warning"],
            "litellm": [litellm, "--config", str(Path(tmp) / "litellm.yaml"), "--host", "127.0.0.1", "--port", str(ports["litellm"]), "--num_workers", "1"],
        }
        try:
            for what, command in commands.items():
                procs.append(subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + 300
                while True:
                    if procs[-1].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{what} did not start: {' '.join(command)}")
                    try:
                        if httpx.get(urls[what] + ("/health/liveliness" if what == "litellm" else "/v1/models"), timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.3)
            targets = {
                "direct to the upstream": (urls["upstream"], model, None),
                "genbandit, model forced": (urls["genbandit"], name, None),
                "genbandit, routed (model=auto)": (urls["genbandit"], "auto", None),
                "LiteLLM proxy": (urls["litellm"], name, {"authorization": f"Bearer {master_key}"}),
            }
            for url, model_field, headers in targets.values():  # warm-up
                bodies = [{"model": model_field, "messages": [{"role": "user", "content": p}]} for p in table.prompts[:50]]
                drive(pool, url, bodies, "/v1/chat/completions", 4, 60, headers)
            runs: dict = {}
            per_round = args.requests // args.rounds
            for c in args.concurrency:
                for r in range(args.rounds):  # the targets take turns, in a rotated order, so that a change of load hits all alike
                    for k in range(len(targets)):
                        target = list(targets)[(k + r) % len(targets)]
                        url, model_field, headers = targets[target]
                        prompts_ = table.prompts[r * per_round : (r + 1) * per_round]
                        bodies = [{"model": model_field, "messages": [{"role": "user", "content": p}]} for p in prompts_]
                        stat, answers = drive(pool, url, bodies, "/v1/chat/completions", c, args.max_seconds / args.rounds, headers)
                        assert all(a is None or a["genbandit_demo"] is not None for a in answers), f"{target} did not return the upstream's answer"
                        runs.setdefault(str(c), {}).setdefault(target, []).append(stat)
            # per target: the requests of all rounds, and the median over the rounds of each statistic
            results = {c: {t: {"n": sum(s["n"] for s in ss), **{k: float(np.median([s[k] for s in ss])) for k in ("per_second", "p50_ms", "p99_ms")}}
                           for t, ss in rows.items()} for c, rows in runs.items()}
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(30)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "load_before": load_before, "load_after": os.getloadavg(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "litellm": subprocess.run([litellm, "--version"], capture_output=True, text=True).stdout.strip()}
    print(f"machine: {machine}")
    print("\n| clients | path | requests | per second | p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) |\n|---|---|---|---|---|---|---|---|")
    for c, rows in results.items():
        direct = rows["direct to the upstream"]
        for target, r in rows.items():
            added = "" if r is direct else f" {r['p50_ms'] - direct['p50_ms']:+.2f} | {r['p99_ms'] - direct['p99_ms']:+.2f} |"
            print(f"| {c} | {target} | {r['n']} | {r['per_second']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |" + (added or " | |"))
    if args.out:
        args.out.write_text(json.dumps({"overhead": results, "rounds": runs, "machine": machine}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(overhead(sys.argv[1:]) if "--overhead" in sys.argv else main())
