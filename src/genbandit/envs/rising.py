"""Rested rising bandits: an arm's expected reward depends on how often *that arm* was pulled.

Three families, all built on a table ``mu[i, s]`` of expected rewards at arm ``i``'s ``s``-th pull
(0-indexed: the first pull of an arm reads ``mu[i, 0]``):

- :class:`RestedRisingArms`: the TI-UCB paper's synthetic problems (``two-arm``, ``fifteen-arm``:
  the curves of Metelli et al. 2022 that the paper's setup matches) with Gaussian noise.
- :class:`LearnerArms`: real learning curves. Each arm is a scikit-learn learner trained
  incrementally on a data set scikit-learn ships; a pull trains the chosen learner on its next
  mini-batch and the reward is its held-out accuracy minus a per-learner cost per step. Curves are
  computed live, recorded to an ``.npz`` once and replayed.
- :class:`LLMReplay`: a **stand-in** for the paper's LLM scenario (XSum, T5/GPT-2/GPT-3): curves
  built from what the paper reports qualitatively, not measured.

Regret. The comparator is the best *fixed* arm ``i* = argmax_i Σ_{s<T} mu[i, s]``
(for concave non-decreasing rested rewards the best policy pulls one arm throughout: Heidari et
al. 2016), so round ``t``'s pseudo-regret is ``mu[i*, t-1] - mu[A_t, n_{A_t}]`` with ``n`` the
chosen arm's pulls before this one. It can be negative early, when a fast starter beats the
oracle arm's young curve; it sums to the paper's empirical regret R̂(T). ``info['optimal']`` is 1
when ``A_t = i*``.
"""

from __future__ import annotations

import hashlib
import json
import os
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from ..core.base import Environment, Step
from ..core.registry import register_environment
from ..core.validation import Interval, InvalidParameterError, Options

__all__ = [
    "RestedRisingArms",
    "LearnerArms",
    "LLMReplay",
    "synthetic_curves",
    "record_learning_curves",
    "LEARNERS",
    "DATASETS",
    "LLM_ARMS",
]


