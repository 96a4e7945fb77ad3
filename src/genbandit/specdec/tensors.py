"""Tensor helpers the decoder and the model drafter share: tempered softmax and KV-cache cropping."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tempered_probs", "crop_cache"]


def tempered_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``softmax(logits / temperature)`` over the last axis, in the logits' precision (at least float32)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.softmax(logits / temperature, dim=-1)


def crop_cache(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions of a Hugging Face KV cache (``DynamicCache``), in place."""
    current = cache.get_seq_length()
    if length < current:
        cache.crop(length - current)  # a negative count removes that many positions, in every transformers version
