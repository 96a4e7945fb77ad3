"""``genbandit specdec demo``: BanditSpec on real (tiny) language models, with no downloads.

1. Train once, on CPU, a small target GPT and a much smaller draft GPT (transformers ``GPT2Config``)
   on the Python standard library's own source files, with the byte tokenizer; cache them under
   ``~/.cache/genbandit/specdec-demo`` (or ``--cache-dir``). Training runs for a wall-clock budget.
2. Decode a mix of copy-heavy prompts (code to complete or edit) and free-text prompts (prose of
   the kind found in docstrings) greedily with every fixed arm (plain; model, pld and suffix
   drafters x speculation lengths), the per-prompt oracle, the best fixed arm per prompt set,
   and the bandits (UCBSpec and EXP3Spec when registered; UCB1 and EXP3 as classic yardsticks).
3. Check that every arm's and every policy's output is token for token the target's greedy
   decoding, and print a Markdown table of MAT and tokens/s; write it to ``results.md`` in the
   cache folder so :func:`cached_demo_table` can hand it to the banditspec report.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sysconfig
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["run_demo", "cached_demo_table", "report_section", "default_cache_dir", "DEMO_PROMPTS"]

RESULTS_FILE = "results.md"

TARGET_CONFIG = dict(n_embd=128, n_layer=4, n_head=4)
DRAFT_CONFIG = dict(n_embd=64, n_layer=1, n_head=2)
BATCH = 4
BLOCK = 512  # training context = model context
LENGTHS = (3, 6)

#: (kind, text). Copy-heavy prompts ask the model to continue or redo code it has just seen.
DEMO_PROMPTS: list[tuple[str, str]] = [
    (
        "code",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "    def __repr__(self):\n        return 'Point(%r, %r)' % (self.x, self.y)\n\n"
        "class Vector:\n    def __init__(self, x, y):\n",
    ),
    (
        "code",
        "def add(self, other):\n    if not isinstance(other, Number):\n        return NotImplemented\n"
        "    return self.value + other.value\n\n"
        "def sub(self, other):\n    if not isinstance(other, Number):\n",
    ),
    (
        "code",
        "    def test_lower(self):\n        self.assertEqual('ABC'.lower(), 'abc')\n\n"
        "    def test_upper(self):\n        self.assertEqual('abc'.upper(), 'ABC')\n\n"
        "    def test_title(self):\n",
    ),
    (
        "code",
        "import os\nimport sys\n\ndef main(argv=None):\n    if argv is None:\n        argv = sys.argv[1:]\n"
        "    for name in argv:\n        if os.path.isdir(name):\n            print(name)\n\n"
        "# the same function, with a different loop variable\ndef main(argv=None):\n",
    ),
    ("text", '"""Return a new list containing the elements of the sequence'),
    ("text", "# This module provides functions for reading and writing"),
    ("text", '    """Raised when the connection to the server is'),
    ("text", "The default value of the timeout is used when no"),
]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "genbandit" / "specdec-demo"


def cached_demo_table(cache_dir: str | os.PathLike | None = None) -> str | None:
    """The demo's Markdown table from its last run with cached models, or ``None`` when not cached."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = folder / RESULTS_FILE
    if not (path.is_file() and (folder / "target" / "config.json").is_file()):
        return None
    return path.read_text()


def report_section(ctx: Any) -> None:
    """Report hook of the ``banditspec`` reproduction: the demo's table from its last cached run, if any."""
    table = cached_demo_table()
    if table:
        ctx.add_section("Real speculative decoder: the demo's table", table)


# ------------------------------------------------------------------------------------------ corpus
def _corpus(max_bytes: int, holdout_every: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The standard library's ``.py`` files (sorted, test suites left out) as bytes: (train, held out)."""
    from .tokenizer import ByteTokenizer

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.relative_to(root).parts[0] and "site-packages" not in str(p))
    train: list[int] = []
    held: list[int] = []
    eos = ByteTokenizer.eos_token_id
    for i, path in enumerate(files):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) < 200:
            continue
        chunk = list(data[:60_000]) + [eos]
        (held if i % holdout_every == 0 else train).extend(chunk)
        if len(train) >= max_bytes:
            break
    return np.asarray(train, dtype=np.int64), np.asarray(held[:200_000], dtype=np.int64)


