"""The demo's models: a small target GPT and a much smaller draft GPT, trained by steps on local Python source.

Training is defined by steps and data, not by wall-clock time, so the same command gives the same
models on a busy or an idle machine (same Python standard library, same torch thread count).
``genbandit specdec train-demo --out DIR`` trains them again; the package ships the result
(``specdec/demo_models/``, float16 weights, a few MB), so ``genbandit specdec demo`` needs no
training and no download.

Quality is measured, not assumed: the held-out loss of both models (the target must beat the
draft) and the share of distinct 4-grams in the target's greedy continuations (a model that
degenerates into loops repeats the same few 4-grams).
"""

from __future__ import annotations

import json
import math
import platform
import sysconfig
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["TARGET_CONFIG", "DRAFT_CONFIG", "TRAIN", "SHIPPED_DIR", "corpus", "build_model", "train_models",
           "load_models", "held_out_loss", "distinct_ngram_share", "QUALITY_PROMPTS"]

#: Where the package keeps the trained demo models (``target/``, ``draft/``, ``training.json``).
SHIPPED_DIR = Path(__file__).with_name("demo_models")

TARGET_CONFIG = dict(n_embd=96, n_layer=4, n_head=4)
DRAFT_CONFIG = dict(n_embd=48, n_layer=1, n_head=2)
N_POSITIONS = 512
#: The training recipe of both models: AdamW with warm-up and cosine decay over ``steps``; all but the last
#: ``long_steps`` steps take ``batch`` windows of ``block`` bytes placed at random positions of the
#: ``N_POSITIONS`` context (short windows see more bytes per second, and every position embedding is
#: trained); the last ``long_steps`` take ``long_batch`` windows of the full ``long_block`` bytes, the
#: context the demo decodes in.
TRAIN = dict(steps=5000, batch=16, block=128, long_steps=600, long_batch=4, long_block=512, lr=2e-3, warmup=40, seed=0,
             threads=1, corpus_bytes=6_000_000)

#: Prompts whose greedy continuations measure degeneration (free text and code, none of them in the demo's prompt set).
QUALITY_PROMPTS = [
    "def read_config(path):\n    ",
    '    """Return the number of',
    "# Copyright",
    "    if not isinstance(value, str):\n        raise TypeError(",
]


def corpus(max_bytes: int, holdout_every: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The standard library's ``.py`` files (sorted, test suites left out) as bytes: (train, held out).

    Every ``holdout_every``-th file goes to the held-out set; each file ends with the end-of-text token.
    """
    from .tokenizer import ByteTokenizer

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.relative_to(root).parts[0] and "site-packages" not in str(p))
    train: list[int] = []
    held: list[int] = []
    for i, path in enumerate(files):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) < 200:
            continue
        chunk = list(data[:60_000]) + [ByteTokenizer.eos_token_id]
        (held if i % holdout_every == 0 else train).extend(chunk)
        if len(train) >= max_bytes:
            break
    return np.asarray(train, dtype=np.int64), np.asarray(held[:200_000], dtype=np.int64)


def build_model(config: dict, seed: int):
    """A GPT-2 architecture over the byte tokenizer's 257 tokens, initialised from ``seed``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from .tokenizer import ByteTokenizer

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=ByteTokenizer.vocab_size, n_positions=N_POSITIONS, bos_token_id=ByteTokenizer.eos_token_id,
                     eos_token_id=ByteTokenizer.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **config)
    return GPT2LMHeadModel(cfg)


def held_out_loss(model: Any, held: np.ndarray, block: int = 256, windows: int = 32) -> float:
    """Mean next-byte loss (nats/byte) on ``windows`` fixed windows of the held-out bytes."""
    import torch

    starts = np.random.default_rng(1).integers(0, len(held) - block - 1, size=windows)
    x = torch.from_numpy(np.stack([held[s : s + block] for s in starts]))
    model.eval()
    with torch.no_grad():
        return float(model(x, labels=x).loss)


