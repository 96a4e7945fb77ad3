"""The speculative decoder on users' own Hugging Face models: tiny random models of the decoder-only architectures people
serve (GPT-2, Llama, Mistral with a sliding window, Qwen2 with tied embeddings, GPT-NeoX, Phi, OPT), each target drafted
by a model of another architecture, checked token for token against transformers' own greedy ``generate`` and, for
sampling, against the target's exact law; the command line on saved models of another architecture."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import itertools
import warnings

import numpy as np
import torch
import transformers
from scipy import stats

from genbandit.core.validation import InvalidInputError, InvalidParameterError
from genbandit.specdec import ModelDrafter, PromptLookupDrafter, SpeculativeDecoder, SuffixMatchDrafter
from genbandit.specdec.tensors import _cache_keyword, crop_cache, returned_cache

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 128


def config(arch: str, *, vocab: int = VOCAB, width: int = 32, layers: int = 2, positions: int = 256, init: float = 0.02):
    """A tiny config of ``arch``; end of text is the last token, so a model's own ``generation_config`` names one."""
    special = {"vocab_size": vocab, "bos_token_id": 0, "eos_token_id": vocab - 1, "initializer_range": init}
    rotary = {"hidden_size": width, "intermediate_size": 2 * width, "num_hidden_layers": layers, "num_attention_heads": 4,
              "max_position_embeddings": positions, **special}
    if arch == "gpt2":
        return transformers.GPT2Config(n_embd=width, n_layer=layers, n_head=2, n_positions=positions, **special)
    if arch == "llama":
        return transformers.LlamaConfig(num_key_value_heads=2, **rotary)
    if arch == "mistral":  # a window of 8 positions: full after the first few tokens, so a crop must undo a rejection past it
        return transformers.MistralConfig(num_key_value_heads=2, sliding_window=8, **rotary)
    if arch == "qwen2":
        return transformers.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **rotary)
    if arch == "gpt_neox":
        return transformers.GPTNeoXConfig(**rotary)
    if arch == "phi":
        return transformers.PhiConfig(**rotary)
    if arch == "opt":
        return transformers.OPTConfig(hidden_size=width, ffn_dim=2 * width, num_hidden_layers=layers, num_attention_heads=4,
                                      max_position_embeddings=positions, word_embed_proj_dim=width, pad_token_id=1, **special)
    raise ValueError(arch)


def tiny(arch: str, seed: int, dtype: torch.dtype = torch.float64, **kw):
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config(arch, **kw)).eval().to(dtype)


ARCHS = ["gpt2", "llama", "mistral", "qwen2", "gpt_neox", "phi", "opt"]
PROMPTS = [
    [5, 9, 14, 5, 9, 14, 7, 3],  # short: the draft's context (24) ends during the response
    [(7 * i) % 50 + 2 for i in range(22)] + [1, 2, 3, 4, 1, 2, 3, 4],  # longer than the draft's context, copy-heavy
]
NEW = 24


def hf_greedy(model, prompt: list[int], n: int, **kw) -> list[int]:
    """transformers' own greedy decoding of the target alone (its generation_config's end of text unless given)."""
    x = torch.tensor([prompt])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, pad_token_id=0, **kw)
    return out[0, len(prompt) :].tolist()


def decoder(target, draft, **kw) -> SpeculativeDecoder:
    drafters = {"model": ModelDrafter(draft), "pld": PromptLookupDrafter(), "suffix": SuffixMatchDrafter()}
    return SpeculativeDecoder(target, drafters, lengths=[1, 3], **kw)


CASES = [(arch, ARCHS[(i + 1) % len(ARCHS)], torch.float64, torch.float64, VOCAB) for i, arch in enumerate(ARCHS)] + [
    ("llama", "gpt2", torch.float32, torch.float32, VOCAB),
    ("qwen2", "opt", torch.float32, torch.float64, VOCAB),  # the draft in another precision than the target's
    ("gpt_neox", "llama", torch.float32, torch.float32, VOCAB + 8),  # a draft embedding padded to a larger size
    ("gpt2", "mistral", torch.float64, torch.float32, VOCAB - 8),  # and one smaller than the target's
]


