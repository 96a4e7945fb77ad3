"""Tensor helpers the decoder and the model drafter share: tempered softmax, KV caches, and the check that a model can serve."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from ..core.validation import InvalidParameterError

__all__ = ["cached_forward", "check_causal_lm", "context_length", "crop_cache", "keep_past", "returned_cache", "tempered_probs", "vocab_size"]


def tempered_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``softmax(logits / temperature)`` over the last axis, in the logits' precision (at least float32)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.softmax(logits / temperature, dim=-1)


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class: type) -> str:
    """The name under which the forward pass of ``model_class`` takes its KV cache: ``cache`` in transformers 5.24 and later
    (where ``past_key_values`` is deprecated, to be removed in 5.40), ``past_key_values`` before; read from the class, once
    per class, so that a wrapper an instance's ``forward`` may carry does not hide it."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cached_forward(model: Any, input_ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
    """``model``'s forward pass over ``input_ids`` continuing its KV ``cache`` (None: from nothing): ``(logits, the cache
    extended by input_ids)``, the cache passed under the name the installed transformers takes."""
    out = model(input_ids, use_cache=True, **{_cache_keyword(type(model)): cache})
    return out.logits, returned_cache(out)


def returned_cache(out: Any) -> Any:
    """The KV cache a forward pass returned (``out.cache`` in transformers 5.24 and later, ``out.past_key_values`` before), or None."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def crop_cache(cache: Any, length: int) -> Any:
    """The first ``length`` positions of a Hugging Face KV cache; returns the cache (the same object, but for tuples).

    A ``Cache`` object (``DynamicCache``) is cropped in place through ``crop`` with a negative count of
    positions to remove (a positive argument, an absolute length in old releases, is refused by recent
    ones). Where caches can record their past (:func:`keep_past`), ``crop(0)`` is called too: it
    trims a sliding-window layer back to its window; in older releases ``crop(0)`` would empty the
    cache, so it is not called there. A legacy cache (a tuple of ``(key, value)`` per layer, shaped
    ``(batch, heads, positions, head_dim)``, what older releases returned without a ``Cache`` given, and what
    remote-code models may still return) is sliced into a new tuple.
    """
    if isinstance(cache, tuple):
        return tuple(tuple(t[..., :length, :] for t in layer) for layer in cache)
    removed = cache.get_seq_length() - length
    if removed > 0 or hasattr(cache, "activate_past_recording"):
        cache.crop(-max(removed, 0))
    return cache


def keep_past(cache: Any) -> Any:
    """Let ``cache`` be cropped back after a forward pass; returns it.

    A sliding-window layer (Mistral, Qwen2 and Gemma with ``sliding_window`` set) keeps only its last
    ``window - 1`` positions, so it could not undo a rejected draft once the window is full:
    ``activate_past_recording`` (``transformers`` >= 5) makes it keep every position until the next
    ``crop``. Called after the prefill, so the prompt's own positions are never all held at once.
    Caches without the method hold every position already.
    """
    activate = getattr(cache, "activate_past_recording", None)
    if activate is not None:
        activate()
    return cache


def vocab_size(model: Any) -> int:
    """The width of ``model``'s logits (its output embedding's rows; the config's ``vocab_size`` without one)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(model.config.vocab_size)


def context_length(model: Any) -> int | None:
    """``max_position_embeddings`` of ``model``'s config (``n_positions`` for GPT-2), or None when it declares none."""
    positions = getattr(model.config, "max_position_embeddings", None)
    return int(positions) if positions else None


