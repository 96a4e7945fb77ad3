"""The per-decision code paths of the router's policies decide and learn bit for bit as the recorded replays.

The compiled select and update of :class:`~genbandit.policies.routing.EvidenceThompson` and
:class:`~genbandit.policies.kernel.RFFUCB` are restructured for speed only: on the real ParetoBandit
stream (its 3,609 prompts as hashed-word vectors, see ``_stream``, and its three LLMs' logged rewards
and costs), 3,000 rounds of one run through the public ``probabilities``/``select``/``update`` (the
router's calls) and of three runs through ``select_batch``/``update_batch``, with and without a
budget, must give the recorded decisions, the recorded propensities and a final state (every learned
array, the recurring-prompt cells and the generator's next number) whose bytes hash to the recorded
digests.

``tests/data/decision_replays.npz`` was recorded by the released code; the restructurings before it
were checked the same way on the prompts' MiniLM embeddings (every decision the same), which this
test no longer uses because their last bits depend on the embedding backend. EvidenceThompson's
cases were re-recorded when its arithmetic changed in its last bits (single-precision frequencies,
the upper triangle of ``(C + lambda I)^-1`` only, ``(C + lambda I)^-1 zbar`` carried between rounds; an evidence refit
forming ``(C + lambda I)^-1`` by BLAS ``dsyrk`` and ``(C + lambda I)^-1 zbar`` by ``dsymv``): every decision of those
cases stayed the one recorded before, its state and propensities moved in their last bits
(docs/router.md, "Decision speed"); and again when the base draw's mean became the inverse-propensity
weighted mean of each model's outcomes in place of the regression-adjusted one (a change of its
statistics, its decisions with it; docs/router.md, "Streams it was not built on").

Bit for bit holds on the platform that recorded it (``platform`` in the fixture: the CPU numba compiles for and the
kernels OpenBLAS picks): numba compiles for the host's CPU, and another CPU's vector width and fused multiply-adds
move the last bits of the compiled sums (on an AMD Zen 5 host against the Intel host that recorded the replays before:
every decision the same, propensities within 4e-14, EvidenceThompson's learned arrays in their last bits; on an AMD
Zen 4 host 2e-9 relative, through the evidence refit's fixed-point iteration). On another platform the decisions and the
integer state must still be the recorded ones exactly, the propensities the recorded ones to 1e-12 and every learned
float array (its Euclidean norm and largest magnitude) to 1e-7 relative. A change meant to alter
the numbers re-records it: ``PYTHONPATH=src python tests/test_decision_bits.py``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from genbandit.policies.kernel import RFFUCB
from genbandit.policies.routing import EvidenceThompson

FIXTURE = Path(__file__).parent / "data" / "decision_replays.npz"
ROUNDS = 3000

# name: (maker(n_arms, d, budget), runs, with a budget)
CASES = {
    "evidence-thompson-1": (lambda G, d, B: EvidenceThompson(n_arms=G, n_features=d, seed=0), 1, False),
    "evidence-thompson-1-budget": (lambda G, d, B: EvidenceThompson(n_arms=G, n_features=d, budget=B, seed=1), 1, True),
    "evidence-thompson-3": (lambda G, d, B: EvidenceThompson(n_arms=G, n_features=d, seed=2), 3, False),
    "evidence-thompson-3-budget": (lambda G, d, B: EvidenceThompson(n_arms=G, n_features=d, budget=B, seed=3), 3, True),
    "rff-ucb-cos-phase-1": (lambda G, d, B: RFFUCB(n_arms=G, n_features=d, sigma=5.0, feature_map="cos-phase", seed=0), 1, False),
    "rff-ucb-cos-sin-1": (lambda G, d, B: RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=0), 1, False),
    "rff-ucb-cos-sin-3": (lambda G, d, B: RFFUCB(n_arms=G, n_features=d, sigma=5.0, seed=0), 3, False),
}


def _stream():
    """The real stream's prompts as hashed-word vectors (each lower-cased word adds 1 to one of 384 coordinates, by CRC-32;
    unit norm), with its logged rewards and mean costs: contexts that carry the prompts' word overlap and depend on no
    embedding model, whose backend and build would move the last bits of every context."""
    import zlib

    from genbandit.envs.prompts import load_paretobandit

    prompts, rewards, costs, _, _ = load_paretobandit()
    X = np.zeros((len(prompts), 384))
    for i, text in enumerate(prompts):
        for word in text.lower().split():
            X[i, zlib.crc32(word.encode()) % 384] += 1.0
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    R = np.asarray(rewards, dtype=float)
    C = np.asarray(costs, dtype=float)
    return X, R, (C if C.ndim == 2 else np.nanmean(C, axis=2))


def _digest(policy) -> dict[str, str]:
    """SHA-256 of every learned array's bytes, of the recurring-prompt cells (keys and counts, in order) and of the next random number."""
    out = {}
    for name, value in sorted(vars(policy).items()):
        if isinstance(value, np.ndarray) and name != "_last":
            out[name] = hashlib.sha256(np.ascontiguousarray(value).tobytes() + str((value.dtype, value.shape)).encode()).hexdigest()
    for r, cells in enumerate(getattr(policy, "_cells", [])):
        h = hashlib.sha256()
        for key, cell in cells.items():
            h.update(key.encode() + cell.tobytes())
        out[f"_cells[{r}]"] = h.hexdigest()
    out["next random"] = hashlib.sha256(np.float64(policy._rng.random()).tobytes()).hexdigest()
    return out