def _train(model: Any, data: np.ndarray, held: np.ndarray, seconds: float, batch: int, seed: int, log: Callable[[str], None], tag: str) -> dict:
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.01)
    start = time.perf_counter()
    step = 0
    losses = []
    warmup = 30
    while time.perf_counter() - start < seconds:
        frac = (time.perf_counter() - start) / seconds
        lr = 2e-3 * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = rng.integers(0, len(data) - BLOCK - 1, size=batch)
        x = torch.from_numpy(np.stack([data[s : s + BLOCK] for s in starts]))
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % 100 == 0:
            log(f"  {tag}: step {step}, loss {np.mean(losses[-100:]):.3f} nats/byte, {time.perf_counter() - start:.0f}s")
    model.eval()
    with torch.no_grad():
        rng_eval = np.random.default_rng(1)
        starts = rng_eval.integers(0, len(held) - BLOCK - 1, size=8)
        x = torch.from_numpy(np.stack([held[s : s + BLOCK] for s in starts]))
        held_loss = float(model(x, labels=x).loss)
    return {"steps": step, "seconds": round(time.perf_counter() - start, 1), "train_loss": round(float(np.mean(losses[-100:])), 3),
            "held_out_loss": round(held_loss, 3), "tokens_seen": step * batch * BLOCK}


def _build(config: dict, seed: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from .tokenizer import ByteTokenizer

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=ByteTokenizer.vocab_size, n_positions=BLOCK, bos_token_id=ByteTokenizer.eos_token_id,
                     eos_token_id=ByteTokenizer.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **config)
    return GPT2LMHeadModel(cfg)


def train_models(cache_dir: Path, train_seconds: float, log: Callable[[str], None], corpus_bytes: int = 6_000_000) -> dict:
    """Train and save the target and draft models; returns the training record."""
    t0 = time.perf_counter()
    data, held = _corpus(corpus_bytes)
    log(f"corpus: {len(data):,} training bytes and {len(held):,} held-out bytes of Python standard library source")
    record: dict[str, Any] = {"corpus_bytes": int(len(data)), "corpus": "Python standard library *.py (test suites left out)"}
    for tag, config, seconds, batch, seed in (("target", TARGET_CONFIG, train_seconds, BATCH, 0), ("draft", DRAFT_CONFIG, train_seconds / 3, BATCH, 1)):
        model = _build(config, seed)
        n_params = sum(p.numel() for p in model.parameters())
        log(f"training the {tag} ({n_params / 1e6:.2f}M parameters, {config}) for {seconds:.0f}s")
        record[tag] = {"parameters": n_params, "config": config, **_train(model, data, held, seconds, batch, seed, log, tag)}
        log(f"  {tag}: {record[tag]}")
        model.save_pretrained(cache_dir / tag)
    record["training_seconds"] = round(time.perf_counter() - t0, 1)
    (cache_dir / "training.json").write_text(json.dumps(record, indent=2))
    return record


# ------------------------------------------------------------------------------------------ decoding
def _policy_names() -> list[str]:
    from ..core.registry import POLICIES

    wanted = [name for name in ("UCBSpec", "EXP3Spec") if name in POLICIES]
    return wanted or ["UCB1", "EXP3"]  # classic stand-ins where the BanditSpec policies are not installed