@pytest.mark.parametrize("arch, draft_arch, dtype, draft_dtype, draft_vocab", CASES,
                         ids=[f"{c[0]}-{c[1]}-{str(c[2])[6:]}-{str(c[3])[6:]}-v{c[4]}" for c in CASES])
def test_greedy_equals_transformers_generate(arch, draft_arch, dtype, draft_dtype, draft_vocab):
    """Every arm (a draft of another architecture with a context of 24 positions, prompt lookup, suffix), UCBSpec,
    EXP3Spec and the default serving policy across calls: token for token transformers' greedy generate on the target."""
    target = tiny(arch, 0, dtype, width=48)
    draft = tiny(draft_arch, 1, draft_dtype, layers=1, positions=24, vocab=draft_vocab)
    dec = decoder(target, draft)
    assert dec.eos_token_id == VOCAB - 1 == target.generation_config.eos_token_id  # the model's own, as generate takes it
    accepted = 0
    for prompt in PROMPTS:
        reference = hf_greedy(target, prompt, NEW)
        for arm in dec.arms:
            res = dec.generate(prompt, arm=arm.label, max_new_tokens=NEW)
            assert res.tokens == reference, arm.label
            accepted += len(res.tokens) - res.rounds
        for policy in ("UCBSpec", "EXP3Spec"):
            assert dec.generate(prompt, policy=policy, max_new_tokens=NEW, seed=1).tokens == reference, policy
        for _ in range(2):
            assert dec.generate(prompt, max_new_tokens=NEW).tokens == reference
    assert accepted > 0  # some drafts were accepted in part or in full: caches were cropped to all kinds of lengths


MORE = {  # further architectures, one config each: the arms of a Llama draft and the suffix copier against generate
    "bloom": {"n_layer": 2, "n_head": 4, "hidden_size": 32},
    "falcon": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4},
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256, "rotary_dim": 4},
    "codegen": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256, "n_ctx": 256, "rotary_dim": 4},
    "gpt_bigcode": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256},
    "qwen3": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8},
    "gemma2": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 8, "sliding_window": 8},  # one sliding layer, one global, logit soft-capping
    "starcoder2": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2},
    "olmo": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "phi3": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "pad_token_id": 0},
}


@pytest.mark.parametrize("arch", list(MORE))
def test_more_architectures_greedy_equals_transformers_generate(arch):
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(arch, vocab_size=VOCAB, bos_token_id=0, eos_token_id=VOCAB - 1, **MORE[arch])
    target = transformers.AutoModelForCausalLM.from_config(cfg).eval().double()
    dec = SpeculativeDecoder(target, {"model": ModelDrafter(tiny("llama", 1, layers=1, positions=24)), "suffix": SuffixMatchDrafter()},
                             lengths=[3])
    reference = hf_greedy(target, PROMPTS[1], NEW)
    for arm in dec.arms:
        assert dec.generate(PROMPTS[1], arm=arm.label, max_new_tokens=NEW).tokens == reference, arm.label


def test_a_draft_identical_to_the_target_accepts_everything_across_its_sliding_window():
    """Mistral with a window of 8 drafting for itself: every round emits k + 1 tokens past the window (positions, the
    window's mask and the recorded cache stay right; the one-token prompt below has rejections past it)."""
    target = tiny("mistral", 0)
    dec = SpeculativeDecoder(target, {"self": ModelDrafter(target)}, lengths=[3], include_plain=False, eos_token_id=None)
    res = dec.generate(PROMPTS[0], arm="self:3", max_new_tokens=30)
    assert res.emitted == [4] * 7 + [2]
    assert res.tokens == hf_greedy(target, PROMPTS[0], 30, eos_token_id=None)


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("as_list", [False, True])
def test_end_of_text_as_an_int_or_a_list_as_generate_reads_it(arch, as_list):
    target = tiny(arch, 0, width=48)
    free = hf_greedy(target, PROMPTS[1], NEW, eos_token_id=None)
    stop = free[6]  # the 7th greedy token becomes the end of text
    target.generation_config.eos_token_id = [VOCAB - 2, stop] if as_list else stop
    reference = hf_greedy(target, PROMPTS[1], NEW)
    assert reference == free[: free.index(stop) + 1]
    dec = decoder(target, tiny("qwen2", 1, layers=1))
    for how in ({"arm": "plain"}, {"arm": "suffix:3"}, {"arm": "model:3"}, {"policy": "UCBSpec", "seed": 0}, {}):
        assert dec.generate(PROMPTS[1], max_new_tokens=NEW, **how).tokens == reference, how
    explicit = decoder(target, tiny("qwen2", 1, layers=1), eos_token_id=None)  # None: never stop early
    assert explicit.generate(PROMPTS[1], arm="suffix:3", max_new_tokens=NEW).tokens == free


