"""``genbandit evaluate``: which routing policy to deploy, judged on your own data before it takes traffic.

Two sources of evidence, alone or together:

- **A full-information table** (every prompt with every model's score, and optionally cost and
  category; the format :class:`~genbandit.envs.prompts.PromptTable` reads, CSV, Parquet or JSON
  lines, several rows per prompt for several stored trials). Each candidate policy is replayed by
  the simulator over ``n_orders`` random orders of the prompts (one pass each; every candidate
  sees the same orders and the same drawn trials), and the report gives its mean utility
  (score - price x cost), quality, cost, regret against the per-prompt oracle, its gain over
  always calling the best single model (OtB), the share of the oracle's headroom it captured, a
  per-category breakdown and a recommendation.
- **A decision log** of a randomised policy (the router's own store, or any log in the format
  below). Off-policy estimates (IPS, SNIPS, DM, DR; :mod:`genbandit.experiments.offpolicy`) say
  what each candidate, and always calling each single model, would have scored on the logged
  traffic, with standard errors.

Decision log format: one JSON object per line (``.jsonl``), or the router's SQLite store
(``.db``, ``.sqlite``, ``.sqlite3``; its ``decisions`` table), one row per decision::

    {"decision_id": "9f1c...", "context": [0.01, -0.03, ...],   # or "prompt": "text" (embedded here)
     "model": "large",            # the chosen model (or "arm": its index)
     "propensity": 0.42,          # probability the logging policy chose it; null if unknown
     "reward": 1.0,               # the feedback; null if none came (the row is skipped)
     "cost": 0.0031,              # optional, per request (utility = reward - price x cost)
     "time": 1764000000.0}        # optional, seconds since the epoch

How a learning candidate is scored on a log: it walks the log in order; at each decision it gives
the probability of each model (exactly where the policy exposes ``probabilities``, else by Monte
Carlo draws of its ``select``: :func:`~genbandit.policies.propensity.action_probabilities`), and
then learns from the logged model and reward, as a router warm-started from that log would. For
a rule that does not learn (always one model, a fixed router) this is its ordinary value.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from ..core.validation import InvalidParameterError
from ..envs.prompts import PromptTable
from ..policies.classic import BestSingle
from ..policies.propensity import action_probabilities
from .config import ExperimentConfig, PolicySpec, load_config, read_toml
from .offpolicy import ESTIMATORS, cross_fitted_reward_model
from .units import Unit, UnitResult, build_policy, simulate_unit, unit_result

if TYPE_CHECKING:
    from .report import ReportContext

__all__ = ["DecisionLog", "read_decision_log", "offpolicy_targets", "offpolicy_unit", "evaluate_unit", "build_config", "evaluate",
           "parse_candidates", "report", "DEFAULT_CANDIDATES"]

#: What ``genbandit evaluate`` compares when no candidates are named.
DEFAULT_CANDIDATES = ("best-single", "RFF-UCB", "LinUCB", "greedy", "random")

_REPLAY = "replay"
_LOG = "logged"
_SQLITE = {".db", ".sqlite", ".sqlite3"}


# ---------------------------------------------------------------------------------------------
# Decision logs
# ---------------------------------------------------------------------------------------------
@dataclass
class DecisionLog:
    """Logged decisions with feedback: contexts ``(n, d)``, actions ``(n,)``, propensities ``(n,)``
    (NaN where unknown), rewards ``(n,)``, costs ``(n,)`` (NaN where not logged), over ``models``."""

    ids: list[str]
    contexts: np.ndarray
    actions: np.ndarray
    propensities: np.ndarray
    rewards: np.ndarray
    costs: np.ndarray
    times: np.ndarray
    models: list[str]
    skipped_no_reward: int = 0

    @property
    def n_arms(self) -> int:
        return len(self.models)

    @property
    def context_dim(self) -> int:
        return int(self.contexts.shape[1])

    def utilities(self, price: float = 0.0) -> np.ndarray:
        """reward - price x cost per decision (cost counts as 0 where not logged)."""
        return self.rewards - price * np.nan_to_num(self.costs) if price else self.rewards.copy()

    def with_models(self, models: list[str]) -> "DecisionLog":
        """The same decisions over ``models`` (another order, or more models), which must name every model the log chose."""
        index = {m: k for k, m in enumerate(models)}
        chosen = [self.models[a] for a in np.unique(self.actions)]
        missing = [m for m in chosen if m not in index]
        if missing:
            raise InvalidParameterError(f"The log chose model(s) {missing} that {list(models)} does not name.")
        remap = np.array([index.get(m, -1) for m in self.models], dtype=np.int64)
        return replace(self, actions=remap[self.actions], models=list(models))


def _float_or_nan(value: Any, field: str, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError(f"{where}: '{field}' must be a number or null. Got {value!r} instead.")
    return float(value)


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidParameterError(f"{path}, line {k}: not JSON ({exc.msg}).") from exc
        if not isinstance(row, dict):
            raise InvalidParameterError(f"{path}, line {k}: each line must be a JSON object.")
        row["_where"] = f"{path}, line {k}"
        rows.append(row)
    return rows


def _sqlite_rows(path: Path, models: list[str] | None) -> list[dict]:
    """The router store's decisions, oldest first; a model is named by the store's ``models`` table, else by ``models[arm]``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "decisions" not in tables:
            raise InvalidParameterError(f"{path} is not a router store: it has no 'decisions' table.")
        has_p = "propensity" in {r[1] for r in conn.execute("PRAGMA table_info(decisions)")}
        names = dict(conn.execute("SELECT id, name FROM models")) if "models" in tables else {}
        query = f"SELECT id, arm, context, created, forced, reward{', propensity' if has_p else ''} FROM decisions ORDER BY created"
        rows = [{"decision_id": r[0], "arm": int(r[1]), "context": np.frombuffer(r[2], dtype="<f8").tolist(), "time": float(r[3]),
                 "reward": r[5], "propensity": r[6] if has_p and not r[4] else None, "_where": f"{path}, decision {r[0]}"} for r in conn.execute(query)]
    finally:
        conn.close()
    for r in rows:
        if r["arm"] in names:
            r["model"] = names[r.pop("arm")]
        elif models is None:
            raise InvalidParameterError(f"{path} does not name its models: give them (--models) in the router config's order.")
    return rows


