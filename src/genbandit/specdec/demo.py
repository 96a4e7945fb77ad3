"""``genbandit specdec demo``: speculative decoding tuned by a bandit, on real (tiny) language models, no downloads.

1. Load the demo models shipped with the package (a target GPT and a much smaller draft GPT over
   a byte-level BPE tokenizer of 4,096 tokens, trained on the Python standard library's source;
   :mod:`genbandit.specdec.demo_training` trains them again).
2. Decode a mix of copy-heavy prompts (code to continue or redo) and free-text prompts (prose of
   the kind found in docstrings) greedily with every fixed arm (plain; model, pld and suffix
   drafters x speculation lengths) and with the policies (the serving policy, which learns
   across prompts, and the paper's UCBSpec, which starts afresh on each prompt). Every
   measurement is repeated, the order of the methods alternating between repetitions.
   (``--temperature`` samples instead: every method draws with the repetition's seed.)
3. Check that every greedy output is token for token ``transformers``' own greedy decoding, write each
   prompt's runs as soon as they finish (``results.csv``, ``log.txt``, ``table.md``), and print a
   table of tokens/s (mean and standard deviation over the repetitions) and MAT. Ctrl-C stops
   cleanly with the table of the prompts that finished.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core.validation import InvalidInputError
from .demo_training import DEMO_PROMPTS

__all__ = ["run_demo", "demo_decoder", "shipped_decoder", "transformers_methods", "cached_demo_table", "report_section", "default_out_dir",
           "DEMO_PROMPTS", "LENGTHS", "DemoLog"]

RESULTS_FILE = "table.md"
LENGTHS = (3, 6)
KINDS = {"code": "copy-heavy code", "text": "free text"}



def default_out_dir() -> Path:
    """``~/.cache/genbandit/specdec-demo`` (or under ``$XDG_CACHE_HOME``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "genbandit" / "specdec-demo"


def cached_demo_table(out: str | os.PathLike | None = None) -> str | None:
    """The demo's Markdown table from its last complete run, or ``None`` when it has not run."""
    path = (Path(out) if out is not None else default_out_dir()) / RESULTS_FILE
    if not path.is_file():
        return None
    text = path.read_text()
    return None if "interrupted" in text.splitlines()[0] else text


def report_section(ctx: Any) -> None:
    """Report hook of the ``banditspec`` reproduction: the demo's table from its last complete run, if any."""
    table = cached_demo_table()
    if table:
        ctx.add_section("Real speculative decoder: the demo's table", table)


class DemoLog:
    """Print a line (to ``echo``) and append it to ``path`` at once, so the log survives an interruption."""

    def __init__(self, path: Path, echo: Callable[[str], None]) -> None:
        self.path = path
        self.echo = echo
        self.start = time.perf_counter()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def __call__(self, message: str) -> None:
        line = f"[{time.perf_counter() - self.start:6.1f}s] {message}"
        self.echo(line)
        with self.path.open("a") as handle:
            handle.write(line + "\n")


def demo_decoder(target: Any, draft: Any, eos_token_id: int | None, temperature: float = 0.0):
    """The demo's decoder: plain decoding, and the draft model, prompt lookup and suffix match at each of :data:`LENGTHS`
    (greedy, or sampling at ``temperature``)."""
    from .decoder import SpeculativeDecoder
    from .drafters import ModelDrafter, PromptLookupDrafter, SuffixMatchDrafter

    drafters = {"model": ModelDrafter(draft), "pld": PromptLookupDrafter(), "suffix": SuffixMatchDrafter()}
    return SpeculativeDecoder(target, drafters, LENGTHS, eos_token_id=eos_token_id, temperature=temperature)


def transformers_methods(target: Any, draft: Any, tokenizer: Any, temperature: float) -> dict[str, Callable]:
    """``transformers``' own decoding of ``target``, greedy or sampled at ``temperature`` (from ``softmax(logits / temperature)``
    as the decoder samples: no top-k, no top-p), for :func:`run_demo`'s ``extra_methods``: plain ``generate``
    (``hf:plain``), assisted generation with ``draft`` (``hf:assisted``, its default schedule of draft lengths) and prompt
    lookup decoding (``hf:prompt-lookup``, 6 tokens): name -> ``f(ids, max_new_tokens) -> new tokens``."""
    import torch

    law = dict(do_sample=False) if temperature == 0 else dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    common = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id, **law)

    def call(**extra):
        def run(ids, max_new_tokens):
            with torch.no_grad():
                out = target.generate(torch.tensor([ids], device=target.device), max_new_tokens=max_new_tokens, **common, **extra)
            return out[0, len(ids):].tolist()

        return run

    return {"hf:plain": call(), "hf:assisted": call(assistant_model=draft), "hf:prompt-lookup": call(prompt_lookup_num_tokens=6)}


