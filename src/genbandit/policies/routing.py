"""The router's default policy: empirical-Bayes Thompson sampling over models, with a per-prompt deviation.

:class:`EvidenceThompson` plays Thompson sampling over the models (Thompson 1933; for linear
payoffs, Agrawal & Goyal 2013) on a hierarchical Bayesian model of each model's score:

    score_g(y) = b_g + phi(y)' w_g + u_{p(y), g} + noise,

where ``b_g`` is the model's mean score (the context-free part), ``phi`` are random
Fourier features of an RBF kernel on the prompt embedding (Rahimi & Recht 2007; the per-arm kernel
model of Hu, Leung & Farnia 2025, Algorithms 4-5), ``w_g ~ N(0, alpha_g^-1 I)`` a per-prompt
deviation whose prior scale is chosen by evidence maximisation (MacKay 1992; Bishop, PRML
section 3.5.2), and ``u`` the effect of one exact prompt that recurs (one random effect per
(prompt, model) cell, its variance the part of the residual variance that repeats of a prompt
do not share). Nothing is tuned to a stream: the bandwidth is the median distance between the
first prompts seen (the median heuristic), the noise and the slope prior come from the evidence
of each model's own data, and the within-prompt noise from the prompts that recurred; the few
fixed constants (a confidence level, pseudo-rounds of the priors) are library defaults.

The base choice is Thompson sampling over the models, ignoring the prompt; the per-prompt
posterior replaces it only where another model is confidently better at that prompt, and where the
base model is confidently poor at the prompt, information-directed sampling (Russo & Van Roy 2018)
on the per-prompt posteriors chooses. Where the
prompt carries no signal the evidence drives ``alpha_g`` up, the deviation to zero and the
policy to Thompson sampling over the models. Shapes: contexts ``(n_runs, n_features)``.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from types import SimpleNamespace
from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy.linalg import blas, lapack
from scipy.special import betainc, betaln, ndtr

from ..core.base import Policy
from ..core.registry import ENVIRONMENTS, register_policy
from ..core.serialization import from_jsonable, to_jsonable
from ..core.validation import Interval, InvalidInputError, check_finite_array
from ._stats import argmax_random_ties
from .kernel import _PerDecisionCache

__all__ = ["EvidenceThompson", "argmax_law", "beta_argmax_law", "evidence_ridge", "gaussian_argmax_law"]

_LAMBDA_START = 1e6  # slope prior precision / noise precision before any evidence: no deviation
_SHIFT_LIMIT = 100.0  # a refit from (C + lambda_0 I)^-1 with lambda_0 above this takes the eigendecomposition (EvidenceThompson._refit)
_FEATURES_KEPT = 1024  # recurring prompts whose features a policy keeps over all its runs (EvidenceThompson._keep_features): 5 MB at most
# with 384-d embeddings and 200 features (each kept with its context's bytes)
_PRIOR_DOF = 2.0  # pseudo-rounds of the pooled variance in each model's noise estimate
_EVIDENCE_ITERS = 50  # most steps of the evidence's fixed point, whichever way its moments are computed
_TINY = 1e-12  # variance floor: rewards that never varied
_SPREAD = np.concatenate([[-40.0, -20.0, -10.0, -7.0, -5.0], np.linspace(-4.0, 4.0, 17), [5.0, 7.0, 10.0, 20.0, 40.0]])  # law nodes, in sds
_TAIL = np.geomspace(1e-12, 0.5, 16)  # law nodes at these tail probabilities of a Beta law with a < 1 (or b < 1)
_UNIFORM = np.linspace(0.0, 1.0, 17)
_DECADES = 10.0 ** -np.concatenate([np.arange(0.5, 20.0, 0.5), np.arange(20.0, 320.0, 4.0)])  # and at these distances from that end
_PRICE_UNIT = 0.01  # the pacer's price is +-_PRICE_UNIT (exp|u| - 1) reward ranges per budget-sized cost
_PRICE_SPAN = math.log(1e6)  # |u| at most: prices from -1e4 to 1e4 reward ranges
# the Gauss-Hermite rule of the base law in the weights (base_law): its error there is the Gaussian's in place of the Beta law
# (about 0.01 at the 95th percentile against beta_argmax_law), whatever the nodes from 8 to 24
_NODES, _NODE_WEIGHTS = np.polynomial.hermite_e.hermegauss(8)
_NODE_WEIGHTS = _NODE_WEIGHTS / _NODE_WEIGHTS.sum()


def evidence_ridge(eig: np.ndarray, proj: np.ndarray, syy: float, n: int, lam: float = 1.0, iters: int = _EVIDENCE_ITERS, pool: float = 0.0,
                   dof: float = 0.0, alpha_pool: float = 0.0, alpha_dof: float = 0.0) -> tuple[float, float, float]:
    """Evidence maximisation for Bayesian ridge regression on centred data (Bishop, PRML eqs. 3.91-3.95).

    ``eig`` are the eigenvalues of the centred scatter ``C = Phi_c' Phi_c`` and ``proj`` the
    centred cross moment ``Phi_c' y_c`` in its eigenbasis; ``syy = y_c' y_c`` and ``n`` the rows
    (the intercept, fitted by the mean, takes one degree of freedom). MacKay's fixed point:
    ``gamma = sum e_i / (e_i + lambda)``, ``alpha = gamma / |m|^2``,
    ``1/beta = (dof pool + RSS) / (dof + n - 1 - gamma)``, ``lambda = alpha / beta``: with ``dof > 0``
    the noise carries ``dof`` pseudo-rounds of variance ``pool`` (the scale of the scaled
    inverse-chi^2 posterior of a conjugate prior on the noise, Gelman et al., Bayesian Data Analysis,
    section 3.3), so with fewer rows than features the fixed point cannot collapse onto an
    interpolating fit (noise and ``lambda`` both to zero). With ``alpha_dof > 0`` the slope
    precision carries ``alpha_dof`` pseudo-parameters of precision ``alpha_pool``: ``alpha`` is the
    mode of its posterior under a Gamma hyperprior of shape ``1 + alpha_dof / 2`` and rate
    ``alpha_dof / (2 alpha_pool)`` (whose mode is ``alpha_pool``), ``alpha = (gamma + alpha_dof) /
    (|m|^2 + alpha_dof / alpha_pool)`` (the Gamma hyperprior of Tipping 2001, "Sparse Bayesian
    learning and the relevance vector machine", here on one precision for all the slopes).
    Returns ``(lambda, noise variance 1/beta, gamma)``.

    >>> rng = np.random.default_rng(0); X = rng.normal(size=(200, 3)); y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=200)
    >>> Xc, yc = X - X.mean(0), y - y.mean(); e, V = np.linalg.eigh(Xc.T @ Xc)
    >>> lam, s2, gamma = evidence_ridge(e, V.T @ (Xc.T @ yc), float(yc @ yc), 200)
    >>> round(s2, 3), round(gamma, 2)
    (0.011, 3.0)
    """
    eig = np.maximum(eig, 0.0)

    def moments(lam: float) -> tuple[float, float, float, float]:
        shrunk = eig + lam
        m = proj / shrunk
        return float((eig / shrunk).sum()), float(m @ proj), float((eig * m * m).sum()), float(m @ m)

    return _evidence_fixed_point(moments, syy, n, lam, iters, pool, dof, alpha_pool, alpha_dof)


def _evidence_fixed_point(moments, syy: float, n: int, lam: float, iters: int, pool: float, dof: float, alpha_pool: float,
                          alpha_dof: float) -> tuple[float, float, float]:
    """MacKay's fixed point of :func:`evidence_ridge` from ``moments(lambda)``: ``(gamma, m' Phi_c' y_c, m' C m, m' m)`` at each
    trial ``lambda``, ``m = (C + lambda I)^-1 Phi_c' y_c``, however they are computed (an eigenbasis or a tridiagonal form)."""
    s2 = (dof * pool + syy) / max(dof + n - 1, 1)
    for _ in range(iters):
        gamma, fit, curvature, mm = moments(lam)
        rss = max(syy - 2.0 * fit + curvature, 0.0)
        s2 = max((dof * pool + rss) / max(dof + n - 1 - gamma, 1e-9), 1e-12)
        if alpha_dof > 0 and alpha_pool > 0:
            new = min(max(s2 * (gamma + alpha_dof) / (mm + alpha_dof / alpha_pool), 1e-8), _LAMBDA_START)
        else:
            new = min(max(s2 * gamma / mm, 1e-8), _LAMBDA_START) if mm > 0 and gamma > 0 else _LAMBDA_START
        if abs(math.log(new / lam)) < 1e-4:
            lam = new
            break
        lam = new
    return lam, s2, moments(lam)[0]


