"""``genbandit specdec generate`` and ``genbandit specdec demo``: thin adapters over :mod:`genbandit.specdec`.

torch and transformers are imported inside the handlers, so ``genbandit --help`` works without them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["register"]

SERVING_POLICY = "WarmThroughputUCB"  # the decoder's default policy (kept equal to decoder.SERVING_POLICY by a test)


def register(subparsers) -> None:
    """Add ``specdec`` with its ``generate`` and ``demo`` subcommands to the main parser."""
    spec = subparsers.add_parser("specdec", help="speculative decoding on Hugging Face models, arms chosen by a bandit")
    sub = spec.add_subparsers(dest="specdec_command", required=True)

    gen = sub.add_parser("generate", help="generate with a target model, drafters and a policy; print MAT and tokens/s")
    gen.add_argument("--target", required=True, help="path (or hub name, if cached) of the target causal LM")
    gen.add_argument("--draft", help="path of a smaller causal LM with the target's vocabulary (the 'model' drafter)")
    gen.add_argument("--tokenizer", help="tokenizer path, or 'bytes' for the byte tokenizer (default: the target's, else bytes)")
    gen.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    gen.add_argument("--prompt-file", action="append", default=[], type=Path, help="a file whose text is one prompt (repeatable)")
    gen.add_argument("--drafters", default="model,pld,suffix", help="comma-separated drafters among model, pld, suffix")
    gen.add_argument("--lengths", default="1,2,4", help="comma-separated speculation lengths (default 1,2,4)")
    gen.add_argument("--no-plain", action="store_true", help="leave out the arm 'plain' (length 0)")
    gen.add_argument("--policy", default=SERVING_POLICY, help=f"registered policy choosing the arm each round (default {SERVING_POLICY}, which learns across prompts)")
    gen.add_argument("--policy-state", type=Path, help="a JSON file of the policy's learned state: read at the start if it exists "
                     "(so a restarted server starts from what it learned), written after the prompts")
    gen.add_argument("--arm", help="a fixed arm label instead of a policy (e.g. plain, suffix:4)")
    gen.add_argument("--all-arms", action="store_true", help="also run every fixed arm and print them all")
    gen.add_argument("--reward", choices=["tokens", "throughput"], default="tokens", help="the bandit's reward (default tokens)")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 for greedy decoding (default)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "auto"], default="float32",
                     help="the models' weights in memory (default float32; 'auto': as saved). In 16-bit formats a verification "
                     "pass over several tokens can round differently from one-token steps, so greedy outputs may differ from "
                     "plain decoding where two tokens nearly tie")
    gen.add_argument("--threads", type=int, help="torch CPU threads")
    gen.add_argument("--check", action="store_true", help="greedy only: also decode plainly and say whether outputs are identical")
    gen.add_argument("--quiet", action="store_true", help="do not print the generated text")
    gen.set_defaults(handler=_generate)

    demo = sub.add_parser("demo", help="fixed arms against the serving policy and UCBSpec on the shipped tiny models (a few minutes on 2 cores)")
    demo.add_argument("--out", type=Path, help="folder for log.txt, results.csv and table.md (default ~/.cache/genbandit/specdec-demo)")
    demo.add_argument("--models", type=Path, help="folder with target/ and draft/ (default: the models shipped with the package)")
    demo.add_argument("--max-new-tokens", type=int, default=256, help="tokens generated per prompt (default 256)")
    demo.add_argument("--repeats", type=int, default=3, help="repetitions of every measurement, the order of methods alternating (default 3)")
    demo.add_argument("--policies", default=f"{SERVING_POLICY},UCBSpec", help=f"comma-separated policies (default {SERVING_POLICY},UCBSpec)")
    demo.add_argument("--quick", action="store_true", help="two prompts, 64 tokens: a smoke test")
    demo.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: measured faster than 2 for these models)")
    demo.add_argument("--temperature", type=float, default=0.0,
                      help="0 for greedy decoding (default, each output checked against transformers' generate); > 0 samples")
    demo.set_defaults(handler=_demo)

    train = sub.add_parser("train-demo", help="train the demo's target and draft again (by steps; the package ships the result)")
    train.add_argument("--out", type=Path, required=True, help="folder for target/, draft/ and training.json")
    train.set_defaults(handler=_train_demo)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _has_tokenizer(path: str) -> bool:
    folder = Path(path)
    return folder.is_dir() and any((folder / f).exists() for f in _TOKENIZER_FILES)


def _load_causal_lm(path: str, flag: str, dtype: str = "float32"):
    """The causal LM saved at ``path`` (a folder, or a hub name already cached) with its weights in ``dtype`` ("auto": as
    saved; transformers 5 loads them as saved unless told), or a clear error naming ``flag``."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..core.validation import InvalidParameterError

    folder = Path(path).expanduser()
    if not folder.exists() and (folder.is_absolute() or path.startswith((".", "~")) or path.count("/") > 1):
        raise InvalidParameterError(f"{flag} {path}: no folder there (give a folder written by save_pretrained, or a cached hub name).")
    weights = dtype if dtype == "auto" else getattr(torch, dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder) if folder.exists() else path, dtype=weights)
    except (OSError, ValueError, KeyError) as error:  # a folder without a model, or a model that is not a causal LM
        raise InvalidParameterError(f"{flag} {path}: not a causal LM that AutoModelForCausalLM can load ({error})") from error
    if dtype != "auto":  # the Auto path may leave composite models in their saved dtype (transformers issue 46459)
        model = model.to(weights)
    return model.eval()


