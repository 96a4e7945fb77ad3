"""Errors and the one parameter validator used at every public entry point.

Hyperparameters are declared as data on each class (``_parameter_constraints``) and checked
by :func:`validate_params`, in the manner of scikit-learn's ``_param_validation``: one message
shape, one exception type that is both a ``ValueError`` and a ``TypeError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Iterable

import numpy as np

__all__ = [
    "GenbanditError",
    "InvalidParameterError",
    "InvalidInputError",
    "Interval",
    "Options",
    "ArrayOf",
    "check_finite_array",
    "validate_params",
]


class GenbanditError(Exception):
    """Base class of every error genbandit raises on purpose."""


class InvalidParameterError(GenbanditError, ValueError, TypeError):
    """A hyperparameter or configuration value is of the wrong type or out of range."""


class InvalidInputError(GenbanditError, ValueError):
    """An action, feedback or context handed to ``select``/``update``/``step`` is invalid.

    Raised before any state is touched, so the object is unchanged.
    """


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``Integral`` or ``Real``) between ``low`` and ``high``.

    ``closed`` is one of ``"both"``, ``"left"``, ``"right"``, ``"neither"``; ``None`` bounds are open.
    """

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        if isinstance(value, Real) and not math.isfinite(value):
            return False
        if self.low is not None:
            if value < self.low or (value == self.low and self.closed in ("right", "neither")):
                return False
        if self.high is not None:
            if value > self.high or (value == self.high and self.closed in ("left", "neither")):
                return False
        return True

    def __str__(self) -> str:
        kind = "an int" if self.kind is Integral else "a float"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        return f"{kind} in the range {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple

    def accepts(self, value: Any) -> bool:
        return value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class ArrayOf:
    """A non-empty 1-d array-like of finite numbers, each accepted by ``element``."""

    element: Interval
    length: str | None = None  # name of another parameter that fixes the length, if any

    def accepts(self, value: Any) -> bool:
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            return False
        if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)):
            return False
        lo, hi = self.element.low, self.element.high
        if lo is not None and (np.any(arr < lo) or (self.element.closed in ("right", "neither") and np.any(arr == lo))):
            return False
        if hi is not None and (np.any(arr > hi) or (self.element.closed in ("left", "neither") and np.any(arr == hi))):
            return False
        if self.element.kind is Integral and not np.all(arr == np.round(arr)):
            return False
        return True

    def __str__(self) -> str:
        return f"a non-empty 1-d array of {str(self.element).replace('an int', 'ints').replace('a float', 'floats')}"


def _describe(constraint: Any) -> str:
    if constraint is None:
        return "None"
    if constraint == "seed":
        return "None, an int or a numpy Generator"
    if constraint == "callable":
        return "a callable"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def _accepts(constraint: Any, value: Any) -> bool:
    if constraint is None:
        return value is None
    if constraint == "seed":
        return value is None or isinstance(value, (np.random.Generator, np.random.SeedSequence)) or (
            isinstance(value, Integral) and not isinstance(value, bool) and value >= 0
        )
    if constraint == "callable":
        return callable(value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.accepts(value)


def validate_params(owner: str, params: dict[str, Any], constraints: dict[str, Iterable[Any]]) -> None:
    """Check ``params`` against ``constraints``; raise :class:`InvalidParameterError` on the first miss.

    >>> validate_params("UCB1", {"alpha": -1.0}, {"alpha": [Interval(Real, 0, None, "neither")]})
    Traceback (most recent call last):
    ...
    genbandit.core.validation.InvalidParameterError: The 'alpha' parameter of UCB1 must be a float in the range (0, inf). Got -1.0 instead.
    """
    for name, options in constraints.items():
        if name not in params:
            continue
        value = params[name]
        options = list(options)
        if any(_accepts(c, value) for c in options):
            continue
        wanted = " or ".join(_describe(c) for c in options)
        raise InvalidParameterError(f"The '{name}' parameter of {owner} must be {wanted}. Got {value!r} instead.")


def check_finite_array(name: str, value: Any, shape: tuple[int | None, ...] | None = None, owner: str = "") -> np.ndarray:
    """Return ``value`` as a float array after checking it is finite and of ``shape`` (None = any size)."""
    where = f" of {owner}" if owner else ""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"The {name}{where} must be numeric. Got {value!r} instead.") from exc
    if shape is not None and arr.shape != shape:
        if arr.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, arr.shape)):
            dims = ["any" if s is None else str(s) for s in shape]
            want = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
            raise InvalidInputError(f"The {name}{where} must have shape {want}. Got shape {arr.shape} instead.")
    if not np.isfinite(arr).all():
        raise InvalidInputError(f"The {name}{where} must be finite (no NaN or infinity). Got {value!r} instead.")
    return arr

