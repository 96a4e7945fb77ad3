"""Experiment configs: a TOML file names scenarios, policies, horizon, runs, seed and metrics.

A config, in full (every key but ``name``, ``scenarios`` and ``policies`` is optional)::

    name = "classic"
    title = "Classic policies"                # report heading
    description = "..."                       # report introduction (Markdown)
    horizon = 100000
    n_runs = 100
    seed = 0
    metrics = ["final_regret", "pulls_per_second"]
    hooks = ["genbandit.experiments.classic:report"]   # extra report sections and records
    quick = { horizon = 10000, n_runs = 20 }  # what --quick changes

    [[scenarios]]
    name = "bernoulli-10"
    environment = "bernoulli-arms"            # a registered environment
    params = { means = [0.5, 0.4] }
    # optional: horizon, n_runs, horizons = [..] (a sweep; units are named "NAME:T=..."),
    # policies = ["UCB1"] (a subset), policy_params = { UCB1 = { alpha = 1.0 } },
    # policy_variants = { UCBSpec = "ServingUCBSpec" } (the registered policy a label plays here instead),
    # blocks = { batch_size = [1, 5, 10] } (one block of n_runs runs per value of an environment parameter),
    # runner = "module:function" (a custom unit), loglog = true, metrics = [..], quick = { ... }

    [[policies]]
    label = "UCB1 (alpha=2)"                  # the name in outputs (defaults to policy)
    policy = "UCB1"                           # a registered policy, any spelling `genbandit list` accepts
    params = { alpha = 2.0 }                  # n_arms, n_features and horizon are filled in

    [[paper]]                                 # the paper's numbers, shown beside ours
    scenario = "bernoulli-10"
    policy = "UCB1"
    metric = "final_regret"
    value = 123.0
    source = "Table 2"

Labels are labels, never aliases: an entry without ``policy`` must have a ``label`` that is a
policy's display name exactly as ``genbandit list`` prints it (``label = "KL-UCB"``). Any other
label (``"KLUCB"``, ``"klucb"``, ``"UCB1 (alpha=2)"``) needs ``policy`` to say which algorithm runs.

:func:`load_config` checks every name before anything runs: environments and their parameters,
policies and their parameters, metrics, runners and hooks. An unknown name is refused with the
nearest known one ("did you mean 'Thompson'?"). A metric must be registered, and a parameter
the environment's, unless a custom ``runner`` declares it in its ``metrics`` or ``params``
attribute; the metrics and parameters of a runner that declares none are left to it.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.registry import ENVIRONMENTS, METRICS, POLICIES, REPRODUCTIONS
from ..core.validation import InvalidParameterError

__all__ = ["ExperimentConfig", "ScenarioSpec", "PolicySpec", "PaperValue", "load_config", "check_names", "read_toml", "CONFIG_DIR", "builtin_configs"]

CONFIG_DIR = Path(__file__).parent / "configs"

_TOP_KEYS = {"name", "title", "description", "horizon", "n_runs", "seed", "metrics", "hooks", "quick", "scenarios", "policies", "paper", "n_checkpoints"}
_SCENARIO_KEYS = {"name", "environment", "params", "horizon", "horizons", "n_runs", "policies", "policy_params", "policy_variants", "blocks", "runner", "loglog", "quick",
                  "description", "metrics"}
_POLICY_KEYS = {"label", "policy", "params"}


@dataclass(frozen=True)
class PolicySpec:
    label: str
    policy: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    environment: str | None
    params: dict[str, Any]
    horizons: tuple[int, ...]
    n_runs: int
    policies: tuple[PolicySpec, ...]
    runner: str | None = None
    loglog: bool = False
    description: str = ""
    metrics: tuple[str, ...] | None = None
    #: ``{parameter: [values]}``: the unit plays one block of ``n_runs`` runs per value, each with seeds of its own.
    blocks: dict[str, list] = field(default_factory=dict)

    @property
    def sweep(self) -> bool:
        """Whether the scenario runs several horizons (its units are named ``NAME:T=...``)."""
        return len(self.horizons) > 1

    def unit_name(self, horizon: int) -> str:
        return f"{self.name}:T={horizon}" if self.sweep else self.name


@dataclass(frozen=True)
class PaperValue:
    scenario: str
    policy: str
    metric: str
    value: float
    source: str = ""


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    title: str
    description: str
    seed: int
    metrics: tuple[str, ...]
    scenarios: tuple[ScenarioSpec, ...]
    hooks: tuple[str, ...] = ()
    paper: tuple[PaperValue, ...] = ()
    quick: bool = False
    n_checkpoints: int = 200
    source: dict = field(default_factory=dict, compare=False, repr=False)


def _fail(where: str, message: str) -> None:
    raise InvalidParameterError(f"Config error in {where}: {message}")


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(where, f"must be a positive integer. Got {value!r} instead.")
    return value


def _check_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        _fail(where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")


for _path in sorted(CONFIG_DIR.glob("*.toml")):
    REPRODUCTIONS.register(_path, name=_path.stem, description=str(tomllib.loads(_path.read_text()).get("title", _path.stem)))


def builtin_configs() -> dict[str, Path]:
    """The reproductions shipped with genbandit: name -> config path."""
    return {name: path for name, path, _ in REPRODUCTIONS.items()}


def load_config(source: str | Path | dict, *, quick: bool = False, check: bool = True) -> ExperimentConfig:
    """Read and validate a config from a TOML path, a built-in name or a dict; apply ``quick``.

    With ``check`` (the default) every name in it is checked too (:func:`check_names`).
    """
    if isinstance(source, dict):
        raw, where = copy.deepcopy(source), "config"
    else:
        path = Path(source)
        if not path.exists():
            if str(source) not in REPRODUCTIONS:
                raise InvalidParameterError(f"No config file {str(source)!r}. {REPRODUCTIONS.unknown(str(source))}")
            path = REPRODUCTIONS.get(str(source))
        raw, where = read_toml(path, "Config"), str(path)
    config = _parse(raw, where, quick)
    if check:
        check_names(config, where)
    return config


def _import_target(target: str, at: str) -> object:
    module, _, name = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name, None)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise  # the module exists but needs a package that is missing
        obj = None
    if obj is None:
        _fail(at, f"{target!r} is not an importable 'module:function'.")
    return obj


#: Scenario ``params`` that set how many runs a unit plays rather than the environment:
#: ``max_rounds_per_unit`` (runs at horizon T are ``min(n_runs, max(min_runs, max_rounds_per_unit // T))``,
#: so the longest horizons of a sweep run fewer instances) and ``min_runs`` (default 2).
RUN_BUDGET_KEYS = ("max_rounds_per_unit", "min_runs")


def _check_params(kind: str, name: str, cls: type, params: dict, at: str) -> None:
    signature = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in signature.values()):
        return
    accepted = [p for p in signature if p != "self"]
    for param in params:
        if param not in accepted:
            close = difflib.get_close_matches(param, accepted, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            _fail(at, f"the {kind} {name!r} has no parameter {param!r}{hint} Its parameters: {', '.join(accepted)}.")


def _named(registry, name: str, at: str):
    try:
        return registry.get(name)
    except InvalidParameterError as exc:
        _fail(at, str(exc))


def check_names(config: ExperimentConfig, where: str = "config") -> None:
    """Refuse, before any unit runs, a config naming an unknown environment, policy, parameter, metric, runner or hook."""
    for hook in config.hooks:
        _import_target(hook, f"{where}: hooks")  # importing a family module also registers its metrics
    for scenario in config.scenarios:
        at = f"{where}: scenario {scenario.name!r}"
        declared: tuple[str, ...] | None = ()  # metrics and params a custom runner computes or reads itself
        runner_params: tuple[str, ...] | None = ()
        runner_policies: tuple[str, ...] = ()  # peers a custom runner builds itself (another package's router)
        if scenario.runner:
            runner = _import_target(scenario.runner, f"{at}: runner")
            declared, runner_params = getattr(runner, "metrics", None), getattr(runner, "params", None)
            runner_policies = getattr(runner, "policies", ())
        if scenario.environment:
            env_cls = _named(ENVIRONMENTS, scenario.environment, f"{at}: environment")
            if runner_params is not None:
                params = {k: v for k, v in {**scenario.params, **scenario.blocks}.items() if k not in (*runner_params, *RUN_BUDGET_KEYS)}
                _check_params("environment", scenario.environment, env_cls, params, f"{at}: params")
        for spec in scenario.policies:
            if spec.policy in runner_policies:
                continue
            cls = _named(POLICIES, spec.policy, f"{at}: policy {spec.label!r}")
            _check_params("policy", spec.policy, cls, spec.params, f"{at}: policy {spec.label!r} params")
        for metric in scenario.metrics or config.metrics:
            if metric not in METRICS and declared is not None and metric not in declared:
                _fail(f"{at}: metrics", METRICS.unknown(metric))
    labels = {spec.label for scenario in config.scenarios for spec in scenario.policies}
    scenarios = {scenario.name for scenario in config.scenarios}
    for value in config.paper:
        if value.scenario not in scenarios or value.policy not in labels:
            _fail(f"{where}: paper", f"{value.scenario!r} / {value.policy!r} is not a configured scenario / policy label.")


def read_toml(path: Path, what: str) -> dict:
    """The TOML file at ``path`` as a dict, or an error that names ``what`` it was meant to be."""
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameterError(f"{what} {path} is not valid TOML: {exc}") from exc


def _parse(raw: dict, where: str, quick: bool) -> ExperimentConfig:
    _check_keys(raw, _TOP_KEYS, where)
    for key in ("name", "scenarios", "policies"):
        if key not in raw:
            _fail(where, f"the key '{key}' is required.")
    top = dict(raw)
    if quick:
        top.update(raw.get("quick", {}))
    horizon = _positive_int(top.get("horizon", 1000), f"{where}: horizon")
    n_runs = _positive_int(top.get("n_runs", 10), f"{where}: n_runs")
    seed = top.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        _fail(where, f"seed must be a non-negative integer. Got {seed!r} instead.")

    policies: dict[str, PolicySpec] = {}
    for i, entry in enumerate(raw["policies"]):
        at = f"{where}: policies[{i}]"
        if not isinstance(entry, dict):
            _fail(at, "must be a table.")
        _check_keys(entry, _POLICY_KEYS, at)
        label = entry.get("label") or entry.get("policy")
        if not label:
            _fail(at, "needs a 'label' or a 'policy'.")
        if label in policies:
            _fail(at, f"the label {label!r} is used twice.")
        if "policy" not in entry and label not in POLICIES.names():
            _fail(at, f"the label {label!r} is not a policy's exact name, and labels are never aliases: add policy = \"...\". {POLICIES.unknown(label)}")
        policies[label] = PolicySpec(label=label, policy=entry.get("policy", label), params=dict(entry.get("params", {})))

    scenarios = []
    seen = set()
    for i, entry in enumerate(raw["scenarios"]):
        at = f"{where}: scenarios[{i}]"
        if not isinstance(entry, dict):
            _fail(at, "must be a table.")
        _check_keys(entry, _SCENARIO_KEYS, at)
        spec = dict(entry)
        if quick:
            spec.update(entry.get("quick", {}))
        name = spec.get("name")
        if not name or name in seen:
            _fail(at, f"needs a unique 'name'. Got {name!r}.")
        seen.add(name)
        if not spec.get("environment") and not spec.get("runner"):
            _fail(at, "needs an 'environment' (or a custom 'runner').")
        horizons = spec.get("horizons", [spec.get("horizon", horizon)])
        if not isinstance(horizons, list) or not horizons:
            _fail(at, f"horizons must be a non-empty list. Got {horizons!r}.")
        horizons = tuple(_positive_int(h, f"{at}: horizon") for h in horizons)
        chosen = spec.get("policies", list(policies))
        missing = [p for p in chosen if p not in policies]
        if missing:
            _fail(at, f"unknown policy label(s) {', '.join(missing)}; configured: {', '.join(policies)}.")
        overrides, variants = spec.get("policy_params", {}), spec.get("policy_variants", {})
        for key, given in (("policy_params", overrides), ("policy_variants", variants)):
            unknown_overrides = [p for p in given if p not in chosen]
            if unknown_overrides:
                _fail(at, f"{key} names policies not in this scenario: {', '.join(unknown_overrides)}.")
        blocks = spec.get("blocks", {})
        if not isinstance(blocks, dict) or len(blocks) > 1 or not all(isinstance(v, list) and v for v in blocks.values()):
            _fail(at, f"blocks must name one environment parameter and a non-empty list of its values. Got {blocks!r}.")
        scenario_policies = tuple(
            PolicySpec(label=p, policy=variants.get(p, policies[p].policy), params={**policies[p].params, **overrides.get(p, {})}) for p in chosen
        )
        scenarios.append(
            ScenarioSpec(
                name=name,
                environment=spec.get("environment"),
                params=dict(spec.get("params", {})),
                horizons=horizons,
                n_runs=_positive_int(spec.get("n_runs", n_runs), f"{at}: n_runs"),
                policies=scenario_policies,
                runner=spec.get("runner"),
                loglog=bool(spec.get("loglog", False)),
                description=spec.get("description", ""),
                metrics=tuple(spec["metrics"]) if "metrics" in spec else None,
                blocks=dict(blocks),
            )
        )

    paper = []
    for i, entry in enumerate(raw.get("paper", [])):
        at = f"{where}: paper[{i}]"
        try:
            paper.append(PaperValue(str(entry["scenario"]), str(entry["policy"]), str(entry["metric"]), float(entry["value"]), str(entry.get("source", ""))))
        except (KeyError, TypeError, ValueError) as exc:
            _fail(at, f"needs scenario, policy, metric and a numeric value ({exc}).")

    metrics = top.get("metrics", ["final_regret"])
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        _fail(where, f"metrics must be a list of names. Got {metrics!r}.")
    hooks = top.get("hooks", [])
    return ExperimentConfig(
        name=str(raw["name"]),
        title=str(raw.get("title", raw["name"])),
        description=str(raw.get("description", "")),
        seed=seed,
        metrics=tuple(metrics),
        scenarios=tuple(scenarios),
        hooks=tuple(hooks),
        paper=tuple(paper),
        quick=quick,
        n_checkpoints=_positive_int(top.get("n_checkpoints", 200), f"{where}: n_checkpoints"),
        source=raw,
    )
