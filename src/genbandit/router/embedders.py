"""Prompts to context vectors for the router.

``sentence-transformers`` (default) runs all-MiniLM-L6-v2 offline through
:class:`genbandit.embeddings.SentenceEmbedder`, on ONNX Runtime when it is installed (``backend =
"auto"``; the same vectors, faster) or on torch. ``hashing`` is signed feature hashing of word
unigrams and bigrams (no model, no torch: for small deployments and tests of the service
itself). ``none`` takes no prompts: clients send precomputed embeddings. Every context is scaled
to unit norm, as the kernel policies assume (prompt embeddings on the sphere).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time

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


class _Batched:
    """Runs a model for several threads at once: texts that arrive while it is busy go in one batch.

    ``models`` are interchangeable copies of one model (each runs one forward pass at a time, on
    one thread). A waiting thread that finds a copy idle embeds every queued text in one forward
    pass on it (a batch of 8 costs far less than 8 single calls on a CPU) and hands each caller its
    rows; with two copies, two batches run at once, each on its own core, and neither waits for
    the other (as a forward pass split over two threads would, at every operator). Callers that
    come back together (clients answered by one batch send their next prompt at about the same
    time) would otherwise be split into a batch of the first alone and a batch of the rest: so
    when fewer callers wait than the last batch held, the batch waits up to ``window_s`` for them
    to arrive (a lone client never waits, its last batch held one). If the batch fails, each
    caller's texts are embedded alone, so an error reaches only its caller.
    :class:`~genbandit.embeddings.SentenceEmbedder` keeps every vector it made in memory; a
    server sees endless new prompts, so that memory is dropped once it holds ``max_cached``.
    """

    def __init__(self, models: list, max_batch: int = 64, max_cached: int = 10000, window_s: float = 0.005) -> None:
        self.models = list(models)
        self.max_batch = max_batch
        self.max_cached = max_cached
        self.window_s = window_s
        self._idle = list(self.models)  # copies not running a batch
        self._changed = threading.Condition()  # guards the queue and the idle copies; notified when either changes
        self._queue: list[list] = []  # [texts, result, error, done]
        self._last_batch = 1  # callers in the last batch

    def encode(self, texts: list[str]) -> np.ndarray:
        item = [list(texts), None, None, False]
        with self._changed:
            self._queue.append(item)
            self._changed.notify_all()
        while True:
            with self._changed:
                while not item[3] and not (self._idle and item in self._queue):
                    self._changed.wait()
                if item[3]:
                    break
                model = self._idle.pop()
                deadline = time.monotonic() + self.window_s
                while len(self._queue) < self._last_batch and sum(len(it[0]) for it in self._queue) < self.max_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(left)
                batch, size = [], 0
                while self._queue and (not batch or size + len(self._queue[0][0]) <= self.max_batch):
                    size += len(self._queue[0][0])
                    batch.append(self._queue.pop(0))
                if not batch:  # another copy took the queue (this caller's texts too) while this one waited
                    self._idle.append(model)
                    self._changed.notify_all()
                    continue
                self._last_batch = len(batch)
            try:
                self._run(model, batch)
            finally:
                if len(getattr(model, "_memory", None) or ()) > self.max_cached:
                    model._memory = None
                with self._changed:
                    for it in batch:
                        it[3] = True
                    self._idle.append(model)
                    self._changed.notify_all()
        if item[2] is not None:
            raise item[2]
        return item[1]

    def _run(self, model, batch: list[list]) -> None:
        try:
            vectors = unit_norm(np.asarray(model.encode([t for it in batch for t in it[0]]), dtype=float))
            start = 0
            for it in batch:
                it[1], start = vectors[start : start + len(it[0])], start + len(it[0])
        except Exception as exc:  # noqa: BLE001 - handed to the caller whose texts fail, and to no other
            if len(batch) == 1:
                batch[0][2] = exc
            else:
                for it in batch:  # one caller's bad text must not fail the others': embed each caller alone
                    self._run(model, [it])


def make_embedder(spec):
    """``(embedder or None, dim)`` for an :class:`~genbandit.router.config.EmbeddingSpec`.

    ``backend = "auto"`` runs ONNX Runtime when onnxruntime and onnx are installed and the model is
    one the ONNX backend runs (BERT, mean pooling), torch otherwise (and for ``bfloat16``).
    """
    if spec.kind == "none":
        return None, spec.dim
    if spec.kind == "hashing":
        return HashingEmbedder(spec.dim), spec.dim
    from ..core.validation import InvalidParameterError
    from ..embeddings import SentenceEmbedder

    backend = spec.backend
    if backend == "auto":
        backend = "onnx" if spec.precision == "int8" else "torch"
        if spec.precision == "float32":
            try:
                import onnx  # noqa: F401 - the export writes through it
                import onnxruntime  # noqa: F401
            except ImportError:
                pass
            else:
                backend = "onnx"

    def copies(backend: str) -> tuple[_Batched, int]:
        # No disk cache unless the config names one: a server's prompts rarely repeat.
        model = _Batched([SentenceEmbedder(model_name=spec.model, cache_dir=spec.cache_dir or False, backend=backend, precision=spec.precision, threads=1)
                          for _ in range(spec.threads)])
        return model, {int(copy.encode(["warm-up"]).shape[1]) for copy in model.models}.pop()  # loads the weights now, not on the first request

    try:
        model, dim = copies(backend)
    except InvalidParameterError:
        if spec.backend != "auto" or backend != "onnx":
            raise
        model, dim = copies("torch")  # a model the ONNX backend does not run
    if spec.dim is not None and spec.dim != dim:
        raise InvalidParameterError(f"[embedding] dim = {spec.dim}, but {spec.model} makes {dim}-dimensional embeddings.")
    return model, dim
