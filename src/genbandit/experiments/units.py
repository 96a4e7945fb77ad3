"""Units of work: one (scenario, policy, horizon) cell of a grid, all its runs at once.

A unit is self-contained and picklable, so any backend can run it anywhere; its seeds depend
only on the config's seed and the unit's names, never on the order units run in, so results are
the same on every backend and after a resume.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.base import Environment, Policy
from ..core.registry import ENVIRONMENTS, METRICS, POLICIES
from ..core.simulator import SimulationResult, simulate
from ..core.validation import InvalidParameterError
from ..policies.classic import BestSingle
from .config import RUN_BUDGET_KEYS, PolicySpec, ScenarioSpec
from .metrics import compute_metric

__all__ = ["Unit", "UnitResult", "run_unit", "simulate_unit", "unit_result", "build_environment", "build_policy", "best_single_arm", "unit_runs",
           "stable_hash"]


def stable_hash(text: str) -> int:
    """A 32-bit hash of ``text`` that is the same in every process (unlike ``hash``)."""
    return zlib.crc32(text.encode("utf-8"))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


@dataclass(frozen=True)
class Unit:
    """One cell of an experiment grid."""

    experiment: str
    scenario: ScenarioSpec
    policy: PolicySpec
    horizon: int
    seed: int
    metrics: tuple[str, ...]
    n_checkpoints: int = 200

    @property
    def scenario_name(self) -> str:
        return self.scenario.unit_name(self.horizon)

    @property
    def unit_id(self) -> str:
        """A file-safe id that changes whenever anything that shapes the result changes."""
        fingerprint = json.dumps(
            [self.experiment, asdict(self.scenario), asdict(self.policy), self.horizon, self.seed, self.metrics, self.n_checkpoints],
            sort_keys=True,
            default=str,
        )
        return f"{_slug(self.scenario_name)}__{_slug(self.policy.label)}__{stable_hash(fingerprint):08x}"

    def seeds(self) -> tuple[np.random.SeedSequence, np.random.SeedSequence]:
        """(environment seed, policy seed). Every policy of a scenario sees the same environment draws."""
        scenario_key = [self.seed, stable_hash(self.scenario.name), self.horizon]
        return np.random.SeedSequence(scenario_key), np.random.SeedSequence(scenario_key + [stable_hash(self.policy.label)])


@dataclass
class UnitResult:
    """What a unit produced: checkpointed curves, per-run metric values and free-form extras.

    ``regret`` and ``reward`` are cumulative, ``(n_runs, len(rounds))``; ``metrics`` maps a name
    to a list of per-run values (or a single value for the unit); ``extras`` is any JSON a
    report hook needs (for example per-arm counts). ``error`` holds the traceback of a failure.
    """

    unit_id: str
    scenario: str
    policy: str
    horizon: int
    n_runs: int
    rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    regret: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    reward: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    metrics: dict[str, list[float]] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    wall_time: float = 0.0
    error: str | None = None

    @classmethod
    def from_simulation(cls, unit: Unit, result: SimulationResult, metrics: dict[str, Any], extras: dict | None = None) -> "UnitResult":
        return cls(
            unit_id=unit.unit_id,
            scenario=unit.scenario_name,
            policy=unit.policy.label,
            horizon=unit.horizon,
            n_runs=result.n_runs,
            rounds=result.rounds,
            regret=result.regret,
            reward=result.reward,
            metrics={k: np.atleast_1d(np.asarray(v, dtype=float)).tolist() for k, v in metrics.items()},
            extras=extras or {},
            wall_time=result.wall_time,
        )

    @classmethod
    def failure(cls, unit: Unit, error: str, wall_time: float = 0.0) -> "UnitResult":
        """The result of a unit that failed with ``error`` (a traceback, or a backend's message)."""
        return cls(
            unit_id=unit.unit_id,
            scenario=unit.scenario_name,
            policy=unit.policy.label,
            horizon=unit.horizon,
            n_runs=unit.scenario.n_runs,
            wall_time=wall_time,
            error=error,
        )

    def frame(self) -> pd.DataFrame:
        """Tidy rows: scenario, policy, horizon, run, round, regret, reward."""
        n_runs, n_points = self.regret.shape
        return pd.DataFrame(
            {
                "scenario": self.scenario,
                "policy": self.policy,
                "horizon": self.horizon,
                "run": np.repeat(np.arange(n_runs), n_points),
                "round": np.tile(self.rounds, n_runs),
                "regret": self.regret.ravel(),
                "reward": self.reward.ravel(),
            }
        )

    # ------------------------------------------------------------- storage
    def save(self, directory: Path) -> None:
        """Write ``<unit_id>.parquet`` (curves) and then ``<unit_id>.json`` (the completion mark)."""
        directory.mkdir(parents=True, exist_ok=True)
        if self.error is None:
            self.frame().to_parquet(directory / f"{self.unit_id}.parquet", index=False)
        meta = {k: v for k, v in asdict(self).items() if k not in ("rounds", "regret", "reward")}
        tmp = directory / f"{self.unit_id}.json.tmp"
        tmp.write_text(json.dumps(meta, default=_json_default))
        tmp.replace(directory / f"{self.unit_id}.json")

    @classmethod
    def load(cls, directory: Path, unit_id: str) -> "UnitResult | None":
        meta_path = directory / f"{unit_id}.json"
        if not meta_path.exists():
            return None
        meta = json.loads(meta_path.read_text())
        result = cls(**meta)
        if result.error is None:
            frame = pd.read_parquet(directory / f"{unit_id}.parquet")
            n_runs = int(frame["run"].max()) + 1
            result.rounds = frame["round"].to_numpy()[: len(frame) // n_runs]
            result.regret = frame["regret"].to_numpy().reshape(n_runs, -1)
            result.reward = frame["reward"].to_numpy().reshape(n_runs, -1)
        return result


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _import(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def unit_runs(unit: Unit) -> int:
    """How many runs ``unit`` plays: the scenario's ``n_runs``, capped by its run budget."""
    params = unit.scenario.params
    n = unit.scenario.n_runs
    budget = params.get("max_rounds_per_unit")
    if budget:
        n = min(n, max(int(params.get("min_runs", 2)), int(budget) // unit.horizon))
    return max(n, 1)


def build_environment(scenario: ScenarioSpec, horizon: int) -> Environment:
    """The scenario's environment; ``horizon`` is passed when its constructor takes one."""
    cls = ENVIRONMENTS.get(scenario.environment)
    params = {k: v for k, v in scenario.params.items() if k not in RUN_BUDGET_KEYS}
    if "horizon" in inspect.signature(cls.__init__).parameters and "horizon" not in params:
        params["horizon"] = horizon
    return ENVIRONMENTS.create(scenario.environment, **params)


def best_single_arm(env: Environment) -> int:
    """The arm with the highest mean reward: the environment's ``best_single_arm`` where it has one
    (the prompt replays: the best model on average over the table), else the argmax of its
    ``mean_rewards()`` averaged over runs at the first round (stationary environments)."""
    if hasattr(env, "best_single_arm"):
        return int(env.best_single_arm)
    means = env.reset().mean_rewards()
    if means is None:
        raise InvalidParameterError(f"best-single needs an explicit 'arm' on {type(env).__name__}, which reports no mean rewards.")
    return int(np.asarray(means, dtype=float).mean(axis=0).argmax())


def build_policy(spec: PolicySpec, env: Environment, horizon: int) -> Policy:
    """The policy, with constructor arguments the spec leaves out filled in from the environment.

    ``n_arms``, ``n_features`` and ``horizon`` always; then whatever the environment's public
    ``policy_arguments()`` offers (an action set, a maximum draft length, static means...) for the
    arguments the policy's constructor takes. A string parameter that names one of those
    arguments (``L = "L1"``) is replaced by its value. An offered value that costs a computation
    is offered as a function, called only for a policy that takes it.
    A ``best-single`` policy without an ``arm`` gets :func:`best_single_arm`.
    """
    cls = POLICIES.get(spec.policy)
    accepted = inspect.signature(cls.__init__).parameters
    offered = {"n_arms": env.n_arms, "n_features": env.context_dim, "horizon": horizon}
    if hasattr(env, "policy_arguments"):
        offered.update(env.policy_arguments())
    value = lambda name: offered[name]() if callable(offered[name]) else offered[name]  # noqa: E731
    params = {k: value(v) if isinstance(v, str) and v in offered else v for k, v in spec.params.items()}
    for name in offered:
        if name in accepted and name not in params and offered[name] is not None:
            params[name] = value(name)
    if issubclass(cls, BestSingle) and "arm" not in params:
        params["arm"] = best_single_arm(env)
    return POLICIES.create(spec.policy, **params)


def _shown_params(policy: Policy) -> dict:
    """The policy's scalar hyperparameters, JSON-safe (arrays such as static means left out)."""
    shown = {}
    for key, value in policy.get_params().items():
        if key != "seed" and (value is None or isinstance(value, (bool, int, float, str, np.integer, np.floating))):
            shown[key] = value.item() if isinstance(value, np.generic) else value
    return shown


def simulate_unit(unit: Unit, progress: bool = False, *, block: int | None = None) -> tuple[Environment, Policy, SimulationResult]:
    """Build the unit's environment and policy and run them through the simulator: (env, policy, result).

    An environment that ends its runs itself (a ``done()`` method, e.g. a response that is complete)
    plays until every run is done, within its ``max_rounds``; the scenario's horizon then only
    names the unit. ``block`` is the index of one block of a scenario with ``blocks``: the
    environment gets that block's parameter value, and the block its own environment and policy
    seeds, spawned from the unit's.
    """
    n_runs = unit_runs(unit)
    scenario, seeds = unit.scenario, unit.seeds()
    if block is not None:
        (name, values), = scenario.blocks.items()
        scenario = replace(scenario, params={**scenario.params, name: values[block]})
        seeds = tuple(seed.spawn(len(values))[block] for seed in seeds)
    env = build_environment(scenario, unit.horizon)
    stop = getattr(env, "done", None)
    if hasattr(env, "policy_arguments") or stop is not None:  # arguments and bounds that depend on the scenario's draws
        env.reset(n_runs, seed=seeds[0])
    policy = build_policy(unit.policy, env, unit.horizon)
    result = simulate(
        env,
        policy,
        unit.horizon if stop is None else env.max_rounds,
        n_runs=n_runs,
        seed=seeds,
        n_checkpoints=unit.n_checkpoints,
        progress=progress,
        description=f"{unit.scenario_name} / {unit.policy.label}",
        stop=stop,
        time_policy=any(getattr(METRICS.get(name), "times_policy", False) for name in unit.metrics),
    )
    return env, policy, result


def unit_result(unit: Unit, env: Environment, policy: Policy, result: SimulationResult) -> UnitResult:
    """The unit's metrics and extras: the pulls (summed and per run), the mean over runs of every
    ``Step.info`` key at the checkpoints (``info_curves``), the policy's scalar hyperparameters and
    whatever the environment's and the policy's public ``diagnostics()`` report. A metric that does not apply
    to the policy (``spend_over_budget`` of a policy without a budget) gives ``None`` and is left out."""
    metrics = {name: compute_metric(name, result, env, policy) for name in unit.metrics}
    metrics = {name: value for name, value in metrics.items() if value is not None}
    extras = {
        "counts": result.counts.sum(axis=0).tolist(),
        "counts_per_run": result.counts.tolist(),
        "info_curves": {key: curve.mean(axis=0).tolist() for key, curve in result.curves.items()},
        "params": _shown_params(policy),
    }
    for source in (env, policy):
        if hasattr(source, "diagnostics"):
            extras.update(source.diagnostics())
    return UnitResult.from_simulation(unit, result, metrics, extras=extras)


def _blocks_result(unit: Unit, progress: bool) -> UnitResult:
    """A unit of a scenario with ``blocks``: every block through :func:`simulate_unit` and :func:`unit_result`, the
    runs of all blocks side by side (metrics, curves and pulls per run; ``extras[parameter]`` the block value of each run)."""
    (name, values), = unit.scenario.blocks.items()
    parts = [unit_result(unit, *simulate_unit(unit, progress, block=i)) for i in range(len(values))]
    if any(part.rounds.shape != parts[0].rounds.shape or np.any(part.rounds != parts[0].rounds) for part in parts):
        raise InvalidParameterError(f"The blocks of scenario {unit.scenario.name!r} play different horizons; their runs cannot be put side by side.")
    counts = [run for part in parts for run in part.extras["counts_per_run"]]
    return UnitResult(
        unit_id=unit.unit_id, scenario=unit.scenario_name, policy=unit.policy.label, horizon=unit.horizon, n_runs=len(counts),
        rounds=parts[0].rounds, regret=np.concatenate([part.regret for part in parts]), reward=np.concatenate([part.reward for part in parts]),
        metrics={key: [v for part in parts for v in part.metrics[key]] for key in parts[0].metrics},
        extras={"counts": np.sum(counts, axis=0).tolist(), "counts_per_run": counts, name: [v for v, part in zip(values, parts) for _ in range(part.n_runs)],
                "params": parts[0].extras["params"]},
        wall_time=sum(part.wall_time for part in parts),
    )  # fmt: skip


def run_unit(unit: Unit, progress: bool = False) -> UnitResult:
    """Run one unit (:func:`simulate_unit`, then :func:`unit_result`, or the scenario's own runner);
    a failure is returned as a result with ``error`` set, never raised."""
    start = time.perf_counter()
    try:
        if unit.scenario.runner:
            return _import(unit.scenario.runner)(unit, progress=progress)
        if unit.scenario.blocks:
            return _blocks_result(unit, progress)
        return unit_result(unit, *simulate_unit(unit, progress))
    except Exception:  # noqa: BLE001 - a unit's failure is data: it is reported, not raised
        return UnitResult.failure(unit, traceback.format_exc(), time.perf_counter() - start)
