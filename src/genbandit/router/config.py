"""The router's TOML config: models, policy, embedding, state store, keys and limits.

A config, in full (every table but ``[[models]]`` is optional)::

    [server]
    host = "127.0.0.1"
    port = 8000
    route_name = "auto"           # the model name that asks the router to choose (/v1/chat/completions)
    max_prompt_chars = 32000      # longer prompts get 413
    max_body_bytes = 1048576      # larger request bodies get 413
    decision_ttl_s = 86400        # feedback after this gets 410 (forgotten after twice this: 404)
    reward_range = [0.0, 1.0]     # feedback outside gets 422
    cost_weight = 0.0             # the policy learns reward - cost_weight * cost of the model
    upstream_timeout_s = 120.0
    upstream_error_reward = -1.0  # optional: feedback recorded when an upstream fails (omit for none)
    recent_decisions = 50         # how many /v1/stats lists
    max_pending_decisions = 100000  # decisions awaiting feedback (younger than decision_ttl_s); more gets 429
    propensity_draws = 64         # Monte Carlo draws for the recorded propensity of a policy without probabilities(); 0: record none
    max_json_depth = 32           # request bodies nested deeper get 400
    keep_alive_s = 5.0            # an idle keep-alive connection is closed after this
    header_timeout_s = 10.0       # a connection that has not sent a whole request head in this (after it opened or after its last answer, keep_alive_s aside) is closed
    body_timeout_s = 30.0         # a request body not received in full within this gets 408
    max_connections = 512         # connections beyond this are closed at once
    docs = false                  # serve /docs and /openapi.json (behind a read or admin key)

    [[models]]
    name = "small"                # what clients and feedback see
    base_url = "http://127.0.0.1:9001/v1"   # an OpenAI-compatible endpoint
    model = "qwen2.5-7b"          # the upstream's model id (default: name)
    api_key_env = "SMALL_KEY"     # optional: environment variable holding the upstream key
    cost = 0.2                    # optional, any unit (per request)
    renamed_from = "qwen-small"   # optional: this model was called that; what was learned about it stays

    [policy]
    name = "evidence-thompson"    # the default; any registered contextual policy, or "package.module:Class"
    params = { }                  # n_arms and n_features are filled in

    [budget]
    target_cost = 0.004           # optional: the mean cost per request to keep (the [[models]] costs' unit);
                                  # the policy prices cost online to hold it (a policy with a ``budget`` parameter)

    [warm_start]
    path = "logged.csv"           # optional: CSV or Parquet of logged outcomes, folded in when the store is new
    prompt_column = "prompt"      # or embedding_column = "embedding" (a list of numbers per row)
    model_column = "model"        # model names as in [[models]]
    reward_column = "reward"
    cost_column = "cost"          # optional (default: the model's configured cost)

    [embedding]
    kind = "sentence-transformers"  # or "hashing" (no model), or "none" (clients send embeddings)
    model = "all-MiniLM-L6-v2"
    dim = 384                     # for "hashing" and "none"
    backend = "auto"              # "onnx" (ONNX Runtime), "torch" (sentence-transformers); "auto": onnx when installed
    precision = "float32"         # "bfloat16" (torch) or "int8" (onnx): faster, and the vectors move slightly
    threads = 1                   # copies of the model, each running its own batch on one thread (the event loop needs a core too)

    [store]
    kind = "sqlite"               # or "redis" (several replicas sharing one policy)
    path = "router.db"            # sqlite
    synchronous = "full"          # sqlite: "full" survives power loss, "normal" survives process crashes
    url = "redis://127.0.0.1:6379/0"  # redis
    prefix = "genbandit"          # redis key prefix: one policy per prefix
    snapshot_every = 500          # save the policy state after this many feedbacks

    [auth]
    feedback_keys = ["..."]       # keys for /v1/feedback
    read_keys = ["..."]           # read-only keys: /v1/stats, /v1/decisions/{id}, the dashboard, /docs
    admin_keys = ["..."]          # keys for /v1/admin/*; an admin key also works wherever the others do
    client_keys = []              # keys for /v1/route and /v1/chat/completions; empty = open
    feedback_keys_env = "GENBANDIT_FEEDBACK_KEYS"  # optional, comma-separated, added to the lists (also
                                  # read_keys_env, admin_keys_env, client_keys_env)

Keys travel as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``.
"""