@register_policy("evidence-thompson", "router-default")
class EvidenceThompson(_PerDecisionCache, Policy):
    """Empirical-Bayes Thompson sampling over models with a kernel per-prompt deviation (the router's default).

    Per model ``g``, a Bayesian linear model on ``[1, phi(y)]``: an intercept (the model's mean
    score, shrunk by one pseudo-round to the mean over models) and ``w_g ~ N(0, s2_g/lambda_g I)``
    on the random-feature slopes. With ``n_g`` rounds, feature mean ``phibar_g``, centred scatter
    ``C_g`` and ``z = phi(y) - phibar_g``, the posterior of the model's mean score at ``y`` is
    ``N(b_g + z' theta_g, s2_g (1/(n_g + 1) + z' (C_g + lambda_g I)^-1 z))``, ``theta_g = (C_g +
    lambda_g I)^-1 Phi_c' y_c`` (PRML eqs. 3.53-3.54 with the intercept fitted by the mean).
    ``lambda_g`` and ``s2_g`` maximise the evidence of model ``g``'s data (:func:`evidence_ridge`),
    refitted whenever ``n_g`` doubles, with two pseudo-parameters of the slope precision pooled over
    models, ``sum_h gamma_h / sum_h |theta_h|^2`` (a Gamma hyperprior whose mode it is), so a model with
    few rounds, or rounds on a few kinds of prompt only, takes the scale of the per-prompt deviation
    the other models show instead of one its own data barely identify (on the real ParetoBandit stream:
    the median order from 0.0004 below the best single model to 0.0001 below, docs/router.md), and
    with two pseudo-rounds of the variance pooled over models in
    the noise (a scaled inverse-chi^2 prior): without them a model with fewer rounds than features
    can reach the evidence's degenerate fixed point, an interpolating fit with ``lambda_g`` and
    ``s2_g`` near zero, whose posterior at any new prompt is then as wide as the pooled noise over
    ``lambda_g`` makes it (on the real ParetoBandit stream the weakest model, sent prompts for that
    width, took 3% to 11% of the rounds after round 1,000 in 3 of 120 orders); ``s2_g`` is again
    shrunk by two pseudo-rounds to the variance pooled over models when the scores are formed.
    ``(C_g + lambda_g I)^-1`` (its upper triangle) is kept by Sherman-Morrison between refits, with
    the features, ``(C_g + lambda_g I)^-1 z`` and the scores of the last ``select`` reused by the ``update``;
    ``probabilities`` and the ``select`` after it on the same context share the features and the
    scores, and a recurring prompt's features are kept for its next decision (:meth:`_keep_features`). The per-decision
    arithmetic runs in compiled kernels (:mod:`genbandit.policies._routing_numba`):
    a ``select`` is one call (the features, the scores, the draws from the policy's generator and the choice), an
    ``update`` one call.

    A round (models played fewer than ``initial_plays`` times first, in random order):

    1. the base choice is Thompson sampling over the models, ignoring the prompt (Thompson 1933;
       Agrawal & Goyal 2012): each model's mean over the prompts, drawn from the Beta law with that
       mean and its variance on the observed reward range (its skewed tail keeps a model whose first
       outcomes were unlucky in play, where a Gaussian draw would freeze it out). Steps 2-3 play a
       model on the prompts where the posteriors send it, so the mean of its outcomes is biased by
       where it was played (a model sent the prompts hard for another looks worse than it is); the
       mean is that of its outcomes weighted by the inverse of the probability with which the round
       played it, stabilised (Horvitz & Thompson 1952; the ratio form of Hajek 1971; stabilised
       weights, Robins, Hernan & Brumback 2000): ``w_s = q_s(g) / p_s(g | x_s)``, with ``q_s`` the law
       of this step's draw, which ignores the prompt, and ``p_s(g | x) = sum_k q_s(k) P(g | base k,
       x)`` the law of the model played, from the rule steps 2-3 apply given each base
       (:func:`~genbandit.policies._routing_numba.base_weight`). Wherever steps 2-3 leave every base
       alone ``p = q`` and the weight is 1: the model's own mean, as plain Thompson sampling keeps
       it, with no estimate of the per-prompt deviation in it; only the selection steps 2-3 make is
       undone. The mean is shrunk by one pseudo-round to the mean over models and its variance is
       ``s2_g / (e_g + 1)``, ``e_g = (sum w)^2 / sum w^2`` the effective sample size of the weighted
       outcomes (Kish 1965, Survey Sampling, section 11.7). ``q_s`` takes each Beta law as the
       Gaussian of its moments (Gauss-Hermite quadrature), and is computed only where another base
       leads to the model played; a round that plays an untried model, and a row of ``fit_logged``
       (no draw behind it), weighs 1, as does an outcome the rule would not have played (a forced
       model, or feedback arriving after the state moved). The weighted mean estimates the model's
       mean over the prompts where the rule can play it; at a prompt where no base leads to it, no
       weight makes up for its absence. Before this, the mean was regression-adjusted to the mean
       feature of every prompt by the model's slopes (the regression estimator, Cochran 1977,
       Sampling Techniques, chapter 7): its 200 slopes, fitted on noisy pass/fail outcomes, put their
       error into every round's base draw, and on such outcomes the policy fell below plain Thompson
       sampling by about two standard errors; with the weights it is level with it, and on the real
       ParetoBandit stream level with the adjusted mean at the end, ahead of it in the first rounds
       (docs/router.md, "Streams it was not built on");
    2. the model of largest posterior mean at this prompt replaces the base choice when it is
       better by ``override_z`` posterior standard deviations of the difference (by the larger of
       ``2 override_z`` and the Gaussian UCB width ``sqrt(2 log t)`` when it is the context-free
       leader itself, so exploration is cut short only where it is safe);
    3. where the base model is worse at this prompt than its mean by ``2 override_z`` standard
       deviations, information-directed sampling on the posteriors at this prompt decides (Russo &
       Van Roy 2018): the law over at most two models of least information ratio ``(E gap)^2 /
       E information``, with each model's expected gap ``E[max_b theta_b] - mean_a`` (Clark's 1961
       recursion for the expected maximum) and the Gaussian information ``log(1 + var_a / noise_a)
       / 2`` one outcome gives about its mean. A per-prompt Thompson draw here (Agrawal & Goyal 2013)
       tries any model whose posterior at the prompt is wide, which on real traffic is the weakest
       model, seen least and far worse; information-directed sampling tries it only where what it
       would teach outweighs its expected gap squared. On 40 orders of the ParetoBandit stream this
       step took the mean quality from 0.0018 below the best single model to 0.0014 below
       (docs/router.md).

    ``override_z=None`` plays per-prompt Thompson sampling (Agrawal & Goyal 2013) in every round.

    ``probabilities`` (the propensity the router logs with each decision) is the law of a round,
    computed rather than sampled: the law of the base choice, ``P(b) = int f_b prod_(j != b) F_j`` over
    the Beta laws of step 1 (one-dimensional quadrature where their mass is, :func:`beta_argmax_law`),
    times the law of steps 2-3 given each base, where only the information-directed mixture is random
    (the rule ``select`` itself applies); to about 1e-4 (``tests/test_routing_policy.py``).

    ``phi`` are ``n_components`` random Fourier features ``sqrt(2/D) cos(w.y/sigma + b)``
    (Rahimi & Recht 2007) with ``sigma`` the median distance between the first
    ``bandwidth_sample`` prompts (the median heuristic); until then the policy is Thompson
    sampling over the models and the prompts wait in a buffer.

    A prompt seen before (same embedding) adds a random effect per (prompt, model) with variance
    ``tau2_g = max(s2_g - s2_within, 0)``, where ``s2_within`` is the pooled variance of repeated
    outcomes of the same (prompt, model): its observations move that prompt's estimate by their
    precision (a normal-normal update), so a recurring prompt whose best model differs is
    routed to it. The variance at the prompt is the smaller of that update's and the kernel
    posterior's, the one a new prompt gets: the prompt's own outcomes sharpen it and never widen it.
    With the update's alone, a prompt seen once or twice was wider than a new one by ``tau2`` for
    every model, and the steps above rarely left the base choice where prompts recur (on
    ``setup4-llm-bernoulli``, 360 prompts drawn 1,000 times, the default kept +0.003 of RFF-UCB's
    +0.044 over the best single model; with the bound +0.023, docs/router.md). At such a prompt,
    wherever the base choice is not the model of largest posterior mean there, information-directed
    sampling (step 3's law) decides without the confidence steps 2 and 3 ask of a posterior the kernel
    alone informs, with the information an outcome gives measured against the within-prompt variance
    ``s2_within`` (the noise of one more outcome of this very prompt): the prompt's own outcomes are
    direct evidence about it, where the kernel's are borrowed from its neighbours (on
    ``setup4-llm-bernoulli`` +0.022 ± 0.004 over 20 runs, paired; on real prompts drawn again and again,
    each with one logged outcome per model, 0.001 lower at the end, still 0.017 above the best single
    model; docs/router.md). The ``max_prompts`` newest prompts are kept.

    With ``budget`` (a target mean cost per decision) the policy maximises
    ``score - price x cost / budget``, with each model's cost its running mean cost, and the
    price follows an online dual (sub)gradient step on the budget, ``u += pacer_rate x (cost_t /
    budget - 1)``, on a signed log scale in units of the observed reward range ``r``, ``price =
    sign(u) 0.01 r (exp|u| - 1)`` (the primal-dual pacing of Agrawal & Devanur 2014 and Balseiro
    & Gur 2019: near zero about linear, ``0.0005 r`` a step per budget-sized over- or underspend,
    geometric above ``0.01 r``, so one rate fits prices from a near-tie to ``1e4 r``). The budget is a spend target, an equality
    constraint, so the price is free in sign: below the budget it falls, through zero, to a
    subsidy as large as it takes to buy the dearer model. Summing the steps, ``mean cost / budget
    - 1 = u_t / (pacer_rate t)`` whatever the choices were (the identity a clipped price would
    break), so the mean spend comes to the budget at rate ``1 / t`` wherever a bounded price
    balances it, that is wherever the budget lies between the cheapest and the dearest model's
    cost, with the lag ``|u*| / (pacer_rate t)`` of the balancing price ``u*``; the log scale's
    origin at 1% of the reward range keeps ``|u*| <= log 101`` for every price up to one reward
    range per budget-sized cost. There the price settles at the cost-adjusted tie of two models and
    alternates between them in the proportion that spends the budget, the randomised solution of
    the budgeted bandit's linear relaxation (Badanidiyuru, Kleinberg & Slivkins 2013, "Bandits with
    knapsacks"). A one-sided price (no subsidy, or a bounded one) would leave the budget
    unspent whenever the dearer model looks worse, and a model that looks worse after a few
    unlucky outcomes would then never be played again to show that it is not. Feedback is then
    ``{"reward": r, "cost": c}``.

    Parameters
    ----------
    n_arms, n_features : int
    n_components : int
        Random Fourier features (D).
    bandwidth_sample : int
        Prompts whose median pairwise distance sets the RBF bandwidth.
    max_prompts : int
        Recurring-prompt cells kept (oldest forgotten first); 0 turns them off.
    budget : float or None
        Target mean cost per decision.
    pacer_rate : float
        Step of the log price ``u`` per budget-sized overspend.
    override_z : float or None
        Posterior standard deviations by which a model must beat the base choice at a prompt to
        replace it (see above); ``None``: per-prompt Thompson sampling in every round.
    initial_plays : int
        Rounds every model is played before the posterior draws choose. Thompson sampling on
        Gaussian rewards whose variance is estimated too is asymptotically optimal only with at least
        ``max(2, 3 - ceil(2 alpha))`` initial plays of each arm under the prior ``sigma^(-2(1 + alpha))``,
        3 under the reference prior (Honda & Takemura 2014, "Optimality of Thompson sampling for
        Gaussian bandits depends on priors"); here the two pseudo-rounds of pooled variance make the
        posterior proper from the first play, and the initial plays' outcomes enter the model's own
        variance estimate beside them. On the real ParetoBandit stream 3 initial plays left fewer
        orders settled on the second-best model (9 of 400 against 13) but explored longer in the
        typical order, at no better mean, and 2 were no better (docs/router.md): 1 is the default.
    seed : None, int or Generator

    Examples
    --------
    >>> from genbandit.policies.routing import EvidenceThompson
    >>> rng = np.random.default_rng(0)
    >>> centres = rng.normal(size=(2, 8)); policy = EvidenceThompson(n_arms=2, n_features=8, seed=0)
    >>> for t in range(400):
    ...     c = t % 2; y = centres[c] + 0.1 * rng.normal(size=8)
    ...     arm = policy.select(y)
    ...     _ = policy.update(arm, float(rng.random() < (0.8 if arm == c else 0.3)), context=y)
    >>> [policy.select(centres[c] + 0.1 * rng.normal(size=8)) for c in (0, 1, 0, 1)]
    [0, 1, 0, 1]
    """

    name = "evidence-thompson"
    contextual = True
    _scratch = ("_last", "_work")
    _parameter_constraints = {
        "n_features": [Interval(Integral, 1, None, "left")],
        "n_components": [Interval(Integral, 1, None, "left")],
        "bandwidth_sample": [Interval(Integral, 2, None, "left")],
        "max_prompts": [Interval(Integral, 0, None, "left")],
        "budget": [None, Interval(Real, 0, None, "neither")],
        "pacer_rate": [Interval(Real, 0, None, "neither")],
        "override_z": [None, Interval(Real, 0, None, "left")],
        "initial_plays": [Interval(Integral, 1, None, "left")],
    }

    def __init__(self, n_arms: int, n_features: int, n_components: int = 200, bandwidth_sample: int = 32, max_prompts: int = 100_000,
                 budget: float | None = None, pacer_rate: float = 0.05, override_z: float | None = 1.0, initial_plays: int = 1,
                 seed=None) -> None:
        self.n_arms = n_arms
        self.n_features = n_features
        self.n_components = n_components
        self.bandwidth_sample = bandwidth_sample
        self.max_prompts = max_prompts
        self.budget = budget
        self.pacer_rate = pacer_rate
        self.override_z = override_z
        self.initial_plays = initial_plays
        self.seed = seed

    @classmethod
    def from_state_dict(cls, state: dict) -> "EvidenceThompson":
        """:meth:`Policy.from_state_dict`; a state saved before the base draw's mean was inverse-propensity weighted (it
        holds ``_Cinv_zbar`` and no ``_weighted``) is read with each model's outcomes so far at weight 1, as logged rows."""
        learned = state.get("state") if isinstance(state, dict) else None
        if isinstance(learned, dict) and "_Cinv_zbar" in learned and "_weighted" not in learned and "_n" in learned and "_ybar" in learned:
            n, ybar = from_jsonable(learned["_n"]).astype(float), from_jsonable(learned["_ybar"])
            learned = {k: v for k, v in learned.items() if k != "_Cinv_zbar"}
            learned["_weighted"] = to_jsonable(np.stack([n, n, ybar], axis=-1))
            state = {**state, "state": learned}
        return super().from_state_dict(state)

    @classmethod
    def _check_examples(cls):
        env = ENVIRONMENTS.create("setup4-synthetic", setup="expert", contexts="gaussian", dim=6, n_prompts_per_category=8, seed=1)
        return [(cls(n_arms=5, n_features=6, n_components=20, bandwidth_sample=8, seed=0), env)]

    # ------------------------------------------------------------------ state
    def _init_state(self, n_runs: int) -> None:
        R, G, D, d = n_runs, self.n_arms, self.n_components, self.n_features
        self._freq = self._rng.standard_normal((R, D, d)).astype(np.float32)  # divided by the bandwidth once it is known
        self._phase = self._rng.uniform(0.0, 2.0 * np.pi, (R, D))
        self._bandwidth = np.zeros(R)  # 0 until the median heuristic has its sample
        self._buffer: list[list[tuple[np.ndarray, int, float]]] = [[] for _ in range(R)]
        self._n = np.zeros((R, G), dtype=np.int64)
        self._ybar = np.zeros((R, G))
        self._syy = np.zeros((R, G))
        self._phibar = np.zeros((R, G, D))
        self._cxy = np.zeros((R, G, D))
        self._Cinv = np.broadcast_to(np.eye(D) / _LAMBDA_START, (R, G, D, D)).copy()  # (C_g + lambda_g I)^-1, its upper triangle
        self._weighted = np.zeros((R, G, 3))  # each model's outcomes under inverse-propensity weights: sum w, sum w^2, weighted mean
        self._theta = np.zeros((R, G, D))
        self._lam = np.full((R, G), _LAMBDA_START)
        self._s2 = np.zeros((R, G))
        self._ymin = np.full(R, np.inf)
        self._ymax = np.full(R, -np.inf)
        self._gamma = np.zeros((R, G))
        self._next_fit = np.zeros((R, G), dtype=np.int64)
        self._cells: list[dict[str, np.ndarray]] = [{} for _ in range(R)]
        self._within = np.zeros((R, 2))  # pooled within-prompt sum of squares, degrees of freedom
        self._cost_sum = np.zeros((R, G))
        self._cost_n = np.zeros((R, G), dtype=np.int64)
        self._log_price = np.zeros(R)  # u: the price's signed log scale
        self._spent = np.zeros(R)
        self._paid = np.zeros(R, dtype=np.int64)
        self._work: SimpleNamespace | None = None  # the kernels' output arrays (_scratch_for)

    # ------------------------------------------------------------------ per decision
    def _scratch_for(self, n_runs: int) -> SimpleNamespace:
        """The arrays the compiled kernels write a decision into, allocated once per state (not learned state: see
        ``_scratch``): the features ``phi`` ``(R, D)`` and whether they were ``known`` (kept, :meth:`_keep_features`), ``zh``
        ``(2, R, G, D)``, the scores ``out`` ``(7, R, G)`` and the views ``scores`` of those a choice uses, the Beta laws ``ab``
        ``(2, R, G)``, untried models, a recurring prompt's cell per run, refits due, the draws of a ``select`` ``(R G + R,)`` and
        its choice ``(R,)``; the recurring prompts' kept features (``features``, per run); and ``state``, the kernels' one
        argument that references them with the learned arrays and the constants (:func:`~genbandit.policies._routing_numba.state`,
        from ``fields``), built once: the learned arrays stay the same objects for the state's life."""
        work = self._work
        if work is None:
            R, G, D = n_runs, self.n_arms, self.n_components
            out = np.empty((7, R, G))
            work = SimpleNamespace(phi=np.empty((R, D)), known=np.zeros(R, dtype=bool), features=[{} for _ in range(R)],
                                   zh=np.empty((2, R, G, D)), out=out, scores=(out[5], out[1], out[6], out[3], out[4]), ab=np.empty((2, R, G)),
                                   untried=np.empty((R, G), dtype=bool), cell=np.zeros((R, G, 3)), has_cell=np.zeros(R, dtype=bool),
                                   due=np.empty(R, dtype=bool), draws=np.empty(R * G + R), chosen=np.empty(R, dtype=np.int64))
            work.fields = dict(
                freq=self._freq, phase=self._phase, scale=math.sqrt(2.0 / self.n_components), bandwidth=self._bandwidth, phibar=self._phibar,
                Cinv=self._Cinv, theta=self._theta, cxy=self._cxy, n=self._n, ybar=self._ybar, syy=self._syy, weighted=self._weighted,
                fitted=self._s2, gamma=self._gamma, ymin=self._ymin, ymax=self._ymax, prior_dof=_PRIOR_DOF, tiny=_TINY,
                min_plays=self.initial_plays, symv=_kernels().SYMV, cells=self.max_prompts > 0, cell=work.cell, has_cell=work.has_cell,
                within=self._within, cost_sum=self._cost_sum, cost_n=self._cost_n, log_price=self._log_price, unit=_PRICE_UNIT,
                budget=0.0 if self.budget is None else float(self.budget), z=math.inf if self.override_z is None else float(self.override_z),
                nodes=_NODES, node_weights=_NODE_WEIGHTS, next_fit=self._next_fit, due=work.due, phi=work.phi, known=work.known, zh=work.zh,
                out=out, ab=work.ab, untried=work.untried, draws=work.draws, chosen=work.chosen)
            work.state = _kernels().state(**work.fields)
            self._work = work
        return work

    def _cached(self, contexts: np.ndarray) -> tuple:
        """(whether a model is untried, prompt keys) of each run's context, with its features, posterior and Beta laws in the
        scratch arrays (:meth:`_scratch_for`), the features zero where the bandwidth is not set yet.

        Computed once per context in one compiled call (:func:`~genbandit.policies._routing_numba.prepare`, or within
        :func:`~genbandit.policies._routing_numba.decide` by a ``select``): ``probabilities`` and the ``select`` and ``update``
        that follow on the same context reuse them; an ``update`` clears them.
        """
        cached = self._cache_get(contexts)
        if cached is not None:
            return cached
        work = self._scratch_for(contexts.shape[0])
        keys = self._prompt_cells(contexts, work)
        fresh = _kernels().prepare(contexts, work.state)
        self._keep_features(contexts, work, keys)
        return self._cache_put(contexts, fresh, keys)

    def _prompt_cells(self, contexts: np.ndarray, work: SimpleNamespace) -> list[str] | None:
        """The prompt key of each run's context (``None`` without recurring-prompt cells), with the cell of that prompt, where the
        run has one, in ``work.cell`` (``work.has_cell``), and its features, where they were kept for this very context
        (:meth:`_keep_features`), in ``work.phi`` (``work.known``)."""
        if not self.max_prompts:
            return None
        keys = []
        for r, cells in enumerate(self._cells):  # one pass, rows by index: iterating over contexts' rows costs more than the lookups
            key = _key(contexts[r])
            keys.append(key)
            cell = cells.get(key)
            work.has_cell[r] = cell is not None
            known = False
            if cell is not None:
                work.cell[r] = cell
                kept = work.features[r].get(key)
                known = kept is not None and kept[0] == contexts[r].tobytes()  # the key is the embedding's to single precision
                if known:
                    work.phi[r] = kept[1]
            work.known[r] = known
        return keys

    def _keep_features(self, contexts: np.ndarray, work: SimpleNamespace, keys: list[str] | None) -> None:
        """After the kernels computed ``work.phi``: the features of each run's context kept where its prompt recurs (it has a cell)
        and they were not (the newest ``_FEATURES_KEPT / R`` prompts' per run), so that the next time the prompt comes the kernels
        skip the ``D x d`` product and the ``D`` cosines (``prepare`` in 7 us instead of 13 with 384-d embeddings and 200
        features, docs/router.md, "Decision speed"), for the same numbers. Kept only once the bandwidth is set (the features
        are final then), and only for prompts seen before: distinct prompts pay nothing for it."""
        if keys is None:
            return
        for r, key in enumerate(keys):
            if work.has_cell[r] and not work.known[r] and self._bandwidth[r] > 0:
                features = work.features[r]
                if len(features) >= max(_FEATURES_KEPT // len(keys), 1):
                    del features[next(iter(features))]
                features[key] = (contexts[r].tobytes(), work.phi[r].copy())

    # ------------------------------------------------------------------ posterior
    def posterior(self, contexts: Any) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of every model's mean score at each run's context, ``(n_runs, n_arms)`` each.

        Each model's noise variance is its evidence estimate shrunk by two pseudo-rounds to the
        variance pooled over models (empirical Bayes across models), which keeps a model whose first
        few outcomes happened to agree from looking certain, so it is not frozen out. A recurring
        prompt's own outcomes update the mean and variance (see
        :func:`~genbandit.policies._routing_numba.scores` and :func:`~genbandit.policies._routing_numba.recurring`).
        """
        self._ensure_state(single=False)
        self._cached(self._check_contexts(contexts, self._n_runs))
        out = self._work.out
        return out[0].copy(), out[1].copy()

    # ------------------------------------------------------------------ policy
    def _select(self, contexts: np.ndarray) -> np.ndarray:
        """The model each run plays: untried models first (ties at random); then the base choice, the largest of one draw per
        model from a Beta law moment-matched to its context-free mean's posterior on the observed reward range, and the
        override step on the posteriors at the prompt, where the prompt is confidently worse than average for the base model
        the information-directed choice (:func:`~genbandit.policies._routing_numba.override`; ``override_laws`` gives the law
        of this choice given each base).

        On the range ``[lo, hi]`` of the rewards seen, a model's mean ``m`` and variance ``v`` are those
        of ``Beta(a, b)`` with ``a + b = m (1 - m) / v - 1``; its skewed tail keeps a model whose first
        outcomes sat at one end of the range in play, where a Gaussian draw would freeze it out
        (for 0/1 rewards this is close to Beta-Bernoulli Thompson sampling, Agrawal & Goyal 2012).
        One compiled call (:func:`~genbandit.policies._routing_numba.decide`) computes the scores (unless ``probabilities``
        did, on this context), draws from the policy's generator the numbers ``rng.beta(a, b)`` on each run's laws in turn and
        then ``rng.random(n_runs)`` would (:func:`~genbandit.policies._routing_numba.context_free_draws`) and chooses.
        """
        if self.override_z is None:
            mean, var, _, _, _, untried, fresh = self._scores(contexts)
            return _thompson(mean, var, untried, fresh, self._rng)
        work = self._scratch_for(contexts.shape[0])
        prepared = self._cache_get(contexts) is not None
        keys = None if prepared else self._prompt_cells(contexts, work)
        bit_generator = self._rng.bit_generator
        with bit_generator.lock:  # as NumPy's own draws hold it: a generator shared with other threads stays whole
            fresh = _kernels().decide(contexts, prepared, work.state, bit_generator.ctypes.bit_generator.value, self._t)
        if not prepared:
            self._keep_features(contexts, work, keys)
            self._cache_put(contexts, fresh, keys)
        if fresh:
            return argmax_random_ties(np.where(work.untried, np.inf, work.draws[: work.untried.size].reshape(work.untried.shape)), self._rng)
        return work.chosen.copy()

    def _probabilities(self, contexts: np.ndarray) -> np.ndarray:
        """The law of the next ``select``, ``(n_runs, n_arms)``, computed, not sampled: what the router logs as the propensity.

        ``select`` draws a base model, then plays a model that, given the base, is fixed or drawn with a known
        probability, so ``P(model) = sum_b P(base = b) P(model | base = b)``: the second factor is the rule
        ``select`` itself applies (:func:`~genbandit.policies._routing_numba.override_laws`), the first the law
        of the largest of independent draws, ``P(b) = int f_b prod_(j != b) F_j`` (:func:`argmax_law`:
        Beta draws for the context-free base, Gaussian ones with ``override_z=None``; untried models first,
        ties uniform). The policy's state and its next ``select`` are unchanged.
        """
        mean, var, value, spread, noise, untried, fresh = self._scores(contexts)
        if self.override_z is None:
            return np.stack([u / u.sum() if u.any() else gaussian_argmax_law(m, np.sqrt(v)) for m, v, u in zip(mean, var, untried)])
        ties = "uniform" if fresh else "first"  # as _select breaks them
        base = np.stack([u / u.sum() if u.any() else beta_argmax_law(a, b, ties) for a, b, u in zip(*self._work.ab, untried)])  # untried first
        if fresh:
            return base
        laws = np.empty((*mean.shape, self.n_arms))
        kernels = _kernels()
        leader_z = kernels.leader_width(self.override_z, self._t)
        kernels.override_laws(mean, var, value, spread, noise, self._work.has_cell, leader_z, self.override_z, _TINY, laws)
        return np.einsum("rb,rbg->rg", base, laws)

    def _scores(self, contexts: np.ndarray) -> tuple[np.ndarray, ...]:
        """(mean, var, value, spread, noise, untried, fresh): each model's posterior at the context (the recurring prompt's
        outcomes and, with a budget, the price of its cost included) and context-free, its noise variance and whether it
        was never played, ``(n_runs, n_arms)``, and whether any model was not: views of the scratch arrays, kept with the
        context's features until the next ``update`` (``probabilities`` and the ``select`` after it share them)."""
        fresh = self._cached(contexts)[0]
        work = self._work
        return (*work.scores, work.untried, fresh)

    def _check_feedback(self, feedback: Any, actions: np.ndarray) -> Any:
        owner = type(self).__name__
        if self.budget is None:
            return check_finite_array("reward", feedback, (self._n_runs,), owner)
        if not isinstance(feedback, dict) or set(feedback) != {"reward", "cost"}:
            raise InvalidInputError(f"{owner} with a budget learns from {{'reward': r, 'cost': c}}. Got {feedback!r} instead.")
        cost = check_finite_array("cost", feedback["cost"], (self._n_runs,), owner)
        if np.any(cost < 0):
            raise InvalidInputError(f"The cost of {owner} must be >= 0. Got {cost.tolist()} instead.")
        return {"reward": check_finite_array("reward", feedback["reward"], (self._n_runs,), owner), "cost": cost}

    def _update(self, actions: np.ndarray, feedback: Any, contexts: np.ndarray) -> None:
        rewards = feedback if self.budget is None else feedback["reward"]
        if self.budget is not None:
            self._pace(actions, feedback["cost"])
        keys = self._cached(contexts)[1]
        self._last = None
        work = self._work
        some_due, waiting = _kernels().learn(actions, rewards, self._t, work.state)  # the widths from the state's z: inf without override_z
        if keys is not None:  # learn counted the outcome into each run's copy of its prompt's cell (prepare's): kept in its place
            for r, key in enumerate(keys):
                self._keep_cell(r, key, work.cell[r].copy())
        if some_due:
            for r in np.flatnonzero(work.due):
                self._refit(int(r), int(actions[r]))
        if waiting:
            for r in np.flatnonzero(self._bandwidth == 0):
                self._buffer[r].append((contexts[r].copy(), int(actions[r]), float(rewards[r])))
                if len(self._buffer[r]) >= self.bandwidth_sample:
                    self._set_bandwidth(int(r))

    def _refit(self, r: int, g: int, C: np.ndarray | None = None) -> None:
        """Evidence maximisation for model g of run r (:func:`evidence_ridge`), and ``(C + lambda I)^-1`` and ``theta`` at its lambda.

        The noise carries ``_PRIOR_DOF`` pseudo-rounds of the variance pooled over models, as in the scores. With the centred
        scatter ``C`` given (a block of rounds folded in, :meth:`_fold`), its eigendecomposition (:meth:`_eigen_fit`). Between
        refits ``C`` is not stored, only ``P = (C + lambda_0 I)^-1``; from it, without eigenvectors (:func:`_shifted_fit`):
        ``P`` reduced to tridiagonal form by Householder reflections, ``Q' P Q = T`` (LAPACK ``dsytrd``; Golub & Van Loan,
        Matrix Computations, 4th ed., section 8.3.1), so that ``(C + lambda I)^-1 = Q T (I + delta T)^-1 Q'``, ``delta = lambda -
        lambda_0``, and every quantity the fixed point needs at a trial ``lambda`` is a tridiagonal solve
        (:func:`~genbandit.policies._routing_numba.shifted_moments`); then ``(C + lambda I)^-1 = P (I + delta P)^-1 = P - delta
        K'K``, ``K = L^-1 P``, ``L L' = I + delta P`` (Cholesky), and ``theta = (C + lambda I)^-1 Phi_c' y_c``. With 200
        features it takes 1.5 ms where the eigendecomposition took 3.1 (docs/router.md, "Decision speed"); on the refits of
        three orders of the ParetoBandit stream the two agree to 4e-13 relative or better, on 300 of its prompts drawn again and
        again, where ``lambda`` falls to 5e-5 and ``C + lambda I`` grows ill-conditioned, to 1.1e-10. Where ``lambda_0`` exceeds 100
        (``_SHIFT_LIMIT``: a model whose evidence saw no signal yet, ``P`` kept near ``I / lambda_0`` by Sherman-Morrison),
        the eigenvalues of ``C`` recovered from ``P`` carry rounding errors that grow with ``lambda_0`` (``C`` has as many
        zero eigenvalues as it lacks rounds; about 1e-9 at ``lambda_0 = 1e6``): the eigendecomposition sets those that come
        out negative to 0, the tridiagonal form would keep them (from ``lambda_0`` = 1.8e3 to 2.6e4 the two differed by 7e-11
        to 1e-8), so such a fit takes the eigendecomposition, as does one where ``I + delta P`` is not numerically positive definite.
        """
        n = int(self._n[r, g])
        self._next_fit[r, g] = max(2 * n, 8)
        if self._bandwidth[r] > 0 and n >= 2:
            pool = max(float(self._syy[r].sum()), _TINY) / float(np.maximum(self._n[r] - 1, 0).sum())
            fitted = self._s2[r] > 0  # the slope precision pooled over the models fitted so far: sum gamma_h / sum |theta_h|^2
            spent, size = float(self._gamma[r, fitted].sum()), float((self._theta[r, fitted] ** 2).sum())
            prior = {"pool": pool, "dof": _PRIOR_DOF, "alpha_pool": spent / size if spent > 0 and size > 0 else 0.0, "alpha_dof": _PRIOR_DOF}
            data = (self._cxy[r, g], float(self._syy[r, g]), n, min(float(self._lam[r, g]), 1.0), prior)
            fit = None if C is not None or self._lam[r, g] > _SHIFT_LIMIT else _shifted_fit(self._Cinv[r, g], float(self._lam[r, g]), *data)
            if fit is None:
                fit = self._eigen_fit(r, g, C, *data)
            self._lam[r, g], self._s2[r, g], self._gamma[r, g], self._Cinv[r, g], self._theta[r, g] = fit

    def _eigen_fit(self, r: int, g: int, C: np.ndarray | None, cxy: np.ndarray, syy: float, n: int, start: float, prior: dict) -> tuple:
        """``(lambda, s2, gamma, (C + lambda I)^-1, theta)`` of model g of run r from the eigendecomposition of ``C`` (that of
        ``(C + lambda_0 I)^-1`` where ``C`` is None: the same eigenvectors, eigenvalues ``1/mu - lambda_0``)."""
        if C is None:
            mu, V = _eigh(self._Cinv[r, g])
            eig = 1.0 / np.maximum(mu, _TINY) - self._lam[r, g]
        else:
            eig, V = _eigh(C)
        eig = np.maximum(eig, 0.0)
        proj = V.T @ cxy
        lam, s2, gamma = evidence_ridge(eig, proj, syy, n, lam=start, **prior)
        # (C + lambda I)^-1 = W W', W = V (diag(eig) + lambda I)^(-1/2): BLAS dsyrk forms its upper triangle (the only one the
        # kernels read and keep; the lower one zero) in half the flops of a general product (on W', whose columns BLAS reads)
        return lam, s2, gamma, blas.dsyrk(1.0, (V / np.sqrt(eig + lam)).T, trans=1, lower=0), V @ (proj / (eig + lam))

    def _scatter(self, r: int, g: int) -> np.ndarray:
        """The centred feature scatter ``C`` of model g of run r, recovered from ``(C + lambda I)^-1``."""
        if self._n[r, g] < 2:
            return np.zeros((self.n_components, self.n_components))
        mu, V = _eigh(self._Cinv[r, g])
        return (V * np.maximum(1.0 / np.maximum(mu, _TINY) - self._lam[r, g], 0.0)) @ V.T

    # ------------------------------------------------------------------ before the bandwidth is known
    def _set_bandwidth(self, r: int) -> None:
        """The median heuristic on the buffered prompts, then their features folded in at once."""
        X = np.stack([row[0] for row in self._buffer[r]])
        sq = (X * X).sum(1)
        dist = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0))[np.triu_indices(len(X), 1)]
        positive = dist[dist > 0]
        self._bandwidth[r] = float(np.median(positive)) if positive.size else 1.0
        self._freq[r] /= self._bandwidth[r]
        acts = np.array([row[1] for row in self._buffer[r]])
        ys = np.array([row[2] for row in self._buffer[r]])
        Phi = self._features_one(r, X)
        self._buffer[r] = []
        for g in range(self.n_arms):
            mask = acts == g
            if mask.any():
                self._fold(r, g, Phi[mask], ys[mask], replace=True)

    def _features_one(self, r: int, X: np.ndarray) -> np.ndarray:
        return math.sqrt(2.0 / self.n_components) * np.cos(X @ self._freq[r].T + self._phase[r])

    def _fold(self, r: int, g: int, Phi: np.ndarray, y: np.ndarray, replace: bool = False) -> None:
        """Merge a block of rounds into model g's centred moments (Chan et al.'s pairwise update), then refit.

        ``replace=True`` takes the block's feature moments as the model's (its rewards are counted already).
        """
        k = len(y)
        self._ymin[r], self._ymax[r] = min(self._ymin[r], y.min()), max(self._ymax[r], y.max())
        pb, yb = Phi.mean(0), y.mean()
        Pc, yc = Phi - pb, y - yb
        Cb, cb, sb = Pc.T @ Pc, Pc.T @ yc, float(yc @ yc)
        if replace:
            self._phibar[r, g], self._cxy[r, g] = pb, cb
            self._refit(r, g, Cb)
            return
        na = int(self._n[r, g])
        n = na + k
        dp, dy = pb - self._phibar[r, g], yb - self._ybar[r, g]
        scale = na * k / n
        C = self._scatter(r, g) + Cb + scale * np.outer(dp, dp)
        self._cxy[r, g] += cb + scale * dp * dy
        self._syy[r, g] += sb + scale * dy * dy
        self._phibar[r, g] += dp * k / n
        self._ybar[r, g] += dy * k / n
        self._n[r, g] = n
        self._refit(r, g, C)

    def fit_logged(self, contexts: Any, arms: Any, rewards: Any, costs: Any = None) -> "EvidenceThompson":
        """Start from a logged table: fold rows ``(context, arm, reward[, cost])`` into every run's state.

        Order-free and exact: the result equals the moments of updating on the rows one by one
        (the hyperparameters are then refitted on all of them). The rows count as rounds (``t``). ``contexts`` ``(n, n_features)``,
        ``arms`` ``(n,)`` ints, ``rewards`` and ``costs`` ``(n,)``. With fewer than
        ``bandwidth_sample`` rows and no bandwidth yet, the rows go to the buffer as live rounds do.
        """
        self._ensure_state(single=False)
        self._last = None
        owner = type(self).__name__
        X = check_finite_array("contexts", contexts, (None, self.n_features), owner) if np.ndim(contexts) == 2 else None
        if X is None:
            raise InvalidInputError(f"{owner}.fit_logged needs contexts of shape (n, {self.n_features}). Got {np.shape(contexts)} instead.")
        n = X.shape[0]
        a = np.asarray(arms)
        if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer) or np.any((a < 0) | (a >= self.n_arms)):
            raise InvalidInputError(f"{owner}.fit_logged needs one arm in 0..{self.n_arms - 1} per row. Got {a!r} instead.")
        y = check_finite_array("rewards", rewards, (n,), owner)
        c = None if costs is None else check_finite_array("costs", costs, (n,), owner)
        for r in range(self._n_runs):
            if self._bandwidth[r] == 0:
                for i in range(n):
                    self._update_one(r, X[i], int(a[i]), float(y[i]))
                if len(self._buffer[r]) >= self.bandwidth_sample:
                    self._set_bandwidth(r)
            else:
                Phi = self._features_one(r, X)
                for g in range(self.n_arms):
                    mask = a == g
                    if mask.any():
                        self._fold(r, g, Phi[mask], y[mask])
            if self.max_prompts:
                for i in range(n):
                    _kernels().count_cell(self._cell(r, _key(X[i])), int(a[i]), float(y[i]), self._within[r])
        for g in range(self.n_arms):  # logged rows carry no base draw: each weighs 1 in the context-free mean
            mask = a == g
            if mask.any():
                k = int(mask.sum())
                self._weighted[:, g, :2] += k
                self._weighted[:, g, 2] += k / self._weighted[:, g, 0] * (y[mask].mean() - self._weighted[:, g, 2])
        if c is not None:
            np.add.at(self._cost_sum, (slice(None), a), c)
            np.add.at(self._cost_n, (slice(None), a), 1)
        self._t += n
        return self

    def _update_one(self, r: int, x: np.ndarray, a: int, y: float) -> None:
        self._ymin[r], self._ymax[r] = min(self._ymin[r], y), max(self._ymax[r], y)
        n = float(self._n[r, a])
        dy = y - self._ybar[r, a]
        self._n[r, a] += 1
        self._ybar[r, a] += dy / (n + 1.0)
        self._syy[r, a] += n / (n + 1.0) * dy * dy
        self._buffer[r].append((x.copy(), a, y))

    # ------------------------------------------------------------------ recurring prompts
    def _cell(self, r: int, key: str) -> np.ndarray:
        """Run r's cell of the prompt ``key`` (each model's count and sum of outcomes there), a new one of zeros where it has
        none (:meth:`_keep_cell`)."""
        cell = self._cells[r].get(key)
        return self._keep_cell(r, key, np.zeros((self.n_arms, 3))) if cell is None else cell

    def _keep_cell(self, r: int, key: str, cell: np.ndarray) -> np.ndarray:
        """``cell`` kept as run r's cell of the prompt ``key``: in the place of the one it replaces (the order of the cells is
        that of their prompts' first outcomes), or, for a new prompt, the newest, the oldest cell forgotten first when
        ``max_prompts`` are kept."""
        cells = self._cells[r]
        if key not in cells and len(cells) >= self.max_prompts:
            del cells[next(iter(cells))]
        cells[key] = cell
        return cell

    # ------------------------------------------------------------------ budget
    def _pace(self, actions: np.ndarray, cost: np.ndarray) -> None:
        _kernels().pace(actions, cost, self.budget, self.pacer_rate, _PRICE_SPAN, self._cost_sum, self._cost_n, self._spent, self._paid,
                        self._log_price)

    @property
    def price(self) -> np.ndarray:
        """The pacer's current price of a budget-sized cost, in reward, per run (``(n_runs,)``)."""
        span = np.maximum(self._ymax - self._ymin, 0.0)
        return np.sign(self._log_price) * _PRICE_UNIT * span * np.expm1(np.abs(self._log_price))

    @property
    def spent(self) -> np.ndarray:
        """Total cost of the decisions learned from since the last reset (logged rows excluded), per run."""
        return self._spent.copy()

    @property
    def mean_cost(self) -> np.ndarray:
        """Mean cost per decision learned from since the last reset (logged rows excluded), per run; 0 before the first."""
        return self._spent / np.maximum(self._paid, 1)