@pytest.mark.parametrize("arch", ["gpt2", "llama", "mistral", "gpt_neox"])
def test_one_new_token_a_one_token_prompt_and_an_empty_prompt(arch):
    target = tiny(arch, 0)
    dec = decoder(target, tiny("phi" if arch != "phi" else "gpt2", 1, layers=1))
    for how in ({"arm": "model:3"}, {"arm": "suffix:3"}, {}):
        assert dec.generate(PROMPTS[1], max_new_tokens=1, **how).tokens == hf_greedy(target, PROMPTS[1], 1)
        assert dec.generate([7], max_new_tokens=NEW, **how).tokens == hf_greedy(target, [7], NEW)
    with pytest.raises(InvalidInputError, match="at least one token"):
        dec.generate([], max_new_tokens=4)


def test_the_targets_logits_processing_is_named_not_applied():
    """A generation_config that penalises repeats changes generate's greedy output; the decoder says so and decodes the
    model's own argmax, which generate gives with the neutral value."""
    target = tiny("llama", 0, width=48)
    target.generation_config.repetition_penalty = 1.3
    with pytest.warns(UserWarning, match="repetition_penalty=1.3"):
        dec = decoder(target, tiny("gpt2", 1, layers=1))
    res = dec.generate(PROMPTS[1], arm="suffix:3", max_new_tokens=NEW)
    assert res.tokens == hf_greedy(target, PROMPTS[1], NEW, repetition_penalty=1.0)
    assert res.tokens != hf_greedy(target, PROMPTS[1], NEW)  # the setting mattered


def test_a_plain_generation_config_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decoder(tiny("qwen2", 0), tiny("gpt2", 1, layers=1))


def test_models_that_cannot_serve_raise_what_they_lack():
    torch.manual_seed(0)
    mamba = transformers.MambaForCausalLM(transformers.MambaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, state_size=4))
    # transformers before 5.24 return no cache from Mamba, 5.24 a cache whose recurrent layers cannot be cropped, 5.25 one it
    # reports croppable, on which a pass over several tokens raises
    with pytest.raises(InvalidParameterError, match=r"MambaForCausalLM\) (returns no KV cache|has a cache .* cannot be cropped|cannot undo a rejected draft)"):
        SpeculativeDecoder(mamba.eval(), {"suffix": SuffixMatchDrafter()})
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(vocab_size=VOCAB, d_model=16, d_ff=16, num_layers=1,
                                                                       num_heads=2, d_kv=8))
    with pytest.raises(InvalidParameterError, match="encoder-decoder"):
        SpeculativeDecoder(tiny("llama", 0), {"model": ModelDrafter(t5.eval())})
    bert = transformers.AutoModelForCausalLM.from_config(transformers.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                                                                                 num_attention_heads=2, intermediate_size=16))
    with pytest.raises(InvalidParameterError, match=r"draft model 'model' \(BertLMHeadModel\) returns no KV cache"):
        SpeculativeDecoder(tiny("llama", 0), {"model": ModelDrafter(bert.eval())})


