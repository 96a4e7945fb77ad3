"""Find policies, environments, metrics and reproductions by name, from configs, the CLI and tests.

One :class:`Registry` class serves every kind of named thing. Names are matched
case-insensitively with ``-``, ``_`` and spaces ignored, so ``"KL-UCB"``, ``"kl_ucb"`` and
``"klucb"`` name the same policy. A class registers under its display ``name`` and its class
name; an unknown name is refused with the nearest known one suggested.

The built-in entries register themselves when their module is imported. ``core`` imports no
other part of genbandit: a registry holds the names of the modules that fill it, as data, and
imports them the first time it is asked for an entry.

>>> POLICIES.get("kl_ucb").name
'KL-UCB'
>>> POLICIES.get("Thompsen")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
genbandit.core.validation.InvalidParameterError: Unknown policy 'Thompsen'; did you mean 'Thompson'? ...
"""

from __future__ import annotations

import difflib
import importlib
import re
from typing import Any, Callable, Iterator, TypeVar

from .validation import InvalidParameterError

__all__ = [
    "Registry",
    "POLICIES",
    "ENVIRONMENTS",
    "METRICS",
    "REPRODUCTIONS",
    "register_policy",
    "register_environment",
    "register_metric",
]

T = TypeVar("T")


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def _summary(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip() if isinstance(obj, type) else ""
    return doc.splitlines()[0] if doc else ""


class Registry:
    """A name -> object table of one kind of thing (classes, metric functions, config paths).

    ``builtins`` are the modules that register the built-in entries when imported; they are
    imported on the first lookup, so importing the registry costs nothing.
    """

    def __init__(self, kind: str, plural: str, builtins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.plural = plural
        self._builtins = builtins
        self._loaded = False
        self._entries: dict[str, tuple[Any, str]] = {}  # canonical name -> (object, description)
        self._aliases: dict[str, str] = {}  # normalised alias -> canonical name

    def register(self, obj: T, *aliases: str, name: str | None = None, description: str | None = None) -> T:
        """Add ``obj`` under ``name`` (default: its ``name`` attribute or class name) and ``aliases``."""
        canonical = name or getattr(obj, "name", "") or obj.__name__
        class_name = obj.__name__ if isinstance(obj, type) else canonical
        keys = {_key(alias) for alias in (canonical, class_name, *aliases)}
        for key in keys:
            owner = self._aliases.get(key)
            if owner is not None and self._entries[owner][0] is not obj:
                raise ValueError(f"{self.kind} name {key!r} is taken by {owner!r}")
        self._entries[canonical] = (obj, _summary(obj) if description is None else description)
        self._aliases.update(dict.fromkeys(keys, canonical))
        return obj

    def _load_builtins(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._builtins:
                importlib.import_module(module)

    def canonical(self, name: str) -> str:
        """The registered display name that ``name`` spells, or :class:`InvalidParameterError`."""
        self._load_builtins()
        canonical = self._aliases.get(_key(str(name)))
        if canonical is None:
            raise InvalidParameterError(self.unknown(name))
        return canonical

    def unknown(self, name: str) -> str:
        """The message for an unknown ``name``: the nearest known name, then every known one."""
        self._load_builtins()
        close = difflib.get_close_matches(_key(str(name)), list(self._aliases), n=1, cutoff=0.6)
        hint = f"; did you mean {self._aliases[close[0]]!r}?" if close else "."
        return f"Unknown {self.kind} {name!r}{hint} Known {self.plural}: {', '.join(self.names())}."

    def get(self, name: str) -> Any:
        """The object registered as ``name`` (any accepted spelling)."""
        return self._entries[self.canonical(name)][0]

    def create(self, name: str, **params: Any) -> Any:
        """Instantiate the class registered as ``name`` with ``params``."""
        cls = self.get(name)
        try:
            return cls(**params)
        except TypeError as exc:
            if "unexpected keyword" in str(exc) or "missing" in str(exc):
                raise InvalidParameterError(f"Bad parameters for {self.kind} {name!r}: {exc}") from exc
            raise

    def names(self) -> list[str]:
        """Every display name, sorted."""
        self._load_builtins()
        return sorted(self._entries, key=str.lower)

    def items(self) -> Iterator[tuple[str, Any, str]]:
        """(name, object, one-line description) for every entry, sorted by name."""
        for name in self.names():
            obj, description = self._entries[name]
            yield name, obj, description

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return isinstance(name, str) and _key(name) in self._aliases


POLICIES = Registry("policy", "policies", builtins=("genbandit.policies",))
ENVIRONMENTS = Registry("environment", "environments", builtins=("genbandit.envs",))
METRICS = Registry("metric", "metrics", builtins=("genbandit.experiments.metrics", "genbandit.experiments.rising", "genbandit.envs"))
REPRODUCTIONS = Registry("reproduction", "reproductions", builtins=("genbandit.experiments.config",))


def register_policy(*aliases: str) -> Callable[[T], T]:
    """Class decorator: register a policy under its ``name``, class name and ``aliases``."""
    return lambda cls: POLICIES.register(cls, *aliases)


def register_environment(*aliases: str) -> Callable[[T], T]:
    """Class decorator: register an environment under its ``name``, class name and ``aliases``."""
    return lambda cls: ENVIRONMENTS.register(cls, *aliases)


def register_metric(name: str, description: str) -> Callable[[T], T]:
    """Decorator: make ``fn(result, env, policy) -> array (n_runs,) | float`` available to configs as ``name``."""
    return lambda fn: METRICS.register(fn, name=name, description=description)