def distinct_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Distinct ``n``-grams over all ``n``-grams of ``tokens``: near 1 for varied text, small for a loop.

    >>> distinct_ngram_share([1, 2, 3, 4, 5, 6])
    1.0
    >>> distinct_ngram_share([1, 2] * 20)  # a loop of period 2 has only 2 distinct 4-grams out of 37
    0.05
    """
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return round(len(set(grams)) / len(grams), 2) if grams else 0.0


def greedy_quality(model: Any, new_tokens: int = 256) -> dict:
    """Greedy continuations of :data:`QUALITY_PROMPTS`: the mean distinct 4-gram share and a sample."""
    import torch

    from .tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    shares, samples = [], []
    with torch.no_grad():
        for text in QUALITY_PROMPTS:
            ids = tok.encode(text)
            out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
            shares.append(distinct_ngram_share(out))
            samples.append(text + tok.decode(out))
    return {"distinct_4gram_share": round(float(np.mean(shares)), 3), "per_prompt": shares, "samples": samples}


def _train(model: Any, data: np.ndarray, held: np.ndarray, recipe: dict, seed: int, log: Callable[[str], None], tag: str,
           stop_after: int | None = None) -> dict:
    """Train ``model`` with ``recipe`` (the schedule spans ``recipe["steps"]``); ``stop_after`` ends it early (for checks)."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], betas=(0.9, 0.95), weight_decay=0.01)
    steps, warmup, long_steps = recipe["steps"], recipe["warmup"], recipe["long_steps"]
    start = time.perf_counter()
    losses: list[float] = []
    curve: list[dict] = []
    for step in range(steps if stop_after is None else stop_after):
        lr = recipe["lr"] * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        if step < steps - long_steps:
            batch, block = recipe["batch"], recipe["block"]
        else:
            batch, block = recipe["long_batch"], recipe["long_block"]
        starts = rng.integers(0, len(data) - block - 1, size=batch)
        x = torch.from_numpy(np.stack([data[s : s + block] for s in starts]))
        offsets = rng.integers(0, N_POSITIONS - block + 1, size=(batch, 1))
        loss = model(x, labels=x, position_ids=torch.from_numpy(offsets + np.arange(block))).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 100 == 0 or step + 1 == steps:
            point = {"step": step + 1, "train_loss": round(float(np.mean(losses[-100:])), 4), "seconds": round(time.perf_counter() - start, 1)}
            if (step + 1) % 200 == 0 or step + 1 == steps:
                point["held_out_loss"] = round(held_out_loss(model, held), 4)
                model.train()
            curve.append(point)
            log(f"  {tag}: " + ", ".join(f"{k} {v}" for k, v in point.items()))
    model.eval()
    return {"steps": steps, "seconds": round(time.perf_counter() - start, 1), "first_losses": [round(v, 4) for v in losses[:5]],
            "held_out_loss": round(held_out_loss(model, held), 4), "bytes_seen": (steps - long_steps) * recipe["batch"] * recipe["block"] + long_steps * recipe["long_batch"] * recipe["long_block"],
            "curve": curve}


def train_models(out: str | Path, log: Callable[[str], None] = print, recipe: dict | None = None) -> dict:
    """Train the target and the draft with ``recipe`` (default :data:`TRAIN`); save both (float16) and ``training.json``."""
    import torch

    recipe = {**TRAIN, **(recipe or {})}
    out = Path(out)
    torch.set_num_threads(recipe["threads"])
    data, held = corpus(recipe["corpus_bytes"])
    log(f"corpus: {len(data):,} training bytes and {len(held):,} held-out bytes of the Python {platform.python_version()} standard library")
    record: dict[str, Any] = {"recipe": recipe, "corpus_bytes": int(len(data)), "python": platform.python_version(), "torch": torch.__version__,
                              "corpus": "Python standard library *.py (test suites left out, every tenth file held out)"}
    for tag, config, seed in (("target", TARGET_CONFIG, recipe["seed"]), ("draft", DRAFT_CONFIG, recipe["seed"] + 1)):
        model = build_model(config, seed)
        n_params = sum(p.numel() for p in model.parameters())
        log(f"training the {tag} ({n_params / 1e6:.2f}M parameters, {config}) for {recipe['steps']} steps")
        record[tag] = {"parameters": n_params, "config": config, **_train(model, data, held, recipe, seed, log, tag)}
        model.half().save_pretrained(out / tag)
    target, draft = load_models(out)
    record["target"]["held_out_loss_shipped"] = round(held_out_loss(target, held), 4)
    record["draft"]["held_out_loss_shipped"] = round(held_out_loss(draft, held), 4)
    record["target"]["greedy"] = greedy_quality(target)
    record["draft"]["greedy"] = greedy_quality(draft)
    log(f"held-out loss (nats/byte): target {record['target']['held_out_loss_shipped']}, draft {record['draft']['held_out_loss_shipped']}; "
        f"distinct 4-gram share of greedy text: target {record['target']['greedy']['distinct_4gram_share']}, "
        f"draft {record['draft']['greedy']['distinct_4gram_share']}")
    (out / "training.json").write_text(json.dumps(record, indent=2))
    return record


def load_models(folder: str | Path | None = None) -> tuple[Any, Any]:
    """The demo's (target, draft) from ``folder`` (default: the shipped models), in float32, in eval mode."""
    from transformers import GPT2LMHeadModel

    folder = Path(folder) if folder is not None else SHIPPED_DIR
    target = GPT2LMHeadModel.from_pretrained(folder / "target").float().eval()
    draft = GPT2LMHeadModel.from_pretrained(folder / "draft").float().eval()
    return target, draft
