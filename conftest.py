"""Collect only what this installation can import: on a bare ``pip install -e .`` the modules
that need an extra are left out of collection (their doctests and helpers), and test modules skip
through ``pytest.importorskip``."""

import importlib.util

#: Files collected by pytest (``--doctest-modules``) that import an optional package at import time.
_NEEDS = {
    "src/genbandit/router/app.py": ("fastapi",),
    "src/genbandit/specdec/decoder.py": ("torch",),
    "src/genbandit/specdec/tensors.py": ("torch",),
    "tests/router_helpers.py": ("httpx", "fastapi", "uvicorn"),
}

collect_ignore = [path for path, modules in _NEEDS.items() if any(importlib.util.find_spec(m) is None for m in modules)]