from __future__ import annotations

import copy
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.validation import InvalidParameterError

__all__ = ["RouterConfig", "ModelSpec", "ServerSpec", "PolicySpec", "EmbeddingSpec", "StoreSpec", "AuthSpec", "BudgetSpec", "WarmStartSpec",
           "load_router_config"]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    base_url: str
    model: str
    api_key_env: str | None = None
    cost: float = 0.0
    renamed_from: str | None = None

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class ServerSpec:
    host: str = "127.0.0.1"
    port: int = 8000
    route_name: str = "auto"
    max_prompt_chars: int = 32000
    max_body_bytes: int = 1 << 20
    decision_ttl_s: float = 86400.0
    reward_range: tuple[float, float] = (0.0, 1.0)
    cost_weight: float = 0.0
    upstream_timeout_s: float = 120.0
    upstream_error_reward: float | None = None
    recent_decisions: int = 50
    max_pending_decisions: int = 100_000
    propensity_draws: int = 64
    max_json_depth: int = 32
    keep_alive_s: float = 5.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 512
    docs: bool = False


@dataclass(frozen=True)
class PolicySpec:
    name: str = "evidence-thompson"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BudgetSpec:
    target_cost: float | None = None


@dataclass(frozen=True)
class WarmStartSpec:
    path: str | None = None
    prompt_column: str | None = "prompt"
    embedding_column: str | None = None
    model_column: str = "model"
    reward_column: str = "reward"
    cost_column: str | None = None


@dataclass(frozen=True)
class EmbeddingSpec:
    kind: str = "sentence-transformers"
    model: str = "all-MiniLM-L6-v2"
    dim: int | None = None
    cache_dir: str | None = None
    backend: str = "auto"
    precision: str = "float32"
    threads: int = 1


@dataclass(frozen=True)
class StoreSpec:
    kind: str = "sqlite"
    path: str = "router.db"
    synchronous: str = "full"
    url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "genbandit"
    snapshot_every: int = 500


@dataclass(frozen=True)
class AuthSpec:
    feedback_keys: tuple[str, ...] = ()
    read_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    client_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class RouterConfig:
    models: tuple[ModelSpec, ...]
    server: ServerSpec = ServerSpec()
    policy: PolicySpec = PolicySpec()
    embedding: EmbeddingSpec = EmbeddingSpec()
    store: StoreSpec = StoreSpec()
    auth: AuthSpec = AuthSpec()
    budget: BudgetSpec = BudgetSpec()
    warm_start: WarmStartSpec = WarmStartSpec()

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]


_TABLES = {"server", "models", "policy", "embedding", "store", "auth", "budget", "warm_start"}


def _fail(where: str, message: str) -> None:
    raise InvalidParameterError(f"Router config error in {where}: {message}")


