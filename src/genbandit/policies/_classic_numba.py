"""Compiled loops of Thompson sampling and UCB1 on Bernoulli arms (numba; imported lazily).

The loops :meth:`ThompsonSampling.compiled_loop` and :meth:`UCB1.compiled_loop` offer
:func:`genbandit.simulate` for fixed-mean Bernoulli arms.

UCB1 (:func:`ucb1_bernoulli_loop`) takes exactly the plain loop's decisions on the same random
numbers (see its docstring).

Thompson sampling (:func:`thompson_bernoulli_loop`): one run at a time, every round in compiled code: draw ``Beta(prior_alpha + S_i, prior_beta + F_i)``
for every arm, play the largest, draw the arm's Bernoulli reward, count it. Each run owns two
random streams, one for the policy and one for the environment, both xoshiro256** (Blackman &
Vigna, 2021) seeded from the reset policy's and environment's own generators, so a seed gives the
same numbers bit for bit and every policy of a scenario sees the same rewards for the same arms
(the environment stream advances once per round, as :class:`~genbandit.envs.stochastic.BernoulliArms`
draws one uniform per run and round).

Exactness of the posterior draw:

- ``Beta(a, b) = G_a / (G_a + G_b)`` for independent ``G_a ~ Gamma(a, 1)``, ``G_b ~ Gamma(b, 1)``
  (the beta-gamma relation; e.g. Devroye, *Non-Uniform Random Variate Generation*, 1986, IX.4);
- ``Gamma(s, 1)`` for ``s >= 1`` by Marsaglia & Tsang (2000): ``d = s - 1/3``, ``c = 1/sqrt(9 d)``,
  propose ``v = (1 + c X)^3`` with ``X ~ N(0, 1)`` and accept when ``ln U < X^2/2 + d - d v + d ln v``
  (a rejection sampler, so its output has exactly the gamma law; the squeeze
  ``U < 1 - 0.0331 X^4`` only skips the logarithm when the full test would accept anyway);
  ``Gamma(s)`` for ``s < 1`` as ``Gamma(s + 1) U^(1/s)`` (Marsaglia & Tsang, sec. 6);
- ``N(0, 1)`` by the ziggurat (Marsaglia & Tsang, 2000b, 128 layers as Doornik's ZIGNOR, 2005; exact:
  rectangles, wedges accepted under the density, the tail by Marsaglia's method), uniforms as
  53-bit doubles in [0, 1).

Up to floating-point rounding, each round's choice has exactly Thompson sampling's law: the
probability that arm ``i`` has the largest of independent posterior draws. The choices are not the
numpy loop's round for round (another sampler, another stream); ``tests/test_classic.py`` checks
their law with a chi-square test against exact posterior probabilities.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TWO_POW_M53 = 1.0 / 9007199254740992.0


@njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, inline="always")
def _next(state):
    """xoshiro256**: the next 64-bit output of ``state`` (4 uint64, updated in place)."""
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    result = _rotl(s1 * np.uint64(5), 7) * np.uint64(9)
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    return result


@njit(cache=True, inline="always")
def _uniform(state):
    """A double in [0, 1) from the top 53 bits."""
    return float(np.int64(_next(state) >> np.uint64(11))) * _TWO_POW_M53


_ZIGGURAT_LAYERS = 128
_ZIGGURAT_R = 3.442619855899  # start of the tail (Marsaglia & Tsang, 2000b, 128 layers)
_ZIGGURAT_V = 9.91256303526217e-3  # area of each layer


def ziggurat_table() -> np.ndarray:
    """``(2, 129)``: the layers' right edges ``x_0 > x_1 > ... > x_128 = 0`` and the ratios ``x_{i+1} / x_i``.

    Marsaglia & Tsang's ziggurat for N(0, 1) with 128 layers of equal area ``V`` under
    ``f(x) = exp(-x^2 / 2)`` (Doornik, 2005, ZIGNOR): ``x_0 = V / f(R)`` (the base layer with the
    tail), ``x_1 = R``, ``x_{i+1} = f^{-1}(V / x_i + f(x_i))``.
    """
    x = np.zeros(_ZIGGURAT_LAYERS + 1)
    f = math.exp(-0.5 * _ZIGGURAT_R * _ZIGGURAT_R)
    x[0] = _ZIGGURAT_V / f
    x[1] = _ZIGGURAT_R
    for i in range(2, _ZIGGURAT_LAYERS):
        x[i] = math.sqrt(-2.0 * math.log(_ZIGGURAT_V / x[i - 1] + f))
        f = math.exp(-0.5 * x[i] * x[i])
    table = np.zeros((2, _ZIGGURAT_LAYERS + 1))
    table[0] = x
    table[1, :_ZIGGURAT_LAYERS] = x[1:] / x[:-1]
    return table


@njit(cache=True)
def _normal_edge(state, zig, i, u):
    """N(0, 1) by the ziggurat (Marsaglia & Tsang, 2000b; Doornik, 2005) once the draw ``(i, u)`` missed its rectangle.

    A draw takes one 64-bit word: the layer ``i`` from its low 7 bits, ``u`` in (-1, 1) from its top
    53; ``u x_i`` is returned at once when ``|u| < x_{i+1} / x_i`` (inside the layer's rectangle, in
    :func:`_gamma`). Here: the base layer's tail by Marsaglia's method, a wedge point accepted under
    the density, or a fresh draw.
    """
    while True:
        if i == 0:
            while True:
                x = -math.log(1.0 - _uniform(state)) / _ZIGGURAT_R
                y = -math.log(1.0 - _uniform(state))
                if y + y > x * x:
                    return _ZIGGURAT_R + x if u > 0.0 else -_ZIGGURAT_R - x
        x = u * zig[0, i]
        f0 = math.exp(-0.5 * (zig[0, i] * zig[0, i] - x * x))
        f1 = math.exp(-0.5 * (zig[0, i + 1] * zig[0, i + 1] - x * x))
        if f1 + _uniform(state) * (f0 - f1) < 1.0:
            return x
        word = _next(state)
        i = np.int64(word & np.uint64(127))
        u = float(np.int64(word >> np.uint64(11))) * (2.0 * _TWO_POW_M53) - 1.0
        if abs(u) < zig[1, i]:
            return u * zig[0, i]


@njit(cache=True)
def _gamma_constants(shape, out, i):
    """Marsaglia-Tsang constants of ``Gamma(shape)`` into ``out[i]``: d, c and the boost exponent (0 if shape >= 1)."""
    boost = 0.0
    if shape < 1.0:
        boost = 1.0 / shape
        shape += 1.0
    d = shape - 1.0 / 3.0
    out[i, 0] = d
    out[i, 1] = 1.0 / math.sqrt(9.0 * d)
    out[i, 2] = boost


@njit(cache=True, inline="always")
def _gamma(constants, i, state, zig):
    """Gamma(shape, 1) for the shape whose constants are ``constants[i]`` (Marsaglia & Tsang, 2000)."""
    d, c = constants[i, 0], constants[i, 1]
    while True:
        # x ~ N(0, 1): the ziggurat's rectangle test written out here (the hot path), its rare cases in _normal_edge
        word = _next(state)
        layer = np.int64(word & np.uint64(127))
        w = float(np.int64(word >> np.uint64(11))) * (2.0 * _TWO_POW_M53) - 1.0
        x = w * zig[0, layer] if abs(w) < zig[1, layer] else _normal_edge(state, zig, layer, w)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = _uniform(state)
        x2 = x * x
        if u < 1.0 - 0.0331 * x2 * x2:
            break
        if u > 0.0 and math.log(u) < 0.5 * x2 + d * (1.0 - v + math.log(v)):
            break
    if constants[i, 2] != 0.0:
        u = _uniform(state)
        while u == 0.0:
            u = _uniform(state)
        return d * v * u ** constants[i, 2]
    return d * v


@njit(cache=True)
def _thompson_bernoulli(means, prior_alpha, prior_beta, policy_states, env_states, rounds, successes, failures, zig):
    n_runs, k = policy_states.shape[0], means.shape[0]
    horizon = rounds[rounds.shape[0] - 1]
    best = means.max()
    regret_at = np.empty((n_runs, rounds.shape[0]))
    reward_at = np.empty((n_runs, rounds.shape[0]))
    optimal_at = np.empty((n_runs, rounds.shape[0]))
    counts = np.zeros((n_runs, k), dtype=np.int64)
    alpha = np.empty(k)
    beta = np.empty(k)
    ca = np.empty((k, 3))  # Marsaglia-Tsang constants of every arm's Gamma(alpha_i) and Gamma(beta_i)
    cb = np.empty((k, 3))
    for r in range(n_runs):
        pstate = policy_states[r]
        estate = env_states[r]
        for i in range(k):
            alpha[i] = prior_alpha
            beta[i] = prior_beta
            _gamma_constants(prior_alpha, ca, i)
            _gamma_constants(prior_beta, cb, i)
        regret = 0.0
        reward = 0.0
        optimal = 0.0
        nxt = 0
        for t in range(1, horizon + 1):
            arm = 0
            top = -1.0
            for i in range(k):
                ga = _gamma(ca, i, pstate, zig)
                sample = ga / (ga + _gamma(cb, i, pstate, zig))  # Beta(alpha_i, beta_i)
                if sample > top:
                    top = sample
                    arm = i
            if _uniform(estate) < means[arm]:
                alpha[arm] += 1.0
                _gamma_constants(alpha[arm], ca, arm)
                reward += 1.0
            else:
                beta[arm] += 1.0
                _gamma_constants(beta[arm], cb, arm)
            counts[r, arm] += 1
            regret += best - means[arm]
            if means[arm] == best:
                optimal += 1.0
            if t == rounds[nxt]:
                regret_at[r, nxt] = regret
                reward_at[r, nxt] = reward
                optimal_at[r, nxt] = optimal
                nxt += 1
        for i in range(k):
            successes[r, i] = alpha[i] - prior_alpha
            failures[r, i] = beta[i] - prior_beta
    return regret_at, reward_at, counts, optimal_at


def thompson_bernoulli_loop(env, policy, rounds: np.ndarray):
    """Play a reset :class:`ThompsonSampling` on a reset :class:`BernoulliArms`.

    Returns ``(regret_at, reward_at, counts, curves)``, ``curves = {"optimal": ...}`` the cumulative
    rounds on a best arm at the checkpoints (the environment's ``optimal`` info key).

    Draws ``4 n_runs`` raw 64-bit words from each of the policy's and the environment's generators
    to seed the runs' streams. The policy's success and failure counts and round counter are left
    where the game ended.
    """
    rounds = np.asarray(rounds, dtype=np.int64)
    n_runs, horizon = policy.n_runs, int(rounds[-1])
    policy_states = policy._rng.bit_generator.random_raw(4 * n_runs).astype(np.uint64).reshape(n_runs, 4)
    env_states = env._rng.bit_generator.random_raw(4 * n_runs).astype(np.uint64).reshape(n_runs, 4)
    regret_at, reward_at, counts, optimal_at = _thompson_bernoulli(
        np.asarray(env.means, dtype=float), float(policy.prior_alpha), float(policy.prior_beta), policy_states, env_states, rounds,
        policy._successes, policy._failures, ziggurat_table(),
    )  # fmt: skip
    policy._t += horizon
    env._t += horizon
    return regret_at, reward_at, counts, {"optimal": optimal_at}


@njit(cache=True)
def _ucb1_block(means, alpha, logs, t0, uniforms, priority, counts, sums, rounds, nxt, regret, reward, optimal, regret_at, reward_at, optimal_at):
    """Rounds ``t0 .. t0 + len(uniforms) - 1`` (0-based) of UCB1 for every run, state updated in place."""
    n_runs, k = counts.shape
    best = means.max()
    n_rounds = uniforms.shape[0]
    index = np.empty(k)
    for r in range(n_runs):
        c = nxt[r]
        for j in range(n_rounds):
            t = t0 + j
            # choose_by_index on mean + sqrt(alpha ln max(t, 1) / n), operation for operation as UCB1._index
            level = alpha * logs[t]
            arm = -1
            untried = False
            for a in range(k):
                n = counts[r, a]
                if n == 0:
                    if not untried or priority[r, a] > priority[r, arm]:
                        arm = a
                    untried = True
                elif not untried:
                    index[a] = sums[r, a] / n + math.sqrt(level / n)
                    if arm < 0 or index[a] > index[arm] or (index[a] == index[arm] and priority[r, a] > priority[r, arm]):
                        arm = a
            won = 1.0 if uniforms[j, r] < means[arm] else 0.0
            counts[r, arm] += 1
            sums[r, arm] += won
            regret[r] += best - means[arm]
            reward[r] += won
            if means[arm] == best:
                optimal[r] += 1.0
            if t + 1 == rounds[c]:
                regret_at[r, c] = regret[r]
                reward_at[r, c] = reward[r]
                optimal_at[r, c] = optimal[r]
                c += 1
        nxt[r] = c


def ucb1_bernoulli_loop(env, policy, rounds: np.ndarray, block_pulls: int = 1 << 18):
    """Play a reset :class:`UCB1` on a reset :class:`BernoulliArms`; ``(regret_at, reward_at, counts, curves)`` as
    :func:`thompson_bernoulli_loop`.

    The same numbers as the plain loop, round for round: the environment's uniforms come from its
    own generator in blocks of rounds (``Generator.random`` yields the same stream in blocks as
    round by round), the logarithms from numpy, and the index is computed with the same
    floating-point operations in the same order. The policy's counts, sums and round counter are
    left where the plain loop would leave them.
    """
    rounds = np.asarray(rounds, dtype=np.int64)
    horizon, n_runs = int(rounds[-1]), policy.n_runs
    logs = np.log(np.maximum(np.arange(horizon), 1).astype(float))
    means = np.asarray(env.means, dtype=float)
    regret, reward, optimal = np.zeros(n_runs), np.zeros(n_runs), np.zeros(n_runs)
    regret_at, reward_at, optimal_at = (np.empty((n_runs, rounds.size)) for _ in range(3))
    nxt = np.zeros(n_runs, dtype=np.int64)
    step = max(block_pulls // n_runs, 1)
    for t0 in range(0, horizon, step):
        uniforms = env._rng.random((min(step, horizon - t0), n_runs))
        _ucb1_block(means, float(policy.alpha), logs, t0, uniforms, policy._priority, policy._counts, policy._sums, rounds, nxt,
                    regret, reward, optimal, regret_at, reward_at, optimal_at)
    policy._t += horizon
    env._t += horizon
    return regret_at, reward_at, policy._counts.copy(), {"optimal": optimal_at}
