"""The demo's models: a byte-level BPE tokenizer, a small target GPT and a much smaller draft GPT, trained on local Python source.

Training is defined by steps and data, not by wall-clock time, so the same command gives the same
models on a busy or an idle machine (same Python standard library, same torch thread count).
``genbandit specdec train-demo --out DIR`` trains them again; the package ships the result
(``specdec/demo_models/``: float16 weights and the tokenizer, a few MB), so ``genbandit specdec
demo`` needs no training and no download.

The tokenizer (BPE over bytes, GPT-2's pre-tokenization, :data:`TRAIN` ``["vocab_size"]`` tokens)
is learnt from the training files; each token covers 3.4 bytes of Python source on average, so a
training step sees 3.4 times the text of a byte-level model's step and the 512-position context
holds about 1,700 bytes.

Quality is measured, not assumed: the held-out loss of both models in nats per byte (comparable
across tokenizers; the target must beat the draft) and the share of distinct 4-grams in the
target's greedy continuations (a model that degenerates into loops repeats the same few 4-grams).
A model trained by maximum likelihood alone loops under greedy decoding (Holtzman et al. 2020, "The
curious case of neural text degeneration"), so the target's training ends with sequence-level
unlikelihood fine-tuning on its own greedy continuations (Welleck et al. 2020, "Neural text
generation with unlikelihood training", ICLR): :func:`finetune_target`.
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

__all__ = ["DEMO_PROMPTS", "TARGET_CONFIG", "DRAFT_CONFIG", "TRAIN", "SHIPPED_DIR", "corpus_texts", "train_tokenizer", "corpus", "build_model",
           "train_models", "prepare", "train_model", "finish", "load_models", "load_tokenizer", "byte_lengths", "held_out_loss",
           "distinct_ngram_share", "greedy_quality", "greedy_shares", "held_out_prefixes", "repeated_ngram_mask", "finetune_target", "QUALITY_PROMPTS"]

#: Where the package keeps the trained demo models (``target/``, ``draft/``, ``training.json``).
SHIPPED_DIR = Path(__file__).with_name("demo_models")

TARGET_CONFIG = dict(n_embd=128, n_layer=4, n_head=4)
DRAFT_CONFIG = dict(n_embd=48, n_layer=1, n_head=2)
N_POSITIONS = 512
EOS = "<|endoftext|>"
#: The training recipe: a byte-level BPE tokenizer of ``vocab_size`` tokens, then each model trained with AdamW, warm-up
#: and cosine decay over its own ``steps``; all but its last ``long_steps`` steps take ``batch`` windows of ``block``
#: tokens placed at random positions of the ``N_POSITIONS`` context (short windows see more text per second, and every
#: position embedding is trained); the last ``long_steps`` take ``long_batch`` windows of the full ``long_block``
#: tokens, the context the demo decodes in.
#: The target is then fine-tuned with sequence-level unlikelihood (``finetune``, :func:`_unlikelihood_finetune`).
TRAIN = dict(vocab_size=4096, target=dict(steps=1800, long_steps=200), draft=dict(steps=1000, long_steps=100), batch=16, block=128,
             long_batch=4, long_block=512, lr=2e-3, warmup=40, seed=0, threads=1, corpus_bytes=6_000_000,
             finetune=dict(steps=2000, lr=5e-4, warmup=10, mle_every=2, prefix=32, continuation=128, batch=8, n=4))

#: (kind, text), copy-heavy and free-text prompts alternating as they would reach a server.
DEMO_PROMPTS: list[tuple[str, str]] = [
    (
        "code",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "    def __repr__(self):\n        return 'Point(%r, %r)' % (self.x, self.y)\n\n"
        "class Vector:\n    def __init__(self, x, y):\n",
    ),
    ("text", '"""Return a new list containing the elements of the sequence'),
    (
        "code",
        "def add(self, other):\n    if not isinstance(other, Number):\n        return NotImplemented\n"
        "    return self.value + other.value\n\n"
        "def sub(self, other):\n    if not isinstance(other, Number):\n",
    ),
    ("text", "# This module provides functions for reading and writing"),
    (
        "code",
        "    def test_lower(self):\n        self.assertEqual('ABC'.lower(), 'abc')\n\n"
        "    def test_upper(self):\n        self.assertEqual('abc'.upper(), 'ABC')\n\n"
        "    def test_title(self):\n",
    ),
    ("text", '    """Raised when the connection to the server is'),
    (
        "code",
        "import os\nimport sys\n\ndef main(argv=None):\n    if argv is None:\n        argv = sys.argv[1:]\n"
        "    for name in argv:\n        if os.path.isdir(name):\n            print(name)\n\n"
        "# the same function, with a different loop variable\ndef main(argv=None):\n",
    ),
    ("text", "The default value of the timeout is used when no"),
]

