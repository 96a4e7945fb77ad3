"""Exact, JSON-safe encoding of policy state (arrays, scalars, nested lists and dicts).

Arrays are stored as base64 of their raw bytes with dtype and shape, so a round trip through
JSON, SQLite or Redis restores them bit for bit.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

__all__ = ["to_jsonable", "from_jsonable"]

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
