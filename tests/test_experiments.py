"""Experiments end to end: a tiny config through the CLI, the output schema, resume and config errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from genbandit import REPRODUCTIONS, InvalidParameterError, __version__
from genbandit.cli import main
from genbandit.core.optional import MissingExtraError, import_optional
from genbandit.experiments import load_config, plan_units, run_experiment

TINY = """
name = "tiny"
title = "A tiny experiment"
horizon = 300
n_runs = 4
seed = 3
metrics = ["final_regret", "pulls_per_second", "optimal_rate"]
quick = { horizon = 100 }

[[scenarios]]
name = "two-arms"
environment = "bernoulli"
params = { means = [0.2, 0.8] }
loglog = true

[[scenarios]]
name = "sweep"
environment = "gaussian"
params = { means = [0.0, 0.5, 1.0] }
horizons = [50, 100]
policies = ["UCB1"]
policy_params = { UCB1 = { alpha = 1.0 } }

[[policies]]
label = "UCB1"

[[policies]]
label = "TS"
policy = "Gaussian-Thompson"
params = { sigma = 0.5 }

[[paper]]
scenario = "two-arms"
policy = "UCB1"
metric = "final_regret"
value = 9.5
source = "made up for the test"
"""


@pytest.fixture()
def config_path(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_cli_runs_a_tiny_config_end_to_end(config_path, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(config_path), "--out", str(out), "--no-progress"]) == 0
    assert (out / "report.md").exists() and (out / "results.parquet").exists() and (out / "summary.json").exists()
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert figures == ["final-regret-vs-T-sweep.png", "regret-sweep.png", "regret-two-arms.png"]
    assert all((out / "figures" / f).read_bytes()[:4] == b"\x89PNG" for f in figures)

    frame = pd.read_parquet(out / "results.parquet")
    assert list(frame.columns) == ["scenario", "policy", "horizon", "run", "round", "regret", "reward"]
    assert set(frame["scenario"]) == {"two-arms", "sweep:T=50", "sweep:T=100"}
    assert frame.groupby(["scenario", "policy"])["run"].nunique().eq(4).all()

    summary = json.loads((out / "summary.json").read_text())
    assert all(set(rec) == {"scenario", "policy", "metric", "mean", "stderr", "n_runs"} for rec in summary)
    regret = {(r["scenario"], r["policy"]): r for r in summary if r["metric"] == "final_regret"}
    assert set(regret) == {("two-arms", "UCB1"), ("two-arms", "TS"), ("sweep:T=50", "UCB1"), ("sweep:T=100", "UCB1")}
    assert regret[("two-arms", "UCB1")]["n_runs"] == 4 and regret[("two-arms", "UCB1")]["stderr"] is not None
    # The summary agrees with the curves it came from.
    final = frame[(frame.scenario == "two-arms") & (frame.policy == "UCB1") & (frame["round"] == 300)]
    assert final["regret"].mean() == pytest.approx(regret[("two-arms", "UCB1")]["mean"])

    report = (out / "report.md").read_text()
    assert "# A tiny experiment" in report and "figures/regret-two-arms.png" in report
    assert "9.5 (made up for the test)" in report and "alpha=1.0" in report


def test_quick_mode_and_resume(config_path, tmp_path):
    config = load_config(config_path, quick=True)
    assert config.scenarios[0].horizons == (100,) and config.quick
    out = tmp_path / "out"
    first = run_experiment(config, out, progress=False)
    before = (out / "results.parquet").read_bytes()
    second = run_experiment(config, out, progress=False)
    assert first["summary"] == [r for r in second["summary"]]
    assert (out / "results.parquet").read_bytes() == before
    assert "units resumed from disk" in (out / "report.md").read_text()


def test_units_are_seeded_by_name_not_order(config_path):
    units = plan_units(load_config(config_path))
    by_id = {u.unit_id: u for u in units}
    assert len(by_id) == len(units) == 4
    env_seeds = {u.policy.label: u.seeds()[0].entropy for u in units if u.scenario.name == "two-arms"}
    assert env_seeds["UCB1"] == env_seeds["TS"]  # common random numbers across policies


def test_a_failing_unit_is_reported_not_raised(tmp_path):
    raw = {
        "name": "broken",
        "horizon": 20,
        "n_runs": 2,
        "scenarios": [{"name": "ok", "environment": "bernoulli", "params": {"means": [0.1, 0.9]}}, {"name": "bad", "environment": "bernoulli", "params": {"means": [0.1, 0.9]}, "policies": ["KL"]}],
        "policies": [{"label": "UCB1"}, {"label": "KL", "policy": "KL-UCB", "params": {"c": -1.0}}],
    }
    raw["scenarios"][0]["policies"] = ["UCB1"]
    outcome = run_experiment(load_config(raw), tmp_path / "o", progress=False)
    assert len(outcome["failed"]) == 1
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Failed units" in report and "The 'c' parameter of KLUCB" in report
    assert any(r["scenario"] == "ok" for r in outcome["summary"])


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"horizon": 0}, "horizon: must be a positive integer"),
        ({"colour": "red"}, "unknown key\\(s\\) colour"),
        ({"scenarios": [{"name": "s", "environment": "bernoulli", "policies": ["nope"]}]}, "unknown policy label\\(s\\) nope"),
        ({"scenarios": [{"name": "s"}]}, "needs an 'environment'"),
    ],
)
def test_config_errors_are_clear(patch, message):
    raw = {"name": "x", "scenarios": [{"name": "s", "environment": "bernoulli"}], "policies": [{"label": "UCB1"}]}
    raw.update(patch)
    with pytest.raises(InvalidParameterError, match=message):
        load_config(raw)


def _scenario(**extra):
    return {"name": "s", "environment": "bernoulli", "params": {"means": [0.2, 0.8]}, **extra}


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"scenarios": [_scenario(environment="bernouli-arms")]}, "Unknown environment 'bernouli-arms'; did you mean 'bernoulli-arms'\\?"),
        ({"scenarios": [_scenario(params={"meens": [0.2, 0.8]})]}, "'bernoulli' has no parameter 'meens'; did you mean 'means'\\?"),
        ({"policies": [{"label": "T", "policy": "Thompsen"}]}, "Unknown policy 'Thompsen'; did you mean 'Thompson'\\?"),
        ({"policies": [{"policy": "UCB1", "params": {"alpah": 1.0}}]}, "'UCB1' has no parameter 'alpah'; did you mean 'alpha'\\?"),
        ({"metrics": ["final_regert"]}, "Unknown metric 'final_regert'; did you mean 'final_regret'\\?"),
        ({"policies": [{"label": "KLUCB"}]}, "label 'KLUCB' is not a policy's exact name.*did you mean 'KL-UCB'\\?"),
        ({"hooks": ["genbandit.experiments.classic:nothing"]}, "'genbandit.experiments.classic:nothing' is not an importable"),
        ({"scenarios": [_scenario(runner="genbandit.no_such_module:run")]}, "'genbandit.no_such_module:run' is not an importable"),
    ],
)
def test_every_name_is_checked_at_load_with_the_nearest_suggested(patch, message):
    raw = {"name": "x", "scenarios": [_scenario()], "policies": [{"label": "UCB1"}], **patch}
    with pytest.raises(InvalidParameterError, match=message):
        load_config(raw)


def test_a_label_with_a_policy_is_only_a_label():
    config = load_config({"name": "x", "scenarios": [_scenario()], "policies": [{"label": "KLUCB", "policy": "UCB1"}]})
    assert [(p.label, p.policy) for p in config.scenarios[0].policies] == [("KLUCB", "UCB1")]


def test_builtin_reproductions_pass_the_name_checks():
    for name in REPRODUCTIONS.names():
        load_config(name)
        load_config(name, quick=True)


def test_run_refuses_a_typo_before_any_unit_runs(tmp_path, capsys):
    path = tmp_path / "typo.toml"
    path.write_text(TINY.replace('environment = "gaussian"', 'environment = "gausian"'))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "did you mean 'gaussian-arms'?" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["reproduce", "clasic"]) == 2
    assert "did you mean 'classic'?" in capsys.readouterr().err


def test_a_missing_extra_names_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "obp", None)  # what Python does for a module that is not installed
    with pytest.raises(MissingExtraError, match=re.escape('The Open Bandit Dataset sample needs the \'obp\' module, which is not installed: pip install -e ".[smooth]"')):
        import_optional("obp", "The Open Bandit Dataset sample")


def test_cli_errors_list_and_version(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "No config file" in capsys.readouterr().err
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "UCB1" in listing and "bernoulli-arms" in listing and "classic" in listing and "local" in listing
    assert "(means, seed=None)" in listing and "final_regret" in listing and "optimal_rate" in listing
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"genbandit {__version__}"


def test_console_script_is_installed():
    proc = subprocess.run([sys.executable, "-m", "genbandit.cli", "--help"], capture_output=True, text=True, check=True)
    assert "reproduce" in proc.stdout
