"""The Ray backend on a local two-CPU Ray instance: identical results, failures, retries, resume."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import ray

from genbandit.experiments.config import load_config
from genbandit.experiments.runner import BACKENDS, plan_units, run_experiment
from genbandit.experiments.units import UnitResult, run_unit

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
MODULE = __name__  # how workers import the custom runners below (tests/ is on their PYTHONPATH)

TINY = {
    "name": "tiny",
    "horizon": 300,
    "n_runs": 5,
    "seed": 7,
    "metrics": ["final_regret", "optimal_rate"],
    "n_checkpoints": 20,
    "scenarios": [
        {"name": "bern-3", "environment": "bernoulli-arms", "params": {"means": [0.2, 0.5, 0.6]}},
        {"name": "bern-2", "environment": "bernoulli-arms", "params": {"means": [0.4, 0.6]}, "horizons": [50, 150]},
    ],
    "policies": [{"label": "UCB1"}, {"label": "Thompson"}, {"label": "eps", "policy": "epsilon-greedy", "params": {"epsilon": 0.1}}],
}


# ------------------------------------------------------------------ custom runners run by workers
def _as_plain(unit):
    """The same unit without its custom runner and its test-only params, run normally."""
    params = {k: v for k, v in unit.scenario.params.items() if k != "marker"}
    plain = dataclasses.replace(unit, scenario=dataclasses.replace(unit.scenario, runner=None, environment="bernoulli-arms", params=params))
    result = run_unit(plain)
    result.unit_id = unit.unit_id
    return result


def dies_once(unit, progress=False):
    """Kills its worker the first time it runs (a crash, an OOM kill), then runs normally."""
    marker = Path(unit.scenario.params["marker"]) / f"{unit.unit_id}.started"
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return _as_plain(unit)


def always_dies(unit, progress=False):
    os._exit(1)


def raises(unit, progress=False):
    raise RuntimeError("planted failure")


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module", autouse=True)
def local_ray():
    path = os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def _bytes(out: Path, name: str) -> bytes:
    return (out / name).read_bytes()


def _config(**changes):
    raw = json.loads(json.dumps(TINY))
    raw.update(changes)
    return load_config(raw)


# ------------------------------------------------------------------ tests
def test_ray_results_identical_to_local(tmp_path):
    config = _config()
    local = run_experiment(config, tmp_path / "local", backend="local", progress=False)
    remote = run_experiment(config, tmp_path / "ray", backend="ray", progress=False)
    assert local["failed"] == remote["failed"] == []
    assert len(plan_units(config)) == 9
    assert _bytes(tmp_path / "local", "results.parquet") == _bytes(tmp_path / "ray", "results.parquet")
    assert _bytes(tmp_path / "local", "summary.json") == _bytes(tmp_path / "ray", "summary.json")
    assert "backend `ray`" in (tmp_path / "ray" / "report.md").read_text()
    # each unit's stored curves too, not just the merged table
    for unit in plan_units(config):
        a, b = UnitResult.load(tmp_path / "local" / "units", unit.unit_id), UnitResult.load(tmp_path / "ray" / "units", unit.unit_id)
        assert (a.regret == b.regret).all() and a.metrics == b.metrics


def test_failing_units_are_reported_and_the_rest_completes(tmp_path):
    scenarios = TINY["scenarios"] + [
        {"name": "raises", "runner": f"{MODULE}:raises", "params": {}, "policies": ["UCB1"]},
        {"name": "dies", "runner": f"{MODULE}:always_dies", "params": {}, "policies": ["UCB1"]},
        # a bad hyperparameter fails inside the unit, like any bug in a policy
        {"name": "bad-param", "environment": "bernoulli-arms", "params": {"means": [0.2, 0.5]}, "policies": ["eps"], "policy_params": {"eps": {"epsilon": -1.0}}},
    ]
    config = _config(scenarios=scenarios)
    outcome = run_experiment(config, tmp_path, backend="ray", backend_options={"max_retries": 1}, progress=False)
    failed = {uid.split("__")[0] for uid in outcome["failed"]}
    assert failed == {"raises", "dies", "bad-param"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {(r["scenario"], r["policy"]) for r in summary if r["metric"] == "final_regret"} == {
        (s, p) for s in ("bern-3", "bern-2:T=50", "bern-2:T=150") for p in ("UCB1", "Thompson", "eps")
    }
    report = (tmp_path / "report.md").read_text()
    assert "## Failed units" in report
    assert "RuntimeError: planted failure" in report
    assert "the Ray task died 2 times (max_retries=1)" in report
    assert "epsilon" in report.split("## Failed units")[1]
    died = UnitResult.load(tmp_path / "units", next(u for u in outcome["failed"] if u.startswith("dies")))
    assert "WorkerCrashedError" in died.error


def test_a_task_that_dies_is_retried(tmp_path):
    (tmp_path / "markers").mkdir()
    crashy = {"name": "crashy", "runner": f"{MODULE}:dies_once", "params": {"means": [0.3, 0.6], "marker": str(tmp_path / "markers")}, "policies": ["UCB1"]}
    outcome = run_experiment(_config(scenarios=[crashy]), tmp_path / "out", backend="ray", backend_options={"max_retries": 2}, progress=False)
    assert outcome["failed"] == []
    assert len(list((tmp_path / "markers").iterdir())) == 1  # the unit crashed once ...
    # ... and its retry gave exactly what an uninterrupted run gives
    plain = _config(scenarios=[{"name": "crashy", "environment": "bernoulli-arms", "params": {"means": [0.3, 0.6]}, "policies": ["UCB1"]}])
    run_experiment(plain, tmp_path / "plain", backend="local", progress=False)
    assert _bytes(tmp_path / "out", "results.parquet") == _bytes(tmp_path / "plain", "results.parquet")


def test_interrupted_sweep_resumes_with_only_the_rest(tmp_path, monkeypatch):
    config = _config()
    original_save = UnitResult.save
    saved: list[str] = []

    def save_then_interrupt(self, directory):
        original_save(self, directory)
        saved.append(self.unit_id)
        if len(saved) == 3:
            raise KeyboardInterrupt  # Ctrl-C while the sweep is streaming back

    monkeypatch.setattr(UnitResult, "save", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, tmp_path / "ray", backend="ray", progress=False)
    monkeypatch.setattr(UnitResult, "save", original_save)
    units_dir = tmp_path / "ray" / "units"
    written = {p.stem: p.stat().st_mtime_ns for p in units_dir.glob("*.json")}
    assert sorted(written) == sorted(saved)

    ran: list[str] = []
    backend = BACKENDS["ray"]

    def counting(units, options):
        ran.extend(u.unit_id for u in units)
        yield from backend(units, options)

    monkeypatch.setitem(BACKENDS, "ray", counting)
    outcome = run_experiment(config, tmp_path / "ray", backend="ray", progress=False)
    assert outcome["failed"] == []
    assert sorted(ran) == sorted(u.unit_id for u in plan_units(config) if u.unit_id not in written)
    assert {p.stem: p.stat().st_mtime_ns for p in units_dir.glob("*.json") if p.stem in written} == written
    assert "3 units resumed from disk" in (tmp_path / "ray" / "report.md").read_text()
    run_experiment(config, tmp_path / "local", backend="local", progress=False)
    assert _bytes(tmp_path / "local", "results.parquet") == _bytes(tmp_path / "ray", "results.parquet")
    assert _bytes(tmp_path / "local", "summary.json") == _bytes(tmp_path / "ray", "summary.json")


def test_cli_backend_ray(tmp_path, capsys):
    from genbandit.cli import main

    config = tmp_path / "tiny.toml"
    config.write_text(
        'name = "tiny"\nhorizon = 200\nn_runs = 3\n[[scenarios]]\nname = "b"\nenvironment = "bernoulli-arms"\n'
        "params = { means = [0.3, 0.7] }\n[[policies]]\nlabel = \"UCB1\"\n"
    )
    assert main(["run", str(config), "--backend", "ray", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert "backend `ray`" in (tmp_path / "out" / "report.md").read_text()


def test_missing_ray_says_how_to_install(tmp_path, monkeypatch):
    from genbandit.core.optional import MissingExtraError
    from genbandit.experiments import ray_backend

    monkeypatch.setitem(sys.modules, "ray", None)  # what an installation without Ray sees
    with pytest.raises(MissingExtraError, match=re.escape('pip install -e ".[ray]"')):
        list(ray_backend.ray_backend(plan_units(_config()), {}))


def test_workers_import_the_modules_that_registered_a_plugin_policy(tmp_path):
    import ray_plugin  # registers "ray-test-plugin-random" in this process only

    scenario = {"name": "plug", "environment": "bernoulli-arms", "params": {"means": [0.3, 0.6]}}
    config = _config(scenarios=[scenario], policies=[{"label": "plugin", "policy": ray_plugin.PluginRandom.name}])
    outcome = run_experiment(config, tmp_path / "ray", backend="ray", progress=False)
    assert outcome["failed"] == []
    run_experiment(config, tmp_path / "local", backend="local", progress=False)
    assert _bytes(tmp_path / "local", "results.parquet") == _bytes(tmp_path / "ray", "results.parquet")