#: Prompts whose greedy continuations measure degeneration (free text and code, none of them in the demo's prompt set).
QUALITY_PROMPTS = [
    "def read_config(path):\n    ",
    '    """Return the number of',
    "# Copyright",
    "    if not isinstance(value, str):\n        raise TypeError(",
]


def corpus_texts(max_bytes: int, holdout_every: int = 10) -> tuple[list[str], list[str]]:
    """The standard library's ``.py`` files (sorted, test suites left out, first 60,000 bytes each): (train, held out).

    Every ``holdout_every``-th file goes to the held-out set; the training files stop once they hold
    ``max_bytes`` bytes.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.relative_to(root).parts[0] and "site-packages" not in str(p))
    train: list[str] = []
    held: list[str] = []
    size = 0
    for i, path in enumerate(files):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) < 200:
            continue
        text = data[:60_000].decode("utf-8", errors="replace")
        if i % holdout_every == 0:
            held.append(text)
        else:
            train.append(text)
            size += len(text.encode("utf-8"))
        if size >= max_bytes:
            break
    return train, held


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer of ``vocab_size`` tokens learnt from ``texts``, end of text ``<|endoftext|>`` (id 0).

    GPT-2's byte-level pre-tokenization, so every byte sequence has an encoding and decoding is
    lossless; returned as a ``transformers`` fast tokenizer, saved with the models.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, bos_token=EOS, clean_up_tokenization_spaces=False)


def corpus(tokenizer: Any, max_bytes: int, held_bytes: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """The token ids of :func:`corpus_texts`: (train, the held-out files' first ``held_bytes`` bytes); each file ends with end of text."""
    train, held = corpus_texts(max_bytes)

    def ids(texts: Sequence[str]) -> np.ndarray:
        return np.asarray([i for ids in tokenizer(list(texts))["input_ids"] for i in ids + [tokenizer.eos_token_id]], dtype=np.int64)

    held_ids = ids(held)
    lengths = byte_lengths(tokenizer)[held_ids]
    return ids(train), held_ids[: int(np.searchsorted(np.cumsum(lengths), held_bytes))]


def byte_lengths(tokenizer: Any) -> np.ndarray:
    """Bytes of text each token id stands for (the end-of-text token counts as one byte, as in a byte-level model)."""
    # byte-level BPE writes each byte as one character of its alphabet
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return np.asarray([1 if t in tokenizer.all_special_tokens else len(t) for t in tokens], dtype=np.int64)


def _config(recipe: dict, tag: str) -> dict:
    """The size of the ``tag`` model (``"target"`` or ``"draft"``): ``recipe[tag]["config"]``, else the demo's."""
    return recipe[tag].get("config", TARGET_CONFIG if tag == "target" else DRAFT_CONFIG)


def build_model(config: dict, seed: int, vocab_size: int):
    """A GPT-2 architecture over ``vocab_size`` tokens (end of text: id 0), initialised from ``seed``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=N_POSITIONS, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, **config)
    return GPT2LMHeadModel(cfg)


def held_out_loss(model: Any, held: np.ndarray, lengths: np.ndarray, block: int = 256, windows: int = 32) -> float:
    """Next-token loss on ``windows`` fixed windows of ``block`` held-out tokens, in nats per byte of text predicted.

    ``lengths`` gives the bytes of each token id (:func:`byte_lengths`), so models over different
    tokenizers compare: the summed loss of the predicted tokens over the bytes they spell.
    """
    import torch

    starts = np.random.default_rng(1).integers(0, len(held) - block - 1, size=windows)
    tokens = np.stack([held[s : s + block] for s in starts])
    x = torch.from_numpy(tokens).to(_device(model))
    model.eval()
    with torch.no_grad():
        logits = model(x).logits[:, :-1].float()
        nats = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
    return float(nats) / float(lengths[tokens[:, 1:]].sum())


def distinct_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Distinct ``n``-grams over all ``n``-grams of ``tokens``: near 1 for varied text, small for a loop.

    >>> distinct_ngram_share([1, 2, 3, 4, 5, 6])
    1.0
    >>> distinct_ngram_share([1, 2] * 20)  # a loop of period 2 has only 2 distinct 4-grams out of 37
    0.05
    """
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return round(len(set(grams)) / len(grams), 2) if grams else 0.0


def greedy_quality(model: Any, tokenizer: Any, prompts: Sequence[str] = QUALITY_PROMPTS, new_tokens: int = 256,
                   measured_bytes: int = 256) -> dict:
    """Greedy continuations of ``prompts``: the share of distinct byte 4-grams in each one's first ``measured_bytes`` bytes.

    Measured on bytes, not tokens, so that models over different tokenizers compare (a byte-level
    model's 256 new tokens are 256 bytes).
    """
    import torch

    shares, samples = [], []
    with torch.no_grad():
        for text in prompts:
            ids = tokenizer.encode(text)
            out = model.generate(torch.tensor([ids], device=_device(model)), max_new_tokens=new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)[0, len(ids):].tolist()
            continuation = tokenizer.decode(out)
            shares.append(distinct_ngram_share(list(continuation.encode("utf-8")[:measured_bytes])))
            samples.append(text + continuation)
    return {"distinct_4gram_share": round(float(np.mean(shares)), 3), "per_prompt": shares, "samples": samples}


def held_out_prefixes(tokenizer: Any, held: np.ndarray, count: int = 48, length: int = 32, seed: int = 7) -> list[str]:
    """``count`` prompts no one chose: windows of ``length`` tokens of the held-out token stream (:func:`corpus`) at offsets
    drawn by ``numpy.random.default_rng(seed)``, those that hold an end of text skipped; for :func:`greedy_quality`."""
    rng, prefixes = np.random.default_rng(seed), []
    while len(prefixes) < count:
        start = int(rng.integers(0, len(held) - length))
        window = held[start : start + length]
        if tokenizer.eos_token_id not in window:
            prefixes.append(tokenizer.decode(window.tolist()))
    return prefixes


def greedy_shares(model: Any, tokenizer: Any) -> dict:
    """:func:`greedy_quality` on :data:`QUALITY_PROMPTS` (``"greedy"``) and on the demo's code and text prompts (``"greedy_demo_prompts"``)."""
    return {"greedy": greedy_quality(model, tokenizer),
            "greedy_demo_prompts": {kind: greedy_quality(model, tokenizer, [text for k, text in DEMO_PROMPTS if k == kind])
                                    for kind in ("code", "text")}}


def _optimizer(model: Any, recipe: dict, seed: int) -> tuple[Any, np.random.Generator]:
    """Seed torch, put ``model`` in training mode and return its AdamW optimiser and the window sampler's generator."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.train()
    return torch.optim.AdamW(model.parameters(), lr=recipe["lr"], betas=(0.9, 0.95), weight_decay=0.01), rng


def _schedule(opt: Any, recipe: dict, step: int) -> None:
    """Set the learning rate of ``step``: linear warm-up over ``recipe["warmup"]`` steps, then cosine decay to a tenth over ``recipe["steps"]``."""
    lr = recipe["lr"] * min(1.0, (step + 1) / recipe["warmup"]) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / recipe["steps"])))
    for group in opt.param_groups:
        group["lr"] = lr


def _device(model: Any) -> Any:
    """Where ``model``'s weights are: the tensors it is given are made there."""
    return next(model.parameters()).device


def _windows(data: np.ndarray, rng: np.random.Generator, batch: int, block: int, device: Any) -> Any:
    """``batch`` windows of ``block`` tokens of ``data`` at random offsets, ``batch x block``, on ``device``."""
    import torch

    starts = rng.integers(0, len(data) - block - 1, size=batch)
    return torch.from_numpy(np.stack([data[s : s + block] for s in starts])).to(device)


def _step(model: Any, opt: Any, loss: Any, losses: list[float]) -> None:
    """One optimiser step on ``loss`` (gradient norm clipped at 1), its value appended to ``losses``."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(float(loss.detach()))


def _train(model: Any, data: np.ndarray, held: np.ndarray, lengths: np.ndarray, recipe: dict, seed: int, log: Callable[[str], None],
           tag: str, stop_after: int | None = None) -> dict:
    """Train ``model`` with ``recipe`` (the schedule spans ``recipe["steps"]``); ``stop_after`` ends it early (for checks)."""
    import torch

    opt, rng = _optimizer(model, recipe, seed)
    steps, long_steps = recipe["steps"], recipe["long_steps"]
    start = time.perf_counter()
    losses: list[float] = []
    curve: list[dict] = []
    for step in range(steps if stop_after is None else stop_after):
        _schedule(opt, recipe, step)
        if step < steps - long_steps:
            batch, block = recipe["batch"], recipe["block"]
        else:
            batch, block = recipe["long_batch"], recipe["long_block"]
        x = _windows(data, rng, batch, block, _device(model))
        offsets = rng.integers(0, N_POSITIONS - block + 1, size=(batch, 1))
        _step(model, opt, model(x, labels=x, position_ids=torch.from_numpy(offsets + np.arange(block)).to(x.device)).loss, losses)
        if (step + 1) % 100 == 0 or step + 1 == steps:
            point = {"step": step + 1, "train_loss": round(float(np.mean(losses[-100:])), 4), "seconds": round(time.perf_counter() - start, 1)}
            if (step + 1) % 200 == 0 or step + 1 == steps:
                point["held_out_nats_per_byte"] = round(held_out_loss(model, held, lengths), 4)
                model.train()
            curve.append(point)
            log(f"  {tag}: " + ", ".join(f"{k} {v}" for k, v in point.items()))
    model.eval()
    tokens = (steps - long_steps) * recipe["batch"] * recipe["block"] + long_steps * recipe["long_batch"] * recipe["long_block"]
    return {"steps": steps, "seconds": round(time.perf_counter() - start, 1), "first_losses": [round(v, 4) for v in losses[:5]],
            "held_out_loss": round(held_out_loss(model, held, lengths), 4), "tokens_seen": tokens, "curve": curve}


def repeated_ngram_mask(tokens: Any, n: int = 4) -> Any:
    """Ones on every token of each ``n``-gram that already occurred earlier in the same row (Welleck et al. 2020).

    ``tokens`` is ``batch x length``; a row is a model's own continuation, so a copy of the prompt is
    not a repeat. These are the candidates whose probability sequence-level unlikelihood pushes down.

    >>> import torch
    >>> repeated_ngram_mask(torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]]), n=3).tolist()
    [[0, 0, 0, 1, 1, 1, 1, 1]]
    """
    import torch

    mask = torch.zeros_like(tokens)
    for row, xs in enumerate(tokens.tolist()):
        seen: set[tuple[int, ...]] = set()
        for i in range(len(xs) - n + 1):
            gram = tuple(xs[i : i + n])
            if gram in seen:
                mask[row, i : i + n] = 1
            seen.add(gram)
    return mask


def _greedy_continuations(model: Any, prefixes: Any, length: int) -> Any:
    """``length`` greedy tokens after each row of ``prefixes`` (``batch x prefix``), with the key-value cache; no gradient."""
    import torch

    from .tensors import cached_forward

    with torch.no_grad():
        logits, cache = cached_forward(model, prefixes, None)
        tokens = []
        for _ in range(length):
            tokens.append(logits[:, -1].argmax(-1, keepdim=True))
            logits, cache = cached_forward(model, tokens[-1], cache)
    return torch.cat(tokens, dim=1)


def _unlikelihood_finetune(model: Any, data: np.ndarray, held: np.ndarray, lengths: np.ndarray, recipe: dict, seed: int,
                           log: Callable[[str], None], stop_after: int | None = None) -> dict:
    """Sequence-level unlikelihood fine-tuning (Welleck et al. 2020, its sequence-level objective), interleaved with maximum-likelihood steps.

    All but every ``mle_every``-th step continue ``batch`` prefixes of ``prefix`` training tokens greedily for
    ``continuation`` tokens, and minimises ``-log(1 - p(x_t | x_<t))`` summed over the tokens of the
    continuation's repeated ``n``-grams (:func:`repeated_ngram_mask`), over the continuation's
    length; every ``mle_every``-th step is a maximum-likelihood step on ``long_batch`` windows of ``long_block`` tokens. The
    schedule (warm-up, cosine decay to a tenth) spans ``steps``; ``stop_after`` ends it early (for checks).
    """
    import torch

    opt, rng = _optimizer(model, recipe, seed)
    steps, prefix, length = recipe["steps"], recipe["prefix"], recipe["continuation"]
    start = time.perf_counter()
    losses: list[float] = []
    log_every = max(1, steps // 8)
    window: dict[str, list[float]] = {"mle": [], "unlikelihood": [], "repeated_share": []}
    curve: list[dict] = []
    for step in range(steps if stop_after is None else stop_after):
        _schedule(opt, recipe, step)
        if (step + 1) % recipe["mle_every"]:
            prefixes = _windows(data, rng, recipe["batch"], prefix, _device(model))
            model.eval()
            continuation = _greedy_continuations(model, prefixes, length)
            model.train()
            mask = repeated_ngram_mask(continuation, recipe["n"])
            logits = model(torch.cat([prefixes, continuation], dim=1)).logits[:, prefix - 1 : -1]
            p = torch.softmax(logits.float(), dim=-1).gather(-1, continuation.unsqueeze(-1)).squeeze(-1)
            loss = -(torch.log(torch.clamp(1.0 - p, min=1e-5)) * mask).sum() / mask.numel()
            window["unlikelihood"].append(float(loss.detach()))
            window["repeated_share"].append(float(mask.float().mean()))
        else:
            x = _windows(data, rng, recipe["long_batch"], recipe["long_block"], _device(model))
            loss = model(x, labels=x).loss
            window["mle"].append(float(loss.detach()))
        _step(model, opt, loss, losses)
        if (step + 1) % log_every == 0 or step + 1 == steps:
            point = {"step": step + 1, **{f"{k}": round(float(np.mean(v)), 4) for k, v in window.items() if v},
                     "held_out_nats_per_byte": round(held_out_loss(model, held, lengths), 4), "seconds": round(time.perf_counter() - start, 1)}
            model.train()
            window = {k: [] for k in window}
            curve.append(point)
            log("  fine-tune: " + ", ".join(f"{k} {v}" for k, v in point.items()))
    model.eval()
    # six decimals: an unlikelihood step's loss can be near 1e-3
    return {"steps": steps, "seconds": round(time.perf_counter() - start, 1), "first_losses": [round(v, 6) for v in losses[:5]],
            "held_out_loss": round(held_out_loss(model, held, lengths), 4), "curve": curve}


def train_models(out: str | Path, log: Callable[[str], None] = print, recipe: dict | None = None) -> dict:
    """Learn the tokenizer, train (and fine-tune) the target and train the draft with ``recipe`` (default :data:`TRAIN`); save them and ``training.json``.

    Each model's folder (``target/``, ``draft/``) holds its float16 weights and the tokenizer. The stages
    (:func:`prepare`, :func:`train_model` per model, :func:`finish`) may also run the two models in two
    processes: the same seeds give the same models.
    """
    recipe = {**TRAIN, **(recipe or {})}
    tokenizer, data, held = prepare(recipe, log)
    record = {tag: train_model(tag, out, recipe, tokenizer, data, held, log) for tag in ("target", "draft")}
    return finish(out, recipe, tokenizer, data, held, record, log)


def prepare(recipe: dict, log: Callable[[str], None] = print) -> tuple[Any, np.ndarray, np.ndarray]:
    """The first stage of :func:`train_models`: torch's thread count set, the tokenizer learnt, the corpus tokenized."""
    import torch

    torch.set_num_threads(recipe["threads"])
    tokenizer = train_tokenizer(corpus_texts(recipe["corpus_bytes"])[0], recipe["vocab_size"])
    data, held = corpus(tokenizer, recipe["corpus_bytes"])
    lengths = byte_lengths(tokenizer)
    log(f"corpus: {len(data):,} training tokens ({lengths[data].mean():.2f} bytes each) and {int(lengths[held].sum()):,} held-out "
        f"bytes of the Python {platform.python_version()} standard library; byte-level BPE of {len(tokenizer)} tokens")
    return tokenizer, data, held


