"""Compare two ``summary.json`` files of ``genbandit reproduce`` record by record.

Records are matched on (scenario, policy, metric); their ``mean``, ``stderr`` and ``n_runs`` are
compared within a relative tolerance. Timing metrics (wall times, pulls per second, seconds per
round or decision, speedups) differ from run to run and are left aside unless ``--timing`` is given.
Prints every difference and exits with 1 when there is any, 0 otherwise::

    python benchmarks/compare_summaries.py /work/baseline/quick/classic/summary.json out/classic/summary.json
    python benchmarks/compare_summaries.py A.json B.json --rtol 1e-9
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

#: Metrics that measure time on the machine that ran them, not what the algorithms did.
TIMING = re.compile(r"pulls_per_second|seconds|wall_time|runtime|time_ratio|speedup|ms_per|us_per|total_seconds")

Key = tuple[str, str, str]


def load_records(path: str | Path) -> dict[Key, dict]:
    """The records of a summary file, keyed by (scenario, policy, metric)."""
    records = json.loads(Path(path).read_text())
    return {(r["scenario"], r["policy"], r["metric"]): r for r in records}


def _close(a, b, rtol: float, atol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=atol)


def compare(a: dict[Key, dict], b: dict[Key, dict], *, rtol: float = 0.0, atol: float = 0.0, timing: bool = False) -> list[str]:
    """One line per difference between the record sets ``a`` and ``b`` (empty when they agree)."""
    lines = []
    for key in sorted(set(a) | set(b)):
        if not timing and TIMING.search(key[2]):
            continue
        name = " / ".join(key)
        if key not in b:
            lines.append(f"only in A: {name}")
            continue
        if key not in a:
            lines.append(f"only in B: {name}")
            continue
        for field in ("mean", "stderr", "n_runs"):
            x, y = a[key].get(field), b[key].get(field)
            if not _close(x, y, rtol, atol):
                rel = abs(x - y) / max(abs(x), abs(y), 1e-300) if x is not None and y is not None else float("nan")
                lines.append(f"differs: {name}: {field} {x!r} -> {y!r} (relative {rel:.2e})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the reference summary.json")
    parser.add_argument("b", help="the summary.json to check")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: identical numbers)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    parser.add_argument("--timing", action="store_true", help="compare timing metrics too")
    args = parser.parse_args(argv)
    a, b = load_records(args.a), load_records(args.b)
    lines = compare(a, b, rtol=args.rtol, atol=args.atol, timing=args.timing)
    for line in lines:
        print(line)
    compared = sum(1 for k in set(a) & set(b) if args.timing or not TIMING.search(k[2]))
    print(f"{compared} records compared, {len(lines)} difference(s).")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
