"""Compiled per-decision kernels of :class:`genbandit.policies.routing.EvidenceThompson` (numba; imported lazily).

The kernels, each one pass over the runs, writing into output arrays the caller allocates (a
compiled function that returns arrays pays about a microsecond to hand each one back to Python):

- :func:`prompt_terms`: the random Fourier features ``phi = scale cos(W y + b)`` of each run's
  context (Rahimi & Recht 2007; ``W`` in single precision, ``W y`` summed in double; a recurring prompt's kept), and per model
  ``z = phi - phibar_g``, ``h = (C_g + lambda_g I)^-1 z`` (BLAS ``dsymv`` on the upper triangle, the only
  one kept: half the bytes), ``z' theta_g`` and ``z' h`` (the posterior mean's and variance's prompt terms);
- :func:`scores`: each model's noise variance, intercept and posterior at the prompt from those terms;
- :func:`posterior_terms`: the two above in one call, and whether a model is untried;
- :func:`beta_laws`: the Beta laws of the context-free Thompson draw;
- :func:`shifted_moments`: the evidence refit's quantities at a trial prior precision from a tridiagonal form;
- :func:`recurring`: a recurring prompt's own outcomes folded into one run's posterior (a normal-normal update);
- :func:`priced` and :func:`pace`: the budget pacer's price applied to the scores, and its step after a round;
- :class:`State` (built by :func:`state`): a policy state's arrays and constants in one object, the one argument of
  :func:`prepare`, :func:`decide` and :func:`learn` besides the round's own;
- :func:`prepare`: all a new context needs before the draws, in one call: :func:`posterior_terms`,
  :func:`recurring` where the prompt has a cell, :func:`priced` with a budget, and :func:`beta_laws`;
- :func:`override`: the model played given the context-free draw, and :func:`override_laws`, the
  law of that model given each possible draw, both from one rule (``_given_base``), with
  :func:`information_directed`, the law of information-directed sampling at a prompt, and :func:`leader_width`, the width
  the rule asks of the context-free leader at a round;
- :func:`context_free_draws`: the Beta draws of the context-free choice and the uniforms of the override step, from the
  policy's NumPy generator itself (:func:`_bit_generator`), the numbers NumPy's own calls would draw;
- :func:`decide`: a whole ``select`` in one call: :func:`prepare` (unless the context's scores are there already),
  :func:`context_free_draws` and :func:`override`;
- :func:`argmax_cells`: the law of the largest of independent draws from their CDFs on cells;
- :func:`learn`: one round, in place: Welford's update of the played model's reward and centred
  feature moments, the outcome into the context-free means under its inverse-propensity weight (:func:`weigh`, with
  :func:`base_law`, the law of the context-free draw), the Sherman-Morrison step on ``(C + lambda I)^-1`` (its upper
  triangle) with its coefficients ``theta``, and the outcome counted in the recurring prompt's cell (:func:`count_cell`),
  so that an update is one call.

Their plain-Python versions (``prompt_terms.py_func`` and so on; :func:`context_free_draws` with the NumPy bit
generator itself in place of :func:`_bit_generator`, which numba's distributions then call through ``ctypes``, and any
object with the ``FIELDS`` as attributes in place of a :class:`State`) compute
the same numbers: ``tests/test_routing_policy.py`` replays the policy with each and compares it round for round.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.experimental import structref
from numba.extending import get_cython_function_address, intrinsic
from numba.np.random.distributions import random_standard_gamma
from numba.np.random.generator_core import next_double

from ._kernel_numba import _LINALG, _dot  # u . v, reassociated so that it vectorises (accumulated in double: u may be single)

#: The address of BLAS ``dsymv`` (SciPy's, as numba's own ``np.dot`` uses), passed to the kernels at each call: a compiled
#: function may be cached to disk only if it holds no address of this process.
SYMV = get_cython_function_address("scipy.linalg.cython_blas", "dsymv")


#: The fields of a policy's :class:`State`: its learned arrays, the scratch arrays the kernels write a decision into, and its constants.
FIELDS = ("freq", "phase", "scale", "bandwidth", "phibar", "Cinv", "theta", "cxy", "n", "ybar", "syy", "weighted", "fitted", "gamma", "ymin",
          "ymax", "prior_dof", "tiny", "min_plays", "symv", "cells", "cell", "has_cell", "within", "cost_sum", "cost_n", "log_price", "unit",
          "budget", "z", "nodes", "node_weights", "next_fit", "due", "phi", "known", "zh", "out", "ab", "untried", "draws", "chosen")


@structref.register
class _StateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(kind)) for name, kind in fields)


class State(structref.StructRefProxy):
    """The arrays and constants of one policy state that :func:`prepare`, :func:`decide` and :func:`learn` read and write (``FIELDS``),
    referenced by one object built once per state (:func:`state`): numba unboxes every argument of a call from Python (about 50 ns
    an array on this machine, 2.0 us for 38 arrays), this one object in 0.6 us."""


structref.define_proxy(State, _StateType, list(FIELDS))


def state(**fields) -> State:
    """A :class:`State` of the given ``FIELDS`` (each by name; the arrays referenced, not copied)."""
    return _new_state(*(fields[name] for name in FIELDS))


@njit(cache=True)
def _new_state(*fields):  # pragma: no cover - compiled
    """:class:`State`'s constructor, compiled once to the disk cache (called from Python, it compiles in every process: 0.6 s)."""
    return State(*fields)