def run_demo(
    cache_dir: str | os.PathLike | None = None,
    *,
    retrain: bool = False,
    train_seconds: float | None = None,
    max_new_tokens: int | None = None,
    seeds: int | None = None,
    quick: bool = False,
    out: str | os.PathLike | None = None,
    threads: int | None = 2,
    reward: str = "tokens",
    log: Callable[[str], None] = print,
) -> str:
    """Train (once) and decode; returns the Markdown table (and writes it to the cache folder)."""
    import torch
    from transformers import GPT2LMHeadModel

    from .decoder import SpeculativeDecoder
    from .drafters import ModelDrafter, PromptLookupDrafter, SuffixMatchDrafter
    from .tokenizer import ByteTokenizer

    if threads:
        torch.set_num_threads(threads)
    train_seconds = train_seconds if train_seconds is not None else (60.0 if quick else 480.0)
    max_new_tokens = max_new_tokens if max_new_tokens is not None else (64 if quick else 256)
    seeds = seeds if seeds is not None else (1 if quick else 2)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wall = time.perf_counter()
    trained_now = retrain or not (cache / "target" / "config.json").is_file() or not (cache / "draft" / "config.json").is_file()
    if trained_now:
        train_models(cache, train_seconds, log)
    training = json.loads((cache / "training.json").read_text()) if (cache / "training.json").is_file() else {}
    target = GPT2LMHeadModel.from_pretrained(cache / "target").eval()
    draft = GPT2LMHeadModel.from_pretrained(cache / "draft").eval()
    tok = ByteTokenizer()
    drafters = {"model": ModelDrafter(draft), "pld": PromptLookupDrafter(), "suffix": SuffixMatchDrafter()}
    decoder = SpeculativeDecoder(target, drafters, LENGTHS, eos_token_id=tok.eos_token_id)
    labels = [a.label for a in decoder.arms]
    policies = _policy_names()
    log(f"arms ({len(labels)}): {', '.join(labels)}; L = {decoder.max_length}; policies: {', '.join(policies)}")

    decode_start = time.perf_counter()
    rows: list[dict] = []  # one per (prompt, run)
    mismatches: list[str] = []
    for p, (kind, text) in enumerate(DEMO_PROMPTS):
        ids = tok.encode(text)
        with torch.no_grad():
            hf = target.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
        decoder.generate(ids, arm="plain", max_new_tokens=8)  # warm up this prompt's code paths
        runs = [("fixed:" + label, {"arm": label}, 0) for label in labels]
        runs += [(name, {"policy": name, "reward": reward}, s) for name in policies for s in range(seeds)]
        for name, how, s in runs:
            res = decoder.generate(ids, max_new_tokens=max_new_tokens, seed=1000 * p + s, **how)
            if res.tokens != hf:
                mismatches.append(f"prompt {p} {name} seed {s}")
            rows.append({"prompt": p, "kind": kind, "run": name, "seed": s, "tokens": len(res.tokens), "rounds": res.rounds,
                         "seconds": res.seconds, "mat": res.mat, "tps": res.tokens_per_second, "pulls": res.arm_counts()})
        best = max((r for r in rows if r["prompt"] == p and r["run"].startswith("fixed:")), key=lambda r: r["tps"])
        log(f"prompt {p} ({kind}): {len(hf)} tokens; best fixed arm {best['run']} at {best['tps']:.0f} tokens/s, MAT {best['mat']:.2f}")
        if p == 0 or kind != DEMO_PROMPTS[p - 1][0]:
            log("  sample: " + repr(text[-60:] + "|" + tok.decode(hf)[:120]))
    decode_seconds = time.perf_counter() - decode_start

    table = _table(rows, labels, policies, seeds, max_new_tokens)
    total = time.perf_counter() - wall
    header = [
        "### Real-model demo (`genbandit specdec demo`)",
        "",
        f"Target GPT {training.get('target', {}).get('parameters', 0) / 1e6:.2f}M parameters, draft GPT "
        f"{training.get('draft', {}).get('parameters', 0) / 1e6:.2f}M, byte tokenizer, trained on CPU on the Python standard "
        f"library's source ({training.get('corpus_bytes', 0):,} bytes; held-out loss target "
        f"{training.get('target', {}).get('held_out_loss', float('nan'))} / draft {training.get('draft', {}).get('held_out_loss', float('nan'))} nats/byte). "
        f"Greedy decoding, {max_new_tokens} new tokens per prompt, {len(DEMO_PROMPTS)} prompts "
        f"({sum(k == 'code' for k, _ in DEMO_PROMPTS)} copy-heavy code, {sum(k == 'text' for k, _ in DEMO_PROMPTS)} free text), "
        f"arms = plain + {{model, pld, suffix}} x lengths {list(LENGTHS)} (L = {decoder.max_length}); randomised policies over {seeds} seed(s); bandit reward: {'emitted tokens' if reward == 'tokens' else 'normalised round throughput (serving variant)'}.",
        "MAT = tokens per target verification pass (bonus included); tokens/s = generated tokens / wall time of each response (prefill included), "
        "summed over prompts. `oracle` = the best fixed arm by tokens/s for each prompt, in hindsight; `best fixed (set)` = the single fixed arm best over the set.",
        "",
        table,
        "",
        f"Lossless check: every arm's and policy's output equals transformers' `generate(do_sample=False)`: "
        + ("**yes** (all runs)." if not mismatches else f"**no** for {len(mismatches)} run(s): {', '.join(mismatches[:8])}."),
        f"Timing: training {'%.0f s (this run)' % training.get('training_seconds', 0) if trained_now else 'cached (%.0f s when trained)' % training.get('training_seconds', 0)}, "
        f"decoding {decode_seconds:.0f} s, total {total:.0f} s, torch threads {torch.get_num_threads()}, on {platform.machine()} "
        f"with {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end (a busy shared machine inflates timings).",
    ]
    text = "\n".join(header) + "\n"
    (cache / RESULTS_FILE).write_text(text)
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "table.md").write_text(text)
        import pandas as pd

        frame = pd.DataFrame(rows)
        frame["pulls"] = frame["pulls"].map(json.dumps)
        frame.to_csv(folder / "results.csv", index=False)
        (folder / "training.json").write_text(json.dumps(training, indent=2))
    return text