def _check_vocabularies(args: argparse.Namespace, target, draft, tokenizer) -> None:
    """The draft must read and write the target's tokens: with two tokenizers, the same vocabulary; else the same size.

    ``tokenizer`` is the one already loaded for the run; it is the target's own unless ``--tokenizer`` named another.
    """
    from ..core.validation import InvalidParameterError
    from .tensors import vocab_size

    if _has_tokenizer(args.target) and _has_tokenizer(args.draft):
        from transformers import AutoTokenizer

        own = tokenizer if args.tokenizer is None else AutoTokenizer.from_pretrained(args.target)
        if own.get_vocab() != AutoTokenizer.from_pretrained(args.draft).get_vocab():
            raise InvalidParameterError(f"--draft {args.draft}: its tokenizer's vocabulary is not the target's; "
                                        "a draft model must use the target's tokenizer.")
        return  # one tokenizer: the embedding matrices may be padded to different sizes
    if vocab_size(draft) != vocab_size(target):
        raise InvalidParameterError(f"--draft {args.draft}: its vocabulary has {vocab_size(draft)} tokens, the target's "
                                    f"{vocab_size(target)}; a draft model must use the target's tokenizer.")


def _load_tokenizer(name: str | None, target_path: str, vocab_size: int):
    from ..core.validation import InvalidParameterError
    from .tokenizer import ByteTokenizer

    if name == "bytes":
        return ByteTokenizer()
    folder = Path(target_path)
    if name is None and folder.is_dir() and not _has_tokenizer(target_path):
        if vocab_size == ByteTokenizer.vocab_size:
            return ByteTokenizer()  # a model trained with genbandit's byte tokenizer
        raise InvalidParameterError(f"No tokenizer in {folder}: give --tokenizer PATH (or 'bytes').")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name or target_path)


