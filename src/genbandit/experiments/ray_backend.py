"""The Ray backend: every unit of a grid is one Ray task, results stream back as they finish.

``genbandit run CONFIG --backend ray [--address ADDR]`` (or ``reproduce``) and
``run_experiment(config, out, backend="ray", backend_options={...})`` use it. Units are
self-contained and seeded from their names only (see :mod:`genbandit.experiments.units`), so a
unit gives the same numbers bit for bit on any worker, in any order, as on the local backend.

Failure handling:

- a task whose worker dies (a crash, ``os._exit``, the node lost, the OOM killer) is retried by
  Ray up to ``max_retries`` times;
- a unit that raises is returned by :func:`~genbandit.experiments.units.run_unit` as a result
  with ``error`` set, and a task that is still dead after its retries becomes such a result
  here: both are reported in the report's "Failed units" and the rest of the sweep goes on;
- the runner writes each result to ``OUT/units/`` the moment it arrives, so an interrupted sweep
  resumes from the units already there; on an interrupt the tasks still queued are cancelled.

Options (``backend_options``; the CLI passes ``address``):

``address``
    A Ray address (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``). Without one, an
    already initialised Ray is used as it is; otherwise ``ray.init()`` resolves ``RAY_ADDRESS``
    or the cluster last started on this machine with ``ray start``, or starts a local instance
    that is shut down when the sweep ends.
``max_retries``
    Times a task whose worker died is retried (default 3).
``num_cpus``
    CPUs each task reserves (default 1: a unit is one vectorised simulation on one core).
``max_in_flight``
    Tasks submitted at once (default: four per cluster CPU, at least 8), so that a grid of a
    million units does not put a million tasks in the scheduler.
``local_cpus``
    CPUs of a local instance started here (default: all of this machine's).
``imports``
    Modules each worker imports before running a unit. Modules outside genbandit that registered
    the policies, environments and metrics a unit names are found and imported automatically;
    classes defined in ``__main__`` cannot be, so put them in an importable module.
``runtime_env``
    Passed to ``ray.init`` (for example ``{"pip": ["genbandit[ray]"]}`` on a cluster whose nodes
    lack genbandit).
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

from ..core.optional import import_optional
from ..core.registry import ENVIRONMENTS, METRICS, POLICIES
from ..core.validation import InvalidParameterError
from .runner import register_backend
from .units import Unit, UnitResult, run_unit

__all__ = ["ray_backend"]

_DEFAULT_RETRIES = 3


def _import_ray() -> Any:
    return import_optional("ray", "The ray backend")


def _run_unit_task(unit: Unit, modules: tuple[str, ...] = ()) -> UnitResult:
    """What a worker runs: the unit, exactly as the local backend runs it.

    ``modules`` register the policies, environments and metrics the unit names that are not
    genbandit's own; a worker is a fresh process, so it imports them first.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            return UnitResult.failure(unit, traceback.format_exc() + f"The worker could not import {module!r}: install it on every node of the cluster.")
    return run_unit(unit, progress=False)


def _plugin_modules(unit: Unit, extra: tuple[str, ...]) -> tuple[str, ...]:
    """Modules outside genbandit that registered what ``unit`` uses (in this process)."""
    found = list(extra)
    owners = []
    if unit.policy.policy in POLICIES:
        owners.append(POLICIES.get(unit.policy.policy))
    if unit.scenario.environment and unit.scenario.environment in ENVIRONMENTS:
        owners.append(ENVIRONMENTS.get(unit.scenario.environment))
    owners += [METRICS.get(name) for name in unit.metrics if name in METRICS]
    for owner in owners:
        module = getattr(owner, "__module__", "") or ""
        if module and module != "__main__" and module.split(".")[0] != "genbandit" and module not in found:
            found.append(module)
    return tuple(found)


def _local_runtime_env() -> dict:
    """Workers of a local instance import genbandit from where this process found it (a source checkout)."""
    package_root = str(Path(__file__).resolve().parents[2])
    if Path(package_root).name in ("site-packages", "dist-packages"):
        return {}  # installed: workers find it as this process did
    paths = [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != package_root]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


def _connect(ray: Any, options: dict) -> bool:
    """Make sure Ray is initialised; return whether this call started it (and must shut it down)."""
    if ray.is_initialized():  # the caller's own ray.init(...) decides where tasks go
        return False
    address = options.get("address")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": bool(options.get("log_to_driver", False))}
    runtime_env = options.get("runtime_env")
    if address or os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = options.get("local_cpus")
        runtime_env = runtime_env or _local_runtime_env()
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        hint = ""
        if not os.environ.get("RAY_AUTH_MODE"):
            hint = (
                " If the cluster uses token authentication (recent Ray versions turn it on by default), set "
                "RAY_AUTH_MODE=token and give this process the cluster's token (RAY_AUTH_TOKEN, or ~/.ray/auth_token)."
            )
        raise InvalidParameterError(f"Could not connect to the Ray cluster at {address!r}: {exc}.{hint}") from exc
    return True


@register_backend("ray")
def ray_backend(units: list[Unit], options: dict) -> Iterator[UnitResult]:
    """Run ``units`` as Ray tasks and yield their results in the order they finish."""
    ray = _import_ray()
    if not units:
        return
    max_retries = int(options.get("max_retries", _DEFAULT_RETRIES))
    num_cpus = float(options.get("num_cpus", 1))
    if max_retries < 0 or num_cpus <= 0:
        raise InvalidParameterError(f"max_retries must be >= 0 and num_cpus > 0. Got {max_retries!r} and {num_cpus!r} instead.")
    imports = tuple(options.get("imports", ()))
    started_here = _connect(ray, options)
    try:
        task = ray.remote(num_cpus=num_cpus, max_retries=max_retries)(_run_unit_task)
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        window = int(options.get("max_in_flight") or max(4 * cluster_cpus, 8))
        queue = list(reversed(units))  # pop() takes them in grid order
        pending: dict[Any, tuple[Unit, float]] = {}
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    unit = queue.pop()
                    pending[task.remote(unit, _plugin_modules(unit, imports))] = (unit, time.perf_counter())
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    unit, submitted = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - the worker died max_retries + 1 times
                        message = f"{exc}\n{type(exc).__name__}: the Ray task died {max_retries + 1} times (max_retries={max_retries})"
                        result = UnitResult.failure(unit, message, time.perf_counter() - submitted)
                    yield result
        finally:
            for ref in pending:  # an interrupt: stop what is queued or running
                ray.cancel(ref, force=True)
    finally:
        if started_here:
            ray.shutdown()