def _aggregate(rows: list[dict]) -> tuple[float, float]:
    tokens = sum(r["tokens"] for r in rows)
    return tokens / max(sum(r["rounds"] for r in rows), 1), tokens / max(sum(r["seconds"] for r in rows), 1e-9)


def _table(rows: list[dict], labels: list[str], policies: list[str], seeds: int, max_new_tokens: int) -> str:
    kinds = [("code", "copy-heavy code"), ("text", "free text"), (None, "all prompts")]
    lines = ["| policy | " + " | ".join(f"{title} MAT | {title} tokens/s" for _, title in kinds) + " |",
             "|---|" + "---:|---:|" * len(kinds)]

    def subset(kind, run=None):
        return [r for r in rows if (kind is None or r["kind"] == kind) and (run is None or r["run"] == run)]

    def cells(select) -> str:
        out = []
        for kind, _ in kinds:
            chosen = select(kind)
            mat, tps = _aggregate(chosen) if chosen else (float("nan"), float("nan"))
            out.append(f"{mat:.2f} | {tps:.1f}")
        return " | ".join(out)

    for label in labels:
        lines.append(f"| fixed:{label} | " + cells(lambda kind, label=label: subset(kind, "fixed:" + label)) + " |")

    def oracle(kind):
        chosen = []
        for p in sorted({r["prompt"] for r in subset(kind)}):
            fixed = [r for r in subset(kind) if r["prompt"] == p and r["run"].startswith("fixed:")]
            chosen.append(max(fixed, key=lambda r: r["tps"]))
        return chosen

    def best_set(kind):
        return max((subset(kind, "fixed:" + label) for label in labels), key=lambda rs: _aggregate(rs)[1])

    lines.append("| oracle (per prompt) | " + cells(oracle) + " |")
    lines.append("| best fixed (set) | " + cells(best_set) + " |")
    for name in policies:
        lines.append(f"| **{name}** | " + cells(lambda kind, name=name: subset(kind, name)) + " |")
    best_names = []
    for kind, title in kinds:
        runs = best_set(kind)
        best_names.append(f"{title}: {runs[0]['run'] if runs else '-'}")
    lines.append("")
    lines.append("Best fixed arm per set: " + "; ".join(best_names) + ".")
    return "\n".join(lines)
