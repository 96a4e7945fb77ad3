"""Prompts to context vectors for the router.

``sentence-transformers`` (default) runs all-MiniLM-L6-v2 offline through
:class:`genbandit.embeddings.SentenceEmbedder`. ``hashing`` is signed feature hashing of word
unigrams and bigrams (no model, no torch: for small deployments and tests of the service
itself). ``none`` takes no prompts: clients send precomputed embeddings. Every context is scaled
to unit norm, as the kernel policies assume (prompt embeddings on the sphere).
"""

from __future__ import annotations

import hashlib
import re
import threading

import numpy as np

__all__ = ["HashingEmbedder", "make_embedder", "unit_norm"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


def unit_norm(x: np.ndarray) -> np.ndarray:
    """``x / ||x||`` row-wise (rows of zeros stay zero)."""
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


class HashingEmbedder:
    """Signed feature hashing of lower-cased word unigrams and bigrams into ``dim`` buckets.

    >>> e = HashingEmbedder(dim=64).encode(["sort a list in python", "sort a list in python", "translate to French"])
    >>> e.shape, bool(np.allclose(e[0], e[1])), round(float(e[0] @ e[0]), 6)
    ((3, 64), True, 1.0)
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def _vector(self, text: str) -> np.ndarray:
        words = _TOKEN.findall(text.lower())
        out = np.zeros(self.dim)
        for token in words + [a + " " + b for a, b in zip(words, words[1:])]:
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            out[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return out

    def encode(self, texts: list[str]) -> np.ndarray:
        return unit_norm(np.stack([self._vector(t) for t in texts])) if texts else np.zeros((0, self.dim))


class _Locked:
    """Serialises calls into a model that is not meant to be called from several threads at once.

    :class:`~genbandit.embeddings.SentenceEmbedder` keeps every vector it made in memory; a
    server sees endless new prompts, so that memory is dropped once it holds ``max_cached``.
    """

    def __init__(self, inner, max_cached: int = 10000) -> None:
        self.inner = inner
        self.max_cached = max_cached
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            out = unit_norm(np.asarray(self.inner.encode(texts), dtype=float))
            if len(getattr(self.inner, "_memory", None) or ()) > self.max_cached:
                self.inner._memory = None
            return out


def make_embedder(spec):
    """``(embedder or None, dim)`` for an :class:`~genbandit.router.config.EmbeddingSpec`."""
    if spec.kind == "none":
        return None, spec.dim
    if spec.kind == "hashing":
        return HashingEmbedder(spec.dim), spec.dim
    from ..embeddings import SentenceEmbedder

    # No disk cache unless the config names one: a server's prompts rarely repeat.
    model = _Locked(SentenceEmbedder(model_name=spec.model, cache_dir=spec.cache_dir or False))
    dim = int(model.encode(["warm-up"]).shape[1])  # loads the weights now, not on the first request
    if spec.dim is not None and spec.dim != dim:
        from ..core.validation import InvalidParameterError

        raise InvalidParameterError(f"[embedding] dim = {spec.dim}, but {spec.model} makes {dim}-dimensional embeddings.")
    return model, dim