def read_decision_log(path: str | Path, models: list[str] | None = None, embedding_model: str = "all-MiniLM-L6-v2",
                      cache_dir: str | None = None) -> DecisionLog:
    """Read a decision log (JSON lines, or the router's SQLite store) in the module's format.

    ``models`` fixes the models and their order (by default the names found, sorted; a router
    store names its models itself). Rows without a reward are skipped and counted; rows whose
    propensity is null are kept (the estimators leave them out and say how many).

    >>> import json, tempfile
    >>> path = tempfile.mkdtemp() + "/decisions.jsonl"
    >>> rows = [{"decision_id": "a", "context": [0.6, 0.8], "model": "large", "propensity": 0.7, "reward": 1.0},
    ...         {"decision_id": "b", "context": [1.0, 0.0], "model": "small", "propensity": 0.3, "reward": 0.0, "cost": 0.001},
    ...         {"decision_id": "c", "context": [0.0, 1.0], "model": "small", "propensity": None, "reward": None}]
    >>> _ = open(path, "w").write("\\n".join(json.dumps(r) for r in rows))
    >>> log = read_decision_log(path)
    >>> log.models, log.actions.tolist(), log.propensities.tolist(), log.skipped_no_reward, log.context_dim
    (['large', 'small'], [0, 1], [0.7, 0.3], 1, 2)
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidParameterError(f"No decision log {str(path)!r}.")
    rows = _sqlite_rows(path, models) if path.suffix.lower() in _SQLITE else _jsonl_rows(path)
    with_reward = [r for r in rows if r.get("reward") is not None]
    if len(with_reward) < 2:
        raise InvalidParameterError(f"{path}: fewer than two logged decisions have a reward ({len(rows)} rows).")
    for r in with_reward:
        if "model" not in r and "arm" not in r:
            raise InvalidParameterError(f"{r['_where']}: each row needs 'model' (or 'arm').")
    names = list(models) if models is not None else sorted({str(r["model"]) for r in with_reward if "model" in r})
    index = {m: k for k, m in enumerate(names)}
    actions, contexts, texts = [], [], []
    for r in with_reward:
        if "model" in r:
            if str(r["model"]) not in index:
                raise InvalidParameterError(f"{r['_where']}: unknown model {r['model']!r}; models: {names}.")
            actions.append(index[str(r["model"])])
        else:
            arm = r["arm"]
            if not isinstance(arm, int) or not 0 <= arm < len(names):
                raise InvalidParameterError(f"{r['_where']}: 'arm' must be an index below {len(names)}. Got {arm!r} instead.")
            actions.append(arm)
        vector = r.get("context", r.get("embedding"))
        if vector is None and not isinstance(r.get("prompt"), str):
            raise InvalidParameterError(f"{r['_where']}: each row needs 'context' (a list of numbers) or 'prompt' (text).")
        contexts.append(vector)
        texts.append(r.get("prompt"))
    if any(c is None for c in contexts):
        if not all(c is None for c in contexts):
            raise InvalidParameterError(f"{path}: give either 'context' on every row or 'prompt' on every row, not a mix.")
        from ..envs.prompts import embed_texts

        X = np.asarray(embed_texts([str(t) for t in texts], embedding_model, cache_dir), dtype=float)
    else:
        try:
            X = np.asarray(contexts, dtype=float)
        except ValueError as exc:
            raise InvalidParameterError(f"{path}: every 'context' must be a list of numbers of one length ({exc}).") from exc
        if X.ndim != 2 or not np.all(np.isfinite(X)):
            raise InvalidParameterError(f"{path}: every 'context' must be a finite list of numbers of one length.")
    p = np.array([_float_or_nan(r.get("propensity"), "propensity", r["_where"]) for r in with_reward])
    bad = np.flatnonzero(~np.isnan(p) & ((p <= 0) | (p > 1)))
    if bad.size:
        raise InvalidParameterError(f"{with_reward[bad[0]]['_where']}: 'propensity' must lie in (0, 1]. Got {float(p[bad[0]])!r} instead.")
    rewards = np.array([_float_or_nan(r["reward"], "reward", r["_where"]) for r in with_reward])
    bad = np.flatnonzero(~np.isfinite(rewards) | (rewards < 0) | (rewards > 1))
    if bad.size:
        raise InvalidParameterError(f"{with_reward[bad[0]]['_where']}: 'reward' must lie in [0, 1] (rescale it, as a table's scores). "
                                    f"Got {float(rewards[bad[0]])!r} instead ({bad.size} such row(s)).")
    costs = np.array([_float_or_nan(r.get("cost"), "cost", r["_where"]) for r in with_reward])
    bad = np.flatnonzero(costs < 0)
    if bad.size:
        raise InvalidParameterError(f"{with_reward[bad[0]]['_where']}: 'cost' must be zero or more. Got {float(costs[bad[0]])!r} instead.")
    return DecisionLog(
        ids=[str(r.get("decision_id", k)) for k, r in enumerate(with_reward)],
        contexts=X,
        actions=np.asarray(actions, dtype=np.int64),
        propensities=p,
        rewards=rewards,
        costs=costs,
        times=np.array([_float_or_nan(r.get("time"), "time", r["_where"]) for r in with_reward]),
        models=names,
        skipped_no_reward=len(rows) - len(with_reward),
    )


def _with_propensity(log: DecisionLog, path: str) -> np.ndarray:
    """The decisions that record a propensity; at least two, or a clear error."""
    usable = np.flatnonzero(~np.isnan(log.propensities))
    if usable.size < 2:
        raise InvalidParameterError(
            f"{path}: {usable.size} of {log.actions.size} decisions with a reward record a propensity (the probability with which "
            "the logger chose the logged model); off-policy estimates need at least two. Log them (the genbandit router records "
            "them for randomised policies), or evaluate on a full-information table instead."
        )
    return usable


@functools.lru_cache(maxsize=4)
def _logged(params_json: str) -> tuple[DecisionLog, np.ndarray, np.ndarray, np.ndarray]:
    """(log, utilities, rows with a propensity, cross-fitted reward model on those rows), memoised per scenario."""
    params = json.loads(params_json)
    log = read_decision_log(params["log"], params.get("models"), params.get("embedding_model", "all-MiniLM-L6-v2"), params.get("cache_dir"))
    utilities = log.utilities(params.get("price", 0.0))
    usable = _with_propensity(log, params["log"])
    q = cross_fitted_reward_model(log.contexts[usable], log.actions[usable], utilities[usable], log.n_arms, seed=params.get("seed", 0))
    return log, utilities, usable, q


def offpolicy_targets(policy, log: DecisionLog, utilities: np.ndarray, n_draws: int = 256, progress: bool = False,
                      description: str | None = None) -> np.ndarray:
    """The probabilities ``(n, n_arms)`` ``policy`` gives each model at each logged decision, learning from the log as it goes.

    Before decision ``i`` the policy has learned from decisions ``0..i-1`` (their logged model and
    ``utilities``), so a warm-started router's choices are what is scored.
    """
    policy.reset(1)
    out = np.empty((log.actions.size, log.n_arms))
    for i in tqdm(range(log.actions.size), desc=description, disable=not progress, leave=False, unit="decision", mininterval=0.5):
        x = log.contexts[i] if policy.contextual else None
        out[i] = action_probabilities(policy, x, n_draws=n_draws)
        policy.update(int(log.actions[i]), float(utilities[i]), x)
    return out


def offpolicy_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """Runner: IPS, SNIPS, DM and DR estimates of one candidate's value on the scenario's decision log.

    ``metrics`` hold each estimator's per-decision terms (their mean is the estimate, their
    standard error the estimate's), so summary.json records carry the estimate and its error.
    """
    params = dict(unit.scenario.params)
    log, utilities, usable, q = _logged(json.dumps(params, sort_keys=True))
    policy = build_policy(unit.policy, log, log.actions.size)
    target = offpolicy_targets(policy, log, utilities, params.get("n_draws", 256), progress, f"{unit.scenario_name} / {unit.policy.label}")[usable]
    a, p, r = log.actions[usable], log.propensities[usable], utilities[usable]
    if not np.any(target[np.arange(a.size), a] > 0):
        raise InvalidParameterError(f"{unit.policy.label} never calls a model the log chose on the logged requests, so the log cannot "
                                    "judge it: evaluate it on a full-information table, or on a log of a router that explored.")
    metrics = {}
    for name, (estimator, needs_model) in ESTIMATORS.items():
        est = estimator(r, a, p, target, q) if needs_model else estimator(r, a, p, target)
        metrics[name] = est.terms.tolist()
    w = target[np.arange(a.size), a] / p
    extras = {
        "mean_weight": float(w.mean()),
        "mean_weight_stderr": float(w.std(ddof=1) / math.sqrt(w.size)),
        "n_decisions": int(log.actions.size),
        "n_used": int(usable.size),
        "n_without_propensity": int(log.actions.size - usable.size),
        "n_without_reward": log.skipped_no_reward,
        "max_weight": float(w.max()),
        "effective_sample_size": float(w.sum() ** 2 / max((w * w).sum(), 1e-300)),
        "target_share": target.mean(axis=0).tolist(),
        "models": log.models,
    }
    return UnitResult(unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=unit.horizon, n_runs=1,
                      metrics=metrics, extras=extras)


# ---------------------------------------------------------------------------------------------
# Full-information replays
# ---------------------------------------------------------------------------------------------
def evaluate_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """Runner: the simulator's replay of one candidate over the table, with per-category metrics.

    Per category ``c`` of the table, ``extras["categories"][c]`` holds ``mean_reward``, ``otb`` and
    ``mean_regret`` per run (the report adds them to summary.json under the scenario ``replay[c]``).
    """
    env, policy, result = simulate_unit(unit, progress)
    out = unit_result(unit, env, policy, result)
    labels = env.categories()
    out.extras["categories"] = {}
    for name in labels[1] if labels is not None else []:
        t = result.totals
        n = np.maximum(t[f"prompts[{name}]"], 1.0)
        out.extras["categories"][name] = {
            "mean_reward": (t[f"reward[{name}]"] / n).tolist(),
            "otb": ((t[f"reward[{name}]"] - t[f"best_single_reward[{name}]"]) / n).tolist(),
            "mean_regret": (t[f"regret[{name}]"] / n).tolist(),
        }
    return out


evaluate_unit.params = ()  # the scenario's params are all the table's: the config check holds them to PromptTable's
offpolicy_unit.metrics = tuple(ESTIMATORS)


# ---------------------------------------------------------------------------------------------
# Candidates and the config
# ---------------------------------------------------------------------------------------------
def parse_candidates(items: list[str]) -> list[PolicySpec]:
    """Candidate policies from registered names (``"LinUCB"``, ``"label=policy"``), experiment
    configs (their ``[[policies]]`` tables) or router configs (their ``[policy]``, labelled by the
    file name)."""
    specs: list[PolicySpec] = []
    for item in items:
        path = Path(item)
        if path.suffix == ".toml":
            if not path.is_file():
                raise InvalidParameterError(f"No candidate config {item!r}.")
            raw = read_toml(path, "Candidate config")
            if "policies" in raw:
                for k, e in enumerate(raw["policies"]):
                    if not isinstance(e, dict) or not (e.get("label") or e.get("policy")) or not isinstance(e.get("params", {}), dict):
                        raise InvalidParameterError(f"{path}: policies[{k}] needs a 'label' or a 'policy' (and 'params' a table).")
                    label = e.get("label") or e["policy"]
                    specs.append(PolicySpec(label=label, policy=e.get("policy", label), params=dict(e.get("params", {}))))
            elif "models" in raw:  # a router config
                policy = raw.get("policy", {})
                specs.append(PolicySpec(label=path.stem, policy=policy.get("name", "RFF-UCB"), params=dict(policy.get("params", {}))))
            else:
                raise InvalidParameterError(f"{path}: a candidate config needs [[policies]] tables (an experiment config) or [[models]] and [policy] (a router config).")
        else:
            label, _, name = item.partition("=")
            specs.append(PolicySpec(label=label, policy=name or label, params={}))
    from ..core.registry import POLICIES

    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise InvalidParameterError(f"Candidate labels must be unique; {dupes} appear twice (name them 'label=policy').")
    for s in specs:
        POLICIES.get(s.policy)  # an unknown name fails here, with the known ones listed
    return specs


def build_config(candidates: list[PolicySpec], *, table: str | None = None, log: str | None = None, n_orders: int = 5, seed: int = 0,
                 price: float = 0.0, prompt_column: str = "prompt", score_columns: list[str] | None = None,
                 cost_columns: list[str] | None = None, category_column: str | None = None, models: list[str] | None = None,
                 embedding_model: str = "all-MiniLM-L6-v2", cache_dir: str | None = None, n_draws: int = 256,
                 horizon: int | None = None) -> ExperimentConfig:
    """The experiment ``evaluate`` runs: a replay scenario for the table, an off-policy scenario for the log."""
    if table is None and log is None:
        raise InvalidParameterError("genbandit evaluate needs a table (full information), a decision log, or both.")
    if not candidates:
        raise InvalidParameterError("genbandit evaluate needs at least one candidate policy.")
    policies = [{"label": c.label, "policy": c.policy, "params": c.params} for c in candidates]
    scenarios = []
    metrics = ["mean_reward", "mean_quality", "mean_regret", "otb", "opr", "headroom_captured"]
    if table is not None:
        params = {"path": str(table), "prompt_column": prompt_column, "score_columns": score_columns, "cost_columns": cost_columns,
                  "category_column": category_column, "price": price, "embedding_model": embedding_model, "cache_dir": cache_dir,
                  "order": "shuffle"}
        params = {k: v for k, v in params.items() if v is not None}
        env = PromptTable(**params)
        n = env.max_horizon
        if horizon is not None and not 1 <= horizon <= n:
            raise InvalidParameterError(f"--horizon must lie in 1..{n}, the table's prompts (each order replays every prompt once). Got {horizon} instead.")
        if n_orders < 2:
            raise InvalidParameterError(f"A replay needs at least 2 orders (--orders): with one, no standard error says whether a candidate's "
                                        f"gain over the best single model is more than the luck of that order. Got {n_orders} instead.")
        scenarios.append({"name": _REPLAY, "environment": "prompt-table", "params": params, "horizon": horizon or n, "n_runs": n_orders,
                          "runner": "genbandit.experiments.evaluate:evaluate_unit",
                          "metrics": metrics + (["mean_cost"] if cost_columns else []),
                          "description": f"Full-information replay of `{table}`: {n} prompts, {env.n_arms} models ({', '.join(env.models)}), "
                                         f"{n_orders} random orders, utility = score - {price:g} x cost."})
    if log is not None:
        logged = read_decision_log(log, models, embedding_model, cache_dir)  # read once: a log of prompts is embedded on reading
        if models is None and table is not None:  # the log's models are the table's (in its order) that the log chose
            unknown = [m for m in logged.models if m not in env.models]
            if unknown:
                raise InvalidParameterError(f"{log} names model(s) {unknown} that the table does not have (its models: {env.models}). "
                                            "Fix the names, or give the log's models with --models to read it on its own terms.")
            models = [m for m in env.models if m in logged.models]
            logged = logged.with_models(models)
        params = {"log": str(log), "price": price, "embedding_model": embedding_model, "cache_dir": cache_dir, "models": models,
                  "n_draws": n_draws, "seed": seed}
        params = {k: v for k, v in params.items() if v is not None}
        _with_propensity(logged, str(log))
        chosen = np.bincount(logged.actions, minlength=logged.n_arms) > 0
        fixed = [{"label": f"always:{m}", "policy": "fixed", "params": {"arm": k}} for k, m in enumerate(logged.models) if chosen[k]]
        never = [m for k, m in enumerate(logged.models) if not chosen[k]]
        policies += fixed
        learned = [c.label for c in candidates if not issubclass(_policy_class(c.policy), BestSingle)]
        scenarios.append({"name": _LOG, "runner": "genbandit.experiments.evaluate:offpolicy_unit", "params": params, "horizon": 1, "n_runs": 1,
                          "policies": [f["label"] for f in fixed] + learned,
                          "description": f"Off-policy estimates from `{log}`: {logged.actions.size} decisions with feedback over "
                                         f"{logged.n_arms} models ({', '.join(logged.models)})."
                                         + (f" The log never chose {', '.join(never)}: it cannot say what always calling "
                                            f"{'it' if len(never) == 1 else 'them'} would score, nor judge a policy that does." if never else "")})
    if table is not None and log is not None:
        scenarios[0]["policies"] = [c.label for c in candidates]
    raw = {
        "name": "evaluate",
        "title": "Offline evaluation: which policy to deploy",
        "description": "Candidates replayed on a full-information table and/or estimated off-policy from a decision log "
                       "(`genbandit evaluate`; see docs/evaluate.md for what each number means).",
        "seed": seed,
        "metrics": metrics,
        "hooks": ["genbandit.experiments.evaluate:report"],
        "scenarios": scenarios,
        "policies": policies,
    }
    return load_config(raw)


def _policy_class(name: str) -> type:
    from ..core.registry import POLICIES

    return POLICIES.get(name)


def evaluate(candidates: list[PolicySpec], out: str | Path, *, progress: bool = True, command: str | None = None, **options: Any) -> dict:
    """Run :func:`build_config` (``options`` are its keyword arguments) and write the outputs to ``out``."""
    from .runner import run_experiment

    config = build_config(candidates, **options)
    return run_experiment(config, out, resume=False, progress=progress, command=command)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def _rec(ctx: ReportContext, scenario: str, policy: str, metric: str) -> dict | None:
    return ctx.metric(scenario, policy, metric)


def _fmt(rec: dict | None, scale: float = 1.0, digits: int = 4) -> str:
    if rec is None or rec["mean"] is None:
        return "n/a"
    se = rec["stderr"]
    return f"{scale * rec['mean']:.{digits}f}" + ("" if se is None else f" ± {scale * se:.{digits}f}")


def _replay_section(ctx: ReportContext) -> None:
    import matplotlib.pyplot as plt

    from .kernel import headroom
    from .units import build_environment

    spec = next((s for s in ctx.config.scenarios if s.name == _REPLAY), None)
    if spec is None:
        return
    env = build_environment(spec, spec.horizons[0])
    U = env.utilities()
    N = len(env.prompts)
    room = headroom(env.embeddings(), U, groups=np.asarray(env.prompts))
    if room["cv_ridge_routing"] is not None:
        ridge = (f"A full-information router trained offline (5-fold cross-validated ridge on the same embeddings, folds grouped by "
                 f"prompt): {room['cv_ridge_routing']:.4f}: what prompt-aware routing can reach here with plenty of data.")
    else:
        ridge = (f"No offline router is fitted: {N} prompts are too few to cross-validate one (five folds of prompts, each fitted "
                 "on four inner folds, take 20), and too few for any number here to say much about new traffic.")
    room["n_prompts"] = N
    best = room["best_single_arm"]
    labels = [p.label for p in spec.policies if _rec(ctx, _REPLAY, p.label, "mean_reward")]
    for key in ("best_single", "cv_ridge_routing", "oracle"):
        if room[key] is not None:
            ctx.add_record(_REPLAY, f"table:{key}", "mean_reward", [room[key]])
    per_model = ", ".join(f"{m} {u:.4f}" for m, u in zip(env.models, U.mean(axis=0)))
    ties = [m for g, m in enumerate(env.models) if g != best and np.isclose(U[:, g].mean(), room["best_single"], rtol=0, atol=1e-12)]
    tied = f"; tied with {', '.join(ties)}: it is first of them in the table, not better" if ties else ""
    lines = [
        f"{N} prompts, {spec.n_runs} orders. Per model (mean utility over the table): {per_model}. "
        f"Best single model: **{env.models[best]}** ({room['best_single']:.4f}{tied}). Per-prompt oracle (knows every outcome, unreachable): "
        f"{room['oracle']:.4f}. " + ridge,
        "",
        "| policy | utility | quality | cost | regret per decision | vs best single (OtB) | headroom captured | on the prompt's best model |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        cells = [_fmt(_rec(ctx, _REPLAY, label, m)) for m in ("mean_reward", "mean_quality", "mean_cost", "mean_regret", "otb")]
        share, opr = _rec(ctx, _REPLAY, label, "headroom_captured"), _rec(ctx, _REPLAY, label, "opr")
        cells += [_fmt(share, 100, 1) + " %" if share and share["mean"] is not None else "n/a", _fmt(opr, 100, 1) + " %" if opr else "n/a"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Means ± standard errors over the orders (every policy sees the same orders and the same drawn trials). "
              "Headroom captured = 1 - regret / the best single model's regret: 0 % is the best single model, 100 % the oracle."]

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.6))
    otb = [_rec(ctx, _REPLAY, lab, "otb") for lab in labels]
    ax.barh(labels, [r["mean"] for r in otb], xerr=[2 * (r["stderr"] or 0.0) for r in otb], color="tab:blue", alpha=0.7, capsize=3)
    ax.axvline(0.0, color="k", lw=1, ls="--", label=f"always {env.models[best]}")
    if room["cv_ridge_routing"] is not None:
        ax.axvline(room["cv_ridge_routing"] - room["best_single"], color="k", lw=1, ls=":", label="offline ridge router")
    ax.axvline(room["oracle"] - room["best_single"], color="k", lw=1, label="per-prompt oracle")
    ax.set_xlabel("mean utility minus the best single model's (± 2 standard errors over orders)")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="best")
    lines += ["", f"![utility by policy]({ctx.savefig(fig, 'evaluate-utility')})"]
    ctx.add_section("Replay on the full-information table", "\n".join(lines))

    labels_cats = env.categories()
    if labels_cats is not None:
        cat_ids, names = labels_cats
        rows = ["| category | prompts | best model here | its gain over the best single model (± over prompts) | " + " | ".join(labels) + " |",
                "|---|---|---|---|" + "---|" * len(labels)]
        done = {r.policy: r for r in ctx.results if r.scenario == _REPLAY and r.error is None}
        for c, name in enumerate(names):
            mine = U[cat_ids == c]
            for lab in labels:
                for metric, values in done[lab].extras["categories"][name].items():
                    ctx.add_record(f"{_REPLAY}[{name}]", lab, metric, values)
            cells = [_fmt(_rec(ctx, f"{_REPLAY}[{name}]", lab, "otb")) for lab in labels]
            here = int(mine.mean(0).argmax())
            rows.append(f"| {name} | {mine.shape[0]} | {env.models[here]} ({mine[:, here].mean():.4f}) | "
                        f"{_prompt_spread(mine[:, here] - mine[:, best])} | " + " | ".join(cells) + " |")
        ctx.add_section("By category", "Each policy's mean utility minus the best single model's (over the whole table) on the prompts "
                        "of each category (OtB per category, ± over orders). The ± over orders does not cover which prompts the "
                        "category holds: the column before the policies gives the category's best model's gain with its standard "
                        "error over the category's prompts, n/a for a category of one prompt. A category of a few prompts is an "
                        "anecdote, not evidence for routing it elsewhere.\n\n" + "\n".join(rows))
    _recommend(ctx, labels, env.models[best], room)


def _prompt_spread(gains: np.ndarray) -> str:
    """Mean of per-prompt gains ± their standard error over prompts; n/a with one prompt."""
    if gains.size < 2:
        return f"{gains.mean():+.4f} ± n/a (one prompt)"
    return f"{gains.mean():+.4f} ± {gains.std(ddof=1) / math.sqrt(gains.size):.4f}"


def _recommend(ctx: ReportContext, labels: list[str], best_model: str, room: dict) -> None:
    contenders = [lab for lab in labels if lab != "best-single"]
    if not contenders:
        return
    winner = max(contenders, key=lambda lab: _rec(ctx, _REPLAY, lab, "mean_reward")["mean"])
    otb = _rec(ctx, _REPLAY, winner, "otb")
    share = _rec(ctx, _REPLAY, winner, "headroom_captured")
    gain, se = otb["mean"], otb["stderr"] or 0.0
    base = room["best_single"]
    pct = 100 * gain / abs(base) if base else float("nan")
    if room["cv_ridge_routing"] is None:  # too few prompts to cross-validate a router: too few to judge one
        text = (f"**Keep calling {best_model}.** {room['n_prompts']} prompts are too few to judge a router on (the best "
                f"candidate, {winner}, is {gain:+.4f} utility per request from it): a router that gains on a handful of prompts "
                "may lose on the next ones.")
        verdict = "best-single" if "best-single" in labels else winner
    elif gain - 2 * se > 0:
        text = (f"**Deploy {winner}.** Over the table it beats always calling {best_model} by {gain:+.4f} utility per request "
                f"({pct:+.2f} %, ± {2 * se:.4f} at two standard errors over orders) and captures "
                f"{100 * share['mean']:.0f} % of the oracle's headroom.")
        verdict = winner
    else:
        why = ("every candidate scores below it" if gain + 2 * se < 0 else "no candidate beats it by more than its uncertainty")
        text = (f"**Keep calling {best_model}.** The best candidate, {winner}, is {gain:+.4f} utility per request from it "
                f"(± {2 * se:.4f} at two standard errors over orders): on these prompts {why}.")
        verdict = "best-single" if "best-single" in labels else winner
    chosen = next(r for r in ctx.results if r.scenario == _REPLAY and r.policy == verdict)
    ctx.add_record("recommendation", verdict, "otb", chosen.metrics["otb"])
    ridge = "" if room["cv_ridge_routing"] is None else f" The offline ridge router reaches {room['cv_ridge_routing'] - base:+.4f} over the best single model."
    text += (f"{ridge} The per-prompt oracle reaches "
             f"{room['oracle'] - base:+.4f}: the room any router has on these prompts. The standard errors cover the orders and the "
             "drawn trials, not which prompts are in the table: on new traffic, expect the spread a different sample of prompts gives.")
    ctx.add_section("Recommendation", text)


def _log_section(ctx: ReportContext) -> None:
    import matplotlib.pyplot as plt

    spec = next((s for s in ctx.config.scenarios if s.name == _LOG), None)
    if spec is None:
        return
    done = [r for r in ctx.results if r.scenario == _LOG and r.error is None]
    if not done:
        return
    info = done[0].extras
    lines = [
        f"{info['n_decisions']} logged decisions with feedback ({info['n_without_reward']} without feedback skipped); "
        f"{info['n_used']} record a propensity and are used"
        + (f" ({info['n_without_propensity']} without one are left out)" if info["n_without_propensity"] else "") + "."
        + (" `best-single` is not estimated here: which model is best is what the `always:` rows estimate."
           if any(p.get("label") == "best-single" for p in ctx.config.source.get("policies", [])) else ""),
        "",
        "| policy | IPS | SNIPS | DM | DR | effective sample size | largest weight | mean weight (1 expected) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in done:
        cells = [_fmt(_rec(ctx, _LOG, r.policy, m)) for m in ESTIMATORS]
        lines.append(f"| {r.policy} | " + " | ".join(cells) + f" | {r.extras['effective_sample_size']:.0f} | {r.extras['max_weight']:.1f} | "
                     f"{r.extras['mean_weight']:.3f} ± {r.extras['mean_weight_stderr']:.3f} |")
    off = [r for r in done if r.policy.startswith("always:") and abs(r.extras["mean_weight"] - 1) > max(3 * r.extras["mean_weight_stderr"], 0.05)]
    if off:
        found = ", ".join(f"{r.policy} has {r.extras['mean_weight']:.3f} ± {r.extras['mean_weight_stderr']:.3f}" for r in off)
        warning = ("> **Warning: these propensities do not behave like the probabilities of the logged choices.** With true "
                   "propensities the mean weight of always calling a model is 1 within its error (each model's weights average to 1 "
                   f"over the log); here {found}. Either the log's propensities are not the probabilities with which its models were "
                   "chosen (a score, a rounded value, a deterministic router's 1), or the logger never chose that model on part of the "
                   "traffic. IPS, DR and DM below are then biased, and SNIPS hides it by dividing by the mean weight: do not trust "
                   "them for policies that call those models.")
        lines = [warning, "", *lines]
    lines += ["", "Each cell is an estimate of the mean utility the policy would have had on the logged requests ± its standard "
              "error. Trust IPS and DR when the effective sample size is a good share of the decisions and the largest weight is "
              "modest; when DM disagrees with DR by more than their errors, the reward model is off and DR (which corrects it) "
              "is the one to read. A policy that picks models the logger almost never picked cannot be judged from this log."]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(done) + 1.6))
    for k, name in enumerate(ESTIMATORS):
        recs = [_rec(ctx, _LOG, r.policy, name) for r in done]
        y = np.arange(len(done)) + (k - 1.5) * 0.18
        ax.errorbar([x["mean"] for x in recs], y, xerr=[2 * (x["stderr"] or 0) for x in recs], fmt="o", ms=4, label=name.upper(), capsize=2)
    ax.set_yticks(np.arange(len(done)), [r.policy for r in done])
    ax.invert_yaxis()
    ax.set_xlabel("estimated mean utility (± 2 standard errors)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    lines += ["", f"![off-policy estimates]({ctx.savefig(fig, 'evaluate-offpolicy')})"]
    ctx.add_section("Off-policy estimates from the decision log", "\n".join(lines))


def report(ctx: ReportContext) -> None:
    """Report hook of ``genbandit evaluate``: the replay table, categories, recommendation, off-policy estimates."""
    _replay_section(ctx)
    _log_section(ctx)
