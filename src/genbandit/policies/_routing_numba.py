"""Compiled per-decision kernels of :class:`genbandit.policies.routing.EvidenceThompson` (numba; imported lazily).

The kernels, each one pass over the runs, writing into output arrays the caller allocates (a
compiled function that returns arrays pays about a microsecond to hand each one back to Python):

- :func:`prompt_terms`: the random Fourier features ``phi = scale cos(W y + b)`` of each run's
  context (Rahimi & Recht 2007), and per model ``z = phi - phibar_g``, ``h = (C_g + lambda_g I)^-1 z``,
  ``z' theta_g`` and ``z' h`` (the posterior mean's and variance's prompt terms);
- :func:`scores`: each model's noise variance, intercept and posterior at the prompt from those terms;
- :func:`posterior_terms`: the two above in one call (what a new context needs), and whether a model is untried;
- :func:`beta_laws`: the Beta laws of the context-free Thompson draw;
- :func:`recurring`: a recurring prompt's own outcomes folded into one run's posterior (a normal-normal update);
- :func:`priced` and :func:`pace`: the budget pacer's price applied to the scores, and its step after a round;
- :func:`override`: the model played given the context-free draw, and :func:`override_laws`, the
  law of that model given each possible draw, both from one rule (``_given_base``), with
  :func:`information_directed`, the law of information-directed sampling at a prompt;
- :func:`argmax_cells`: the law of the largest of independent draws from their CDFs on cells;
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
def prompt_terms(contexts, freq, phase, scale, bandwidth, n, phibar, Cinv, theta, zh, terms):  # pragma: no cover - compiled
    """Into ``zh`` ``(2, R, G, D)``: ``z`` and ``h = Cinv z`` of every run and model; into ``terms`` ``(4, R, G)``:
    ``z'theta``, ``z'h``, and at ``zbar = seen - phibar_g`` (``seen`` the mean feature of every prompt seen,
    ``sum_g n_g phibar_g / sum_g n_g``) ``zbar'theta`` and ``zbar' Cinv zbar``.

    ``Cinv z`` and ``Cinv zbar`` come from one product with the two columns ``[z, zbar]``, so each model's
    ``Cinv`` is read once per decision (the products are memory bound). ``phi`` is zero in the runs whose
    ``bandwidth`` is 0 (not set yet).
    """
    R, G, D = phibar.shape
    z, h, lin, quad, adjust, quad_seen = zh[0], zh[1], terms[0], terms[1], terms[2], terms[3]
    phi = np.empty(D)
    seen = np.empty(D)
    pair = np.empty((D, 2))
    for r in range(R):
        phi[:] = 0.0
        if bandwidth[r] > 0:
            proj = np.dot(freq[r], contexts[r])  # BLAS gemv, as numpy's
            for k in range(D):
                phi[k] = scale * math.cos(proj[k] + phase[r, k])
        rounds = 0.0
        seen[:] = 0.0
        for g in range(G):
            rounds += n[r, g]
            for k in range(D):
                seen[k] += n[r, g] * phibar[r, g, k]
        seen /= max(rounds, 1.0)
        for g in range(G):
            for k in range(D):
                z[r, g, k] = phi[k] - phibar[r, g, k]
                pair[k, 0] = z[r, g, k]
                pair[k, 1] = seen[k] - phibar[r, g, k]
            both = np.dot(Cinv[r, g], pair)  # BLAS gemm: Cinv [z, zbar]
            lin_g, quad_g, adjust_g, quad_seen_g = 0.0, 0.0, 0.0, 0.0
            for k in range(D):
                h[r, g, k] = both[k, 0]
                lin_g += pair[k, 0] * theta[r, g, k]
                quad_g += pair[k, 0] * both[k, 0]
                adjust_g += pair[k, 1] * theta[r, g, k]
                quad_seen_g += pair[k, 1] * both[k, 1]
            lin[r, g], quad[r, g], adjust[r, g], quad_seen[r, g] = lin_g, quad_g, adjust_g, quad_seen_g


@njit(cache=True, nogil=True)
def learn(n, ybar, syy, ymin, ymax, Cinv, theta, cxy, phibar, bandwidth, arms, rewards, zh, next_fit, due):  # pragma: no cover - compiled
    """One round of every run, in place: the reward range, each played model's count, mean and centred sum of squares
    (Welford), and where the run's bandwidth is set (``bandwidth > 0``), with ``u = sqrt(w) z``, ``w = n / (n + 1)``:
    ``Cinv -= w h h' / (1 + w z'h)`` (Sherman-Morrison), ``theta += w (dy - z'theta) / (1 + w z'h) h``,
    ``cxy += w dy z`` and ``phibar += z / (n + 1)``, ``n`` the model's count before the round; ``z`` and ``h``
    from :func:`prompt_terms`. ``due[r]``: run ``r``'s played model has reached its ``next_fit`` count (a run with a bandwidth).
    Returns ``(any due, any run without a bandwidth)``.
    """
    D = Cinv.shape[2]
    z, h = zh[0], zh[1]
    some_due, waiting = False, False
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
        live = bandwidth[r] > 0
        due[r] = live and n[r, g] >= next_fit[r, g]
        some_due = some_due or due[r]
        if not live:
            waiting = True
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
    return some_due, waiting


@njit(cache=True, nogil=True)
def scores(n, ybar, syy, fitted, gamma, ymin, ymax, terms, prior_dof, tiny, out):  # pragma: no cover - compiled
    """Each model's noise variance, context-free mean and its variance, and posterior mean and variance at the prompt.

    Per run, with ``n_g`` rounds of model ``g``: the noise ``(prior_dof s2_pool + dof_g s2_g) / (prior_dof + dof_g)``,
    ``dof_g = max(n_g - 1 - gamma_g, 0)``, ``s2_g`` the evidence estimate (``fitted``, the sample variance
    while it is 0), ``s2_pool`` the within-model variance pooled over models (``(range / 2)^2`` before
    any model has two rounds); the intercept ``b_g = (grand + n_g ybar_g) / (n_g + 1)`` with one
    pseudo-round at the mean over models; at the prompt ``mean = b_g + z'theta_g`` and
    ``var = noise (1 / (n_g + 1) + max(z'h, 0))``; context-free, ``value = b_g + (seen - phibar_g)'theta_g``
    with ``seen`` the mean feature of every prompt seen, and its posterior variance ``spread = noise (1 / (n_g + 1) +
    zbar' (C_g + lambda_g I)^-1 zbar)``, ``zbar = seen - phibar_g`` (PRML eq. 3.59 at the mean feature seen: the
    adjustment's own uncertainty counts; ``zbar = 0`` while the bandwidth is not set and the features are 0).
    ``terms`` from :func:`prompt_terms`; into ``out`` ``(5, R, G)``: ``(mean, var, value, spread, noise)``.
    """
    R, G = n.shape
    lin, quad, adjust, quad_seen = terms[0], terms[1], terms[2], terms[3]
    mean, var, value, spread, noise = out[0], out[1], out[2], out[3], out[4]
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
        for g in range(G):
            dof = max(n[r, g] - 1.0 - gamma[r, g], 0.0)
            s2 = fitted[r, g] if fitted[r, g] > 0 else syy[r, g] / max(n[r, g] - 1.0, 1.0)
            noise[r, g] = (prior_dof * pool + dof * s2) / (prior_dof + dof)
            weight = n[r, g] + 1.0
            b = (grand + n[r, g] * ybar[r, g]) / weight
            mean[r, g] = b + lin[r, g]
            var[r, g] = noise[r, g] * (1.0 / weight + max(quad[r, g], 0.0))
            value[r, g] = b + adjust[r, g]
            spread[r, g] = noise[r, g] * (1.0 / weight + max(quad_seen[r, g], 0.0))


@njit(cache=True, nogil=True)
def posterior_terms(contexts, freq, phase, scale, bandwidth, phibar, Cinv, theta, n, ybar, syy, fitted, gamma, ymin, ymax, prior_dof, tiny,
                    zh, out, untried):  # pragma: no cover - compiled
    """:func:`prompt_terms` then :func:`scores` of each run's context, and into ``untried`` ``(R, G)`` whether model ``g`` of run
    ``r`` was never played; returns whether any was not."""
    terms = np.empty((4, n.shape[0], n.shape[1]))
    prompt_terms(contexts, freq, phase, scale, bandwidth, n, phibar, Cinv, theta, zh, terms)
    scores(n, ybar, syy, fitted, gamma, ymin, ymax, terms, prior_dof, tiny, out)
    fresh = False
    for r in range(n.shape[0]):
        for g in range(n.shape[1]):
            untried[r, g] = n[r, g] == 0
            fresh = fresh or untried[r, g]
    return fresh


@njit(cache=True, nogil=True)
def information_directed(mean, var, noise, tiny):  # pragma: no cover - compiled
    """The information-directed law at one prompt (Russo & Van Roy 2018): ``(a, b, q)``, play ``a`` w.p. ``q``, else ``b``.

    ``Delta_a = E[max_b theta_b] - mean_a`` with ``E[max]`` of the independent Gaussian posteriors by
    Clark's (1961) moment recursion, ``I_a = log(1 + var_a / noise_a) / 2``; over every pair ``(a, b)``
    (and each model alone) the mixture ``q`` of least ``(q Delta_a + (1 - q) Delta_b)^2 / (q I_a + (1 - q) I_b)``,
    at ``q = Delta_b / (Delta_a - Delta_b) - 2 I_b / (I_a - I_b)`` clipped to [0, 1] or at an end
    (Russo & Van Roy 2018, Proposition 6). ``a <= b``.
    """
    G = mean.shape[0]
    gap = np.empty(G)
    info = np.empty(G)
    root = math.sqrt(2.0)
    top, second, best = mean[0], var[0], mean[0]
    for b in range(1, G):
        theta = math.sqrt(max(second + var[b], tiny))
        alpha = (top - mean[b]) / theta
        cdf = 0.5 * math.erfc(-alpha / root)
        pdf = math.exp(-0.5 * alpha * alpha) / math.sqrt(2.0 * math.pi)
        moment = (top * top + second) * cdf + (mean[b] ** 2 + var[b]) * (1.0 - cdf) + (top + mean[b]) * theta * pdf
        top = top * cdf + mean[b] * (1.0 - cdf) + theta * pdf
        second = max(moment - top * top, 0.0)
        best = max(best, mean[b])
    top = max(top, best)
    for a in range(G):
        gap[a] = max(top - mean[a], 0.0)
        info[a] = max(0.5 * math.log1p(var[a] / max(noise[a], tiny)), tiny)
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
    return pick_a, pick_b, pick_q


@njit(cache=True, nogil=True)
def beta_laws(value, spread, ymin, ymax, tiny, out):  # pragma: no cover - compiled
    """Into ``out`` ``(2, R, G)``: ``(a, b)`` of the Beta law on ``[lo, lo + span]`` with each context-free mean ``value``
    and variance ``spread``, ``lo = ymin``, ``span = max(ymax - ymin, tiny)`` per run.

    ``m = (value - lo) / span`` in ``[1e-6, 1 - 1e-6]``, ``v = min(spread / span^2, 0.999 m (1 - m))``,
    ``a + b = m (1 - m) / v - 1`` (the method of moments), each at least 1e-6.
    """
    R, G = value.shape
    a, b = out[0], out[1]
    for r in range(R):
        lo = ymin[r]
        span = max(ymax[r] - ymin[r], tiny)
        for g in range(G):
            m = min(max((value[r, g] - lo) / span, 1e-6), 1.0 - 1e-6)
            v = min(spread[r, g] / (span * span), m * (1.0 - m) * 0.999)
            total = m * (1.0 - m) / max(v, tiny) - 1.0
            a[r, g] = max(m * total, 1e-6)
            b[r, g] = max((1.0 - m) * total, 1e-6)


@njit(cache=True, nogil=True)
def _given_base(mean, var, value, spread, noise, r, k, leader_z, z, tiny, law):  # pragma: no cover - compiled
    """Into ``law`` ``(G,)``: the law of the model row ``r`` plays when its context-free draw is ``k``.

    The model of largest posterior mean at the prompt when it beats ``k`` by ``z`` posterior standard
    deviations of the difference (``leader_z`` when it is the context-free leader); else, where ``k``
    is worse at the prompt than its context-free mean by ``2 z`` standard deviations, the
    information-directed law (:func:`information_directed`); else ``k``.
    """
    G = mean.shape[1]
    best = 0
    leader = 0
    for g in range(1, G):
        if mean[r, g] > mean[r, best]:
            best = g
        if value[r, g] > value[r, leader]:
            leader = g
    law[:] = 0.0
    width = leader_z if best == leader else z
    if mean[r, best] - mean[r, k] > width * math.sqrt(var[r, best] + var[r, k]):
        law[best] = 1.0
    elif value[r, k] - mean[r, k] > 2.0 * z * math.sqrt(var[r, k] + spread[r, k]):
        a, b, q = information_directed(mean[r], var[r], noise[r], tiny)
        law[a] += q
        law[b] += 1.0 - q
    else:
        law[k] = 1.0


@njit(cache=True, nogil=True)
def override(mean, var, value, spread, noise, draws, leader_z, z, tiny, out):  # pragma: no cover - compiled
    """Into ``out`` ``(R,)``: the model each row plays given its context-free draws ``draws[r G:(r + 1) G]``, whose largest (the
    first of equal ones, as ``argmax``) is the base choice (see :class:`~genbandit.policies.routing.EvidenceThompson`), drawn from
    :func:`_given_base`'s law by inversion with the uniform ``draws[R G + r]``: the first model whose cumulative probability exceeds
    it (the last one with mass if none), so the information-directed law plays ``a`` when the uniform is below ``q``, else ``b``.
    """
    R, G = mean.shape
    law = np.empty(G)
    for r in range(R):
        base = 0
        for g in range(1, G):
            if draws[r * G + g] > draws[r * G + base]:
                base = g
        _given_base(mean, var, value, spread, noise, r, base, leader_z, z, tiny, law)
        total = 0.0
        for g in range(G):
            if law[g] > 0.0:
                out[r] = g
                total += law[g]
                if draws[R * G + r] < total:
                    break


@njit(cache=True, nogil=True)
def priced(mean, value, cost_sum, cost_n, price, budget, out):  # pragma: no cover - compiled
    """Into ``out`` ``(2, R, G)``: ``mean`` and ``value`` minus each model's running mean cost (0 before its first) times the
    run's ``price`` per ``budget``-sized cost."""
    R, G = mean.shape
    for r in range(R):
        per = price[r] / budget
        for g in range(G):
            cost = (cost_sum[r, g] / max(cost_n[r, g], 1) if cost_n[r, g] > 0 else 0.0) * per
            out[0, r, g] = mean[r, g] - cost
            out[1, r, g] = value[r, g] - cost


@njit(cache=True, nogil=True)
def pace(actions, cost, budget, rate, span, cost_sum, cost_n, spent, paid, log_price):  # pragma: no cover - compiled
    """One round of the budget pacer, in place: each run's played model's cost sum and count, the run's spend and paid
    rounds, and its log price ``u <- clip(u + rate (cost / budget - 1), -span, span)``."""
    for r in range(actions.shape[0]):
        a = actions[r]
        cost_sum[r, a] += cost[r]
        cost_n[r, a] += 1
        spent[r] += cost[r]
        paid[r] += 1
        log_price[r] = min(max(log_price[r] + rate * (cost[r] / budget - 1.0), -span), span)


@njit(cache=True, nogil=True)
def recurring(mean, var, noise, cell, within, tiny):  # pragma: no cover - compiled
    """In place, one run's ``mean`` and ``var`` ``(G,)`` updated by a recurring prompt's own outcomes (a normal-normal update).

    ``cell`` ``(G, >= 2)``: each model's count ``k_g`` and sum of outcomes at this prompt; ``within``: the pooled within-prompt
    sum of squares and its degrees of freedom. The within-prompt variance ``s2_w = max((max_g noise_g + ss) / (1 + dof), tiny)``
    and the prompt's prior variance ``var_g + max(noise_g - s2_w, 0)`` (floored at ``tiny``) give the precision
    ``1 / prior + k_g / s2_w``, the mean ``(mean_g / prior + sum_g / s2_w) / precision`` and the variance ``1 / precision``.
    """
    pooled = noise[0]
    for g in range(1, noise.shape[0]):
        pooled = max(pooled, noise[g])
    s2w = max((pooled + within[0]) / (1.0 + within[1]), tiny)
    for g in range(mean.shape[0]):
        prior = max(var[g] + max(noise[g] - s2w, 0.0), tiny)
        precision = 1.0 / prior + cell[g, 0] / s2w
        mean[g] = (mean[g] / prior + cell[g, 1] / s2w) / precision
        var[g] = 1.0 / precision


@njit(cache=True, nogil=True)
def override_laws(mean, var, value, spread, noise, leader_z, z, tiny, out):  # pragma: no cover - compiled
    """Into ``out`` ``(R, G, G)``: ``out[r, k]`` the law of the model row ``r`` plays given the context-free draw ``k``."""
    R, G = mean.shape
    for r in range(R):
        for k in range(G):
            _given_base(mean, var, value, spread, noise, r, k, leader_z, z, tiny, out[r, k])


@njit(cache=True, nogil=True)
def argmax_cells(F, t, w, out):  # pragma: no cover - compiled
    """Into ``out`` ``(G,)``: ``sum over cells of int prod_(j != g) F_j dF_g``, each CDF quadratic in the cell's parameter.

    ``F`` ``(G, 2N + 1)``: the CDFs at the cells' ends and midpoints (columns ``2i``, ``2i + 1``, ``2i + 2``
    for cell ``i``); ``t``, ``w``: Gauss-Legendre nodes and weights on [0, 1], exact for the polynomial integrand.
    """
    G = F.shape[0]
    cells = (F.shape[1] - 1) // 2
    value = np.empty(G)
    slope = np.empty(G)
    out[:] = 0.0
    for i in range(cells):
        for k in range(t.shape[0]):
            for g in range(G):
                lo, mid, hi = F[g, 2 * i], F[g, 2 * i + 1], F[g, 2 * i + 2]
                c1 = 4.0 * mid - 3.0 * lo - hi
                c2 = 2.0 * (lo + hi) - 4.0 * mid
                value[g] = lo + t[k] * (c1 + t[k] * c2)
                slope[g] = c1 + 2.0 * t[k] * c2
            for g in range(G):
                if slope[g] == 0.0:
                    continue
                others = 1.0
                for j in range(G):
                    if j != g:
                        others *= value[j]
                out[g] += w[k] * slope[g] * others