def _platform() -> str:
    """What the last bits depend on beyond the code: the CPU numba compiles for, and the kernels each OpenBLAS picks."""
    import llvmlite.binding
    import threadpoolctl

    blas = sorted({str(info.get("architecture")) for info in threadpoolctl.threadpool_info() if info.get("internal_api") == "openblas"})
    return f"numba:{llvmlite.binding.get_host_cpu_name()} openblas:{','.join(blas)}"


def _float_summary(policy) -> dict[str, tuple[float, float]]:
    """(Euclidean norm, largest magnitude) of every learned float array: what rounding moves only in its last bits."""
    out = {}
    for name, value in sorted(vars(policy).items()):
        if isinstance(value, np.ndarray) and name != "_last" and value.dtype.kind == "f":
            v = np.abs(value[np.isfinite(value)].astype(float))
            out[name] = (float(np.sqrt(np.sum(v * v))), float(v.max()) if v.size else 0.0)
    return out


def _replay(name: str, X: np.ndarray, R: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    """Decisions ``(ROUNDS, runs)``, propensities ``(ROUNDS // 7 + 1, n_arms)`` (one run: before every 7th select) and the state digest."""
    make, runs, budgeted = CASES[name]
    lo, hi = C.mean(0).min(), C.mean(0).max()
    policy = make(R.shape[1], X.shape[1], float(lo + 0.5 * (hi - lo)))
    policy.reset(runs)
    rng = np.random.default_rng(7)
    order = np.stack([rng.permutation(len(X))[:ROUNDS] for _ in range(runs)])
    arms, probs = np.empty((ROUNDS, runs), dtype=np.int8), []
    for t in range(ROUNDS):
        rows = order[:, t]
        if runs == 1:
            if t % 7 == 0:
                probs.append(policy.probabilities(X[rows[0]]))
            a = policy.select(X[rows[0]])
            r, c = float(R[rows[0], a]), float(C[rows[0], a])
            policy.update(a, {"reward": r, "cost": c} if budgeted else r, X[rows[0]])
            arms[t] = a
        else:
            a = policy.select_batch(X[rows])
            r, c = R[rows, a], C[rows, a]
            policy.update_batch(a, {"reward": r, "cost": c} if budgeted else r, X[rows])
            arms[t] = a
    digest, summary = _digest(policy), _float_summary(policy)
    return {"arms": arms, "probs": np.array(probs), "digest": np.array([f"{k}={v}" for k, v in digest.items()]),
            "float_names": np.array(list(summary)), "float_summary": np.array(list(summary.values()))}


@pytest.mark.parametrize("name", list(CASES))
def test_select_and_update_are_bit_identical_to_the_recorded_replay(name):
    pytest.importorskip("pareto_bandit")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    recorded = np.load(FIXTURE)
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # as the router runs (an evidence refit on two busy threads takes 300 ms)
        got = _replay(name, *_stream())
    arms = recorded[f"{name}/arms"]
    first = np.flatnonzero((got["arms"] != arms).any(axis=1))
    assert first.size == 0, f"first different decision at round {first[:1]}"
    assert min(np.bincount(arms.ravel(), minlength=3)) > 0  # every model was played, so every update path ran
    if str(recorded["platform"]) == _platform():
        np.testing.assert_array_equal(got["probs"], recorded[f"{name}/probs"])
        assert got["digest"].tolist() == recorded[f"{name}/digest"].tolist()
        return
    np.testing.assert_allclose(got["probs"], recorded[f"{name}/probs"], rtol=0, atol=1e-12)
    floats = set(recorded[f"{name}/float_names"].tolist())
    exact = [entry for entry in recorded[f"{name}/digest"].tolist() if entry.split("=")[0] not in floats]
    assert [entry for entry in got["digest"].tolist() if entry.split("=")[0] not in floats] == exact  # integers, cells, the generator
    assert got["float_names"].tolist() == recorded[f"{name}/float_names"].tolist()
    # the evidence refit is a fixed-point iteration stopped at a relative step of 1e-4 in its precision, so rounding that
    # differs by CPU moves its result by more than the last bit: 2e-9 relative between an AMD Zen 4 and a Zen 5 host
    np.testing.assert_allclose(got["float_summary"], recorded[f"{name}/float_summary"], rtol=1e-7, atol=0)


if __name__ == "__main__":  # re-record the replays (see the module docstring), BLAS on one thread as the test replays them
    import threadpoolctl

    stream = _stream()
    FIXTURE.parent.mkdir(exist_ok=True)
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        np.savez_compressed(FIXTURE, platform=np.array(_platform()),
                            **{f"{name}/{k}": v for name in CASES for k, v in _replay(name, *stream).items()})
    print(f"wrote {FIXTURE}")