def _generate(args: argparse.Namespace) -> int:
    import torch

    from ..core.validation import InvalidParameterError
    from .decoder import SpeculativeDecoder
    from .drafters import ModelDrafter, PromptLookupDrafter, SuffixMatchDrafter

    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = list(args.prompt) + [p.read_text() for p in args.prompt_file]
    if not prompts:
        raise InvalidParameterError("Give at least one --prompt or --prompt-file.")
    target = _load_causal_lm(args.target, "--target", args.dtype)
    tokenizer = _load_tokenizer(args.tokenizer, args.target, target.config.vocab_size)
    draft = None
    if args.draft is not None:
        draft = _load_causal_lm(args.draft, "--draft", args.dtype)
        _check_vocabularies(args, target, draft, tokenizer)
    drafters = {}
    for name in _split(args.drafters):
        if name == "model":
            if draft is None:
                continue
            drafters["model"] = ModelDrafter(draft)
        elif name == "pld":
            drafters["pld"] = PromptLookupDrafter()
        elif name == "suffix":
            drafters["suffix"] = SuffixMatchDrafter()
        else:
            raise InvalidParameterError(f"Unknown drafter {name!r}: choose among model, pld, suffix.")
    if draft is not None and "model" not in drafters:
        drafters["model"] = ModelDrafter(draft)
    # the end of text generate would stop at (the model's generation_config: an int or a list), else the tokenizer's
    eos = "model" if target.generation_config.eos_token_id is not None else getattr(tokenizer, "eos_token_id", None)
    decoder = SpeculativeDecoder(
        target, drafters, [int(k) for k in _split(args.lengths)], include_plain=not args.no_plain,
        temperature=args.temperature, eos_token_id=eos,
    )
    runs: list[tuple[str, dict]] = []
    policy = None
    if args.arm is not None:
        if args.policy_state is not None:
            raise InvalidParameterError("--policy-state keeps a policy's state; a fixed --arm has none.")
        runs.append((args.arm, {"arm": args.arm}))
    else:  # one policy object for all prompts: a policy that learns across responses carries its state
        policy = decoder.make_policy(args.policy, seed=args.seed)
        if args.policy_state is not None and args.policy_state.exists():
            policy = _load_policy_state(args.policy_state, policy)
        runs.append((args.policy, {"policy": policy}))
    if args.all_arms:
        runs += [(arm.label, {"arm": arm.label}) for arm in decoder.arms if arm.label != args.arm]
    identical = True
    print(f"arms: {', '.join(a.label for a in decoder.arms)}   (L = {decoder.max_length})")
    rows = []
    for i, text in enumerate(prompts):
        ids = tokenizer.encode(text)
        reference = None
        if args.check and args.temperature == 0:
            reference = decoder.generate(ids, arm=decoder.arms[0].label, max_new_tokens=args.max_new_tokens).tokens
        for label, how in runs:
            res = decoder.generate(ids, max_new_tokens=args.max_new_tokens, reward=args.reward, seed=args.seed, **how)
            if reference is not None:
                identical &= res.tokens == reference
            rows.append((i, label, res))
            if label == runs[0][0] and not args.quiet:
                print(f"--- prompt {i} ({label})\n{text}\u2502{tokenizer.decode(res.tokens)}")
    print(f"\n{'prompt':>6}  {'policy/arm':<16} {'tokens':>6} {'rounds':>6} {'MAT':>6} {'tokens/s':>9}  arm pulls")
    for i, label, res in rows:
        pulls = " ".join(f"{k}={v}" for k, v in res.arm_counts().items() if v)
        print(f"{i:>6}  {label:<16} {len(res.tokens):>6} {res.rounds:>6} {res.mat:>6.2f} {res.tokens_per_second:>9.1f}  {pulls}")
    if policy is not None and args.policy_state is not None:
        _save_policy_state(args.policy_state, policy)
        print(f"\npolicy state written to {args.policy_state}")
    if args.check and args.temperature == 0:
        print(f"\nidentical to plain greedy decoding: {'yes' if identical else 'NO'}")
        return 0 if identical else 1
    return 0


def _load_policy_state(path: Path, fresh):
    """The policy saved at ``path``, checked against ``fresh`` (the policy this run's arms make): the same class and
    hyperparameters (arms, lengths, drafters), or a clear error saying what differs. Its learned round times are this
    machine's only if it was saved here; on another they are replaced within ``memory`` rounds."""
    from ..core.base import Policy
    from ..core.serialization import differing_settings
    from ..core.validation import InvalidInputError, InvalidParameterError

    try:
        state = json.loads(path.read_text())
        saved = Policy.from_state_dict(state)
    except (json.JSONDecodeError, UnicodeDecodeError, InvalidInputError) as error:
        raise InvalidParameterError(f"--policy-state {path}: not a policy state genbandit wrote ({error})") from error
    differ = differing_settings(state, fresh.state_dict(), ignore=("seed",))
    if differ:
        raise InvalidParameterError(f"--policy-state {path}: saved for {type(saved).__name__} with other settings "
                                    f"({', '.join(differ)}) than this run's {type(fresh).__name__}; "
                                    "give the same --policy, --drafters, --lengths and --no-plain, or another file.")
    return saved


def _save_policy_state(path: Path, policy) -> None:
    """Write ``policy``'s state to ``path`` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(policy.state_dict()))
    os.replace(tmp, path)


def _demo(args: argparse.Namespace) -> int:
    print("genbandit specdec demo: loading torch and transformers...", file=sys.stderr, flush=True)
    try:
        from .demo import DEMO_PROMPTS, run_demo

        table, complete = run_demo(
            out=args.out, models=args.models, max_new_tokens=64 if args.quick else args.max_new_tokens, repeats=args.repeats,
            prompts=DEMO_PROMPTS[:2] if args.quick else None, policies=_split(args.policies), threads=args.threads,
            temperature=args.temperature, echo=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    except KeyboardInterrupt:
        print("interrupted before the first prompt finished; nothing to report", file=sys.stderr)
        return 130
    print(table)
    return 0 if complete else 130


def _train_demo(args: argparse.Namespace) -> int:
    from .demo_training import train_models

    train_models(args.out, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    return 0