def _thompson(mean: np.ndarray, var: np.ndarray, untried: np.ndarray, fresh: bool, rng: np.random.Generator) -> np.ndarray:
    """One Gaussian posterior draw per model and run, the largest wins; untried models first (``fresh``: there is one)."""
    draw = mean + np.sqrt(var) * rng.standard_normal(mean.shape)
    return argmax_random_ties(np.where(untried, np.inf, draw), rng) if fresh else draw.argmax(1)


def _eigh(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric matrix with ``A``'s upper triangle (the lower one is not read)."""
    return np.linalg.eigh(A, UPLO="U")


def _shifted_fit(P: np.ndarray, lam0: float, cxy: np.ndarray, syy: float, n: int, start: float, prior: dict) -> tuple | None:
    """``(lambda, s2, gamma, (C + lambda I)^-1, theta)`` from ``P = (C + lambda0 I)^-1`` (its upper triangle) without its
    eigenvectors (see :meth:`EvidenceThompson._refit`); ``None`` where ``I + (lambda - lambda0) P`` is not numerically positive
    definite, or with one feature."""
    D = P.shape[0]
    if D < 2:
        return None
    F = P.T  # column-major, the kept triangle its lower one: LAPACK reads it where it is
    reflectors, d, e, tau, _ = lapack.dsytrd(F, lower=1, lwork=_sytrd_work(D))
    ct = np.empty(D)  # Q' cxy: Q = diag(1, H_1 ... H_(D-1)), the reflectors of a QR factorisation below the first row
    ct[0] = cxy[0]
    ct[1:] = lapack.dormqr("L", "T", reflectors[1:, :-1], tau, cxy[1:, None], 64)[0][:, 0]
    tc = d * ct
    tc[:-1] += e * ct[1:]
    tc[1:] += e * ct[:-1]
    shifted_moments = _kernels().shifted_moments
    moments = lambda lam: shifted_moments(d, e, ct, tc, lam - lam0, lam)  # noqa: E731
    lam, s2, gamma = _evidence_fixed_point(moments, syy, n, start, _EVIDENCE_ITERS, **prior)
    if not math.isfinite(gamma):
        return None
    delta = lam - lam0
    full = P + F  # P whole: the kept triangle mirrored, its diagonal counted once
    full.flat[:: D + 1] = P.diagonal()
    shifted = delta * full
    shifted.flat[:: D + 1] += 1.0
    L, info = lapack.dpotrf(shifted.T, lower=1, clean=0, overwrite_a=1)  # symmetric: its transpose, column-major, is it
    if info:
        return None
    K = blas.dtrsm(1.0, L, full.T, lower=1, overwrite_b=1)
    Cinv = blas.dsyrk(-delta, K, beta=1.0, c=F, trans=1, lower=1)  # P - delta K'K on the kept triangle
    return lam, s2, gamma, Cinv.T, blas.dsymv(1.0, Cinv, cxy, lower=1)


@lru_cache(maxsize=8)
def _sytrd_work(D: int) -> int:
    return int(lapack.dsytrd_lwork(D, lower=1)[0])


def _kernels():
    """The compiled kernels (numba is imported on first use)."""
    global _KERNELS
    if _KERNELS is None:
        from . import _routing_numba as _KERNELS
    return _KERNELS


_KERNELS = None


def _key(x: np.ndarray) -> str:
    """The identity of a prompt: a hash of its embedding to single precision."""
    return hashlib.blake2b(x.astype(np.float32), digest_size=12).hexdigest()


def argmax_law(F: np.ndarray, ties: str = "first") -> np.ndarray:
    """The law of the index of the largest of independent draws, ``(G,)``, from their CDFs ``F`` ``(G, 2N + 1)``.

    The columns of ``F`` are the CDFs at nodes ``x_0 < m_0 < x_1 < ... < m_(N-1) < x_N``, each ``m_i`` inside
    ``(x_i, x_(i+1))``. ``P(g) = int prod_(j != g) F_j dF_g`` over each cell ``[x_i, x_(i+1)]``, with every
    CDF taken quadratic in a common parameter of the cell through its three values, which Gauss-Legendre
    integrates exactly (:func:`~genbandit.policies._routing_numba.argmax_cells`). On a cell where the CDFs
    are functions of one another this is exact whatever their shapes, so the error is that of the
    density ratios' change across a cell; over the cells the ``P(g)`` sum to ``prod_g F_g(x_N) -
    prod_g F_g(x_0)``. The mass at or below ``x_0`` and above ``x_N`` are ties (draws rounded to one
    number), broken to the ``"first"`` index as ``argmax`` does, or ``"uniform"``.

    >>> from scipy.special import ndtr
    >>> x = np.linspace(-8.0, 9.0, 341)  # two Gaussian draws N(0, 1) and N(1, 1): P(second larger) = Phi(1 / sqrt 2)
    >>> law = argmax_law(ndtr(np.stack([x, x - 1.0])))
    >>> round(float(law[1]), 6), round(float(ndtr(1 / np.sqrt(2))), 6)
    (0.760250, 0.760250)
    """
    G = F.shape[0]
    law = np.empty(G)
    _kernels().argmax_cells(F, *_gauss_legendre(G + 1), law)
    bottom, top = float(np.prod(F[:, 0])), 1.0 - F[:, -1]
    if ties == "first":
        law[0] += bottom
        law += top * np.concatenate([[1.0], np.cumprod(1.0 - top[:-1])])
    else:  # E[1 / (1 + K)], K the others tied at the top, is int_0^1 prod_(j != g) (1 - top_j + top_j s) ds
        s, ws = _gauss_legendre(G)
        terms = 1.0 - top[None, :] + top[None, :] * s[:, None]
        law += bottom / G + top * np.array([ws @ np.prod(np.delete(terms, g, axis=1), axis=1) for g in range(G)])
    law = np.maximum(law, 0.0)
    return law / law.sum()


def beta_argmax_law(a: np.ndarray, b: np.ndarray, ties: str = "first") -> np.ndarray:
    """The law of ``argmax`` of independent draws ``Beta(a_g, b_g)`` as NumPy makes them, ``(G,)``.

    Nodes where each law's mass is: its mean plus -40 to 40 standard deviations, the quantiles of its
    lower (upper) tail at probabilities 1e-12 to 0.5 where ``a < 1`` (``b < 1``, its mass then piles at
    an end of the range) by ``F(x) ~ x^a / (a B(a, b))``, and a grid of [0, 1]; the CDFs by
    ``scipy.special.betainc`` (the upper tail by symmetry, exact near 1). A draw that rounds to 1.0 (or
    to 0.0) ties with the others there, which :func:`argmax_law` breaks as ``ties`` says. Cached on
    ``(a, b)``, which change only with the policy's state.

    >>> law = beta_argmax_law(np.array([2.0, 3.0]), np.array([3.0, 2.0]))  # P(Beta(3, 2) > Beta(2, 3))
    >>> round(float(law[1]), 5)
    0.75714
    """
    return _beta_argmax_law(np.ascontiguousarray(a, dtype=float).tobytes(), np.ascontiguousarray(b, dtype=float).tobytes(), ties).copy()


@lru_cache(maxsize=64)
def _beta_argmax_law(a_bytes: bytes, b_bytes: bytes, ties: str) -> np.ndarray:
    a, b = np.frombuffer(a_bytes), np.frombuffer(b_bytes)
    m, sd = a / (a + b), np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    parts = [(m[:, None] + sd[:, None] * _SPREAD).ravel(), _UNIFORM]
    with np.errstate(over="ignore", under="ignore"):
        lb, lq = betaln(a, b), np.log(_TAIL)
        for shape, sign in ((a, 1.0), (b, -1.0)):
            small = shape < 1.0
            if small.any():
                tail = np.concatenate([np.exp((lq + (np.log(shape) + lb)[small, None]) / shape[small, None]).ravel(), _DECADES])
                parts.append(tail if sign > 0 else 1.0 - tail)
    x = np.unique(np.concatenate(parts))
    x = np.concatenate([[_SUBNORMAL], x[(x > _SUBNORMAL) & (x < 1.0 - 2.0**-53)]])  # 0.0 and 1.0 are ties
    xs = np.empty(2 * x.size)
    xs[0::2], xs[1:-1:2], xs[-1] = x, (x[:-1] + x[1:]) / 2.0, (x[-1] + 1.0) / 2.0
    # a law with a, b >= 1 has no mass to speak of beyond 12 standard deviations (below 1e-6 even for
    # Beta(1, b), the exponential tail): its CDF is 0 or 1 there, not evaluated
    F = np.empty((a.size, xs.size + 1))
    regular = (a >= 1.0) & (b >= 1.0)
    for g in range(a.size):
        lo, hi = (m[g] - 12.0 * sd[g], m[g] + 12.0 * sd[g]) if regular[g] else (0.0, 1.0)
        inside = (xs >= lo) & (xs <= hi)
        F[g, :-1] = xs > hi
        low, up = inside & (xs <= 0.5), inside & (xs > 0.5)
        F[g, :-1][low] = betainc(a[g], b[g], xs[low])
        F[g, :-1][up] = 1.0 - betainc(b[g], a[g], 1.0 - xs[up])
    F[:, -1] = 1.0 - betainc(b, a, _ROUNDS_TO_ONE)
    return argmax_law(F, ties)


def gaussian_argmax_law(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The law of ``argmax`` of independent Gaussian draws ``N(mean_g, sd_g^2)``, ``(G,)``: :func:`argmax_law` on nodes
    every quarter of a standard deviation from each mean, 10 either side.

    >>> round(float(gaussian_argmax_law(np.array([0.0, 1.0]), np.array([1.0, 1.0]))[1]), 6)  # Phi(1 / sqrt 2)
    0.76025
    """
    sd = np.maximum(sd, math.sqrt(_TINY))
    x = np.unique((mean[:, None] + sd[:, None] * np.linspace(-10.0, 10.0, 81)).ravel())
    xs = np.empty(2 * x.size - 1)
    xs[0::2], xs[1::2] = x, (x[:-1] + x[1:]) / 2.0
    return argmax_law(ndtr((xs[None, :] - mean[:, None]) / sd[:, None]))


@lru_cache(maxsize=8)
def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1], exact for polynomials of degree ``2 n - 1``."""
    t, w = np.polynomial.legendre.leggauss(n)
    return (t + 1.0) / 2.0, w / 2.0


_SUBNORMAL = 5e-324  # the least positive double: Beta draws below it are 0.0
_ROUNDS_TO_ONE = 2.0**-53.5  # NumPy's Beta draw X / (X + Y) is 1.0 where Y / X < 2^-54 to 2^-53 (as X sits in its binade)
