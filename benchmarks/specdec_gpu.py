"""Speculative decoding on a GPU with a larger target trained there, side by side with Hugging Face's own, in one run.

The CPU demo's target is small enough (1.4M parameters) that a draft model's forward pass costs nearly as much as the
target's, so on a CPU the copiers win and the draft model never pays. On a GPU a forward pass of a small model costs
about the same whatever its width, and verifying a draft of several tokens about as much as decoding one, so a draft
model of 2 layers in front of a target of 12 can pay. This script measures that regime:

1. Learn the demo's byte-level BPE tokenizer on the Python standard library's source (test suites left out, every
   tenth file held out, as the demo's models), then train a target GPT and a draft GPT of the sizes below on the
   device, each for a fixed number of steps (the same models on a busy or an idle machine; the seeds fixed). They are
   saved under ``OUT/models`` with ``training.json`` (held-out loss in nats per byte, the share of distinct 4-grams of
   the target's greedy text), so ``--models OUT/models`` decodes again without training.
2. Decode the demo's 8 prompts greedily with every fixed arm of ``genbandit.specdec`` (plain; draft model, prompt
   lookup and suffix copier x lengths 3 and 6), the serving policy (``WarmThroughputUCB``, its state carried from prompt
   to prompt), UCBSpec, and ``transformers``' plain ``generate``, assisted generation (``assistant_model=``) and prompt
   lookup decoding (``prompt_lookup_num_tokens=6``), each repeated with the order of the methods alternating, every
   output compared with plain ``generate``. ``OUT/table.md``, ``OUT/results.csv`` and ``OUT/log.txt`` are written
   prompt by prompt, so a run stopped by a time limit keeps the prompts that finished.

Run on a machine with a CUDA GPU (the device defaults to ``cuda`` when one is visible)::

    PYTHONPATH=src python benchmarks/specdec_gpu.py --out gpu-run

``--smoke`` trains tiny models for a few steps and decodes two prompts: a check that the script runs, on any device
(the test suite runs it on the CPU). TF32 matrix products are allowed while training and switched off before decoding,
so that decoding compares float32 with float32 (the setting is put back as it was).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from genbandit.specdec.demo import DEMO_PROMPTS, run_demo, transformers_methods
from genbandit.specdec.demo_training import TRAIN, train_models

#: The larger models: a 12-layer target of width 384 (about 23M parameters with the 4,096-token vocabulary) and a
#: 2-layer draft of width 192 (about 1.8M), each trained for a fixed number of steps of 32 windows of 256 tokens (the last
#: steps on 8 windows of the full 512-token context). No unlikelihood fine-tuning: the target is measured as trained.
GPU_RECIPE = dict(
    corpus_bytes=20_000_000, lr=1e-3, warmup=100, batch=32, block=256, long_batch=8, long_block=512,
    target=dict(steps=2000, long_steps=200, config=dict(n_embd=384, n_layer=12, n_head=6)),
    draft=dict(steps=1500, long_steps=150, config=dict(n_embd=192, n_layer=2, n_head=3)),
    finetune=dict(TRAIN["finetune"], steps=0),
)
#: ``--smoke``: the same pipeline at a size that runs in well under a minute on a CPU.
SMOKE_RECIPE = dict(
    corpus_bytes=300_000, vocab_size=512, lr=2e-3, warmup=2, batch=4, block=32, long_batch=2, long_block=64,
    target=dict(steps=6, long_steps=2, config=dict(n_embd=32, n_layer=2, n_head=2)),
    draft=dict(steps=4, long_steps=1, config=dict(n_embd=16, n_layer=1, n_head=2)),
    finetune=dict(TRAIN["finetune"], steps=0),
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("specdec-gpu-out"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", type=Path, default=None, help="decode with the models of an earlier run (OUT/models) instead of training")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--smoke", action="store_true", help="tiny models, a few steps, two prompts, 16 new tokens")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    models = args.models
    if models is None:
        models = args.out / "models"
        recipe = {**(SMOKE_RECIPE if args.smoke else GPU_RECIPE), "device": args.device}
        log(f"training on {args.device}: target {recipe['target']['config']} for {recipe['target']['steps']} steps, "
            f"draft {recipe['draft']['config']} for {recipe['draft']['steps']} steps")
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True  # training only: the models are saved, then decoded in float32
        try:
            record = train_models(models, log=log, recipe=recipe)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        log("trained: held-out loss (nats per byte) target {0}, draft {1}".format(
            record["target"]["held_out_loss_shipped"], record["draft"]["held_out_loss_shipped"]))
        (args.out / "training-summary.json").write_text(json.dumps(
            {tag: {k: record[tag].get(k) for k in ("parameters", "config", "seconds", "held_out_loss_shipped")} for tag in ("target", "draft")}, indent=2))
    prompts = DEMO_PROMPTS[:2] if args.smoke else DEMO_PROMPTS
    max_new_tokens = 16 if args.smoke else args.max_new_tokens
    table, complete = run_demo(args.out, models=models, max_new_tokens=max_new_tokens, repeats=2 if args.smoke else args.repeats,
                               prompts=prompts, extra_methods=transformers_methods, device=args.device,
                               echo=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(table)
    return 0 if complete else 130


if __name__ == "__main__":
    sys.exit(main())
