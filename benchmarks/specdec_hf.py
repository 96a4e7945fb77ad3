"""Speculative decoding side by side with Hugging Face's own, on the demo's models and prompts, in one run.

Methods (greedy, every output compared with plain ``generate``; or all sampled at ``--temperature``):

- ``hf:plain``: ``target.generate(do_sample=False)``;
- ``hf:assisted``: assisted generation, ``target.generate(assistant_model=draft)`` (its default
  schedule of draft lengths);
- ``hf:prompt-lookup``: prompt lookup decoding, ``target.generate(prompt_lookup_num_tokens=6)``;
- ours: every fixed arm of ``genbandit.specdec`` (plain, model / pld / suffix drafters x lengths
  3 and 6), the serving policy (``WarmThroughputUCB``, state carried from prompt to prompt) and
  UCBSpec.

Each measurement is repeated (default 3), the order of the methods alternating. Run::

    PYTHONPATH=src nice -n 10 python benchmarks/specdec_hf.py --out docs/reproductions/specdec-demo/hf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from genbandit.specdec.demo import run_demo, transformers_methods


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("specdec-hf-out"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: every method samples")
    args = parser.parse_args(argv)
    table, complete = run_demo(args.out, max_new_tokens=args.max_new_tokens, repeats=args.repeats, threads=args.threads,
                               extra_methods=transformers_methods, temperature=args.temperature, echo=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(table)
    return 0 if complete else 130


if __name__ == "__main__":
    sys.exit(main())
