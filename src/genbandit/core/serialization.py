"""Exact, JSON-safe encoding of policy state (arrays, scalars, nested lists and dicts), and its checks.

Arrays are stored as base64 of their raw bytes with dtype and shape, so a round trip through
JSON, SQLite or Redis restores them bit for bit. A policy's state dict carries a format version;
:func:`check_state_layout` and :func:`check_fields` refuse a state that would be read with
another meaning than it was saved with.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from .validation import InvalidInputError

__all__ = ["STATE_VERSION", "to_jsonable", "from_jsonable", "check_state_layout", "check_fields", "differing_settings"]

#: The layout of ``Policy.state_dict()``: states of another version are refused, never reinterpreted.
#: A class's hyperparameters and learned fields are checked by name, dtype and shape on load
#: (:func:`check_fields`), so a class that adds, removes or retypes one refuses its older states by
#: itself, naming the field, while every other class's saved states still load. Bump it when the
#: top-level layout changes, or when a field keeps its name, dtype and shape but changes meaning.
STATE_VERSION = 1
_STATE_KEYS = ("version", "policy", "params", "state", "rng")

_ARRAY = "__ndarray__"
_TUPLE = "__tuple__"


def to_jsonable(obj: Any) -> Any:
    """Encode ``obj`` into plain JSON types.

    >>> from_jsonable(to_jsonable({"x": np.arange(3.0), "n": 2}))["x"]
    array([0., 1., 2.])
    """
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return {_ARRAY: "object", "items": [to_jsonable(x) for x in obj.ravel()], "shape": list(obj.shape)}
        data = np.ascontiguousarray(obj)
        return {_ARRAY: base64.b64encode(data.tobytes()).decode("ascii"), "dtype": data.dtype.str, "shape": list(data.shape)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return {_TUPLE: [to_jsonable(x) for x in obj]}
    if isinstance(obj, list):
        return [to_jsonable(x) for x in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot encode an object of type {type(obj).__name__} in a state dict")


def from_jsonable(obj: Any) -> Any:
    """Invert :func:`to_jsonable`."""
    if isinstance(obj, dict):
        if _ARRAY in obj:
            if obj[_ARRAY] == "object":
                items = [from_jsonable(x) for x in obj["items"]]
                out = np.empty(len(items), dtype=object)
                out[:] = items
                return out.reshape(obj["shape"])
            raw = base64.b64decode(obj[_ARRAY])
            return np.frombuffer(raw, dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
        if _TUPLE in obj:
            return tuple(from_jsonable(x) for x in obj[_TUPLE])
        return {k: from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(x) for x in obj]
    return obj


def _differ(where: str, saved: set, expected: set) -> str | None:
    missing, unknown = sorted(expected - saved), sorted(saved - expected)
    parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else [])
    return f"{where}: {'; '.join(parts)}" if parts else None


def check_state_layout(state: Any) -> None:
    """Refuse a state dict of another format version (or of none) or with missing or unknown top-level fields.

    >>> check_state_layout({"policy": "genbandit.policies.classic:UCB1", "params": {}, "state": {}, "rng": {}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    genbandit.core.validation.InvalidInputError: This state dict has no format version: it was saved by an older genbandit, ...
    """
    if not isinstance(state, dict):
        raise InvalidInputError(f"Not a genbandit policy state dict: expected a dict, got {type(state).__name__}.")
    if "version" not in state:
        raise InvalidInputError(
            "This state dict has no format version: it was saved by an older genbandit, whose fields may mean "
            f"something else. This genbandit reads state format version {STATE_VERSION} only; start the policy afresh."
        )
    if state["version"] != STATE_VERSION:
        raise InvalidInputError(
            f"This state dict has format version {state['version']!r}; this genbandit reads version {STATE_VERSION} only."
        )
    problem = _differ("The state dict's fields differ", set(state), set(_STATE_KEYS))
    if problem:
        raise InvalidInputError(problem + ".")


def differing_settings(saved: dict, expected: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """What sets two state dicts' policies apart: ``"policy"`` when their classes differ, then each hyperparameter whose value
    differs (or that one has and the other has not), ``ignore`` left out; empty when a saved state fits the policy that
    ``expected`` describes. A service resuming from a saved state refuses it unless this is empty.

    >>> a = {"policy": "genbandit.policies.classic:UCB1", "params": {"n_arms": 3, "c": 2.0, "seed": 0}}
    >>> differing_settings(a, {**a, "params": {"n_arms": 4, "c": 2.0, "seed": 1}}, ignore=("seed",))
    ['n_arms']
    """
    def settings(state: dict) -> dict:
        return {k: v for k, v in (state.get("params") or {}).items() if k not in ignore}

    theirs, ours = settings(saved), settings(expected)
    differ = sorted(k for k in theirs.keys() | ours.keys() if k not in theirs or k not in ours or theirs[k] != ours[k])
    return (["policy"] if saved.get("policy") != expected.get("policy") else []) + differ


def check_fields(where: str, saved: dict, expected: dict) -> None:
    """Refuse ``saved`` unless it has exactly ``expected``'s keys, with arrays of the same dtype and shape.

    An axis of length 0 in ``expected`` (a buffer that grows as the policy learns) may have any length.

    >>> check_fields("state", {"_n": np.zeros(3, dtype=np.float32)}, {"_n": np.zeros(3)})
    Traceback (most recent call last):
    ...
    genbandit.core.validation.InvalidInputError: state: '_n' has dtype float32, shape (3,); expected float64, shape (3,).
    """
    problems: list[str] = []
    _compare_fields(where, saved, expected, problems)
    if problems:
        raise InvalidInputError("; ".join(problems) + ".")


def _compare_fields(where: str, saved: dict, expected: dict, problems: list[str]) -> None:
    problem = _differ(where, set(saved), set(expected))
    if problem:
        problems.append(problem)
    for key in sorted(set(saved) & set(expected)):
        _compare(where, repr(key), saved[key], expected[key], problems)


def _compare(where: str, path: str, saved: Any, expected: Any, problems: list[str]) -> None:
    if isinstance(expected, dict):
        if not isinstance(saved, dict):
            problems.append(f"{where}: {path} is a {type(saved).__name__}; expected a dict")
        else:
            _compare_fields(f"{where}: {path}", saved, expected, problems)
    elif isinstance(expected, np.ndarray) and expected.dtype != object:
        shape_ok = isinstance(saved, np.ndarray) and saved.ndim == expected.ndim
        shape_ok = shape_ok and all(e == 0 or s == e for s, e in zip(saved.shape, expected.shape))
        if not (shape_ok and saved.dtype == expected.dtype):
            got = f"dtype {saved.dtype}, shape {saved.shape}" if isinstance(saved, np.ndarray) else f"a {type(saved).__name__}"
            problems.append(f"{where}: {path} has {got}; expected {expected.dtype}, shape {expected.shape}")