def check_causal_lm(model: Any, role: str) -> torch.device:
    """The device of ``model``'s logits; a clear :class:`InvalidParameterError` if ``model`` cannot serve in speculative decoding.

    It must be a decoder-only causal LM (not an encoder-decoder one) whose forward pass, given token
    ids and ``use_cache=True``, returns ``logits`` and a KV cache that can be cropped back to a shorter
    prefix (a rejected draft is undone that way). One forward pass of one token tells; recurrent
    models (Mamba, RWKV) return a state instead of a KV cache, and hybrid models with linear-attention
    layers a cache whose recurrent state cannot be cropped.
    """
    name = type(model).__name__
    config = getattr(model, "config", None)
    if config is None:
        raise InvalidParameterError(f"The {role} ({name}) is not a Hugging Face model: it has no config.")
    if getattr(config, "is_encoder_decoder", False):
        raise InvalidParameterError(f"The {role} ({name}) is an encoder-decoder model; speculative decoding here needs a "
                                    "decoder-only causal LM (load it with AutoModelForCausalLM).")
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            out = model(torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=True)
    except Exception as error:  # the model's own message says what it lacks
        raise InvalidParameterError(f"The {role} ({name}) cannot run a forward pass on token ids with use_cache=True: {error}") from error
    if getattr(out, "logits", None) is None:
        raise InvalidParameterError(f"The {role} ({name}) returns no logits: it is not a causal LM (load it with AutoModelForCausalLM).")
    cache = returned_cache(out)
    if cache is None:
        raise InvalidParameterError(f"The {role} ({name}) returns no KV cache: recurrent models (Mamba, RWKV) "
                                    "and models that are not decoders cannot undo a rejected draft.")
    if not isinstance(cache, tuple) and not (hasattr(cache, "crop") and hasattr(cache, "get_seq_length")):
        raise InvalidParameterError(f"The {role} ({name}) returns a KV cache ({type(cache).__name__}) without crop: "
                                    "a rejected draft could not be undone.")
    if not getattr(keep_past(cache), "is_croppable", True):
        raise InvalidParameterError(f"The {role} ({name}) has a cache ({type(cache).__name__}) whose layers cannot be cropped "
                                    "(recurrent or linear-attention states): a rejected draft could not be undone.")
    _check_rollback(model, cache, device, f"The {role} ({name})")
    return out.logits.device


def _check_rollback(model: Any, cache: Any, device: torch.device, who: str) -> None:
    """Undo a rejected draft once, as the decoder does, and compare with decoding from scratch.

    A cache may say it can be cropped and still fail: transformers 5.25 reports Mamba's recurrent cache as croppable, and
    its forward pass over several tokens on that cache then raises. So after the one-token pass that filled ``cache``, two
    tokens are run on it (a draft), the cache is cropped back by one (the second rejected) and that token run again: its
    logits must be those of the three tokens run from nothing.
    """
    vocab = vocab_size(model)
    ids = torch.tensor([[0, 1 % vocab, 2 % vocab]], device=device)
    try:
        with torch.no_grad():
            fresh = model(ids, use_cache=False).logits[0, -1].float()
            _, cache = cached_forward(model, ids[:, 1:], cache)
            crop_cache(cache, 2)
            again = cached_forward(model, ids[:, 2:], cache)[0][0, -1].float()
    except Exception as error:  # the model's own message says what failed
        raise InvalidParameterError(f"{who} cannot undo a rejected draft: a forward pass over two tokens on its cache, a crop "
                                    f"and a pass over one token again failed: {error}") from error
    # a cropped cache that kept the rejected token's state leaves the logits off by far more than rounding (float32: ~1e-6)
    tolerance = 1e-3 if next(model.parameters()).dtype in (torch.float32, torch.float64) else 5e-2
    difference = float((again - fresh).abs().max())
    if not difference <= tolerance * (1.0 + float(fresh.abs().max())):  # written so that a NaN fails too
        raise InvalidParameterError(f"{who} cannot undo a rejected draft: after a crop its cache gives other logits than "
                                    f"decoding from the start (largest difference {difference:.3g}); "
                                    + ("it is in training mode, where dropout makes every pass differ: call model.eval()."
                                       if model.training else "its cache keeps state that a crop does not remove."))
