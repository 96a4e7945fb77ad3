"""The ``genbandit`` command: a thin adapter over :mod:`genbandit.experiments` and the registry."""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import shlex
import sys
from pathlib import Path

from . import __version__
from .core.optional import MissingExtraError, extra_for
from .core.registry import ENVIRONMENTS, METRICS, POLICIES, REPRODUCTIONS
from .core.validation import GenbanditError
from .experiments.config import load_config
from .experiments.evaluate import DEFAULT_CANDIDATES
from .experiments.runner import available_backends, run_experiment

log = logging.getLogger("genbandit")

#: Parts that add their own subcommands (``genbandit specdec ...``, ``genbandit serve``): each module
#: has ``register(subparsers)`` and imports its optional dependencies only when its command runs.
SUBCOMMAND_MODULES = ("genbandit.specdec.cli", "genbandit.router.cli")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="output folder (default: results/NAME, or results/NAME-quick)")
    parser.add_argument("--quick", action="store_true", help="the smaller version of the experiment (about a minute on two cores)")
    parser.add_argument("--backend", default="local", help="where units run: local (default) or ray")
    parser.add_argument("--address", help="Ray cluster address (with --backend ray)")
    parser.add_argument("--fresh", action="store_true", help="ignore units already written in the output folder")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _run(config_source: str, args: argparse.Namespace, command: str) -> int:
    config = load_config(config_source, quick=args.quick)
    out = args.out or Path("results") / (config.name + ("-quick" if args.quick else ""))
    options = {"address": args.address} if args.address else {}
    outcome = run_experiment(
        config, out, backend=args.backend, backend_options=options, resume=not args.fresh, progress=not args.no_progress, command=command
    )
    print(f"{config.name}: wrote {out}/report.md, summary.json, results.parquet and figures/")
    if outcome["failed"]:
        print(f"{config.name}: {len(outcome['failed'])} unit(s) failed; see the report's 'Failed units'.", file=sys.stderr)
        return 1
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="compare routing policies offline on your own table of model scores, or on a router's decision log")
    p.add_argument("table", nargs="?", help="full-information table: CSV, Parquet or JSONL, one row per prompt (and trial), one score column per model")
    p.add_argument("--log", help="decision log: JSONL in the documented format, or the router's SQLite store")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_CANDIDATES),
                   help="candidates: registered names (label=name to rename), experiment configs with [[policies]], or router configs "
                        f"(default: {' '.join(DEFAULT_CANDIDATES)})")
    p.add_argument("--orders", type=int, default=5, help="random orders of the prompts to replay (default 5)")
    p.add_argument("--horizon", type=int, help="requests per replay (default: every prompt once)")
    p.add_argument("--price", type=float, default=0.0, help="utility = score - price x cost (default 0: quality only)")
    p.add_argument("--prompt-column", default="prompt")
    p.add_argument("--score-columns", nargs="+", help="one per model (default: inferred, see docs/evaluate.md)")
    p.add_argument("--cost-columns", nargs="+", help="one per model, in the order of the score columns")
    p.add_argument("--category-column", help="a column of prompt categories, for a breakdown")
    p.add_argument("--models", nargs="+", help="the models of the decision log, in arm order (names a router store's arms)")
    p.add_argument("--embedding-model", default="all-MiniLM-L6-v2")
    p.add_argument("--draws", type=int, default=256, help="Monte Carlo draws for the probabilities of policies that do not expose them")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results") / "evaluate")
    p.add_argument("--no-progress", action="store_true")


def _evaluate(args: argparse.Namespace, command: str) -> int:
    from .experiments.evaluate import evaluate, parse_candidates

    if args.orders < 1:
        raise GenbanditError(f"--orders must be a positive int. Got {args.orders} instead.")
    outcome = evaluate(
        parse_candidates(args.policies), args.out, progress=not args.no_progress, command=command, table=args.table, log=args.log,
        n_orders=args.orders, seed=args.seed, price=args.price, prompt_column=args.prompt_column, score_columns=args.score_columns,
        cost_columns=args.cost_columns, category_column=args.category_column, models=args.models, embedding_model=args.embedding_model,
        n_draws=args.draws, horizon=args.horizon,
    )
    print(f"evaluate: wrote {args.out}/report.md, summary.json, results.parquet and figures/")
    chosen = next((r["policy"] for r in outcome["summary"] if r["scenario"] == "recommendation"), None)
    if chosen is not None:
        print(f"evaluate: recommended policy: {chosen}")
    if outcome["failed"]:
        print(f"evaluate: {len(outcome['failed'])} candidate(s) failed; see the report's 'Failed units'.", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="genbandit", description="Bandit algorithms for choosing among generative models, online.")
    parser.add_argument("--version", action="version", version=f"genbandit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an experiment config (TOML)")
    run.add_argument("config", help="path to a config file, or the name of a built-in one")
    _add_run_options(run)

    names = REPRODUCTIONS.names()
    rep = sub.add_parser("reproduce", help="reproduce a paper's experiments: " + ", ".join(names + ["all"]))
    rep.add_argument("name", help="which reproduction (or 'all')")
    _add_run_options(rep)

    _add_evaluate(sub)
    sub.add_parser("list", help="list policies, environments (with their parameters), metrics, reproductions and backends")
    for module in SUBCOMMAND_MODULES:
        try:
            plugin = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue  # that part is not in this installation
            raise
        plugin.register(sub)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    command = "genbandit " + " ".join(shlex.quote(a) for a in argv)
    try:
        if args.command == "list":
            _list()
            return 0
        if hasattr(args, "handler"):
            return int(args.handler(args) or 0)
        if args.command == "run":
            return _run(args.config, args, command)
        if args.command == "evaluate":
            return _evaluate(args, command)
        if args.name == "all":
            if args.out:
                parser.error("--out names one folder; 'reproduce all' writes results/NAME for each reproduction")
            return max(_run(name, args, command) for name in names)
        return _run(REPRODUCTIONS.canonical(args.name), args, command)
    except ModuleNotFoundError as exc:
        if not (exc.name and extra_for(exc.name)):
            raise
        print(f"genbandit: error: {MissingExtraError(exc.name, f'genbandit {args.command}')}", file=sys.stderr)
        return 2
    except GenbanditError as exc:
        print(f"genbandit: error: {exc}", file=sys.stderr)
        return 2


def _signature(cls: type) -> str:
    """``name=default, ...`` of a constructor, required parameters first without a default."""
    shown = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            shown.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return ", ".join(shown)


def _list() -> None:
    print("Policies:")
    for name, _cls, summary in POLICIES.items():
        print(f"  {name:<22} {summary}")
    print("\nEnvironments (parameters with defaults):")
    for name, cls, summary in ENVIRONMENTS.items():
        print(f"  {name:<22} {summary}\n  {'':<22} ({_signature(cls)})")
    print("\nMetrics:")
    for name, _fn, description in METRICS.items():
        print(f"  {name:<22} {description}")
    print("\nReproductions (genbandit reproduce NAME):")
    for name, _path, title in REPRODUCTIONS.items():
        print(f"  {name:<22} {title}")
    print("\nBackends: " + ", ".join(available_backends()))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
