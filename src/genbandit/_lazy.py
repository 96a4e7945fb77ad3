"""Package attributes that import their module on first use (PEP 562), so importing a package is cheap."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose public names are listed under the module defining them."""
    namespace = importlib.import_module(package).__dict__
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