def train_model(tag: str, out: str | Path, recipe: dict, tokenizer: Any, data: np.ndarray, held: np.ndarray,
                log: Callable[[str], None] = print) -> dict:
    """Train the ``"target"`` (then :func:`finetune_target`) or the ``"draft"`` (own ``steps``/``long_steps`` in ``recipe[tag]``); save it with the tokenizer.

    ``recipe[tag]["config"]`` may give the model's size (default :data:`TARGET_CONFIG` / :data:`DRAFT_CONFIG`) and
    ``recipe["device"]`` where it trains (default the CPU); the fine-tuning runs there too.
    """
    config, seed = _config(recipe, tag), recipe["seed"] if tag == "target" else recipe["seed"] + 1
    model = build_model(config, seed, len(tokenizer)).to(recipe.get("device", "cpu"))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"training the {tag} ({n_params / 1e6:.2f}M parameters, {config}) for {recipe[tag]['steps']} steps")
    lengths = byte_lengths(tokenizer)
    result = _train(model, data, held, lengths, {**recipe, **recipe[tag]}, seed, log, tag)
    if tag == "target":
        result.update(finetune_target(model, recipe, tokenizer, data, held, log))
    model.half().save_pretrained(Path(out) / tag)
    tokenizer.save_pretrained(Path(out) / tag)
    return {"parameters": n_params, "config": config, **result}


