"""The serving policy on prompts no one chose: the demo's models and methods on windows of held-out source files.

The demo's 8 prompts were written by hand. This benchmark draws its prompts from the files the demo's
models never trained on (every tenth file of the Python standard library's source, the held-out set
of ``genbandit.specdec.demo_training.corpus_texts``): alternately a 600-byte window of code that starts
at a line, and the first half of a docstring of at least 200 bytes (at most 600 bytes of it, so that every prompt and
its 256 new tokens fit in the models' 512 positions), 8 prompts in all, drawn by
``numpy.random.default_rng(seed)``. Every method then runs as in ``genbandit specdec demo``: every fixed
arm, the serving policy (one chain per repetition), greedy, each output checked against
``transformers``' ``generate`` (or sampled at ``--temperature``), the order of methods alternating. Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_unseen.py --seed 11 --out specdec-unseen-11
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from genbandit.specdec.demo import run_demo
from genbandit.specdec.demo_training import TRAIN, corpus_texts

CODE_BYTES = 600
MIN_DOCSTRING = 200


def unseen_prompts(seed: int, count: int = 8) -> list[tuple[str, str]]:
    """``count`` (kind, text) prompts from the held-out files: code windows and docstring halves, alternating."""
    _, held = corpus_texts(TRAIN["corpus_bytes"])
    files = [text for text in held if len(text) > 2 * CODE_BYTES]
    rng = np.random.default_rng(seed)
    prompts: list[tuple[str, str]] = []
    while len(prompts) < count:
        text = files[int(rng.integers(len(files)))]
        if len(prompts) % 2 == 0:
            start = text.find("\n", int(rng.integers(0, len(text) - CODE_BYTES - 100))) + 1
            prompts.append(("code", text[start : start + CODE_BYTES]))
            continue
        docstrings = [m.group(0) for m in re.finditer(r'"""[^"]{%d,}' % MIN_DOCSTRING, text)]
        if docstrings:
            doc = docstrings[int(rng.integers(len(docstrings)))]
            prompts.append(("text", doc[: min(len(doc) // 2, CODE_BYTES)]))
    return prompts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("specdec-unseen-out"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policies", default="WarmThroughputUCB")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: every method samples")
    args = parser.parse_args(argv)
    table, complete = run_demo(args.out, prompts=unseen_prompts(args.seed), repeats=args.repeats,
                               policies=tuple(args.policies.split(",")), temperature=args.temperature, echo=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(table)
    return 0 if complete else 130


if __name__ == "__main__":
    raise SystemExit(main())