def shipped_decoder(threads: int = 1) -> tuple[Any, Any]:
    """The demo's decoder on the shipped models and its tokenizer, with ``threads`` torch threads: ``(decoder, tokenizer)``."""
    import torch

    from .demo_training import SHIPPED_DIR, load_models, load_tokenizer

    torch.set_num_threads(threads)
    target, draft = load_models(SHIPPED_DIR)
    tokenizer = load_tokenizer(SHIPPED_DIR)
    return demo_decoder(target, draft, tokenizer.eos_token_id), tokenizer


def run_demo(
    out: str | os.PathLike | None = None,
    *,
    models: str | os.PathLike | None = None,
    max_new_tokens: int = 256,
    repeats: int = 3,
    prompts: Sequence[tuple[str, str]] | None = None,
    policies: Sequence[str] = ("WarmThroughputUCB", "UCBSpec"),
    threads: int = 1,
    extra_methods: Callable[[Any, Any, Any, float], dict[str, Callable]] | None = None,
    echo: Callable[[str], None] = print,
    device: str | None = None,
    temperature: float = 0.0,
) -> tuple[str, bool]:
    """Run the demo; returns (the Markdown table, whether every prompt finished).

    Writes ``log.txt`` (progress), ``results.csv`` (one row per run, written after each prompt)
    and ``table.md`` into ``out`` (default :func:`default_out_dir`). ``models`` is a folder with
    ``target/`` and ``draft/`` (default: the shipped models). ``extra_methods(target, draft,
    tokenizer, temperature)`` may add methods timed beside ours, decoding at the same temperature:
    name -> ``f(ids, max_new_tokens) -> new tokens`` (MAT unknown). ``device`` (a torch device,
    default the CPU) is where the models run. ``temperature`` > 0 samples instead of decoding
    greedily: repetition ``r`` of each of our methods draws with seed ``r``, and since each method
    then writes its own text, there is no token for token check (the test suite's chi-square
    tests check the law of the sampled tokens). Ctrl-C ends the decoding early: the table then
    covers the prompts that finished, and the second value is ``False``.
    """
    prompts = list(prompts if prompts is not None else DEMO_PROMPTS)
    for p, (kind, _) in enumerate(prompts):
        if kind not in KINDS:
            raise InvalidInputError(f"Prompt {p}'s kind must be one of {sorted(KINDS)}. Got {kind!r} instead.")
    folder = Path(out) if out is not None else default_out_dir()
    log = DemoLog(folder / "log.txt", echo)
    log(f"genbandit specdec demo: writing log.txt, results.csv and table.md to {folder}")
    import torch

    from .demo_training import SHIPPED_DIR, load_models, load_tokenizer

    torch.set_num_threads(threads)
    model_dir = Path(models) if models is not None else SHIPPED_DIR
    target, draft = load_models(model_dir, device=device)
    training = json.loads((model_dir / "training.json").read_text()) if (model_dir / "training.json").is_file() else {}
    log(f"models from {model_dir}: target {_params(target)}, draft {_params(draft)}; torch threads {threads}; on {target.device}")
    tok = load_tokenizer(model_dir)
    decoder = demo_decoder(target, draft, tok.eos_token_id, temperature)
    encoded = [tok.encode(text) for _, text in prompts]
    for p, ids in enumerate(encoded):  # transformers' generate, the reference, fails past the models' positions
        if not ids or len(ids) + max_new_tokens > decoder.max_positions:
            raise InvalidInputError(f"Prompt {p} ({len(ids)} tokens) and {max_new_tokens} new tokens must fit in the models' "
                                    f"context of {decoder.max_positions} positions: shorten the prompt or ask for fewer tokens.")
    labels = [a.label for a in decoder.arms]
    others = extra_methods(target, draft, tok, temperature) if extra_methods is not None else {}
    # the reference of the token for token check: transformers' own greedy decoding (sampled runs have none)
    reference = transformers_methods(target, draft, tok, 0.0)["hf:plain"] if temperature == 0 else None
    methods = list(others) + ["fixed:" + label for label in labels] + list(policies)
    # one serving chain per repetition: a policy that carries state sees every prompt once, in order
    chains = {(name, r): decoder.make_policy(name, seed=r) for name in policies for r in range(repeats)}
    log("preparing the policies (the serving policy's kernels compile on first use, once per install: seconds)")
    for chain in chains.values():
        chain.reset()  # allocates the state (and compiles what a policy compiles) before anything is timed
    log(f"arms: {', '.join(labels)} (L = {decoder.max_length}); policies: {', '.join(policies)}; "
        f"{len(prompts)} prompts x {len(methods)} methods x {repeats} repetitions, {max_new_tokens} new tokens each")

    rows: list[dict] = []
    mismatches: list[str] = []
    finished = 0
    decode_start = time.perf_counter()
    try:
        for p, ((kind, text), ids) in enumerate(zip(prompts, encoded)):
            hf = reference(ids, max_new_tokens) if reference is not None else None
            decoder.generate(ids, arm="plain", max_new_tokens=8)  # warm up this prompt's code paths
            for r in range(repeats):
                order = methods if (p + r) % 2 == 0 else methods[::-1]
                for name in order:
                    if name in others:
                        start = time.perf_counter()
                        tokens, rounds, pulls = others[name](ids, max_new_tokens), 0, {}
                        seconds = time.perf_counter() - start
                    else:
                        how = {"arm": name[len("fixed:"):]} if name.startswith("fixed:") else {"policy": chains[(name, r)]}
                        res = decoder.generate(ids, max_new_tokens=max_new_tokens, seed=r, **how)
                        tokens, rounds, seconds = res.tokens, res.rounds, res.seconds
                        pulls = {k: v for k, v in res.arm_counts().items() if v}
                    if hf is not None and tokens != hf:
                        mismatches.append(f"prompt {p} {name} repetition {r}")
                    rows.append({"prompt": p, "kind": kind, "method": name, "repetition": r, "tokens": len(tokens),
                                 "rounds": rounds, "seconds": round(seconds, 6), "tokens_per_s": round(len(tokens) / seconds, 2),
                                 "identical": "" if hf is None else tokens == hf, "pulls": json.dumps(pulls)})
            finished = p + 1
            _write_csv(folder / "results.csv", rows)
            sample = hf if hf is not None else tokens  # sampled: the last run's text
            log(_prompt_line(rows, p, kind, methods, policies) + (f"; sample: {(text[-40:] + '|' + tok.decode(sample)[:80])!r}" if p < 2 else ""))
    except KeyboardInterrupt:
        rows = [row for row in rows if row["prompt"] < finished]
        log(f"interrupted: {finished} of {len(prompts)} prompts finished; the table covers those")
    decode_seconds = time.perf_counter() - decode_start
    complete = finished == len(prompts)
    where = f"{platform.machine()} with {os.cpu_count()} CPUs"
    if target.device.type == "cuda":
        where = f"{torch.cuda.get_device_name(target.device)} GPU, {where}"
    table = _report(rows, methods, policies, labels, decoder.max_length, training, max_new_tokens, repeats, finished, len(prompts),
                    mismatches, decode_seconds, threads, complete, where, temperature)
    (folder / RESULTS_FILE).write_text(table)
    log(f"done in {time.perf_counter() - log.start:.0f}s: {folder / RESULTS_FILE}")
    return table, complete