def finetune_target(model: Any, recipe: dict, tokenizer: Any, data: np.ndarray, held: np.ndarray,
                    log: Callable[[str], None] = print) -> dict:
    """The target's last stage: ``recipe["finetune"]`` steps of :func:`_unlikelihood_finetune`, measured before and after.

    Returns nothing when ``recipe["finetune"]["steps"]`` is 0, else ``before_finetune`` (held-out loss and
    :func:`greedy_shares` of the model it is given) and ``finetune`` (its record, with ``check_first_losses``: five fine-tuning steps from the
    untrained target, which a check can repeat without the trained one).
    """
    seed, lengths, stage = recipe["seed"], byte_lengths(tokenizer), {**recipe, **recipe["finetune"]}
    if stage["steps"] == 0:  # no fine-tuning: the target is kept as trained
        return {}
    before = {"held_out_loss": round(held_out_loss(model, held, lengths), 4), **greedy_shares(model, tokenizer)}
    log(f"fine-tuning the target with sequence-level unlikelihood for {stage['steps']} steps")
    record = _unlikelihood_finetune(model, data, held, lengths, stage, seed, log)
    untrained = build_model(_config(recipe, "target"), seed, len(tokenizer)).to(_device(model))
    record["check_first_losses"] = _unlikelihood_finetune(untrained, data, held, lengths, stage, seed, lambda msg: None, stop_after=5)["first_losses"]
    return {"before_finetune": before, "finetune": record}


