"""The demo: shipped models (quality, reproducible training), a run written prompt by prompt, Ctrl-C."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import csv
import json
import platform

from genbandit.core.validation import InvalidInputError, InvalidParameterError
from genbandit.specdec import demo, demo_training
from genbandit.specdec.demo_training import (
    SHIPPED_DIR,
    TRAIN,
    byte_lengths,
    distinct_ngram_share,
    greedy_quality,
    held_out_loss,
    held_out_prefixes,
    load_models,
    load_tokenizer,
)

RECORD = json.loads((SHIPPED_DIR / "training.json").read_text())


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module")
def corpus(tokenizer):
    return demo_training.corpus(tokenizer, TRAIN["corpus_bytes"])


def test_the_shipped_tokenizer_loads_offline_and_round_trips_any_text(tokenizer):
    target, draft = load_models()
    assert len(tokenizer) == TRAIN["vocab_size"] == target.config.vocab_size == draft.config.vocab_size  # the draft shares the vocabulary
    text = "def f(x):\n    return x  # héllo \u2713\t\x00"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text and len(ids) < len(text.encode("utf-8")) and tokenizer.eos_token_id not in ids
    lengths = byte_lengths(tokenizer)
    assert lengths[ids].sum() == len(text.encode("utf-8"))  # each token's bytes, for losses in nats per byte


def test_shipped_target_beats_the_draft_on_held_out_text(corpus, tokenizer):
    target, draft = load_models()
    lengths = byte_lengths(tokenizer)
    t, d = held_out_loss(target, corpus[1], lengths), held_out_loss(draft, corpus[1], lengths)
    assert t < d - 0.15, (t, d)  # 1.123 against 1.328 nats/byte (1.120 before the unlikelihood fine-tuning)
    assert t == pytest.approx(RECORD["target"]["held_out_loss_shipped"], abs=1e-3)  # the record describes these weights


def test_repeats_in_the_shipped_target_greedy_text_are_measured_as_recorded(tokenizer):
    """The share of distinct 4-grams is measured (and recorded in training.json, reported by the demo)."""
    target, _ = load_models()
    quality = greedy_quality(target, tokenizer)
    assert quality["distinct_4gram_share"] == RECORD["target"]["greedy"]["distinct_4gram_share"]
    # the unlikelihood fine-tuning at least tripled it (0.128 before, a loop like "of the end of the end"; 0.53 after)
    assert quality["distinct_4gram_share"] > 3 * RECORD["target"]["before_finetune"]["greedy"]["distinct_4gram_share"]
    assert distinct_ngram_share([7] * 50) < 0.05 < 0.9 < distinct_ngram_share(list(b"def read_config(path): return open(path).read()"))


def test_prompts_no_one_chose_measure_the_shipped_target_as_documented(corpus, tokenizer):
    """48 windows of held-out text as prompts (docs/specdec.md's shares table): the same prompts every time, none with an end of
    text, and the shipped target's share on them as documented (0.536; the maximum-likelihood target's text looped)."""
    prefixes = held_out_prefixes(tokenizer, corpus[1])
    assert len(prefixes) == 48 == len(set(prefixes)) and prefixes == held_out_prefixes(tokenizer, corpus[1])
    assert all(tokenizer.eos_token_id not in tokenizer.encode(p) for p in prefixes)
    target, _ = load_models()
    assert greedy_quality(target, tokenizer, prefixes)["distinct_4gram_share"] == 0.536


@pytest.mark.skipif(platform.python_version() != RECORD["python"], reason="the corpus is this Python version's standard library")
def test_training_by_steps_reproduces_the_recorded_first_losses(corpus, tokenizer):
    data, held = corpus
    assert len(data) == RECORD["corpus_tokens"]
    model = demo_training.build_model(demo_training.TARGET_CONFIG, TRAIN["seed"], len(tokenizer))
    recipe = {**TRAIN, **TRAIN["target"]}
    record = demo_training._train(model, data, held, byte_lengths(tokenizer), recipe, TRAIN["seed"], lambda msg: None, "target", stop_after=5)
    assert record["first_losses"] == pytest.approx(RECORD["target"]["first_losses"], abs=2e-3)


@pytest.mark.skipif(platform.python_version() != RECORD["python"], reason="the corpus is this Python version's standard library")
def test_unlikelihood_finetuning_by_steps_reproduces_the_recorded_first_losses(corpus, tokenizer):
    data, held = corpus
    model = demo_training.build_model(demo_training.TARGET_CONFIG, TRAIN["seed"], len(tokenizer))
    recipe = {**TRAIN, **TRAIN["finetune"]}
    record = demo_training._unlikelihood_finetune(model, data, held, byte_lengths(tokenizer), recipe, TRAIN["seed"], lambda msg: None, stop_after=5)
    # steps 1, 3, 5 are unlikelihood steps on the model's own greedy text, 2 and 4 maximum-likelihood steps
    assert record["first_losses"] == pytest.approx(RECORD["target"]["finetune"]["check_first_losses"], rel=5e-3)


def test_only_ngrams_repeated_within_the_continuation_are_penalised():
    import torch

    prompt_copy = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])  # may copy the prompt: nothing repeats within it
    loop = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 1]])
    assert demo_training.repeated_ngram_mask(prompt_copy).sum() == 0
    assert demo_training.repeated_ngram_mask(loop).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 1, 0]]


@pytest.mark.skipif(platform.python_version() != RECORD["python"], reason="the corpus is this Python version's standard library")
def test_learning_the_tokenizer_again_gives_the_shipped_one(tokenizer):
    again = demo_training.train_tokenizer(demo_training.corpus_texts(TRAIN["corpus_bytes"])[0], TRAIN["vocab_size"])
    assert again.get_vocab() == tokenizer.get_vocab()
    merges = [json.loads(t.backend_tokenizer.to_str())["model"]["merges"] for t in (again, tokenizer)]
    assert merges[0] == merges[1]


def test_cli_generate_finds_the_tokenizer_beside_the_shipped_models(capsys):
    from genbandit.cli import main

    argv = ["specdec", "generate", "--target", str(SHIPPED_DIR / "target"), "--draft", str(SHIPPED_DIR / "draft"),
            "--prompt", "def add(a, b):\n    return", "--max-new-tokens", "24", "--policy", "UCB1", "--check"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "def add(a, b):\n    return\u2502" in out and "identical to plain greedy decoding: yes" in out


PROMPTS = demo.DEMO_PROMPTS[:2]


def test_demo_writes_prompt_by_prompt_and_is_lossless(tmp_path):
    table, complete = demo.run_demo(tmp_path, max_new_tokens=24, repeats=2, prompts=PROMPTS, echo=lambda msg: None)
    assert complete and "**yes**" in table and "WarmThroughputUCB / best fixed arm" in table
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * (7 + 2)  # prompts x repetitions x (7 fixed arms + 2 policies)
    log = (tmp_path / "log.txt").read_text()
    assert "prompt 0 (code) done" in log and "prompt 1 (text) done" in log
    assert demo.cached_demo_table(tmp_path) == table


def test_a_sampled_demo_is_seeded_per_repetition_and_claims_no_token_check(tmp_path):
    runs = []
    for name in ("a", "b"):
        table, complete = demo.run_demo(tmp_path / name, max_new_tokens=24, repeats=2, prompts=PROMPTS, echo=lambda msg: None,
                                        temperature=0.8)
        assert complete and "Sampling at temperature 0.8" in table and "no token for token check" in table
        assert "Lossless check" not in table and "WarmThroughputUCB / best fixed arm" in table
        with (tmp_path / name / "results.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == 2 * 2 * (7 + 2) and {row["identical"] for row in rows} == {""}  # not checked
        # the serving policy's choices follow the measured round times; every other method's rounds are the seeds' alone
        runs.append({(row["prompt"], row["method"], row["repetition"]): (row["tokens"], row["rounds"], row["pulls"]) for row in rows
                     if row["method"] != "WarmThroughputUCB"})
    assert runs[0] == runs[1]  # the same seeds draw the same texts, round for round
    # the two repetitions of a method draw with different seeds: somewhere their rounds differ
    assert any(runs[0][p, m, "0"] != runs[0][p, m, "1"] for p, m, r in runs[0] if r == "0")


def test_the_demo_refuses_a_bad_temperature(tmp_path):
    with pytest.raises(InvalidParameterError, match="temperature must be >= 0"):
        demo.run_demo(tmp_path, temperature=-1.0, echo=lambda msg: None)


def test_the_demo_refuses_prompts_that_do_not_fit_or_have_no_class_before_decoding(tmp_path):
    """A prompt whose tokens and new tokens pass the models' 512 positions is refused up front, naming it (transformers'
    generate, the reference, failed on it with an IndexError after the prompts before it had run), and so is a kind the
    table has no class for (its rows would have been left out of every class)."""
    long_code = ("code", "x = 1\n" * 100)  # 400 tokens
    with pytest.raises(InvalidInputError, match="Prompt 1 .* and 256 new tokens must fit in the models' context of 512"):
        demo.run_demo(tmp_path, prompts=[PROMPTS[0], long_code], echo=lambda msg: None)
    with pytest.raises(InvalidInputError, match="kind must be one of"):
        demo.run_demo(tmp_path, prompts=[("prose", "Once upon a time")], echo=lambda msg: None)
    table, complete = demo.run_demo(tmp_path, prompts=[long_code], max_new_tokens=8, repeats=1, policies=(), echo=lambda msg: None)
    assert complete and "**yes** (all runs)" in table  # it fits with fewer new tokens


def test_transformers_methods_sample_at_the_temperature_given():
    target, draft = load_models(SHIPPED_DIR)
    tokenizer = load_tokenizer()
    ids = tokenizer.encode(PROMPTS[1][1])
    greedy = demo.transformers_methods(target, draft, tokenizer, 0.0)
    cold = demo.transformers_methods(target, draft, tokenizer, 1e-4)  # sampling this cold is greedy decoding
    hot = demo.transformers_methods(target, draft, tokenizer, 5.0)
    reference = greedy["hf:plain"](ids, 24)
    for name in ("hf:plain", "hf:assisted", "hf:prompt-lookup"):
        assert greedy[name](ids, 24) == reference and cold[name](ids, 24) == reference
        assert hot[name](ids, 24) != reference  # sampled (a 24-token greedy match at temperature 5 has no chance)


def test_ctrl_c_keeps_the_finished_prompts(tmp_path):
    def echo(message):
        if "prompt 1 (" in message:
            raise KeyboardInterrupt

    table, complete = demo.run_demo(tmp_path, max_new_tokens=16, repeats=1, prompts=PROMPTS + PROMPTS, echo=echo)
    assert not complete and "interrupted after 2 of 4 prompts" in table
    assert "interrupted: 2 of 4 prompts finished" in (tmp_path / "log.txt").read_text()
    assert {line.split(",")[0] for line in (tmp_path / "results.csv").read_text().splitlines()[1:]} == {"0", "1"}
    assert demo.cached_demo_table(tmp_path) is None  # an interrupted run does not stand for the demo


def test_cli_generate_keeps_the_serving_policy_state_across_runs(tmp_path, capsys):
    from genbandit.cli import main
    from genbandit.core.base import Policy

    state = tmp_path / "serving.json"
    argv = ["specdec", "generate", "--target", str(SHIPPED_DIR / "target"), "--draft", str(SHIPPED_DIR / "draft"), "--lengths", "3,6",
            "--prompt", demo.DEMO_PROMPTS[0][1], "--max-new-tokens", "48", "--policy-state", str(state), "--check", "--quiet"]
    assert main(argv) == 0 and state.exists()
    first = Policy.from_state_dict(json.loads(state.read_text()))
    assert main(argv) == 0 and "identical to plain greedy decoding: yes" in capsys.readouterr().out
    second = Policy.from_state_dict(json.loads(state.read_text()))
    # the second run started from the first one's state: its carried rounds add up (own pulls: column 3 of the sums)
    carried = lambda p: p._carried[..., 3].sum() + p._current[..., 3].sum()
    assert carried(second) > carried(first) > 0
    capsys.readouterr()
    assert main(argv[:6] + ["--lengths", "2,4"] + argv[8:]) != 0  # another arm set: refused, naming what differs
    assert "other settings (arm_lengths)" in capsys.readouterr().err
    saved = state.read_text()
    state.write_text("not json")
    assert main(argv) != 0 and "not a policy state genbandit wrote" in capsys.readouterr().err
    state.write_text(saved)
    assert main(argv + ["--arm", "plain"]) != 0 and "a fixed --arm has none" in capsys.readouterr().err


def _benchmark(name: str):
    """The module ``benchmarks/NAME.py`` (the benchmarks are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_benchmark_trains_by_steps_and_decodes_side_by_side_on_any_device(tmp_path):
    """``benchmarks/specdec_gpu.py --smoke`` on the CPU: the larger-model pipeline (train both models on a device by steps, save
    them, decode every method beside transformers' own) runs end to end, so a session lent a GPU can run it at once."""
    bench = _benchmark("specdec_gpu")
    assert bench.main(["--smoke", "--device", "cpu", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "training-summary.json").read_text())
    assert summary["target"]["config"] == bench.SMOKE_RECIPE["target"]["config"]
    assert summary["draft"]["config"] == bench.SMOKE_RECIPE["draft"]["config"]
    target, draft = load_models(tmp_path / "models")
    assert target.config.n_layer == 2 and draft.config.n_embd == 16
    table = (tmp_path / "table.md").read_text()
    assert "**yes** (all runs)" in table  # every method's output is plain generate's
    for method in ("hf:plain", "hf:assisted", "hf:prompt-lookup", "fixed:model:6", "WarmThroughputUCB"):
        assert f"| {method} |" in table
    # the full run's models are the larger ones it promises, trained by steps without a wall-clock budget
    assert bench.GPU_RECIPE["target"]["config"]["n_layer"] == 12 and bench.GPU_RECIPE["target"]["steps"] > bench.GPU_RECIPE["draft"]["steps"]


def test_the_unseen_prompts_benchmark_draws_from_held_out_files_only():
    """``benchmarks/specdec_unseen.py`` draws its prompts from the files the demo's models never trained on: code windows and
    docstring halves alternating, the same prompts for the same seed and others for another seed."""
    from genbandit.specdec.demo_training import TRAIN, corpus_texts

    bench = _benchmark("specdec_unseen")
    prompts = bench.unseen_prompts(11)
    assert [kind for kind, _ in prompts] == ["code", "text"] * 4
    assert prompts == bench.unseen_prompts(11) and prompts != bench.unseen_prompts(12)
    _, held = corpus_texts(TRAIN["corpus_bytes"])
    for kind, text in prompts:
        # cut from a held-out file (the same text may stand in a training file too: the standard library repeats
        # boilerplate, e.g. across its codecs, so that is not asserted)
        assert any(text in source for source in held)
        assert len(text) == bench.CODE_BYTES if kind == "code" else \
            text.startswith('"""') and bench.MIN_DOCSTRING // 2 <= len(text) <= bench.CODE_BYTES


def test_the_first_response_benchmark_splits_a_fresh_chain_s_time_by_part():
    """``benchmarks/specdec_first_response.py`` books the target's verification, the draft model's catch-up passes and
    drafts, and the rest, per response: the fixed copier never touches the draft model, a fresh serving chain tries it
    (its longest arm first, after a catch-up pass), and the parts add up to no more than the response's time."""
    bench = _benchmark("specdec_first_response")
    rows = bench.measure(repeats=2, max_new_tokens=24)
    assert set(rows) == {bench.FIXED, bench.SERVING} and all(len(got) == 2 for got in rows.values())
    for row in rows[bench.FIXED]:
        assert row["model rounds"] == 0 and row["catch-ups"] == 0 and "draft model: drafts" not in row
    for row in rows[bench.SERVING]:
        assert row["model rounds"] >= 1 and row["catch-ups"] >= 1 and row["draft model: drafts"] > 0
    for got in rows.values():
        for row in got:
            assert 0 < row["verification"] < row["ms"] and row["else"] > 0
            assert row["rounds"] >= 24 / 7  # at most L + 1 = 7 tokens a round