class _CropIgnored(torch.nn.Module):
    """A causal LM whose cache says it can be cropped and ignores the crop (what a recurrent state that reports itself
    croppable does): every rejected draft would stay in its state."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, use_cache=True, cache=None):
        out = self.inner(input_ids, use_cache=use_cache, **{_cache_keyword(type(self.inner)): cache})
        if use_cache:
            returned_cache(out).crop = lambda count: None
        return out


def test_a_cache_that_ignores_a_crop_is_refused_with_what_it_lacks():
    model = tiny("llama", 0)
    SpeculativeDecoder(model, {"suffix": SuffixMatchDrafter()})  # the same model with its own cache serves
    with pytest.raises(InvalidParameterError, match=r"target \(_CropIgnored\) cannot undo a rejected draft: after a crop its cache gives "
                                                    r"other logits .* keeps state that a crop does not remove"):
        SpeculativeDecoder(_CropIgnored(model).eval(), {"suffix": SuffixMatchDrafter()})
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(InvalidParameterError, match=r"training mode, where dropout makes every pass differ: call model.eval\(\)"):
        SpeculativeDecoder(gpt2, {"suffix": SuffixMatchDrafter()})
    SpeculativeDecoder(gpt2.eval(), {"suffix": SuffixMatchDrafter()})


def test_a_legacy_tuple_cache_is_cropped_like_a_dynamic_cache():
    model = tiny("llama", 0)
    with torch.no_grad():
        cache = model(torch.tensor([PROMPTS[1]]), use_cache=True).past_key_values
    legacy = tuple((layer.keys, layer.values) for layer in cache.layers)
    cropped = crop_cache(legacy, 9)
    crop_cache(cache, 9)
    assert cache.get_seq_length() == 9
    for (k, v), layer in zip(cropped, cache.layers):
        assert torch.equal(k, layer.keys) and torch.equal(v, layer.values) and k.shape[-2] == 9


# --------------------------------------------------------------------------- sampling on another architecture
def _sequence_law(model, prompt: list[int], n: int, vocab: int) -> np.ndarray:
    """Exact law of the next ``n`` tokens sampled at temperature 1 over the first ``vocab`` tokens, in lexicographic order."""
    law = np.ones(1)
    with torch.no_grad():
        for depth in range(n):
            batch = torch.tensor([prompt + list(p) for p in itertools.product(range(vocab), repeat=depth)])
            probs = torch.softmax(model(batch).logits[:, -1, :vocab].double(), dim=-1).numpy()
            law = (law[:, None] * probs).reshape(-1)
    return law


def test_sampling_on_llama_drafted_by_qwen2_of_another_precision_context_and_vocabulary_matches_the_target_law():
    """A float32 Llama target (3 tokens), a float64 Qwen2 draft with 5 embedding rows and a context of 4 positions (shorter
    than the prompt: it drafts from the last tokens that fit) and a copier, arms mixed by EXP3Spec (the serving policy
    chooses by wall time, which a busy machine would make decide differently from run to run): the law of 3 sampled
    tokens passes a chi-square test at 1% against the target's exact law, which the draft's own law would fail by far."""
    vocab, n_new, n_samples = 3, 3, 800
    target = tiny("llama", 10, torch.float32, vocab=vocab, width=16, layers=1, init=0.2)  # 23 of 27 sequences have p * n >= 5 (800 samples)
    draft = tiny("qwen2", 11, torch.float64, vocab=vocab + 2, width=16, layers=1, positions=4, init=0.5)
    prompt = [0, 1, 2, 1, 0, 1]
    p = _sequence_law(target, prompt, n_new, vocab)
    q = _sequence_law(draft, prompt[-(4 - n_new + 1) :], n_new, vocab)  # what the draft proposes from its 2-token window at k = 3
    drafters = {"model": ModelDrafter(draft), "suffix": SuffixMatchDrafter(min_match=1)}
    # three-token drafts every round: a residual law taken as P instead of Norm([P - Q]_+) gives a p-value near 1e-9 here
    dec = SpeculativeDecoder(target, drafters, lengths=[3], include_plain=False, temperature=1.0, eos_token_id=None)
    counts = np.zeros(vocab**n_new)
    rounds = []
    for i in range(n_samples):
        res = dec.generate(prompt, policy="EXP3Spec", max_new_tokens=n_new, seed=i)
        counts[int(np.ravel_multi_index(res.tokens, (vocab,) * n_new))] += 1
        rounds.append(res.rounds)
    assert np.mean(rounds) < n_new  # drafts were accepted
    big = p * n_samples >= 5  # the other sequences pooled into one cell
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(p[big], p[~big].sum()) * n_samples
    assert stats.chisquare(observed, expected).pvalue > 0.01
    # power: a decoder that emitted the draft's law would give a statistic far past the 1% cut
    q_pooled = np.append(q[big], q[~big].sum()) * n_samples
    assert float(np.sum((q_pooled - expected) ** 2 / expected)) > 3 * stats.chi2.ppf(0.99, len(expected) - 1)


# --------------------------------------------------------------------------- the command line
def _save(path, arch, seed, tokenizer=None, **kw):
    tiny(arch, seed, torch.float32, **kw).save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return str(path)


def _word_tokenizer(words: list[str]):
    """A word-level tokenizer built here (no download): word i is token i."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token=words[-1])


