"""The paper's Table 1 (Hou et al. 2025: MAT and tokens/s of four drafters on four benchmarks, two models) and its calibration.

:func:`calibrate_table1` turns a Table 1 cell into the per-arm laws of the E2 replica
(:class:`genbandit.envs.speculative.Table1Replica`): a prompt mixture of free text and copy-heavy
prompts whose round-weighted mean accepted tokens match the table.
"""

from __future__ import annotations

import numpy as np

from ..core.validation import InvalidParameterError
from .tgd import tgd_accept_for_mean, tgd_mean

__all__ = ["TABLE1", "TABLE1_ARMS", "ARM_LENGTHS", "COPY_FREE_ACCEPT", "COPY_RUN", "COPY_BEST_MEAN", "calibrate_table1"]

#: Fixed arms of Table 1, in arm order.
TABLE1_ARMS = ("PLD", "REST", "Suffix", "Eagle-2")
#: BanditSpec Table 1: (MAT, tokens/s) per model, benchmark and method (vanilla, arms, bandits).
TABLE1 = {
    "llama3": {
        "spec-bench": {"vanilla": (1.00, 35.73), "PLD": (1.46, 43.96), "REST": (1.29, 40.67), "Suffix": (1.83, 55.10), "Eagle-2": (3.94, 98.15), "EXP3Spec": (3.65, 102.10), "UCBSpec": (3.98, 105.72)},
        "alpaca": {"vanilla": (1.00, 35.92), "PLD": (1.53, 53.06), "REST": (1.48, 52.40), "Suffix": (1.71, 64.02), "Eagle-2": (4.04, 110.00), "EXP3Spec": (4.23, 120.38), "UCBSpec": (4.35, 125.78)},
        "code-editor": {"vanilla": (1.00, 36.32), "PLD": (2.13, 82.61), "REST": (1.33, 51.32), "Suffix": (2.30, 90.21), "Eagle-2": (4.79, 128.76), "EXP3Spec": (4.36, 137.29), "UCBSpec": (4.83, 138.27)},
        "debug-bench": {"vanilla": (1.00, 36.89), "PLD": (1.67, 82.76), "REST": (1.29, 48.49), "Suffix": (2.13, 77.56), "Eagle-2": (4.78, 119.12), "EXP3Spec": (4.50, 132.25), "UCBSpec": (4.60, 135.34)},
    },
    "qwen2": {
        "spec-bench": {"vanilla": (1.00, 38.71), "PLD": (1.55, 52.44), "REST": (1.31, 46.42), "Suffix": (1.96, 68.42), "Eagle-2": (3.64, 97.82), "EXP3Spec": (3.76, 107.36), "UCBSpec": (4.13, 112.33)},
        "alpaca": {"vanilla": (1.00, 39.32), "PLD": (1.42, 58.41), "REST": (1.47, 59.01), "Suffix": (1.46, 62.60), "Eagle-2": (3.61, 104.43), "EXP3Spec": (3.83, 113.90), "UCBSpec": (3.93, 114.20)},
        "code-editor": {"vanilla": (1.00, 39.30), "PLD": (1.89, 64.56), "REST": (1.31, 53.79), "Suffix": (2.18, 85.75), "Eagle-2": (4.88, 138.58), "EXP3Spec": (4.90, 160.41), "UCBSpec": (4.92, 161.35)},
        "debug-bench": {"vanilla": (1.00, 39.57), "PLD": (2.15, 70.49), "REST": (1.22, 50.51), "Suffix": (2.49, 101.47), "Eagle-2": (4.79, 126.01), "EXP3Spec": (4.86, 151.73), "UCBSpec": (5.10, 151.37)},
    },
}

COPY_FREE_ACCEPT = 0.2  # copiers on free text, and on a copy-heavy prompt's misses: TGD(0.2, 10)
COPY_RUN = (5, 11)  # a long copied run emits U{5..11} tokens
COPY_BEST_MEAN = 6.0  # the better copier's mean on copy-heavy prompts (5-7)
ARM_LENGTHS = (10, 10, 10, 6)  # PLD / REST / Suffix draft up to 10 tokens, Eagle-2's tree is 6 deep


def calibrate_table1(benchmark: str, model: str) -> dict:
    """E2's parameters for one cell of Table 1 (how they follow from the table is in docs/banditspec.md).

    Returns ``copy_share`` (the probability that a prompt is copy-heavy), per arm ``free_accept``
    (TGD acceptance on free text), ``copy_accept`` and ``copy_run`` (on copy-heavy prompts a round
    is a long run U{5..11} with probability ``copy_run``, else TGD(copy_accept, L)), ``lengths``,
    ``cost_ms`` (``1000 MAT / tokens_per_s`` of the table) and ``vanilla_ms``.

    >>> cal = calibrate_table1("code-editor", "llama3")
    >>> round(cal["copy_share"], 3), [round(c, 1) for c in cal["cost_ms"]]
    (0.577, [25.8, 25.9, 25.5, 37.2])
    """
    if model not in TABLE1 or benchmark not in TABLE1[model]:
        raise InvalidParameterError(f"No Table 1 cell for benchmark {benchmark!r} and model {model!r}: benchmarks {sorted(TABLE1['llama3'])}, models {sorted(TABLE1)}.")
    cell = TABLE1[model][benchmark]
    mats = np.array([cell[a][0] for a in TABLE1_ARMS])
    m0 = tgd_mean(COPY_FREE_ACCEPT, 10)
    run_mean = sum(COPY_RUN) / 2.0
    # The better copier reaches COPY_BEST_MEAN on copy-heavy prompts; its round-weighted
    # (harmonic) mean over the mixture must equal its MAT: 1/MAT = f/6 + (1-f)/m0.
    best_copy = max(mats[0], mats[2])
    share = (1 / m0 - 1 / best_copy) / (1 / m0 - 1 / COPY_BEST_MEAN)
    free_accept, copy_accept, copy_run = [], [], []
    for i, (mat, length) in enumerate(zip(mats, ARM_LENGTHS)):
        if TABLE1_ARMS[i] in ("PLD", "Suffix"):
            copy_mean = share / (1 / mat - (1 - share) / m0)
            free_accept.append(COPY_FREE_ACCEPT)
            copy_accept.append(COPY_FREE_ACCEPT)
            copy_run.append((copy_mean - m0) / (run_mean - m0))
        else:  # REST and Eagle-2 do not depend on the prompt type
            p = tgd_accept_for_mean(mat, length)
            free_accept.append(p)
            copy_accept.append(p)
            copy_run.append(0.0)
    return {
        "copy_share": float(share),
        "free_accept": free_accept,
        "copy_accept": copy_accept,
        "copy_run": copy_run,
        "lengths": list(ARM_LENGTHS),
        "cost_ms": [1000.0 * cell[a][0] / cell[a][1] for a in TABLE1_ARMS],
        "vanilla_ms": 1000.0 * cell["vanilla"][0] / cell["vanilla"][1],
    }
