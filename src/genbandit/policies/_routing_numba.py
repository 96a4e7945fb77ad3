"""Compiled per-decision kernels of :class:`genbandit.policies.routing.EvidenceThompson` (numba; imported lazily).

The kernels, each one pass over the runs with no temporaries beyond its outputs:

- :func:`prompt_terms`: the random Fourier features ``phi = scale cos(W y + b)`` of each run's
  context (Rahimi & Recht 2007), and per model ``z = phi - phibar_g``, ``h = (C_g + lambda_g I)^-1 z``,
  ``z' theta_g`` and ``z' h`` (the posterior mean's and variance's prompt terms);
- :func:`scores`: each model's noise variance, intercept and posterior at the prompt from those terms;
- :func:`beta_laws`: the Beta laws of the context-free Thompson draw;
- :func:`override`: the per-prompt overrides of that draw, and :func:`information_directed`, the
  model each row plays under information-directed sampling;
- :func:`learn`: one round, in place: Welford's update of the played model's reward and centred
  feature moments and the Sherman-Morrison step on ``(C + lambda I)^-1`` with its coefficients ``theta``.

Their plain-Python versions (``prompt_terms.py_func`` and so on) compute the same
numbers: ``tests/test_routing_policy.py`` replays the policy with each and compares it round for round.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def prompt_terms(contexts, freq, phase, scale, live, phibar, Cinv, theta):  # pragma: no cover - compiled
    """``(phi, z, h, z'theta, z'h)`` of every run: shapes ``(R, D)``, ``(R, G, D)`` twice, ``(R, G)`` twice.

    ``phi`` is zero in the runs whose ``live`` is false (no bandwidth yet).
    """
    R, G, D = phibar.shape
    phi = np.zeros((R, D))
    z = np.empty((R, G, D))
    h = np.empty((R, G, D))
    lin = np.empty((R, G))
    quad = np.empty((R, G))
    for r in range(R):
        if live[r]:
            proj = np.dot(freq[r], contexts[r])  # BLAS gemv, as numpy's
            for k in range(D):
                phi[r, k] = scale * math.cos(proj[k] + phase[r, k])
        for g in range(G):
            for k in range(D):
                z[r, g, k] = phi[r, k] - phibar[r, g, k]
            h[r, g] = np.dot(Cinv[r, g], z[r, g])
            lin[r, g] = np.dot(z[r, g], theta[r, g])
            quad[r, g] = np.dot(z[r, g], h[r, g])
    return phi, z, h, lin, quad


@njit(cache=True, nogil=True)
def learn(n, ybar, syy, ymin, ymax, Cinv, theta, cxy, phibar, live, arms, rewards, z, h):  # pragma: no cover - compiled
    """One round of every run, in place: the reward range, each played model's count, mean and centred sum of squares
    (Welford), and where the run's bandwidth is set (``live``), with ``u = sqrt(w) z``, ``w = n / (n + 1)``:
    ``Cinv -= w h h' / (1 + w z'h)`` (Sherman-Morrison), ``theta += w (dy - z'theta) / (1 + w z'h) h``,
    ``cxy += w dy z`` and ``phibar += z / (n + 1)``, ``n`` the model's count before the round.
    """
    D = Cinv.shape[2]
    for r in range(arms.shape[0]):
        g, y = arms[r], rewards[r]
        ymin[r] = min(ymin[r], y)
        ymax[r] = max(ymax[r], y)
        k = float(n[r, g])
        dy = y - ybar[r, g]
        w = k / (k + 1.0)
        n[r, g] += 1
        ybar[r, g] += dy / (k + 1.0)
        syy[r, g] += w * dy * dy
        if not live[r]:
            continue
        zh = np.dot(z[r, g], h[r, g])
        zt = np.dot(z[r, g], theta[r, g])
        denom = 1.0 + w * zh
        coef = w / denom
        step = w * (dy - zt) / denom
        for i in range(D):
            hi = coef * h[r, g, i]
            for j in range(D):
                Cinv[r, g, i, j] -= hi * h[r, g, j]
            theta[r, g, i] += step * h[r, g, i]
            cxy[r, g, i] += w * dy * z[r, g, i]
            phibar[r, g, i] += z[r, g, i] / (k + 1.0)


@njit(cache=True, nogil=True)
def scores(n, ybar, syy, fitted, gamma, ymin, ymax, phibar, theta, lin, quad, prior_dof, tiny):  # pragma: no cover - compiled
    """Each model's noise variance, context-free mean and its variance, and posterior mean and variance at the prompt.

    Per run, with ``n_g`` rounds of model ``g``: the noise ``(prior_dof s2_pool + dof_g s2_g) / (prior_dof + dof_g)``,
    ``dof_g = max(n_g - 1 - gamma_g, 0)``, ``s2_g`` the evidence estimate (``fitted``, the sample variance
    while it is 0), ``s2_pool`` the within-model variance pooled over models (``(range / 2)^2`` before
    any model has two rounds); the intercept ``b_g = (grand + n_g ybar_g) / (n_g + 1)`` with one
    pseudo-round at the mean over models; at the prompt ``mean = b_g + z'theta_g`` and
    ``var = noise (1 / (n_g + 1) + max(z'h, 0))``; context-free, ``value = b_g + (seen - phibar_g)'theta_g``
    with ``seen`` the mean feature of every prompt seen, and ``spread = noise / (n_g + 1)``.
    Returns ``(mean, var, value, spread, noise)``, each ``(R, G)``.
    """
    R, G, D = phibar.shape
    mean = np.empty((R, G))
    var = np.empty((R, G))
    value = np.empty((R, G))
    spread = np.empty((R, G))
    noise = np.empty((R, G))
    seen = np.empty(D)
    for r in range(R):
        within = 0.0
        total = 0.0
        rounds = 0.0
        weighted = 0.0
        for g in range(G):
            within += max(n[r, g] - 1, 0)
            total += syy[r, g]
            rounds += n[r, g]
            weighted += ybar[r, g] * n[r, g]
        if within > 0:
            pool = max(total, tiny) / within
        else:
            half = (ymax[r] - ymin[r]) / 2.0
            pool = max(half * half, tiny)
        grand = weighted / max(rounds, 1.0)
        seen[:] = 0.0
        for g in range(G):
            for k in range(D):
                seen[k] += n[r, g] * phibar[r, g, k]
        seen /= max(rounds, 1.0)
        for g in range(G):
            dof = max(n[r, g] - 1.0 - gamma[r, g], 0.0)
            s2 = fitted[r, g] if fitted[r, g] > 0 else syy[r, g] / max(n[r, g] - 1.0, 1.0)
            noise[r, g] = (prior_dof * pool + dof * s2) / (prior_dof + dof)
            weight = n[r, g] + 1.0
            b = (grand + n[r, g] * ybar[r, g]) / weight
            mean[r, g] = b + lin[r, g]
            var[r, g] = noise[r, g] * (1.0 / weight + max(quad[r, g], 0.0))
            adjust = 0.0
            for k in range(D):
                adjust += (seen[k] - phibar[r, g, k]) * theta[r, g, k]
            value[r, g] = b + adjust
            spread[r, g] = noise[r, g] / weight
    return mean, var, value, spread, noise


@njit(cache=True, nogil=True)
def information_directed(mean, var, noise, uniform, tiny):  # pragma: no cover - compiled
    """The model of each row under the information-directed law (Russo & Van Roy 2018), ``uniform`` one U(0, 1) per row.

    ``Delta_a = E[max_b theta_b] - mean_a`` with ``E[max]`` of the independent Gaussian posteriors by
    Clark's (1961) moment recursion, ``I_a = log(1 + var_a / noise_a) / 2``; over every pair ``(a, b)``
    (and each model alone) the mixture ``q`` of least ``(q Delta_a + (1 - q) Delta_b)^2 / (q I_a + (1 - q) I_b)``,
    at ``q = Delta_b / (Delta_a - Delta_b) - 2 I_b / (I_a - I_b)`` clipped to [0, 1] or at an end
    (Russo & Van Roy 2018, Proposition 6); the row plays ``a`` when ``uniform < q``, else ``b``.
    """
    rows, G = mean.shape
    out = np.empty(rows, dtype=np.int64)
    gap = np.empty(G)
    info = np.empty(G)
    root = math.sqrt(2.0)
    for r in range(rows):
        top, second, best = mean[r, 0], var[r, 0], mean[r, 0]
        for b in range(1, G):
            theta = math.sqrt(max(second + var[r, b], tiny))
            alpha = (top - mean[r, b]) / theta
            cdf = 0.5 * math.erfc(-alpha / root)
            pdf = math.exp(-0.5 * alpha * alpha) / math.sqrt(2.0 * math.pi)
            moment = (top * top + second) * cdf + (mean[r, b] ** 2 + var[r, b]) * (1.0 - cdf) + (top + mean[r, b]) * theta * pdf
            top = top * cdf + mean[r, b] * (1.0 - cdf) + theta * pdf
            second = max(moment - top * top, 0.0)
            best = max(best, mean[r, b])
        top = max(top, best)
        for a in range(G):
            gap[a] = max(top - mean[r, a], 0.0)
            info[a] = max(0.5 * math.log1p(var[r, a] / max(noise[r, a], tiny)), tiny)
        pick_a, pick_b, pick_q, least = 0, 0, 1.0, np.inf
        for a in range(G):
            for b in range(a, G):
                da, db, ia, ib = gap[a], gap[b], info[a], info[b]
                q = 1.0
                if a != b and da != db and ia != ib:
                    q = min(max(db / (da - db) - 2.0 * ib / (ia - ib), 0.0), 1.0)
                for c in (q, 0.0, 1.0):
                    mix = c * da + (1.0 - c) * db
                    ratio = mix * mix / (c * ia + (1.0 - c) * ib)
                    if ratio < least:
                        pick_a, pick_b, pick_q, least = a, b, c, ratio
        out[r] = pick_a if uniform[r] < pick_q else pick_b
    return out


@njit(cache=True, nogil=True)
def beta_laws(value, spread, lo, span, tiny):  # pragma: no cover - compiled
    """``(a, b)`` of the Beta law on ``[lo, lo + span]`` with each context-free mean ``value`` and variance ``spread``.

    ``m = (value - lo) / span`` in ``[1e-6, 1 - 1e-6]``, ``v = min(spread / span^2, 0.999 m (1 - m))``,
    ``a + b = m (1 - m) / v - 1`` (the method of moments), each at least 1e-6.
    """
    R, G = value.shape
    a = np.empty((R, G))
    b = np.empty((R, G))
    for r in range(R):
        for g in range(G):
            m = min(max((value[r, g] - lo[r, 0]) / span[r, 0], 1e-6), 1.0 - 1e-6)
            v = min(spread[r, g] / (span[r, 0] * span[r, 0]), m * (1.0 - m) * 0.999)
            total = m * (1.0 - m) / max(v, tiny) - 1.0
            a[r, g] = max(m * total, 1e-6)
            b[r, g] = max((1.0 - m) * total, 1e-6)
    return a, b


@njit(cache=True, nogil=True)
def override(mean, var, value, spread, noise, base, uniform, leader_z, z, tiny):  # pragma: no cover - compiled
    """The model each row plays given its context-free draw ``base``: see :class:`~genbandit.policies.routing.EvidenceThompson`.

    The model of largest posterior mean at the prompt when it beats ``base`` by ``z`` posterior standard
    deviations of the difference (``leader_z`` when it is the context-free leader); else, where ``base``
    is worse at the prompt than its context-free mean by ``2 z`` standard deviations, the
    information-directed choice (:func:`information_directed`, with ``uniform``); else ``base``.
    """
    R, G = mean.shape
    out = np.empty(R, dtype=np.int64)
    for r in range(R):
        best = 0
        leader = 0
        for g in range(1, G):
            if mean[r, g] > mean[r, best]:
                best = g
            if value[r, g] > value[r, leader]:
                leader = g
        k = base[r]
        width = leader_z if best == leader else z
        if mean[r, best] - mean[r, k] > width * math.sqrt(var[r, best] + var[r, k]):
            out[r] = best
        elif value[r, k] - mean[r, k] > 2.0 * z * math.sqrt(var[r, k] + spread[r, k]):
            out[r] = information_directed(mean[r:r + 1], var[r:r + 1], noise[r:r + 1], uniform[r:r + 1], tiny)[0]
        else:
            out[r] = k
    return out