def _check_keys(table: Any, allowed: set[str], where: str) -> dict:
    if not isinstance(table, dict):
        _fail(where, f"must be a table. Got {table!r} instead.")
    unknown = sorted(set(table) - allowed)
    if unknown:
        _fail(where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")
    return table


def _number(value: Any, where: str, low: float | None = None, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(where, f"must be a finite number. Got {value!r} instead.")
    if low is not None and (value < low or (strict and value == low)):
        _fail(where, f"must be {'>' if strict else '>='} {low}. Got {value!r} instead.")
    return float(value)


def _int(value: Any, where: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(where, f"must be an integer >= {low}. Got {value!r} instead.")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        _fail(where, f"must be a non-empty string. Got {value!r} instead.")
    return value


def _keys(table: dict, name: str) -> tuple[str, ...]:
    keys = table.get(name, [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        _fail(f"[auth] {name}", f"must be a list of non-empty strings. Got {keys!r} instead.")
    env = table.get(name + "_env")
    if env is not None:
        keys = keys + [k.strip() for k in os.environ.get(_string(env, f"[auth] {name}_env"), "").split(",") if k.strip()]
    return tuple(keys)


def _server(raw: dict) -> ServerSpec:
    where = "[server]"
    t = _check_keys(raw, set(ServerSpec.__dataclass_fields__), where)
    out: dict[str, Any] = {}
    if "host" in t:
        out["host"] = _string(t["host"], f"{where} host")
    if "route_name" in t:
        out["route_name"] = _string(t["route_name"], f"{where} route_name")
    for name in ("port", "max_prompt_chars", "max_body_bytes", "recent_decisions", "max_pending_decisions", "max_json_depth", "max_connections",
                 "propensity_draws"):
        if name in t:
            out[name] = _int(t[name], f"{where} {name}", 0 if name in ("port", "recent_decisions", "propensity_draws") else 1)
    if "docs" in t:
        if not isinstance(t["docs"], bool):
            _fail(f"{where} docs", f"must be true or false. Got {t['docs']!r} instead.")
        out["docs"] = t["docs"]
    for name in ("decision_ttl_s", "upstream_timeout_s", "keep_alive_s", "header_timeout_s", "body_timeout_s"):
        if name in t:
            out[name] = _number(t[name], f"{where} {name}", 0.0, strict=True)
    if "cost_weight" in t:
        out["cost_weight"] = _number(t["cost_weight"], f"{where} cost_weight", 0.0)
    if "upstream_error_reward" in t:
        out["upstream_error_reward"] = _number(t["upstream_error_reward"], f"{where} upstream_error_reward")
    if "reward_range" in t:
        rr = t["reward_range"]
        if not isinstance(rr, list) or len(rr) != 2:
            _fail(f"{where} reward_range", f"must be [low, high]. Got {rr!r} instead.")
        lo, hi = (_number(v, f"{where} reward_range") for v in rr)
        if not lo < hi:
            _fail(f"{where} reward_range", f"needs low < high. Got {rr!r} instead.")
        out["reward_range"] = (lo, hi)
    spec = ServerSpec(**out)
    if spec.upstream_error_reward is not None and not spec.reward_range[0] <= spec.upstream_error_reward <= spec.reward_range[1]:
        _fail(f"{where} upstream_error_reward", f"must lie in reward_range {list(spec.reward_range)}.")
    return spec


def _models(raw: Any, route_name: str) -> tuple[ModelSpec, ...]:
    if not isinstance(raw, list) or len(raw) < 2:
        _fail("[[models]]", "name at least two models to route among.")
    models = []
    for i, m in enumerate(raw):
        where = f"[[models]] #{i + 1}"
        t = _check_keys(m, set(ModelSpec.__dataclass_fields__), where)
        name = _string(t.get("name"), f"{where} name")
        base_url = _string(t.get("base_url"), f"{where} base_url")
        if not base_url.startswith(("http://", "https://")):
            _fail(f"{where} base_url", f"must be an http(s) URL. Got {base_url!r} instead.")
        models.append(
            ModelSpec(
                name=name,
                base_url=base_url.rstrip("/"),
                model=_string(t.get("model", name), f"{where} model"),
                api_key_env=_string(t["api_key_env"], f"{where} api_key_env") if "api_key_env" in t else None,
                cost=_number(t.get("cost", 0.0), f"{where} cost", 0.0),
                renamed_from=_string(t["renamed_from"], f"{where} renamed_from") if "renamed_from" in t else None,
            )
        )
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        _fail("[[models]]", f"model names must be unique. Got {names}.")
    olds = [m.renamed_from for m in models if m.renamed_from is not None]
    if len(set(olds)) != len(olds) or set(olds) & set(names):
        _fail("[[models]]", f"each renamed_from must name a model that is no longer configured, once. Got {olds}.")
    if route_name in names:
        _fail("[[models]]", f"no model may be named {route_name!r}: that name asks the router to choose.")
    return tuple(models)


def load_router_config(source: str | Path | dict) -> RouterConfig:
    """Read and validate a router config from a TOML path or a dict (see the module docstring)."""
    if isinstance(source, dict):
        raw = copy.deepcopy(source)
    else:
        path = Path(source)
        if not path.exists():
            raise InvalidParameterError(f"No router config file {str(source)!r}.")
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise InvalidParameterError(f"Router config {str(source)!r} is not valid TOML: {exc}") from exc
    _check_keys(raw, _TABLES, "the top level")
    server = _server(raw.get("server", {}))
    models = _models(raw.get("models"), server.route_name)

    p = _check_keys(raw.get("policy", {}), {"name", "params"}, "[policy]")
    params = p.get("params", {})
    if not isinstance(params, dict) or {"n_arms", "n_features"} & set(params):
        _fail("[policy] params", "must be a table without n_arms and n_features (the router fills them in).")
    policy = PolicySpec(name=_string(p.get("name", PolicySpec.name), "[policy] name"), params=params)

    e = _check_keys(raw.get("embedding", {}), set(EmbeddingSpec.__dataclass_fields__), "[embedding]")
    kind = e.get("kind", "sentence-transformers")
    if kind not in ("sentence-transformers", "hashing", "none"):
        _fail("[embedding] kind", f"must be 'sentence-transformers', 'hashing' or 'none'. Got {kind!r} instead.")
    dim = _int(e["dim"], "[embedding] dim") if "dim" in e else None
    if kind in ("hashing", "none") and dim is None:
        _fail("[embedding] dim", f"is required with kind = {kind!r}.")
    embedding = EmbeddingSpec(
        kind=kind,
        model=_string(e.get("model", "all-MiniLM-L6-v2"), "[embedding] model"),
        dim=dim,
        cache_dir=_string(e["cache_dir"], "[embedding] cache_dir") if "cache_dir" in e else None,
        backend=_string(e.get("backend", "auto"), "[embedding] backend"),
        precision=_string(e.get("precision", "float32"), "[embedding] precision"),
        threads=_int(e.get("threads", 1), "[embedding] threads"),
    )
    if embedding.backend not in ("auto", "onnx", "torch"):
        _fail("[embedding] backend", f"must be 'auto', 'onnx' or 'torch'. Got {embedding.backend!r} instead.")
    if embedding.precision not in {"auto": ("float32", "bfloat16", "int8"), "torch": ("float32", "bfloat16"), "onnx": ("float32", "int8")}[embedding.backend]:
        _fail("[embedding] precision", f"must be 'float32', 'bfloat16' (torch backend) or 'int8' (onnx backend). Got {embedding.precision!r} instead.")

    s = _check_keys(raw.get("store", {}), set(StoreSpec.__dataclass_fields__), "[store]")
    store_kind = s.get("kind", "sqlite")
    if store_kind not in ("sqlite", "redis"):
        _fail("[store] kind", f"must be 'sqlite' or 'redis'. Got {store_kind!r} instead.")
    synchronous = s.get("synchronous", "full")
    if synchronous not in ("full", "normal"):
        _fail("[store] synchronous", f"must be 'full' or 'normal'. Got {synchronous!r} instead.")
    store = StoreSpec(
        kind=store_kind,
        path=_string(s.get("path", "router.db"), "[store] path"),
        synchronous=synchronous,
        url=_string(s.get("url", StoreSpec.url), "[store] url"),
        prefix=_string(s.get("prefix", "genbandit"), "[store] prefix"),
        snapshot_every=_int(s.get("snapshot_every", 500), "[store] snapshot_every"),
    )

    roles = ("feedback_keys", "read_keys", "admin_keys", "client_keys")
    a = _check_keys(raw.get("auth", {}), {*roles, *(r + "_env" for r in roles)}, "[auth]")
    auth = AuthSpec(**{r: _keys(a, r) for r in roles})
    if not (auth.feedback_keys or auth.admin_keys):
        _fail("[auth]", "name at least one feedback or admin key: feedback changes the policy and must not be open.")
    b = _check_keys(raw.get("budget", {}), {"target_cost"}, "[budget]")
    budget = BudgetSpec(target_cost=_number(b["target_cost"], "[budget] target_cost", 0.0, strict=True) if "target_cost" in b else None)
    if budget.target_cost is not None and not any(m.cost > 0 for m in models):
        _fail("[budget]", "needs a cost on the [[models]] (cost = ...) to keep a target cost.")
    if budget.target_cost is not None and "budget" in params:
        _fail("[policy] params", "must not set budget: [budget] target_cost sets it.")
    w = _check_keys(raw.get("warm_start", {}), set(WarmStartSpec.__dataclass_fields__), "[warm_start]")
    columns = {k: _string(w[k], f"[warm_start] {k}") for k in w if k != "path"}
    warm = WarmStartSpec(path=_string(w["path"], "[warm_start] path"), **columns) if "path" in w else WarmStartSpec()
    if w and "path" not in w:
        _fail("[warm_start]", "needs a path (the logged table).")
    if "embedding_column" in w and "prompt_column" not in w:
        warm = WarmStartSpec(**{**warm.__dict__, "prompt_column": None})
    return RouterConfig(models=models, server=server, policy=policy, embedding=embedding, store=store, auth=auth, budget=budget, warm_start=warm)