WORDS = ["<unk>"] + [f"w{i}" for i in range(VOCAB - 2)] + ["<eos>"]


def test_cli_generate_on_saved_models_of_other_architectures(tmp_path, capsys):
    """A Llama target with its tokenizer, a GPT-NeoX draft with the same tokenizer and 8 padded embedding rows; a Qwen2
    target of 257 tokens without a tokenizer (the byte tokenizer) drafted by OPT with a context of 16 positions."""
    from genbandit.cli import main

    tokenizer = _word_tokenizer(WORDS)
    pairs = [(_save(tmp_path / "llama", "llama", 0, tokenizer), _save(tmp_path / "neox", "gpt_neox", 1, tokenizer, layers=1, vocab=VOCAB + 8),
              " ".join(f"w{i % 5}" for i in range(12))),
             (_save(tmp_path / "qwen2", "qwen2", 0, vocab=257), _save(tmp_path / "opt", "opt", 1, vocab=257, layers=1, positions=16),
              "def f(x):\n    return x")]
    for target, draft, prompt in pairs:
        argv = ["specdec", "generate", "--target", target, "--draft", draft, "--prompt", prompt, "--max-new-tokens", "20",
                "--check", "--quiet"]
        assert main(argv) == 0
        assert "identical to plain greedy decoding: yes" in capsys.readouterr().out


def test_cli_errors_name_the_problem(tmp_path, capsys):
    from genbandit.cli import main

    target = _save(tmp_path / "target", "qwen2", 0, _word_tokenizer(WORDS))
    shuffled = _save(tmp_path / "shuffled", "gpt2", 1, _word_tokenizer(WORDS[:1] + WORDS[1:-1][::-1] + WORDS[-1:]), layers=1)
    bytes_target = _save(tmp_path / "bytes", "llama", 0, vocab=257)
    other_size = _save(tmp_path / "draft", "gpt2", 1, vocab=300, layers=1)
    t5 = tmp_path / "t5"
    transformers.T5ForConditionalGeneration(transformers.T5Config(vocab_size=257, d_model=16, d_ff=16, num_layers=1, num_heads=2,
                                                                  d_kv=8)).save_pretrained(t5)
    with pytest.raises(SystemExit) as done:
        main(["specdec", "--help"])
    assert done.value.code == 0 and "generate" in capsys.readouterr().out
    base = ["specdec", "generate", "--prompt", "w1 w2", "--max-new-tokens", "4"]
    for argv, message in (
        (["--target", str(tmp_path / "missing")], "no folder there"),
        (["--target", target, "--draft", shuffled], "its tokenizer's vocabulary is not the target's"),
        (["--target", bytes_target, "--draft", other_size], "its vocabulary has 300 tokens, the target's 257"),
        (["--target", str(t5)], "not a causal LM"),
        (["--target", bytes_target, "--draft", str(t5)], "not a causal LM"),
    ):
        assert main(base + argv) == 2, argv
        err = capsys.readouterr().err
        assert "genbandit: error:" in err and message in err and "Traceback" not in err, (argv, err)