def _params(model: Any) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters"


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _rate(rows: list[dict]) -> float:
    return sum(r["tokens"] for r in rows) / max(sum(r["seconds"] for r in rows), 1e-12)


def _per_repetition(rows: list[dict], method: str, prompts: set[int]) -> np.ndarray:
    """Tokens/s of ``method`` over ``prompts``, one value per repetition (tokens and seconds summed over prompts)."""
    reps = sorted({r["repetition"] for r in rows})
    return np.array([_rate([r for r in rows if r["method"] == method and r["repetition"] == k and r["prompt"] in prompts]) for k in reps])


def _prompt_line(rows: list[dict], p: int, kind: str, methods: list[str], policies: Sequence[str]) -> str:
    mine = [r for r in rows if r["prompt"] == p]
    rates = {m: _rate([r for r in mine if r["method"] == m]) for m in methods}
    best = max((m for m in methods if m.startswith("fixed:")), key=rates.get)
    parts = [f"prompt {p} ({kind}) done", f"best fixed {best[6:]} {rates[best]:.0f} tokens/s", f"plain {rates['fixed:plain']:.0f}"]
    parts += [f"{name} {rates[name]:.0f}" for name in policies]
    return ", ".join(parts)


def _report(rows, methods, policies, labels, max_length, training, max_new_tokens, repeats, finished, n_prompts, mismatches,
            decode_seconds, threads, complete, where, temperature) -> str:
    import torch

    lines = ["### Real-model demo (`genbandit specdec demo`)" + ("" if complete else f" -- interrupted after {finished} of {n_prompts} prompts"), ""]
    if not rows:
        return "\n".join(lines + ["No prompt finished."]) + "\n"
    target, draft = training.get("target", {}), training.get("draft", {})
    lines += [
        f"Target GPT {target.get('parameters', 0) / 1e6:.2f}M parameters, draft GPT {draft.get('parameters', 0) / 1e6:.2f}M, "
        f"{training.get('tokenizer', 'byte tokenizer')}, "
        f"trained for {target.get('steps', '?')} / {draft.get('steps', '?')} steps on the Python standard library's source"
        + (f", the target then fine-tuned against repeats for {target['finetune'].get('steps', '?')} steps (sequence-level unlikelihood, "
           "Welleck et al. 2020) " if isinstance(target.get("finetune"), dict) else " ")
        + f"(held-out loss target {target.get('held_out_loss_shipped', float('nan'))} / draft {draft.get('held_out_loss_shipped', float('nan'))} nats/byte; "
        f"share of distinct byte 4-grams in the target's greedy text: other prompts {target.get('greedy', {}).get('distinct_4gram_share', float('nan'))}"
        + "".join(f", {KINDS[kind]} prompts {q['distinct_4gram_share']}" for kind, q in target.get("greedy_demo_prompts", {}).items())
        + "). "
        + ("Greedy decoding" if temperature == 0 else f"Sampling at temperature {temperature:g} (repetition r of every method draws with seed r)")
        + f", {max_new_tokens} new tokens per prompt, {finished} prompts, arms = plain + {{model, pld, suffix}} x lengths "
        f"{list(LENGTHS)} (L = {max_length}). Each method ran {repeats} times per prompt, the order of the methods alternating; the "
        "serving policy carries its state from prompt to prompt (one chain per repetition), UCBSpec starts afresh on each prompt.",
        "tokens/s = generated tokens / wall time (prefill included), summed over the prompts of a class, as mean +- standard deviation "
        "over the repetitions; MAT = tokens per target verification pass.",
        "",
    ]
    classes = [(kind, title, {r["prompt"] for r in rows if r["kind"] == kind}) for kind, title in KINDS.items()]
    classes = [c for c in classes if c[2]] + [(None, "all prompts", {r["prompt"] for r in rows})]
    lines.append("| method | " + " | ".join(f"{title} tokens/s | MAT" for _, title, _ in classes) + " |")
    lines.append("|---|" + "---:|---:|" * len(classes))
    fixed = [m for m in methods if m.startswith("fixed:")]
    best = {}
    for kind, _, prompts in classes:
        best[kind] = max(fixed, key=lambda m: _per_repetition(rows, m, prompts).mean())
    for m in methods:
        cells = []
        for kind, _, prompts in classes:
            v = _per_repetition(rows, m, prompts)
            chosen = [r for r in rows if r["method"] == m and r["prompt"] in prompts]
            rounds = sum(r["rounds"] for r in chosen)
            mat = f"{sum(r['tokens'] for r in chosen) / rounds:.2f}" if rounds else "-"
            mark = "**" if m == best[kind] or m in policies else ""
            cells.append(f"{mark}{v.mean():.0f} +- {v.std(ddof=1) if len(v) > 1 else 0:.0f}{mark} | {mat}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Best fixed arm (bold): " + "; ".join(f"{title}: {best[kind][6:]}" for kind, title, _ in classes) + ".")
    for name in policies:
        parts = []
        for kind, title, prompts in classes:
            ratio = _per_repetition(rows, name, prompts) / _per_repetition(rows, best[kind], prompts)
            parts.append(f"{title} {ratio.mean():.2f} +- {ratio.std(ddof=1) if len(ratio) > 1 else 0:.2f}")
        per_prompt = [_per_repetition(rows, name, {p}).mean() / _per_repetition(rows, "fixed:plain", {p}).mean() for p in sorted({r["prompt"] for r in rows})]
        lines.append(f"{name} / best fixed arm, per repetition: {'; '.join(parts)}; / plain decoding, per prompt: "
                     f"min {min(per_prompt):.2f}, max {max(per_prompt):.2f}.")
        for other in [m for m in methods if not m.startswith("fixed:") and m not in policies]:
            ratio = _per_repetition(rows, name, classes[-1][2]) / _per_repetition(rows, other, classes[-1][2])
            lines.append(f"{name} / {other}, all prompts, per repetition: {ratio.mean():.2f} +- {ratio.std(ddof=1) if len(ratio) > 1 else 0:.2f}.")
    lines.append("")
    if temperature == 0:
        lines.append("Lossless check: every output equals transformers' plain `generate(do_sample=False)`: "
                     + ("**yes** (all runs)." if not mismatches else f"**no** for {len(mismatches)} run(s): {', '.join(mismatches[:8])}."))
    else:
        lines.append("Sampled outputs differ from method to method, so there is no token for token check here; the test suite's "
                     "chi-square test checks that the decoder's sampled tokens follow the target's law.")
    lines.append(f"Decoding {decode_seconds:.0f} s, torch threads {threads} ({torch.__version__}), {where}, "
                 f"load average {os.getloadavg()[0]:.1f} at the end.")
    return "\n".join(lines) + "\n"
