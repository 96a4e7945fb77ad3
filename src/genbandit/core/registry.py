"""Find policies and environments by name, from configs, the CLI and the contract suite.

Names are matched case-insensitively with ``-``, ``_`` and spaces ignored, so ``"KL-UCB"``,
``"kl_ucb"`` and ``"klucb"`` name the same policy. A class registers under its display ``name``
and its class name.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator, TypeVar

from .validation import InvalidParameterError

__all__ = ["Registry", "POLICIES", "ENVIRONMENTS", "register_policy", "register_environment"]

T = TypeVar("T", bound=type)


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


class Registry:
    """A name -> class table of one kind of object."""

    def __init__(self, kind: str, plural: str) -> None:
        self.kind = kind
        self.plural = plural
        self._classes: dict[str, type] = {}  # canonical display name -> class
        self._aliases: dict[str, str] = {}  # normalised alias -> canonical name

    def register(self, cls: T, *aliases: str) -> T:
        canonical = getattr(cls, "name", "") or cls.__name__
        keys = {_key(alias) for alias in (canonical, cls.__name__, *aliases)}
        for key in keys:
            owner = self._aliases.get(key)
            if owner is not None and self._classes[owner] is not cls:
                raise ValueError(f"{self.kind} name {key!r} is taken by {self._classes[owner].__name__}")
        self._classes[canonical] = cls
        self._aliases.update(dict.fromkeys(keys, canonical))
        return cls

    def get(self, name: str) -> type:
        _load_builtins()
        canonical = self._aliases.get(_key(name))
        if canonical is None:
            known = ", ".join(sorted(self._classes))
            raise InvalidParameterError(f"Unknown {self.kind} {name!r}. Known {self.plural}: {known}.")
        return self._classes[canonical]

    def create(self, name: str, **params: Any) -> Any:
        """Instantiate the class registered as ``name`` with ``params``."""
        cls = self.get(name)
        try:
            return cls(**params)
        except TypeError as exc:
            if "unexpected keyword" in str(exc) or "missing" in str(exc):
                raise InvalidParameterError(f"Bad parameters for {self.kind} {name!r}: {exc}") from exc
            raise

    def items(self) -> Iterator[tuple[str, type, str]]:
        """(name, class, one-line description) for every registered class, sorted by name."""
        _load_builtins()
        for name in sorted(self._classes, key=str.lower):
            cls = self._classes[name]
            yield name, cls, _summary(cls)

    def __contains__(self, name: str) -> bool:
        _load_builtins()
        return _key(name) in self._aliases


POLICIES = Registry("policy", "policies")
ENVIRONMENTS = Registry("environment", "environments")


def register_policy(*aliases: str) -> Callable[[T], T]:
    """Class decorator: register a policy under its ``name``, class name and ``aliases``."""
    return lambda cls: POLICIES.register(cls, *aliases)


def register_environment(*aliases: str) -> Callable[[T], T]:
    """Class decorator: register an environment under its ``name``, class name and ``aliases``."""
    return lambda cls: ENVIRONMENTS.register(cls, *aliases)


_loaded = False


def _load_builtins() -> None:
    """Import the built-in policy and environment modules so that they register themselves."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import genbandit.envs  # noqa: F401
    import genbandit.policies  # noqa: F401
