"""The compiled backend of :func:`genbandit.simulate` for the smooth family: environment and policy fused.

:func:`run_loop` plays a policy of :mod:`genbandit.policies.smooth` against an environment of
:mod:`genbandit.envs.smooth` exactly as the plain loop of :func:`genbandit.simulate` would (same seeds,
same uniforms, same decisions, same regret book) but in numba: the uniforms that decide rewards (and
Rexp3's draws) are drawn in blocks from the environment's and the policy's own generators, and one
compiled call advances every run through the block (``prange`` over runs). A run at T = 10^8 takes
seconds to about a minute per core depending on the policy (``benchmarks/smooth_long_horizon.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..core.base import Environment, Policy
from ..core.validation import InvalidParameterError

__all__ = ["run_loop"]

BE_ONE, BE_K, REXP3, SW_UCB, D_UCB = 0, 1, 2, 3, 4


@njit(cache=True)
def _mean(kind, params, grid, r, a, t, T):
    if kind == 0:
        amp = params[r, 1]
        if a == 0:
            return amp
        return amp - amp * math.sin(2.0 * math.pi * params[r, 0] * (t / T) + params[r, 2])
    gi = 0 if grid.shape[0] == 1 else np.int64(r)
    G = grid.shape[2]
    pos = (t / T) * (G - 1)
    i = min(int(pos), G - 2)
    w = pos - i
    return grid[gi, a, i] * (1.0 - w) + grid[gi, a, i + 1] * w


@njit(cache=True)
def _pass_arm(ist, r, k):
    seen = 0
    for a in range(k):
        if ist[r, 2 + a]:
            if seen == ist[r, 0]:
                return a
            seen += 1
    return -1


@njit(cache=True)
def _leader(fs, ist, r, k):
    best, arm = -np.inf, -1
    for a in range(k):
        if ist[r, 2 + a] and fs[r, a] > best:
            best, arm = fs[r, a], a
    return arm


@njit(cache=True)
def _n_alive(ist, r, k):
    n = 0
    for a in range(k):
        n += ist[r, 2 + a]
    return n


@njit(cache=True)
def _rexp3_norm(fs, r, k):
    mx = -np.inf
    for b in range(k):
        mx = max(mx, fs[r, b])
    s = 0.0
    for b in range(k):
        s += math.exp(fs[r, b] - mx)
    return mx, s


@njit(cache=True)
def _rexp3_p(fs, r, k, gamma, a, mx, s):
    return (1.0 - gamma) * math.exp(fs[r, a] - mx) / s + gamma / k


@njit(parallel=True, cache=True)
def _run_block(t0, t1, T, env_kind, noise, params, grid, k, u_env, u_pol, pk, pf, c_static, fs, ist, buf_arm, buf_rew, cp, cp_next, cum_reg, cum_rew, reg_at, rew_at, counts, trace):
    n_runs = u_env.shape[0]
    for r in prange(n_runs):
        means = np.empty(k)
        nxt = cp_next[r]
        creg = cum_reg[r]
        crew = cum_rew[r]
        for t in range(t0 + 1, t1 + 1):
            j = t - t0 - 1
            best = -np.inf
            for a in range(k):
                m = _mean(env_kind, params, grid, r, a, t, T)
                means[a] = m
                if m > best:
                    best = m
            # ---------------------------------------------------------------- choose
            arm = 0
            if pk == BE_ONE:
                arm = 1 if ist[r, 1] < 0 else 0
            elif pk == BE_K:
                if ist[r, 1] >= 0:
                    arm = ist[r, 1]
                else:
                    na = _n_alive(ist, r, k)
                    end = min(T, ((t - 1) // int(pf[1]) + 1) * int(pf[1]))
                    if ist[r, 0] == 0 and not (na >= 2 and t + na - 1 <= end):
                        arm = _leader(fs, ist, r, k)
                    else:
                        arm = _pass_arm(ist, r, k)
            elif pk == REXP3:
                u = u_pol[r, j]
                mx, s = _rexp3_norm(fs, r, k)
                total = 0.0
                for a in range(k):
                    total += _rexp3_p(fs, r, k, pf[0], a, mx, s)
                u *= total  # as sample_rows: u scaled by the last CDF value, not assumed 1
                acc = 0.0
                cnt = 0
                for a in range(k):
                    acc += _rexp3_p(fs, r, k, pf[0], a, mx, s)
                    if acc <= u:
                        cnt += 1
                arm = min(cnt, k - 1)
            else:
                arm = -1
                for a in range(k):
                    if fs[r, a] == 0.0:
                        arm = a
                        break
                if arm < 0:
                    if pk == SW_UCB:
                        lg = math.log(min(t, int(pf[0])))
                        bonus_scale = pf[2]
                    else:
                        tot = 0.0
                        for a in range(k):
                            tot += fs[r, a]
                        lg = math.log(max(tot, 1.0))
                        bonus_scale = 2.0 * pf[2]
                    bi = -np.inf
                    for a in range(k):
                        n = fs[r, a]
                        idx = fs[r, k + a] / n + bonus_scale * math.sqrt(pf[1] * lg / n)
                        if idx > bi:
                            bi, arm = idx, a
            # ---------------------------------------------------------------- reward
            chosen = means[arm]
            uu = u_env[r, j]
            if noise == 0:
                y = 1.0 if uu < 0.5 * (1.0 + chosen) else -1.0
            else:
                y = 1.0 if uu < chosen else 0.0
            # ---------------------------------------------------------------- learn
            if pk == BE_ONE:
                if ist[r, 1] < 0 and arm == 1:
                    fs[r, 1] += y - c_static[r]
                    if fs[r, 1] < -pf[0]:
                        ist[r, 1] = 0
                n_ep = int(pf[1])
                if t == min(T, ((t - 1) // n_ep + 1) * n_ep):
                    fs[r, 1] = 0.0
                    ist[r, 1] = -1
            elif pk == BE_K:
                n_ep = int(pf[1])
                end = min(T, ((t - 1) // n_ep + 1) * n_ep)
                if ist[r, 1] < 0:
                    na = _n_alive(ist, r, k)
                    if ist[r, 0] == 0 and not (na >= 2 and t + na - 1 <= end):
                        ist[r, 1] = _leader(fs, ist, r, k)
                    elif arm == _pass_arm(ist, r, k):
                        fs[r, arm] += y
                        ist[r, 0] += 1
                        if ist[r, 0] == na:
                            zmax = -np.inf
                            for a in range(k):
                                if ist[r, 2 + a] and fs[r, a] > zmax:
                                    zmax = fs[r, a]
                            for a in range(k):
                                if ist[r, 2 + a] and fs[r, a] < zmax - pf[0]:
                                    ist[r, 2 + a] = 0
                            ist[r, 0] = 0
                if t == end:
                    for a in range(k):
                        fs[r, a] = 0.0
                        ist[r, 2 + a] = 1
                    ist[r, 0] = 0
                    ist[r, 1] = -1
            elif pk == REXP3:
                mx, s = _rexp3_norm(fs, r, k)
                p = _rexp3_p(fs, r, k, pf[0], arm, mx, s)
                x = min(max((y - pf[2]) / (pf[3] - pf[2]), 0.0), 1.0)
                fs[r, arm] += pf[0] * x / (k * p)
                if t % int(pf[1]) == 0:
                    for a in range(k):
                        fs[r, a] = 0.0
            elif pk == SW_UCB:
                tau = int(pf[0])
                slot = (t - 1) % tau
                old = buf_arm[r, slot]
                if old >= 0:
                    fs[r, old] -= 1.0
                    fs[r, k + old] -= buf_rew[r, slot]
                fs[r, arm] += 1.0
                fs[r, k + arm] += y
                buf_arm[r, slot] = arm
                buf_rew[r, slot] = y
            else:
                disc = pf[0]
                for a in range(2 * k):
                    fs[r, a] *= disc
                fs[r, arm] += 1.0
                fs[r, k + arm] += y
            # ---------------------------------------------------------------- books
            creg += best - chosen
            crew += y
            counts[r, arm] += 1
            if trace.shape[1] > 0:
                trace[r, t - 1] = arm
            if nxt < cp.size and t == cp[nxt]:
                reg_at[r, nxt] = creg
                rew_at[r, nxt] = crew
                nxt += 1
        cp_next[r] = nxt
        cum_reg[r] = creg
        cum_rew[r] = crew


_KINDS = {"be-one": BE_ONE, "be-k": BE_K, "rexp3": REXP3, "sw-ucb": SW_UCB, "d-ucb": D_UCB}


def _policy_spec(policy: Policy, n_runs: int, k: int):
    """(kind, constants, static means, float state, int state, ring buffers) of a freshly reset policy, from its public ``compiled_kernel``."""
    name, pf, static_mean = policy.compiled_kernel()
    if name not in _KINDS:
        raise InvalidParameterError(f"There is no compiled loop for {type(policy).__name__}.")
    kind = _KINDS[name]
    buf_arm, buf_rew = np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1))
    c = np.zeros(n_runs) if static_mean is None else np.broadcast_to(np.asarray(static_mean, dtype=float), (n_runs,)).copy()
    ist = np.zeros((n_runs, 2 + k), dtype=np.int64)
    ist[:, 1] = -1
    ist[:, 2:] = 1
    fs = np.zeros((n_runs, 2 * k if kind in (SW_UCB, D_UCB) else k))
    if kind == SW_UCB:
        tau = int(pf[0])
        buf_arm, buf_rew = np.full((n_runs, tau), -1, dtype=np.int64), np.zeros((n_runs, tau))
    return kind, np.asarray(pf, dtype=float), c, fs, ist, buf_arm, buf_rew


def run_loop(
    env: Environment,
    policy: Policy,
    rounds: np.ndarray,
    *,
    block: int = 1 << 15,
    actions: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compiled loop of :func:`genbandit.simulate` for a smooth policy on a smooth environment.

    Takes the freshly reset ``env`` and ``policy`` and the checkpoint ``rounds`` (the last one is the
    horizon); returns ``(regret_at, reward_at, counts)`` as the plain loop records them, on the same
    random numbers. Runs are split across numba's threads (``numba.set_num_threads`` caps them); ``actions``, an
    int64 array ``(n_runs, horizon)``, receives every arm played (for the round-for-round tests).

    >>> from genbandit import simulate
    >>> from genbandit.envs.smooth import SinusoidArms
    >>> from genbandit.policies.smooth import BES
    >>> env = SinusoidArms(horizon=10**5, amplitude_scale=2.5, amplitude_sd=0.01)
    >>> env.reset(4, seed=0)  # doctest: +ELLIPSIS
    SinusoidArms(...)
    >>> policy = BES(n_arms=2, horizon=10**5, L=98.7, one_armed=True, static_mean=env.static_means())
    >>> res = simulate(env, policy, 10**5, n_runs=4, seed=0, backend="compiled")
    >>> res.regret.shape[0], bool(0 < res.final_regret.mean() < 10_000)
    (4, True)
    """
    horizon = int(rounds[-1])
    if env.horizon != horizon:
        raise InvalidParameterError(f"The environment was built for T={env.horizon}, not {horizon}.")
    n_runs, k = env.n_runs, env.n_arms
    env_kind, params, grid = env.kernel_spec()
    noise = 0 if env.noise == "rademacher" else 1
    pk, pf, c, fs, ist, buf_arm, buf_rew = _policy_spec(policy, n_runs, k)
    reg_at = np.zeros((n_runs, rounds.size))
    rew_at = np.zeros((n_runs, rounds.size))
    cp_next = np.zeros(n_runs, dtype=np.int64)
    cum_reg, cum_rew = np.zeros(n_runs), np.zeros(n_runs)
    counts = np.zeros((n_runs, k), dtype=np.int64)
    trace = actions if actions is not None else np.zeros((n_runs, 0), dtype=np.int64)
    dummy_pol = np.zeros((n_runs, 1))
    for t0 in range(0, horizon, block):
        t1 = min(horizon, t0 + block)
        u_env = np.ascontiguousarray(env.draw_uniforms(t1 - t0))
        u_pol = np.ascontiguousarray(policy.draw_uniforms(t1 - t0)) if pk == REXP3 else dummy_pol
        _run_block(t0, t1, horizon, env_kind, noise, params, grid, k, u_env, u_pol, pk, pf, c, fs, ist, buf_arm, buf_rew, rounds, cp_next, cum_reg, cum_rew, reg_at, rew_at, counts, trace)
    return reg_at, rew_at, counts