# ----------------------------------------------------------------------------- the common core
class _RestedCurves(Environment):
    """Rested arms read from a table of expected rewards ``(n_arms, length)`` indexed by pull count."""

    horizon: int

    def _curves(self) -> np.ndarray:
        """Expected reward of each arm at its 0-indexed pull count, ``(n_arms, >= horizon)``."""
        raise NotImplementedError

    def _noise(self, actions: np.ndarray, pulls: np.ndarray, means: np.ndarray) -> np.ndarray:
        """Observed reward for ``means`` (subclasses add their noise)."""
        return means

    @property
    def max_horizon(self) -> int:
        return int(self.horizon)

    def _init_state(self, n_runs: int) -> None:
        self._table = self._curves()
        if self._table.shape[1] < self.horizon:
            raise InvalidParameterError(f"{type(self).__name__}'s curves are shorter than its horizon {self.horizon}.")
        self._counts = np.zeros((n_runs, self.n_arms), dtype=np.int64)
        totals = self._table[:, : self.horizon].sum(axis=1)
        self._best = int(totals.argmax())
        self._oracle = self._table[self._best, : self.horizon]

    @property
    def best_arm(self) -> int:
        """The best fixed arm over the horizon (the regret's comparator)."""
        if not hasattr(self, "_best"):
            self.reset()
        return self._best

    @property
    def best_final_arm(self) -> int:
        """The arm whose converged expected reward (mean over its last ``horizon // 20`` pulls) is largest."""
        if not hasattr(self, "_table"):
            self.reset()
        tail = max(1, self.horizon // 20)
        return int(self._table[:, self.horizon - tail : self.horizon].mean(axis=1).argmax())

    def diagnostics(self) -> dict:
        """The oracle arms a report compares with: ``best_arm`` (fixed, over the horizon) and ``best_final_arm`` (converged)."""
        return {"best_arm": self.best_arm, "best_final_arm": self.best_final_arm}

    def mean_rewards(self) -> np.ndarray:
        """Expected reward of every arm's next pull, ``(n_runs, n_arms)``."""
        if not hasattr(self, "_counts"):
            self.reset()
        n = np.minimum(self._counts, self._table.shape[1] - 1)
        return self._table[np.arange(self.n_arms)[None, :], n]

    def _step(self, actions: np.ndarray) -> Step:
        rows = np.arange(actions.shape[0])
        pulls = self._counts[rows, actions]
        means = self._table[actions, pulls]
        self._counts[rows, actions] += 1
        reward = self._noise(actions, pulls, means)
        regret = self._oracle[self._t] - means
        return Step(feedback=reward, reward=reward, regret=regret, info={"optimal": (actions == self._best).astype(float)})


# ----------------------------------------------------------------------------- synthetic
_FIFTEEN = [  # Metelli et al. 2022, src/model.py, bandit "0"; (family, c, a_or_b, rho_or_b)
    ("poly", 1.00, 177, 0.8), ("poly", 0.91, 571, 0.9), ("exp", 0.73, 3, 162), ("exp", 0.16, 3, 949),
    ("poly", 0.48, 144, 1.0), ("poly-shift", 0.43, 195, 0.9), ("poly", 0.79, 695, 0.9), ("exp", 0.62, 1, 271),
    ("exp", 0.23, 1, 849), ("exp", 0.39, 5, 457), ("poly", 0.37, 290, 1.0), ("poly", 0.17, 223, 1.0),
    ("poly", 1.08, 85, 0.8), ("poly", 0.84, 219, 1.0), ("poly", 0.26, 124, 0.9),
]


def synthetic_curves(instance: str, length: int) -> np.ndarray:
    """Expected rewards ``(n_arms, length)`` of the paper's synthetic problems at pulls ``x = 0..length-1``.

    ``two-arm``: ``0.4 x / (x + 500)`` (F_poly, c = .4, b = 500, rho = 1) and ``min(x / 25000, 1)``
    (linear, then flat). ``fifteen-arm``: F_exp ``c (1 - exp(-a x / b))`` and F_poly
    ``c (1 - b / (x + b^(1/rho))^rho)`` with Metelli et al.'s parameters (one arm's offset uses 199
    where its numerator uses 195, as in that source; two arms exceed 1).

    >>> synthetic_curves("two-arm", 25001)[:, [0, 500, 25000]].round(3).tolist()
    [[0.0, 0.2, 0.392], [0.0, 0.02, 1.0]]
    """
    x = np.arange(length, dtype=float)
    if instance == "two-arm":
        return np.stack([0.4 * x / (x + 500.0), np.minimum(x / 25000.0, 1.0)])
    if instance == "fifteen-arm":
        rows = []
        for family, c, p, q in _FIFTEEN:
            if family == "exp":
                rows.append(c * (1.0 - np.exp(-p * x / q)))
            else:
                offset = 199.0 ** (1.0 / q) if family == "poly-shift" else p ** (1.0 / q)
                rows.append(c * (1.0 - p / (x + offset) ** q))
        return np.stack(rows)
    raise InvalidParameterError(f"Unknown synthetic instance {instance!r}: use 'two-arm' or 'fifteen-arm'.")


@register_environment("rested-rising-arms", "rising-synthetic")
class RestedRisingArms(_RestedCurves):
    """The TI-UCB paper's synthetic rested rising bandits (sec. 5.2, Fig. 3) with Gaussian noise.

    ``instance`` is ``"two-arm"`` (T = 200,000 in the paper) or ``"fifteen-arm"`` (T = 1,500,000);
    see :func:`synthetic_curves`. Each reward is the arm's curve at its pull count plus
    ``N(0, sigma^2)`` noise (``sigma = 0.1`` in the paper). Regret is against the best fixed arm
    over ``horizon`` (module docstring).

    >>> from genbandit.envs.rising import RestedRisingArms
    >>> env = RestedRisingArms(instance="two-arm", horizon=1000, sigma=0.0, seed=0).reset()
    >>> env.best_arm, [float(env.step(np.array([0])).regret[0]) for _ in range(2)]
    (0, [0.0, 0.0])
    """

    name = "rested-rising"
    _parameter_constraints = {
        "instance": [Options(("two-arm", "fifteen-arm"))],
        "horizon": [Interval(Integral, 1, None, "left")],
        "sigma": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, instance: str = "two-arm", horizon: int = 200_000, sigma: float = 0.1, seed=None) -> None:
        self.instance = instance
        self.horizon = horizon
        self.sigma = sigma
        self.seed = seed

    @property
    def n_arms(self) -> int:
        return 2 if self.instance == "two-arm" else len(_FIFTEEN)

    def _curves(self) -> np.ndarray:
        return synthetic_curves(self.instance, self.horizon)

    def _noise(self, actions, pulls, means):
        return means + self.sigma * self._rng.standard_normal(means.shape[0])

    @classmethod
    def _check_examples(cls):
        return [cls(instance="two-arm", horizon=300, seed=0), cls(instance="fifteen-arm", horizon=200, seed=0)]


# ----------------------------------------------------------------------------- learners
def _learner(kind: str, seed: int):
    from sklearn.linear_model import SGDClassifier
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neural_network import MLPClassifier

    if kind == "sgd-logistic":
        return SGDClassifier(loss="log_loss", alpha=1e-4, learning_rate="constant", eta0=0.001, random_state=seed)
    if kind == "passive-aggressive":  # PassiveAggressiveClassifier's own replacement in scikit-learn >= 1.8
        return SGDClassifier(loss="hinge", penalty=None, learning_rate="pa1", eta0=1.0, random_state=seed)
    if kind == "naive-bayes":
        return GaussianNB()
    if kind == "mlp":
        return MLPClassifier(hidden_layer_sizes=(64,), learning_rate_init=1e-3, random_state=seed)
    if kind == "mlp-small":
        return MLPClassifier(hidden_layer_sizes=(8,), learning_rate_init=1e-3, random_state=seed)
    raise InvalidParameterError(f"Unknown learner {kind!r}; known: {', '.join(LEARNERS)}.")


#: Learners an arm can be (scikit-learn estimators with ``partial_fit``).
LEARNERS = ("sgd-logistic", "passive-aggressive", "naive-bayes", "mlp", "mlp-small")
#: Data sets scikit-learn ships (no download), plus a covertype-like synthetic set.
DATASETS = ("digits", "breast-cancer", "wine", "synthetic")


def _dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    if name == "digits":
        x, y = datasets.load_digits(return_X_y=True)
    elif name == "breast-cancer":
        x, y = datasets.load_breast_cancer(return_X_y=True)
    elif name == "wine":
        x, y = datasets.load_wine(return_X_y=True)
    elif name == "synthetic":
        x, y = datasets.make_classification(n_samples=20000, n_features=20, n_informative=10, n_redundant=0,
                                            n_clusters_per_class=4, flip_y=0.02, class_sep=1.0, random_state=0)
    else:
        raise InvalidParameterError(f"Unknown data set {name!r}; known: {', '.join(DATASETS)}.")
    return StandardScaler().fit_transform(x), y


def record_learning_curves(dataset: str, learners, *, length: int, n_streams: int, batch_size: int = 16,
                           test_size: float = 0.25, data_seed: int = 0) -> np.ndarray:
    """Train every learner for ``length`` mini-batch steps on ``n_streams`` shuffles; return accuracies.

    Stream ``k`` splits the data set into train and held-out parts (stratified, seed ``data_seed + k``)
    and walks the training part in mini-batches of ``batch_size``, reshuffling at each epoch; the
    learner of arm ``i`` sees the stream's batches in order (one per pull). Entry ``[k, i, s]`` is
    arm ``i``'s held-out accuracy after ``s + 1`` steps, shape ``(n_streams, n_learners, length)``.
    """
    from sklearn.model_selection import train_test_split

    x, y = _dataset(dataset)
    classes = np.unique(y)
    out = np.empty((n_streams, len(learners), length))
    for k in range(n_streams):
        seed = data_seed + k
        x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, stratify=y, random_state=seed)
        rng = np.random.default_rng(seed)
        order = np.concatenate([rng.permutation(len(y_tr)) for _ in range(length * batch_size // len(y_tr) + 2)])
        for i, kind in enumerate(learners):
            model = _learner(kind, seed)
            for s in range(length):
                batch = order[s * batch_size : (s + 1) * batch_size]
                model.partial_fit(x_tr[batch], y_tr[batch], classes=classes)
                out[k, i, s] = model.score(x_te, y_te)
    return out


def _cache_dir() -> Path:
    return Path(os.environ.get("GENBANDIT_CACHE", Path.home() / ".cache" / "genbandit")) / "learning-curves"


@register_environment("learner-arms", "learning-curves")
class LearnerArms(_RestedCurves):
    """Real learning curves: arms are scikit-learn learners trained one mini-batch per pull (TI-UCB sec. 5.3 analogue).

    The paper's IMDB experiment needs a download; here every arm is a learner from
    :data:`LEARNERS` trained with ``partial_fit`` on a data set scikit-learn ships. A pull trains the
    chosen learner on its next mini-batch; the reward is its held-out accuracy minus ``costs[i]``
    (a per-learner cost per step). :func:`record_learning_curves` computes ``n_streams``
    independent curves live (different splits and batch orders); they are cached in
    ``$GENBANDIT_CACHE/learning-curves`` (or ``cache_dir``) and replayed: run ``r`` replays
    stream ``perm[r % n_streams]``. Regret uses the expected curve, the mean over streams (as
    Metelli et al. do for IMDB); the policy observes its run's realised curve.

    With ``mode="live"`` nothing is replayed for the policy: every run trains its own learners as
    they are pulled (on a split drawn from the run's seed), and regret still uses the recorded
    expected curve. Live runs cost one ``partial_fit`` and one evaluation per round and run.

    >>> from genbandit.envs.rising import LearnerArms
    >>> env = LearnerArms(dataset="wine", learners=["naive-bayes", "sgd-logistic"], horizon=5, n_streams=2,
    ...                   batch_size=8, cache_dir=None, seed=0).reset(n_runs=2)
    >>> step = env.step(np.array([0, 1]))
    >>> step.reward.shape, bool(np.all((step.reward >= 0) & (step.reward <= 1)))
    ((2,), True)
    """

    name = "learner-arms"
    _parameter_constraints = {
        "dataset": [Options(DATASETS)],
        "learners": [list, tuple],
        "horizon": [Interval(Integral, 1, None, "left")],
        "n_streams": [Interval(Integral, 1, None, "left")],
        "batch_size": [Interval(Integral, 1, None, "left")],
        "costs": [None, list, tuple],
        "mode": [Options(("replay", "live"))],
        "data_seed": [Interval(Integral, 0, None, "left")],
        "cache_dir": [None, str, Path, bool],
    }

    def __init__(self, dataset: str = "digits", learners=("naive-bayes", "sgd-logistic", "passive-aggressive", "mlp"),
                 horizon: int = 3000, n_streams: int = 20, batch_size: int = 16, costs=None, mode: str = "replay",
                 data_seed: int = 0, cache_dir=True, seed=None) -> None:
        self.dataset = dataset
        self.learners = learners
        self.horizon = horizon
        self.n_streams = n_streams
        self.batch_size = batch_size
        self.costs = costs
        self.mode = mode
        self.data_seed = data_seed
        self.cache_dir = cache_dir
        self.seed = seed

    def _check_params(self) -> None:
        unknown = [k for k in self.learners if k not in LEARNERS]
        if unknown or not self.learners:
            raise InvalidParameterError(f"The 'learners' parameter of LearnerArms must name learners from {LEARNERS}. Got {self.learners!r} instead.")
        if self.costs is not None and len(self.costs) != len(self.learners):
            raise InvalidParameterError(f"The 'costs' parameter of LearnerArms needs one cost per learner. Got {self.costs!r} instead.")

    @property
    def n_arms(self) -> int:
        return len(self.learners)

    def _cost(self) -> np.ndarray:
        return np.zeros(self.n_arms) if self.costs is None else np.asarray(self.costs, dtype=float)

    def recorded(self) -> np.ndarray:
        """The recorded accuracies ``(n_streams, n_arms, horizon)``, computed once and cached."""
        spec = dict(dataset=self.dataset, learners=list(self.learners), length=int(self.horizon),
                    n_streams=int(self.n_streams), batch_size=int(self.batch_size), data_seed=int(self.data_seed))
        if self.cache_dir in (None, False):
            return record_learning_curves(**spec)
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
        folder = _cache_dir() if self.cache_dir is True else Path(self.cache_dir)
        path = folder / f"{self.dataset}-{key}.npz"
        if path.exists():
            return np.load(path)["accuracy"]
        accuracy = record_learning_curves(**spec)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez_compressed(tmp, accuracy=accuracy, spec=json.dumps(spec))
        tmp.replace(path)
        return accuracy

    def _curves(self) -> np.ndarray:
        if not hasattr(self, "_recorded_cache"):
            self._recorded_cache = self.recorded()
        return self._recorded_cache.mean(axis=0) - self._cost()[:, None]

    def _init_state(self, n_runs: int) -> None:
        super()._init_state(n_runs)
        self._streams = self._rng.permutation(self.n_streams)[np.arange(n_runs) % self.n_streams]
        if self.mode == "live":
            self._live = [None] * n_runs

    def _noise(self, actions, pulls, means):
        if self.mode == "replay":
            return self._recorded_cache[self._streams, actions, pulls] - self._cost()[actions]
        return np.array([self._live_pull(r, int(a)) for r, a in enumerate(actions)]) - self._cost()[actions]

    def _live_pull(self, run: int, arm: int) -> float:
        from sklearn.model_selection import train_test_split

        if self._live[run] is None:
            x, y = _dataset(self.dataset)
            seed = int(self._rng.integers(2**31))
            x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
            models = [_learner(kind, seed + i) for i, kind in enumerate(self.learners)]
            orders = [np.random.default_rng(seed + i).permutation(len(y_tr)) for i in range(self.n_arms)]
            self._live[run] = dict(x_tr=x_tr, y_tr=y_tr, x_te=x_te, y_te=y_te, classes=np.unique(y), models=models,
                                   orders=orders, steps=[0] * self.n_arms, seed=seed)
        st = self._live[run]
        step = st["steps"][arm]
        per_epoch = len(st["y_tr"]) // self.batch_size
        if step and step % per_epoch == 0:
            st["orders"][arm] = np.random.default_rng(st["seed"] + 1000 * step + arm).permutation(len(st["y_tr"]))
        start = (step % per_epoch) * self.batch_size
        batch = st["orders"][arm][start : start + self.batch_size]
        model = st["models"][arm]
        model.partial_fit(st["x_tr"][batch], st["y_tr"][batch], classes=st["classes"])
        st["steps"][arm] = step + 1
        return float(model.score(st["x_te"], st["y_te"]))

    @classmethod
    def _check_examples(cls):
        return [cls(dataset="wine", learners=["naive-bayes", "sgd-logistic"], horizon=60, n_streams=2, batch_size=8,
                    cache_dir=None, seed=0)]


# ----------------------------------------------------------------------------- LLM stand-in
#: The stand-in LLM arms: (name, start, plateau, time constant in pulls, cost per fine-tuning step,
#: fine-tuning stops after this many pulls). Normalised reward, built from the paper's Fig. 2/5a story.
LLM_ARMS = (
    ("T5 Small", 0.10, 0.55, 3000.0, 1e-7, None),
    ("T5 Base", 0.15, 0.80, 3000.0, 1e-7, None),
    ("GPT-2 Small", 0.05, 0.60, 3000.0, 1e-7, None),
    ("GPT-2 Medium", 0.10, 0.85, 2500.0, 1e-7, None),
    ("GPT-3 Davinci", 0.70, 0.76, 500.0, 2e-5, 1500),
    ("GPT-3 Davinci (w/o)", 0.72, 0.72, 1.0, 0.0, 0),
)


def llm_curves(length: int) -> np.ndarray:
    """Net reward ``(6, length)`` of the stand-in LLM arms: ``plateau - (plateau - start) e^(-x/k) - eta(x)``.

    ``eta(x) = m * min(x, stop)`` is the paper's cumulative fine-tuning cost (sec. 5.4): it grows by
    ``m`` per fine-tuning step until fine-tuning stops, after which the model and the cost freeze.

    >>> llm_curves(30000)[:, -1].round(3).tolist()
    [0.547, 0.797, 0.597, 0.847, 0.73, 0.72]
    """
    x = np.arange(length, dtype=float)
    rows = []
    for _, start, plateau, scale, cost, stop in LLM_ARMS:
        steps = x if stop is None else np.minimum(x, stop)
        rows.append(plateau - (plateau - start) * np.exp(-steps / scale) - cost * steps)
    return np.stack(rows)


@register_environment("llm-replay", "llm-stand-in")
class LLMReplay(_RestedCurves):
    """STAND-IN for the TI-UCB paper's LLM selection on XSum (sec. 5.4, Fig. 5): replayed synthetic curves.

    Not measured: the paper publishes no numbers for its curves, and XSum, the checkpoints and the
    OpenAI fine-tuning API are out of reach offline. The six arms of :data:`LLM_ARMS` follow what
    the paper reports: GPT-3 Davinci starts high and its net reward (ROUGE-2-like score minus the
    cumulative fine-tuning cost) converges early; the small local models start low and rise, and
    GPT-2 Medium ends best, with T5 Base close behind; zero-shot Davinci is flat. Rewards add
    ``N(0, sigma^2)`` noise; the paper's horizon is 30,000.

    >>> from genbandit.envs.rising import LLMReplay
    >>> LLMReplay(horizon=30000).best_arm  # GPT-2 Medium
    3
    """

    name = "llm-replay"
    _parameter_constraints = {"horizon": [Interval(Integral, 1, None, "left")], "sigma": [Interval(Real, 0, None, "left")]}

    def __init__(self, horizon: int = 30_000, sigma: float = 0.05, seed=None) -> None:
        self.horizon = horizon
        self.sigma = sigma
        self.seed = seed

    n_arms = len(LLM_ARMS)

    def _curves(self) -> np.ndarray:
        return llm_curves(self.horizon)

    def _noise(self, actions, pulls, means):
        return means + self.sigma * self._rng.standard_normal(means.shape[0])

    @classmethod
    def _check_examples(cls):
        return [cls(horizon=200, seed=0)]