def finish(out: str | Path, recipe: dict, tokenizer: Any, data: np.ndarray, held: np.ndarray, record: dict,
           log: Callable[[str], None] = print) -> dict:
    """The last stage of :func:`train_models`: the saved models measured, ``training.json`` written."""
    import torch

    lengths = byte_lengths(tokenizer)
    record = {"recipe": recipe, "corpus_tokens": len(data), "corpus_bytes": int(lengths[data].sum()),
              "python": platform.python_version(), "torch": torch.__version__,
              "corpus": "Python standard library *.py (test suites left out, every tenth file held out)",
              "tokenizer": f"byte-level BPE tokenizer ({len(tokenizer)} tokens)", **record}
    for tag, model in zip(("target", "draft"), load_models(out, device=recipe.get("device"))):
        record[tag]["held_out_loss_shipped"] = round(held_out_loss(model, held, lengths), 4)
        record[tag].update(greedy_shares(model, tokenizer))
    log(f"held-out loss (nats/byte): target {record['target']['held_out_loss_shipped']}, draft {record['draft']['held_out_loss_shipped']}; "
        f"distinct 4-gram share of greedy text: target {record['target']['greedy']['distinct_4gram_share']}, "
        f"draft {record['draft']['greedy']['distinct_4gram_share']}")
    (Path(out) / "training.json").write_text(json.dumps(record, indent=2))
    return record


def load_models(folder: str | Path | None = None, device: Any = None) -> tuple[Any, Any]:
    """The demo's (target, draft) from ``folder`` (default: the shipped models), in float32, in eval mode, on ``device`` (default the CPU)."""
    from transformers import GPT2LMHeadModel

    folder = Path(folder) if folder is not None else SHIPPED_DIR
    target = GPT2LMHeadModel.from_pretrained(folder / "target").float().eval()
    draft = GPT2LMHeadModel.from_pretrained(folder / "draft").float().eval()
    return (target.to(device), draft.to(device)) if device is not None else (target, draft)


def load_tokenizer(folder: str | Path | None = None) -> Any:
    """The demo models' tokenizer from ``folder`` (default: the shipped models), read from its files, offline."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder) if folder is not None else SHIPPED_DIR
    return PreTrainedTokenizerFast.from_pretrained(folder / "target", local_files_only=True)