@intrinsic
def _call_blas(typingctx, fn, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    """Call the BLAS routine at address ``fn`` with the ten pointers ``a0..a9`` (all ``intp``)."""
    sig = types.void(types.intp, *[types.intp] * 10)

    def codegen(context, builder, signature, args):
        ptr = ir.IntType(8).as_pointer()
        routine = builder.inttoptr(args[0], ir.FunctionType(ir.VoidType(), [ptr] * 10).as_pointer())
        builder.call(routine, [builder.inttoptr(a, ptr) for a in args[1:]])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _symv(symv, M, x, y):  # pragma: no cover - compiled
    """``y = M x`` for the symmetric matrix whose upper triangle is that of the C-ordered ``M`` (its lower triangle is not read):
    BLAS ``dsymv`` at address ``symv``, half the bytes of a general product."""
    ints = np.array([x.shape[0], x.shape[0], 1], dtype=np.int32)  # n, lda, increment
    coef = np.array([1.0, 0.0])  # alpha, beta
    uplo = np.array([76], dtype=np.uint8)  # "L": the column-major lower triangle, the upper one of the C-ordered M
    _call_blas(symv, uplo.ctypes.data, ints.ctypes.data, coef.ctypes.data, M.ctypes.data, ints[1:].ctypes.data, x.ctypes.data,
               ints[2:].ctypes.data, coef[1:].ctypes.data, y.ctypes.data, ints[2:].ctypes.data)


@njit(cache=True, nogil=True, fastmath=_LINALG)
def _matvec(M, v, out):  # pragma: no cover - compiled
    """``out = M v``, four rows at a time: each element of ``v`` loaded serves four rows' sums, each of which is reassociated as
    :func:`_dot`'s (the same numbers: ``tests/test_decision_bits.py``); 1.6 us less than row by row for 200 x 384."""
    rows, k = M.shape[0], 0
    while k + 4 <= rows:
        m0, m1, m2, m3 = M[k], M[k + 1], M[k + 2], M[k + 3]
        s0, s1, s2, s3 = 0.0, 0.0, 0.0, 0.0
        for j in range(v.shape[0]):
            vj = v[j]
            s0 += m0[j] * vj
            s1 += m1[j] * vj
            s2 += m2[j] * vj
            s3 += m3[j] * vj
        out[k], out[k + 1], out[k + 2], out[k + 3] = s0, s1, s2, s3
        k += 4
    for i in range(k, rows):
        out[i] = _dot(M[i], v)


@njit(cache=True, nogil=True)
def prompt_terms(contexts, freq, phase, scale, bandwidth, phibar, Cinv, theta, symv, phi, known, zh, terms):  # pragma: no cover - compiled
    """Into ``phi`` ``(R, D)``: the features of each run's context, but where ``known[r]`` (they are there already: a recurring
    prompt's, kept by the caller, the same numbers); into ``zh`` ``(2, R, G, D)``: ``z`` and ``h = Cinv z`` of every run and
    model; into ``terms`` ``(2, R, G)``: ``z'theta`` and ``z'h``. ``phi`` is zero in the runs whose ``bandwidth`` is 0 (not
    set yet)."""
    R, G, D = phibar.shape
    z, h, lin, quad = zh[0], zh[1], terms[0], terms[1]
    for r in range(R):
        phi_r = phi[r]
        if not known[r]:
            phi_r[:] = 0.0
            if bandwidth[r] > 0:
                _matvec(freq[r], contexts[r], phi_r)
                for k in range(D):
                    phi_r[k] = scale * math.cos(phi_r[k] + phase[r, k])
        for g in range(G):
            zg, hg, mean_g, theta_g = z[r, g], h[r, g], phibar[r, g], theta[r, g]
            for k in range(D):
                zg[k] = phi_r[k] - mean_g[k]
            _symv(symv, Cinv[r, g], zg, hg)
            lin_g, quad_g = 0.0, 0.0
            for k in range(D):
                lin_g += zg[k] * theta_g[k]
                quad_g += zg[k] * hg[k]
            lin[r, g], quad[r, g] = lin_g, quad_g


@njit(cache=True, nogil=True)
def shifted_moments(d, e, ct, tc, delta, lam):  # pragma: no cover - compiled
    """What the evidence's fixed point needs at ``lam`` from the tridiagonal form ``Q' P Q = T`` (diagonal ``d``, off-diagonal
    ``e``) of ``P = (C + lam_0 I)^-1``, ``delta = lam - lam_0``: ``(C + lam I)^-1 = Q T M^-1 Q'`` with ``M = I + delta T``.

    With ``ct = Q' c`` and ``tc = T ct`` (``c = Phi_c' y_c``): ``x = M^-1 tc``, so that ``m = (C + lam I)^-1 c = Q x``; returns
    ``(gamma, m' c, m' C m, m' m)`` = ``(D - lam tr(T M^-1), ct' x, ct' x - lam x' x, x' x)``. ``M`` by its factorisation ``L diag(p) L'``
    (``L`` unit lower bidiagonal; Golub & Van Loan, Matrix Computations, 4th ed., section 4.3.6), the diagonal and first
    off-diagonal of ``M^-1`` (all the trace needs) by Takahashi's recurrence ``Z = diag(p)^-1 L^-1 + (I - L') Z`` from the last
    row up (Takahashi, Fagan & Chin 1973). ``gamma`` is NaN where a pivot is not positive (``M`` not numerically positive definite).
    """
    D = d.shape[0]
    pivot, low, x = np.empty(D), np.empty(D), np.empty(D)
    pivot[0], x[0] = 1.0 + delta * d[0], tc[0]
    for i in range(D - 1):
        low[i] = delta * e[i] / pivot[i]
        pivot[i + 1] = 1.0 + delta * d[i + 1] - low[i] * delta * e[i]
        x[i + 1] = tc[i + 1] - low[i] * x[i]
    for i in range(D):
        if not pivot[i] > 0.0:
            return math.nan, math.nan, math.nan, math.nan
    x[D - 1] /= pivot[D - 1]
    z = 1.0 / pivot[D - 1]  # (M^-1)_(i, i), from the last row up
    trace = d[D - 1] * z
    for i in range(D - 2, -1, -1):
        x[i] = x[i] / pivot[i] - low[i] * x[i + 1]
        upper = -low[i] * z  # (M^-1)_(i, i + 1)
        z = 1.0 / pivot[i] + low[i] * low[i] * z
        trace += d[i] * z + 2.0 * e[i] * upper
    fit, mm = 0.0, 0.0
    for i in range(D):
        fit += ct[i] * x[i]
        mm += x[i] * x[i]
    return min(max(D - lam * trace, 0.0), D), fit, fit - lam * mm, mm


@njit(cache=True, nogil=True)
def count_cell(cell, g, y, within):  # pragma: no cover - compiled
    """A recurring prompt's outcome ``y`` of model ``g`` counted, in place: the count and sum of the prompt's outcomes of ``g`` in
    ``cell`` ``(G, >= 2)``, and the deviation from their mean before it (Welford) in the pooled within-prompt sum of squares
    ``within[0]`` and its degrees of freedom ``within[1]``."""
    k, total = cell[g, 0], cell[g, 1]
    if k > 0:
        within[0] += k / (k + 1.0) * (y - total / k) ** 2
        within[1] += 1.0
    cell[g, 0], cell[g, 1] = k + 1.0, total + y


@njit(cache=True, nogil=True)
def leader_width(z, t):  # pragma: no cover - compiled
    """The width by which the model of largest posterior mean at a prompt must beat the base choice when it is the context-free
    leader itself (:func:`_given_base`), at round ``t``: leaving the context-free leader for this prompt needs ``z``; cutting
    exploration short for the leader needs the leader above the explored model's upper confidence bound at width
    ``sqrt(2 log t)`` (a Gaussian UCB), so a model unlucky in its first rounds is not frozen out. Computed in the kernels that
    use it, from the round, rather than passed in: a float computed in Python per call costs more than the arithmetic."""
    return max(2.0 * z, math.sqrt(2.0 * math.log(max(t, 1))))


@njit(cache=True, nogil=True)
def learn(arms, rewards, t, state):  # pragma: no cover - compiled
    """One round of every run, in place: the reward range, each played model's count, mean and centred sum of squares
    (Welford); its inverse-propensity weighted sums (``weighted[r, g]``: the sum of the weights, of their squares and the
    weighted mean, a weighted Welford step), the round's weight :func:`base_weight` from the scores ``out`` and Beta laws ``ab``
    of :func:`prepare` on this context (1 where a model was untried: ``untried``, the round's choice ignored the prompt,
    :func:`leader_width` at round ``t`` and ``z_override`` the widths ``select`` used); with ``cells`` (recurring-prompt cells
    kept), the outcome counted in the prompt's cell
    (:func:`count_cell`; ``cell[r]`` that of :func:`prepare`, zeros where the prompt is new: ``has_cell`` false); and where
    the run's bandwidth is set (``bandwidth > 0``), with ``w = n / (n + 1)``:
    ``Cinv -= w h h' / (1 + w z'h)`` (Sherman-Morrison, on the upper triangle: ``Cinv`` holds only that of
    ``(C + lambda I)^-1``), ``theta += w (dy - z'theta) / (1 + w z'h) h``,
    ``cxy += w dy z`` and ``phibar += z / (n + 1)``, ``n`` the model's count before the round; ``z`` and ``h``
    of every model from :func:`prompt_terms`. ``due[r]``: run ``r``'s played model has reached its ``next_fit`` count (a run
    with a bandwidth). Returns ``(any due, any run without a bandwidth)``. The arrays and constants named here are the fields of
    ``state`` (:func:`state`; ``z_override`` is its ``z``).
    """
    n, ybar, syy, ymin, ymax, Cinv, theta, cxy = state.n, state.ybar, state.syy, state.ymin, state.ymax, state.Cinv, state.theta, state.cxy
    phibar, bandwidth, zh, next_fit, due, cells, cell, has_cell = (state.phibar, state.bandwidth, state.zh, state.next_fit, state.due,
                                                                   state.cells, state.cell, state.has_cell)
    within, out, ab, untried, z_override, tiny = state.within, state.out, state.ab, state.untried, state.z, state.tiny
    nodes, node_weights, weighted = state.nodes, state.node_weights, state.weighted
    leader_z = leader_width(z_override, t)
    G, D = Cinv.shape[1], Cinv.shape[2]
    z, h = zh[0], zh[1]
    laws, law = np.empty((G, G)), np.empty(G)
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
        forced = _any(untried[r : r + 1])  # a model untried: the round's choice ignored the prompt
        weight = 1.0 if forced else base_weight(out[5], out[1], out[6], out[3], out[4], ab, r, g, has_cell[r], leader_z, z_override, tiny,
                                                nodes, node_weights, laws, law)
        total = weighted[r, g, 0] + weight
        weighted[r, g, 0] = total
        weighted[r, g, 1] += weight * weight
        weighted[r, g, 2] += weight / total * (y - weighted[r, g, 2])
        if cells:
            if not has_cell[r]:
                cell[r] = 0.0
            count_cell(cell[r], g, y, within[r])
        live = bandwidth[r] > 0
        due[r] = live and n[r, g] >= next_fit[r, g]
        some_due = some_due or due[r]
        if not live:
            waiting = True
            continue
        zg, hg, M = z[r, g], h[r, g], Cinv[r, g]
        zt = np.dot(zg, theta[r, g])
        denom = 1.0 + w * np.dot(zg, hg)
        coef = w / denom
        step = w * (dy - zt) / denom
        for i in range(D):  # the upper triangle, the one the products read (each row's loop here, not in a called function: 2 us less)
            row, tail, factor = M[i, i:], hg[i:], -(coef * hg[i])
            for j in range(row.shape[0]):
                row[j] += factor * tail[j]
        theta_g, cxy_g, mean_g = theta[r, g], cxy[r, g], phibar[r, g]
        for i in range(D):
            theta_g[i] += step * hg[i]
            cxy_g[i] += w * dy * zg[i]
            mean_g[i] += zg[i] / (k + 1.0)
    return some_due, waiting


@njit(cache=True, nogil=True)
def base_law(ab, r, nodes, node_weights, law):  # pragma: no cover - compiled
    """Into ``law`` ``(G,)``: the law of the largest of run ``r``'s context-free draws, each ``Beta(a_g, b_g)`` (``ab``
    ``(2, R, G)``) taken as the Gaussian of its mean and variance: ``P(g) = E[prod_(j != g) Phi((X_g - m_j) / s_j)]``,
    ``X_g ~ N(m_g, s_g^2)``, by Gauss-Hermite quadrature (``nodes``, ``node_weights``: the probabilists' rule, weights
    summing to 1), normalised to sum to 1."""
    G = law.shape[0]
    m = np.empty(G)
    s = np.empty(G)
    for g in range(G):
        a, b = ab[0, r, g], ab[1, r, g]
        m[g] = a / (a + b)
        s[g] = max(math.sqrt(a * b / ((a + b) * (a + b) * (a + b + 1.0))), 1e-12)
    total = 0.0
    for g in range(G):
        acc = 0.0
        for i in range(nodes.shape[0]):
            x = m[g] + s[g] * nodes[i]
            others = 1.0
            for j in range(G):
                if j != g:
                    others *= 0.5 * math.erfc((m[j] - x) / (s[j] * math.sqrt(2.0)))
            acc += node_weights[i] * others
        law[g] = acc
        total += acc
    for g in range(G):
        law[g] = law[g] / total if total > 0.0 else 1.0 / G


@njit(cache=True, nogil=True)
def base_weight(mean, var, value, spread, noise, ab, r, g, seen, leader_z, z, tiny, nodes, node_weights, laws, law):  # pragma: no cover - compiled
    """The stabilised inverse-propensity weight ``q(g) / p(g | x)`` of model ``g`` played at run ``r``'s prompt ``x`` (Horvitz &
    Thompson 1952; Robins, Hernan & Brumback 2000): ``q`` the law of the context-free draw (:func:`base_law`, into ``law`` ``(G,)``),
    ``p(g | x) = sum_k q(k) P(g | base k, x)`` the law of the model played at this prompt, from the rule ``select`` applies given
    each base (:func:`_given_base`, into ``laws`` ``(G, G)``). 1 wherever that rule keeps every base (then ``p = q``); where no
    other base leads to ``g``, ``1 / P(g | base g, x)`` without ``q``; and 1 where ``p(g | x) = 0`` (a decision forced from
    outside, or feedback that arrives after the state moved), as a logged row."""
    G = mean.shape[1]
    sent = 0.0  # how far the other bases lead to g
    for k in range(G):
        _given_base(mean, var, value, spread, noise, r, k, seen, leader_z, z, tiny, laws[k])
        if k != g:
            sent += laws[k, g]
    if sent == 0.0:  # p(g | x) = q(g) P(g | base g, x)
        return 1.0 / laws[g, g] if laws[g, g] > 0.0 else 1.0
    base_law(ab, r, nodes, node_weights, law)
    p = 0.0
    for k in range(G):
        p += law[k] * laws[k, g]
    return law[g] / p if p > 0.0 else 1.0


@njit(cache=True, nogil=True)
def scores(n, ybar, syy, fitted, gamma, ymin, ymax, weighted, terms, prior_dof, tiny, out):  # pragma: no cover - compiled
    """Each model's noise variance, context-free mean and its variance, and posterior mean and variance at the prompt.

    Per run, with ``n_g`` rounds of model ``g``: the noise ``(prior_dof s2_pool + dof_g s2_g) / (prior_dof + dof_g)``,
    ``dof_g = max(n_g - 1 - gamma_g, 0)``, ``s2_g`` the evidence estimate (``fitted``, the sample variance
    while it is 0), ``s2_pool`` the within-model variance pooled over models (``(range / 2)^2`` before
    any model has two rounds); the intercept ``b_g = (grand + n_g ybar_g) / (n_g + 1)`` with one
    pseudo-round at the mean over models; at the prompt ``mean = b_g + z'theta_g`` and
    ``var = noise (1 / (n_g + 1) + max(z'h, 0))``; context-free, from the weighted outcomes (``weighted[r, g]``: the sum of
    the weights ``W``, of their squares ``W2`` and the weighted mean ``ybar_w``, :func:`learn`), with the effective sample
    size ``e_g = W^2 / W2`` (Kish 1965) and again one pseudo-round at the mean over models, ``value = (grand + e_g ybar_w)
    / (e_g + 1)`` and ``spread = noise / (e_g + 1)``. ``terms`` from :func:`prompt_terms`; into ``out`` ``(5, R, G)``:
    ``(mean, var, value, spread, noise)``.
    """
    R, G = n.shape
    lin, quad = terms[0], terms[1]
    mean, var, value, spread, noise = out[0], out[1], out[2], out[3], out[4]
    for r in range(R):
        within = 0.0
        total = 0.0
        rounds = 0.0
        sum_y = 0.0
        for g in range(G):
            within += max(n[r, g] - 1, 0)
            total += syy[r, g]
            rounds += n[r, g]
            sum_y += ybar[r, g] * n[r, g]
        if within > 0:
            pool = max(total, tiny) / within
        else:
            half = (ymax[r] - ymin[r]) / 2.0
            pool = max(half * half, tiny)
        grand = sum_y / max(rounds, 1.0)
        for g in range(G):
            dof = max(n[r, g] - 1.0 - gamma[r, g], 0.0)
            s2 = fitted[r, g] if fitted[r, g] > 0 else syy[r, g] / max(n[r, g] - 1.0, 1.0)
            noise[r, g] = (prior_dof * pool + dof * s2) / (prior_dof + dof)
            weight = n[r, g] + 1.0
            b = (grand + n[r, g] * ybar[r, g]) / weight
            mean[r, g] = b + lin[r, g]
            var[r, g] = noise[r, g] * (1.0 / weight + max(quad[r, g], 0.0))
            sw, sw2 = weighted[r, g, 0], weighted[r, g, 1]
            size = sw * sw / sw2 if sw2 > 0.0 else 0.0
            value[r, g] = (grand + size * weighted[r, g, 2]) / (size + 1.0)
            spread[r, g] = noise[r, g] / (size + 1.0)


@njit(cache=True, nogil=True)
def posterior_terms(contexts, freq, phase, scale, bandwidth, phibar, Cinv, theta, n, ybar, syy, weighted, fitted, gamma, ymin, ymax, prior_dof, tiny,
                    min_plays, symv, phi, known, zh, out, untried):  # pragma: no cover - compiled
    """:func:`prompt_terms` then :func:`scores` of each run's context, and into ``untried`` ``(R, G)`` whether model ``g`` of run
    ``r`` was played fewer than ``min_plays`` times; returns whether any was."""
    terms = np.empty((2, n.shape[0], n.shape[1]))
    prompt_terms(contexts, freq, phase, scale, bandwidth, phibar, Cinv, theta, symv, phi, known, zh, terms)
    scores(n, ybar, syy, fitted, gamma, ymin, ymax, weighted, terms, prior_dof, tiny, out)
    for r in range(n.shape[0]):
        for g in range(n.shape[1]):
            untried[r, g] = n[r, g] < min_plays
    return _any(untried)


@njit(cache=True, nogil=True)
def _any(flags):  # pragma: no cover - compiled
    """Whether any of the ``(R, G)`` ``flags`` is set."""
    for r in range(flags.shape[0]):
        for g in range(flags.shape[1]):
            if flags[r, g]:
                return True
    return False


@njit(cache=True, nogil=True)
def prepare(contexts, state):  # pragma: no cover - compiled
    """Everything a new context needs before the draws, in one call; returns whether any model is untried (played fewer than
    ``min_plays`` times). The arrays and constants named below are the fields of ``state`` (:func:`state`).

    :func:`posterior_terms` into ``phi`` (unless ``known``), ``zh``, ``out[:5]`` and ``untried``; then, in the runs where ``has_cell``,
    :func:`recurring` with the prompt's ``cell[r]`` on ``out[0]`` and ``out[1]``; then the scores the choice uses into
    ``out[5:7]`` (``out[0]`` and ``out[2]``, :func:`priced` where ``budget > 0``); then :func:`beta_laws` of ``out[6]``
    and the spread into ``ab``.
    """
    s = state
    out, ymin, ymax, tiny = s.out, s.ymin, s.ymax, s.tiny
    fresh = posterior_terms(contexts, s.freq, s.phase, s.scale, s.bandwidth, s.phibar, s.Cinv, s.theta, s.n, s.ybar, s.syy, s.weighted, s.fitted,
                            s.gamma, ymin, ymax, s.prior_dof, tiny, s.min_plays, s.symv, s.phi, s.known, s.zh, out, s.untried)
    cell, has_cell, within = s.cell, s.has_cell, s.within
    for r in range(has_cell.shape[0]):
        if has_cell[r]:
            recurring(out[0, r], out[1, r], out[4, r], cell[r], within[r], tiny)
    if s.budget > 0:
        priced(out[0], out[2], s.cost_sum, s.cost_n, s.log_price, ymin, ymax, s.unit, s.budget, out[5:7])
    else:
        out[5] = out[0]
        out[6] = out[2]
    beta_laws(out[6], out[3], ymin, ymax, tiny, s.ab)
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
def _given_base(mean, var, value, spread, noise, r, k, seen, leader_z, z, tiny, law):  # pragma: no cover - compiled
    """Into ``law`` ``(G,)``: the law of the model row ``r`` plays when its context-free draw is ``k``.

    The model of largest posterior mean at the prompt when it beats ``k`` by ``z`` posterior standard deviations of the
    difference (``leader_z`` when it is the context-free leader); else, where ``k`` is worse at the prompt than its
    context-free mean by ``2 z`` standard deviations, the information-directed law (:func:`information_directed`; Russo &
    Van Roy 2018); else ``k``. At a prompt seen before (``seen``: its posterior holds the prompt's own outcomes,
    :func:`recurring`) the information-directed law decides wherever ``k`` is not the model of largest posterior mean
    there, without the confidence the two rules above ask of a posterior that only the kernel informs.
    """
    G = mean.shape[1]
    law[:] = 0.0
    best = 0
    leader = 0
    for g in range(1, G):
        if mean[r, g] > mean[r, best]:
            best = g
        if value[r, g] > value[r, leader]:
            leader = g
    width = leader_z if best == leader else z
    own = seen and best != k  # the prompt's own outcomes say another model leads there: the information-directed law decides
    if not own and mean[r, best] - mean[r, k] > width * math.sqrt(var[r, best] + var[r, k]):
        law[best] = 1.0
    elif own or value[r, k] - mean[r, k] > 2.0 * z * math.sqrt(var[r, k] + spread[r, k]):
        a, b, q = information_directed(mean[r], var[r], noise[r], tiny)
        law[a] += q
        law[b] += 1.0 - q
    else:
        law[k] = 1.0


@njit(cache=True, nogil=True)
def override(mean, var, value, spread, noise, draws, seen, leader_z, z, tiny, out):  # pragma: no cover - compiled
    """Into ``out`` ``(R,)``: the model each row plays given its context-free draws ``draws[r G:(r + 1) G]``, whose largest (the
    first of equal ones, as ``argmax``) is the base choice (see :class:`~genbandit.policies.routing.EvidenceThompson`), drawn from
    :func:`_given_base`'s law by inversion with the uniform ``draws[R G + r]``: the first model whose cumulative probability exceeds
    it (the last one with mass if none), so the information-directed law plays ``a`` when the uniform is below ``q``, else ``b``.
    ``seen`` ``(R,)``: whether each row's prompt was seen before.
    """
    R, G = mean.shape
    law = np.empty(G)
    for r in range(R):
        base = 0
        for g in range(1, G):
            if draws[r * G + g] > draws[r * G + base]:
                base = g
        _given_base(mean, var, value, spread, noise, r, base, seen[r], leader_z, z, tiny, law)
        total = 0.0
        for g in range(G):
            if law[g] > 0.0:
                out[r] = g
                total += law[g]
                if draws[R * G + r] < total:
                    break


_BIT_GENERATOR = types.NumPyRandomBitGeneratorType("bit_generator")


@intrinsic
def _bit_generator(typingctx, address):
    """numba's bit generator on the NumPy one whose ``bitgen_t`` is at ``address`` (``rng.bit_generator.ctypes.bit_generator``: its
    state and its ``next_uint64``, ``next_uint32`` and ``next_double`` functions, in that order): numba's distributions then
    draw through NumPy's own functions, advancing the NumPy generator's state. Read from the address given at each call, so
    that the kernels can be cached to disk (as ``SYMV``), and without unboxing a ``Generator`` (several microseconds a call)."""
    def codegen(context, builder, signature, args):
        word = context.get_value_type(types.uintp)
        words = builder.inttoptr(args[0], word.as_pointer())
        bitgen = cgutils.create_struct_proxy(_BIT_GENERATOR)(context, builder)
        bitgen.state, bitgen.fnptr_next_uint64, bitgen.fnptr_next_uint32, bitgen.fnptr_next_double = (
            builder.load(builder.gep(words, [ir.Constant(word, k)])) for k in range(4))
        return bitgen._getvalue()

    return _BIT_GENERATOR(types.uintp), codegen


@njit(cache=True, nogil=True)
def _beta(bitgen, a, b):  # pragma: no cover - compiled
    """One ``Beta(a, b)`` draw, the number NumPy's ``Generator.beta(a, b)`` draws from the same state, leaving the same state.

    With ``a, b <= 1`` Johnk's algorithm (Johnk 1964): uniforms ``U, V`` until ``X + Y <= 1`` for ``X = U^(1/a)``,
    ``Y = V^(1/b)``, then ``X / (X + Y)``, on a log scale where either power underflows to 0; else ``G_a / (G_a + G_b)``
    with two standard Gamma draws (Marsaglia & Tsang 2000; numba's port of NumPy's, the same numbers). ``a, b >= 1e-6``
    here (:func:`beta_laws`), so NumPy's Bernoulli shortcut below ``3e-103`` never applies. The underflow branch is the one
    of NumPy 2.1 and later (an underflowed power is accepted and handled on the log scale; earlier releases rejected the
    pair when both underflowed and took ``log`` for ``log1p``), hence the package's ``numpy>=2.1``.
    """
    if a <= 1.0 and b <= 1.0:
        while True:
            U = next_double(bitgen)
            V = next_double(bitgen)
            X = U ** (1.0 / a)
            Y = V ** (1.0 / b)
            if X + Y <= 1.0 and U + V > 0.0:
                if X > 0.0 and Y > 0.0:
                    return X / (X + Y)
                log_x, log_y = math.log(U) / a, math.log(V) / b
                top = max(log_x, log_y)
                log_x, log_y = log_x - top, log_y - top  # one of them 0
                return math.exp(log_x - math.log1p(math.exp(min(log_x, log_y))))
    Ga = random_standard_gamma(bitgen, a)
    Gb = random_standard_gamma(bitgen, b)
    return Ga / (Ga + Gb)


@njit(cache=True, nogil=True)
def context_free_draws(generator, ab, uniforms, draws):  # pragma: no cover - compiled
    """Into ``draws``: a ``Beta(a, b)`` draw of every run and model in turn (``ab`` ``(2, R, G)``), then ``uniforms`` uniform
    numbers on [0, 1), from the NumPy bit generator whose ``bitgen_t`` is at the address ``generator`` (:func:`_bit_generator`):
    the numbers of ``[rng.beta(a, b) for a, b in ...]`` then ``rng.random(uniforms)`` on that generator, whose state they
    advance as those calls do (:func:`_beta`)."""
    bitgen = _bit_generator(generator)
    R, G = ab.shape[1], ab.shape[2]
    for r in range(R):
        for g in range(G):
            draws[r * G + g] = _beta(bitgen, ab[0, r, g], ab[1, r, g])
    for k in range(uniforms):
        draws[R * G + k] = next_double(bitgen)


@njit(cache=True, nogil=True)
def decide(contexts, prepared, state, generator, t):  # pragma: no cover - compiled
    """A ``select`` at round ``t`` in one call; returns whether any model is untried.

    :func:`prepare` of the contexts unless ``prepared`` (its outputs in ``state`` are those of these contexts already); then
    :func:`context_free_draws` of the Beta laws ``state.ab`` into ``state.draws``: where a model is untried, only the Beta
    draws (the caller plays an untried model); else with one uniform per run, and :func:`override` of the scores
    ``out[5], out[1], out[6], out[3], out[4]`` into ``state.chosen``.
    """
    untried = state.untried
    fresh = _any(untried) if prepared else prepare(contexts, state)
    context_free_draws(generator, state.ab, 0 if fresh else untried.shape[0], state.draws)
    if not fresh:
        out = state.out
        z = state.z
        override(out[5], out[1], out[6], out[3], out[4], state.draws, state.has_cell, leader_width(z, t), z, state.tiny, state.chosen)
    return fresh


@njit(cache=True, nogil=True)
def priced(mean, value, cost_sum, cost_n, log_price, ymin, ymax, unit, budget, out):  # pragma: no cover - compiled
    """Into ``out`` ``(2, R, G)``: ``mean`` and ``value`` minus each model's running mean cost (0 before its first) times the
    run's price per ``budget``-sized cost, ``sign(u) unit (ymax - ymin) (exp|u| - 1)`` from its log price ``u``."""
    R, G = mean.shape
    for r in range(R):
        u = log_price[r]
        price = math.copysign(unit * max(ymax[r] - ymin[r], 0.0) * math.expm1(abs(u)), u) if u != 0.0 else 0.0
        per = price / budget
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
    ``1 / prior + k_g / s2_w``, the mean ``(mean_g / prior + sum_g / s2_w) / precision`` and the variance
    ``min(1 / precision, var_g)``: the prompt's own outcomes sharpen the kernel posterior ``var_g``, the one a new prompt gets,
    and never widen it (the random effect's variance sets how far they move the mean). ``noise`` becomes ``s2_w``, the
    variance of one more outcome of this very prompt, against which the information-directed step measures what an
    outcome would teach about the prompt's mean.
    """
    pooled = noise[0]
    for g in range(1, noise.shape[0]):
        pooled = max(pooled, noise[g])
    s2w = max((pooled + within[0]) / (1.0 + within[1]), tiny)
    for g in range(mean.shape[0]):
        prior = max(var[g] + max(noise[g] - s2w, 0.0), tiny)
        precision = 1.0 / prior + cell[g, 0] / s2w
        mean[g] = (mean[g] / prior + cell[g, 1] / s2w) / precision
        var[g] = min(1.0 / precision, var[g])
    noise[:] = s2w


@njit(cache=True, nogil=True)
def override_laws(mean, var, value, spread, noise, seen, leader_z, z, tiny, out):  # pragma: no cover - compiled
    """Into ``out`` ``(R, G, G)``: ``out[r, k]`` the law of the model row ``r`` plays given the context-free draw ``k`` (``seen`` ``(R,)``:
    whether each row's prompt was seen before)."""
    R, G = mean.shape
    for r in range(R):
        for k in range(G):
            _given_base(mean, var, value, spread, noise, r, k, seen[r], leader_z, z, tiny, out[r, k])


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
