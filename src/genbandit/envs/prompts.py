"""Prompt streams for model selection: the PAK-UCB paper's synthetic setups and replays of real LLM outcomes.

Every environment here is a table: ``N`` prompts with embeddings ``(N, d)`` and, for each prompt
and model, up to ``S`` stored scores ``(N, G, S)`` (five responses per model in the synthetic
setups, as in the paper's protocol; one logged outcome per model in the ParetoBandit replay; as
many trials as a user's table holds per prompt, NaN-padded where a prompt has fewer). A round
shows a prompt's embedding; the learner picks one model and sees one of that model's stored
scores for that prompt, drawn uniformly among the prompt's trials, nothing else (bandit feedback).
The per-prompt oracle, ``opr`` and the regret use each prompt's expected score (the mean over its
trials).

Truth reported in ``Step.info`` (summed over rounds by the simulator):

- ``optimal``: 1 when the chosen model has the prompt's highest mean score (ties count, spec
  section 5 item 18); the ``opr`` metric (optimal-pick ratio) is its average.
- ``best_single_reward``: what the best single model (highest mean over the prompt stream) scored
  on the same prompt and the same stored response; ``otb`` (outscore-the-best) is the mean of
  ``reward - best_single_reward``, positive when prompt-aware selection beats every fixed model.
- ``quality`` and ``cost`` (real replays): the chosen model's logged reward and dollar cost, so a
  cost-aware run (utility = reward - price x cost) can be read in both currencies.
- ``best_single_regret``: the pseudo-regret the best single model would have on the same prompt;
  ``headroom_captured`` is ``1 - regret / best_single_regret``, the share of the oracle's headroom
  over the best single model that a policy captured.
- per category (a :class:`PromptTable` with a ``category_column``): ``prompts[c]``,
  ``reward[c]``, ``best_single_reward[c]`` and ``regret[c]``, summed over the rounds whose prompt
  is in category ``c``.

``regret`` is the pseudo-regret against the prompt's best model, ``max_g mean_g(y) - mean_{g_t}(y)``
(eq. 3). Embeddings come from :class:`genbandit.embeddings.SentenceEmbedder` (all-MiniLM-L6-v2,
offline, cached on disk), or from a cheap Gaussian-cluster stand-in (``contexts="gaussian"``)
for tests.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from ..core.base import Environment, Step
from ..core.metrics import reported_total as _total
from ..core.optional import import_optional
from ..core.registry import register_environment, register_metric
from ..core.validation import Interval, InvalidParameterError, Options, check_finite_array

log = logging.getLogger("genbandit")

__all__ = [
    "PromptReplay",
    "Setup4Synthetic",
    "ParetoBanditReplay",
    "PromptTable",
    "ArrayReplay",
    "template_prompts",
    "read_table",
    "load_paretobandit",
    "SETUP4",
]

# ---------------------------------------------------------------------------------------------
# Template prompts (Hu et al. 2025, App. C.3): five prompt types, 5 subjects x 6 predicates x 6 styles each
# ---------------------------------------------------------------------------------------------
_TEMPLATES = {
    "dog": (
        ["a golden retriever", "a small terrier", "a black labrador puppy", "a husky", "an old beagle"],
        ["running on the beach", "sleeping on a sofa", "catching a frisbee in a park", "sitting next to a door",
         "drinking water from a bottle", "playing in the snow"],
        [", photorealistic", ", oil painting", ", in the style of a children's book", ", 35mm photo", ", high detail", ", at sunset"],
    ),
    "car": (
        ["a red sports car", "a vintage sedan", "a yellow taxi", "an electric hatchback", "a police car"],
        ["driving down a city street", "parked next to a fire hydrant", "crossing a bridge in the rain",
         "on a mountain road", "stuck in traffic", "in a showroom"],
        [", photorealistic", ", oil painting", ", cinematic lighting", ", 35mm photo", ", high detail", ", at night"],
    ),
    "food": (
        ["a bowl of ramen", "a chocolate cake", "a plate of carrots and peas", "a margherita pizza", "a bowl of strawberries"],
        ["on a wooden table", "served in a busy restaurant", "next to a cup of coffee", "on a picnic blanket",
         "in a bright kitchen", "viewed from above"],
        [", food photography", ", watercolor", ", studio lighting", ", 35mm photo", ", high detail", ", rustic style"],
    ),
    "code": (
        ["Write a Python function that", "Write a Rust function that", "Implement in JavaScript a routine that",
         "Write a Java method that", "Write a C++ function that"],
        ["parses a CSV file", "reverses a linked list", "computes the longest common subsequence of two strings",
         "checks whether a number is prime", "merges two sorted arrays", "serialises a binary tree"],
        [" step by step.", " with unit tests.", " efficiently.", " and explain its complexity.", " using no libraries.", " with type hints."],
    ),
    "math": (
        ["Compute", "Prove that", "Find", "Evaluate", "Solve for x:"],
        ["the integral of sin(x) from 0 to pi", "the sum of the first 100 odd numbers is a square",
         "the derivative of x^3 ln(x)", "the limit of (1 + 1/n)^n as n goes to infinity", "x^2 - 5x + 6 = 0",
         "the determinant of a 3 by 3 rotation matrix"],
        ["", " and show your work.", " in two lines.", " using induction if needed.", " with a short explanation.", " exactly."],
    ),
}
CATEGORIES = tuple(_TEMPLATES)


def template_prompts(categories: tuple[str, ...] = CATEGORIES, per_category: int = 180) -> tuple[list[str], np.ndarray]:
    """(prompts, category index) for the template prompt types, ``per_category`` each (at most 180).

    >>> texts, cats = template_prompts(("dog", "math"), per_category=2)
    >>> texts[0], cats.tolist()
    ('a golden retriever running on the beach, photorealistic', [0, 0, 1, 1])
    """
    texts: list[str] = []
    labels: list[int] = []
    for c, name in enumerate(categories):
        subjects, predicates, styles = _TEMPLATES[name]
        combos = list(itertools.product(subjects, predicates, styles))
        # spread the first per_category picks over all subjects and predicates
        order = sorted(range(len(combos)), key=lambda i: (i % 7, i))
        for i in order[:per_category]:
            s, p, st = combos[i]
            texts.append(f"{s} {p}{st}")
            labels.append(c)
    return texts, np.asarray(labels, dtype=np.int64)


#: Setup 4 analogues (Hu et al. 2025, App. C.3): categories, per-(model, category) mean score, score kind.
SETUP4: dict[str, dict[str, Any]] = {
    # App. C.3: five generators, each an expert on one prompt type; non-experts score lower.
    "expert": {
        "categories": CATEGORIES,
        "means": (np.full((5, 5), 0.45) + np.diag(np.full(5, 0.35)) + np.array([[0.03]] + [[0.0]] * 4)).tolist(),
        "kind": "gaussian",
    },
    # Setup 1 analogue: two models whose ranking flips across prompt types.
    "swap2": {
        "categories": CATEGORIES,
        "means": [[0.75, 0.55, 0.75, 0.55, 0.70], [0.55, 0.75, 0.55, 0.75, 0.55]],
        "kind": "gaussian",
    },
    # Setup 2 analogue: pass rates of Gemini-2.5-Flash and Qwen-Plus on completion vs translation.
    "llm-bernoulli": {
        "categories": ("code", "math"),
        "means": [[0.5591, 0.2439], [0.1384, 0.4091]],
        "kind": "bernoulli",
    },
}


# ---------------------------------------------------------------------------------------------
# The replay machinery
# ---------------------------------------------------------------------------------------------
class PromptReplay(Environment):
    """Base of the prompt environments: a table of prompts, embeddings and stored scores.

    Subclasses implement ``_table(rng) -> (contexts (N, d), scores (N, G, S), extras)`` where
    ``extras`` may hold ``quality`` and ``cost`` ``(N, G)``. Prompts are drawn uniformly with
    replacement (``order="iid"``, the paper's i.i.d. prompt law), replayed as a fresh random
    permutation per run (``order="shuffle"``; the horizon is then at most N) or in the table's own row order, the same in
    every run (``order="logged"``: a log replayed as it happened, drift and all; the horizon is at most N). The stored response
    shown is drawn independently of the action, so every policy of a scenario sees the same draws.
    """

    _parameter_constraints = {"order": [Options(("iid", "shuffle", "logged"))]}

    def _table(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict]:
        raise NotImplementedError

    def _init_state(self, n_runs: int) -> None:
        contexts, scores, extras = self._table(self._rng)
        self._contexts = contexts
        self._scores = scores
        self._extras = extras
        self._n_resp = (~np.isnan(scores[:, 0, :])).sum(axis=1)  # stored trials per prompt (NaN pads the rest)
        self._means = np.nanmean(scores, axis=2)
        self._best_single = int(self._means.mean(axis=0).argmax())
        n = contexts.shape[0]
        self._order = (np.stack([self._rng.permutation(n) for _ in range(n_runs)]) if self.order == "shuffle"
                       else np.broadcast_to(np.arange(n), (n_runs, n)) if self.order == "logged" else None)
        self._idx = np.zeros(n_runs, dtype=np.int64)
        self._resp = np.zeros(n_runs, dtype=np.int64)
        self._drawn_for = -1

    def policy_arguments(self) -> dict:
        """Constructor arguments a policy may take from this environment: ``arm``, the best single model (the one-arm oracle's)."""
        return {"arm": self.best_single_arm}

    @property
    def best_single_arm(self) -> int:
        """The model with the highest mean score over the prompt table (the one-arm oracle's arm)."""
        if not hasattr(self, "_means"):
            self.reset()
        return self._best_single

    def _draw(self) -> None:
        if self._drawn_for == self._t:
            return
        n_runs, n = self._n_runs, self._contexts.shape[0]
        if self._order is not None:
            self._idx = self._order[:, self._t % n]
        else:
            self._idx = self._rng.integers(n, size=n_runs)
        self._resp = self._rng.integers(self._n_resp[self._idx])
        self._drawn_for = self._t

    def _observe(self) -> np.ndarray:
        self._draw()
        return self._contexts[self._idx]

    def mean_rewards(self) -> np.ndarray:
        self._draw()
        return self._means[self._idx]

    def _step(self, actions: np.ndarray) -> Step:
        self._draw()
        idx, resp = self._idx, self._resp
        means = self._means[idx]  # (R, G)
        rows = np.arange(actions.shape[0])
        best = means.max(axis=1)
        reward = self._scores[idx, actions, resp]
        info = {
            "optimal": (means[rows, actions] >= best - 1e-12).astype(float),
            "best_single_reward": self._scores[idx, self._best_single, resp],
            "best_single_regret": best - means[:, self._best_single],
        }
        for key, table in self._extras.items():
            info[key] = table[idx, actions, resp]
        return Step(feedback=reward, reward=reward, regret=best - means[rows, actions], info=info)


def _gaussian_contexts(labels: np.ndarray, dim: int, rng: np.random.Generator, spread: float = 0.6) -> np.ndarray:
    """Unit vectors around one random centroid per category: a cheap, model-free stand-in for embeddings."""
    centroids = rng.standard_normal((int(labels.max()) + 1, dim))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    X = centroids[labels] + spread / np.sqrt(dim) * rng.standard_normal((labels.size, dim))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@functools.lru_cache(maxsize=16)
def _embed_cached(texts: tuple[str, ...], model: str, cache_dir: str | None) -> np.ndarray:
    from ..embeddings import SentenceEmbedder

    out = SentenceEmbedder(model, cache_dir=cache_dir).encode(list(texts)).astype(np.float64)
    out.setflags(write=False)
    return out


def embed_texts(texts: list[str], model: str = "all-MiniLM-L6-v2", cache_dir: str | None = None) -> np.ndarray:
    """Embeddings ``(n, 384)`` of ``texts``, memoised in this process and cached on disk."""
    return _embed_cached(tuple(texts), model, cache_dir)


@register_environment("setup4")
class Setup4Synthetic(PromptReplay):
    """Synthetic conditional-generation tasks (Hu et al. 2025, Setup 4 / App. C.3).

    Template prompts of several types; model ``g`` scores ``M[g, c(y)] + 0.02 tanh(3 w_g.y)`` on a
    prompt of type ``c(y)`` (``w_g`` a random unit vector: smooth within-type variation), and each
    (model, prompt) pair stores ``n_responses`` noisy scores: ``N(0, noise^2)`` clipped to [0, 1]
    for CLIPScore-like scores or Bernoulli for pass/fail. ``setup``:

    - ``"expert"``: five models, each an expert (0.80) on one of five prompt types, 0.45 elsewhere
      (+0.03 for model 0, the unique best single model);
    - ``"swap2"``: two models whose ranking flips across prompt types (Setup 1 analogue);
    - ``"llm-bernoulli"``: pass rates of two LLMs on code vs math prompts (Setup 2 analogue).

    ``contexts="minilm"`` embeds the prompts with all-MiniLM-L6-v2 (cached on disk);
    ``"gaussian"`` uses unit vectors around per-type centroids in ``dim`` dimensions (no model).

    >>> from genbandit.envs.prompts import Setup4Synthetic
    >>> env = Setup4Synthetic(setup="swap2", contexts="gaussian", dim=8, seed=0).reset(n_runs=2)
    >>> env.observe().shape, env.n_arms, env.best_single_arm
    ((2, 8), 2, 0)
    """

    name = "setup4-synthetic"
    _parameter_constraints = {
        "setup": [Options(tuple(SETUP4))],
        "contexts": [Options(("minilm", "gaussian"))],
        "dim": [Interval(Integral, 1, None, "left")],
        "n_prompts_per_category": [Interval(Integral, 1, 180, "both")],
        "n_responses": [Interval(Integral, 1, None, "left")],
        "noise": [Interval(Real, 0, None, "left")],
        "smooth": [Interval(Real, 0, None, "left")],
    }

    def __init__(self, setup: str = "expert", contexts: str = "minilm", dim: int = 384, n_prompts_per_category: int = 180,
                 n_responses: int = 5, noise: float = 0.1, smooth: float = 0.02, order: str = "iid", cache_dir: str | None = None,
                 seed=None) -> None:
        self.setup = setup
        self.contexts = contexts
        self.dim = dim
        self.n_prompts_per_category = n_prompts_per_category
        self.n_responses = n_responses
        self.noise = noise
        self.smooth = smooth
        self.order = order
        self.cache_dir = cache_dir
        self.seed = seed

    @property
    def n_arms(self) -> int:
        return len(SETUP4[self.setup]["means"])

    @property
    def context_dim(self) -> int:
        return 384 if self.contexts == "minilm" else self.dim

    def _table(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict]:
        spec = SETUP4[self.setup]
        texts, labels = template_prompts(spec["categories"], self.n_prompts_per_category)
        if self.contexts == "minilm":
            X = embed_texts(texts, cache_dir=self.cache_dir)
        else:
            X = _gaussian_contexts(labels, self.dim, rng)
        M = np.asarray(spec["means"], dtype=float)
        w = rng.standard_normal((M.shape[0], X.shape[1]))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        mean = M[:, labels].T + self.smooth * np.tanh(3.0 * X @ w.T)  # (N, G)
        shape = mean.shape + (self.n_responses,)
        if spec["kind"] == "bernoulli":
            scores = (rng.random(shape) < np.clip(mean, 0, 1)[..., None]).astype(float)
        else:
            scores = np.clip(mean[..., None] + self.noise * rng.standard_normal(shape), 0.0, 1.0)
        return X, scores, {}

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(setup=s, contexts="gaussian", dim=5, n_prompts_per_category=6, seed=0) for s in ("expert", "llm-bernoulli")]


class _LoggedTable(PromptReplay):
    """A replay of logged per-model outcomes: utility = reward - price x cost, one or more stored trials per prompt."""

    _parameter_constraints = {
        "price": [Interval(Real, 0, None, "left")],
        "limit": [None, Interval(Integral, 1, None, "left")],
    }

    def _load(self) -> tuple[list[str], np.ndarray, np.ndarray | None, list[str]]:
        """(prompts, rewards (N, G, S), costs (N, G, S) or None, model names); NaN pads missing trials."""
        raise NotImplementedError

    @functools.cached_property
    def _data(self) -> tuple[list[str], np.ndarray, np.ndarray | None, list[str]]:
        texts, rewards, costs, models = self._load()
        if self.limit is not None:
            texts, rewards = texts[: self.limit], rewards[: self.limit]
            costs = None if costs is None else costs[: self.limit]
        return texts, rewards, costs, models

    @property
    def n_arms(self) -> int:
        return self._data[1].shape[1]

    @property
    def models(self) -> list[str]:
        return list(self._data[3])

    @property
    def prompts(self) -> list[str]:
        """The distinct prompts, in table order (one row of :meth:`utilities` each)."""
        return list(self._data[0])

    @property
    def context_dim(self) -> int:
        """The embedding model's dimension (384 for all-MiniLM-L6-v2), read from the embeddings themselves."""
        return int(self.embeddings().shape[1])

    @property
    def max_horizon(self) -> int | None:
        return len(self._data[0]) if self.order in ("shuffle", "logged") else None

    def _trial_utilities(self) -> np.ndarray:
        _, rewards, costs, _ = self._data
        return rewards if costs is None or self.price == 0 else rewards - self.price * costs

    def utilities(self) -> np.ndarray:
        """Expected reward - price x cost of every prompt and model (the mean over its trials), ``(N, G)``."""
        return np.nanmean(self._trial_utilities(), axis=2)

    def embeddings(self) -> np.ndarray:
        return embed_texts(self._data[0], self.embedding_model, self.cache_dir)

    def _table(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict]:
        _, rewards, costs, _ = self._data
        extras = {"quality": rewards}
        if costs is not None:
            extras["cost"] = costs
        return self.embeddings(), self._trial_utilities(), extras

    def _step(self, actions: np.ndarray) -> Step:
        step = super()._step(actions)
        if getattr(self, "reveal_cost", False):  # what a policy with a budget learns from
            step.feedback = {"reward": step.feedback, "cost": step.info["cost"]}
        return step


class ArrayReplay(_LoggedTable):
    """A full-information table held in memory, replayed: your own embeddings, scores and costs as arrays.

    ``contexts`` ``(N, d)`` are the prompts' embeddings, ``rewards`` ``(N, G)`` each model's score
    on each prompt (or ``(N, G, S)``: ``S`` stored trials, NaN-padded, one drawn per round), ``costs``
    the same shape or ``None``. Replayed like the logged streams
    (``order="shuffle"``: every prompt once per run, in a random order per run; ``order="logged"``: in the rows' order), with utility
    ``reward - price x cost``; ``reveal_cost=True`` makes the feedback ``{"reward", "cost"}``.
    ``model_names`` names the columns (``model 0``, ``model 1``... by default).
    For tables in files use :class:`PromptTable`, which embeds the prompts itself.

    >>> from genbandit.envs.prompts import ArrayReplay
    >>> env = ArrayReplay(contexts=np.eye(3), rewards=[[0.9, 0.1], [0.2, 0.8], [0.3, 0.9]], seed=0)
    >>> env.n_arms, env.context_dim, env.max_horizon, env.best_single_arm
    (2, 3, 3, 1)
    """

    name = "array-replay"
    _parameter_constraints = {"reveal_cost": [bool], "model_names": [None, list, tuple]}

    def __init__(self, contexts, rewards, costs=None, model_names=None, price: float = 0.0, order: str = "shuffle", limit: int | None = None,
                 reveal_cost: bool = False, seed=None) -> None:
        self.contexts = contexts
        self.rewards = rewards
        self.costs = costs
        self.model_names = model_names
        self.price = price
        self.order = order
        self.limit = limit
        self.reveal_cost = reveal_cost
        self.seed = seed

    def _load(self):
        contexts = check_finite_array("contexts", self.contexts, (None, None), owner="ArrayReplay")
        rewards = np.asarray(self.rewards, dtype=float)
        rewards = rewards[..., None] if rewards.ndim == 2 else rewards
        costs = None if self.costs is None else np.asarray(self.costs, dtype=float)
        costs = costs[..., None] if costs is not None and costs.ndim == 2 else costs
        if rewards.ndim != 3 or rewards.shape[0] != contexts.shape[0] or rewards.shape[1] < 2 or (costs is not None and costs.shape != rewards.shape):
            raise InvalidParameterError(f"ArrayReplay needs rewards (N, G) or (N, G, S) with N = {contexts.shape[0]} rows and G >= 2 models, "
                                        f"and costs of the same shape. Got rewards {rewards.shape}, costs {None if costs is None else costs.shape} instead.")
        models = [str(m) for m in self.model_names] if self.model_names is not None else [f"model {g}" for g in range(rewards.shape[1])]
        return [f"row {i}" for i in range(contexts.shape[0])], rewards, costs, models

    def embeddings(self) -> np.ndarray:
        contexts = np.asarray(self.contexts, dtype=float)
        return contexts[: self.limit] if self.limit is not None else contexts

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        rng = np.random.default_rng(0)
        return [cls(contexts=rng.standard_normal((30, 4)), rewards=rng.uniform(size=(30, 2)), seed=0)]


# ---------------------------------------------------------------------------------------------
# ParetoBandit's shipped stream
# ---------------------------------------------------------------------------------------------
def load_paretobandit(split: str = "all") -> tuple[list[str], np.ndarray, np.ndarray, list[str], list[str]]:
    """The prompts the ``paretobandit`` package ships with three LLMs' logged reward and dollar cost.

    Returns (prompts, rewards (N, 3), costs (N, 3), model ids, sources). ``split`` is ``"val"``,
    ``"test"`` (the holdout file) or ``"all"`` (both, val first).
    """
    pareto_bandit = import_optional("pareto_bandit", "The paretobandit replay")
    root = Path(pareto_bandit.__file__).parent / "data" / "examples"
    files = {"val": ["val.jsonl"], "test": ["test_holdout.jsonl"], "all": ["val.jsonl", "test_holdout.jsonl"]}[split]
    rows = [json.loads(line) for name in files for line in (root / name).read_text(encoding="utf-8").split("\n") if line.strip()]
    models = list(rows[0]["arms"])
    rewards = np.array([[row["arms"][m]["reward"] for m in models] for row in rows], dtype=float)
    costs = np.array([[row["arms"][m]["cost"] for m in models] for row in rows], dtype=float)
    return [row["prompt"] for row in rows], rewards, costs, models, [row.get("source", "") for row in rows]


@register_environment("paretobandit")
class ParetoBanditReplay(_LoggedTable):
    """Real prompts and real LLM outcomes: the stream the ``paretobandit`` package ships, replayed.

    About 3,600 prompts (MBPP, MMLU and more), each with the logged reward in [0, 1] and dollar cost
    of three LLMs (Llama-3.1-8B, Mistral-Large, Gemini-2.5-Pro). Prompts are embedded with
    all-MiniLM-L6-v2 (cached on disk after the first run). A round reveals only the chosen model's
    utility ``reward - price x cost``. ``order="shuffle"`` (default) replays each prompt once per
    run in a random order, so the horizon is at most the number of prompts. With
    ``reveal_cost=True`` a round also reveals the chosen model's logged dollar cost: the feedback
    is ``{"reward": utility, "cost": cost}``, what a policy with a budget learns from.

    >>> from genbandit.envs.prompts import ParetoBanditReplay
    >>> env = ParetoBanditReplay(price=5.0)
    >>> env.n_arms, env.max_horizon > 3000, env.models[0]
    (3, True, 'meta-llama/llama-3.1-8b-instruct')
    """

    name = "paretobandit-replay"
    _parameter_constraints = {"split": [Options(("all", "val", "test"))], "reveal_cost": [bool]}

    def __init__(self, price: float = 0.0, split: str = "all", order: str = "shuffle", limit: int | None = None,
                 embedding_model: str = "all-MiniLM-L6-v2", cache_dir: str | None = None, reveal_cost: bool = False, seed=None) -> None:
        self.price = price
        self.split = split
        self.order = order
        self.limit = limit
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.reveal_cost = reveal_cost
        self.seed = seed

    def policy_arguments(self) -> dict:
        """As for every prompt replay, plus ``arm_names``: the models' ids, in arm order."""
        return {**super().policy_arguments(), "arm_names": tuple(self.models)}

    def _load(self):
        texts, rewards, costs, models, _ = load_paretobandit(self.split)
        return texts, rewards[..., None], costs[..., None], models

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        return [cls(price=5.0, limit=40, seed=0)]


# ---------------------------------------------------------------------------------------------
# Bring your own table
# ---------------------------------------------------------------------------------------------
#: The category a :class:`PromptTable` gives the prompts whose category cell is empty.
_MISSING_CATEGORY = "(no category)"
_TABLE_READERS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def read_table(path: str | Path):
    """A CSV, Parquet or JSON-lines file as a DataFrame (the format is read from the suffix)."""
    import pandas as pd

    path = Path(path)
    kind = _TABLE_READERS.get(path.suffix.lower())
    if kind is None:
        raise InvalidParameterError(f"{path}: a table must be .csv, .parquet (.pq) or .jsonl (.ndjson). Got {path.suffix or 'no suffix'!r} instead.")
    if not path.is_file():
        raise InvalidParameterError(f"No table file {str(path)!r}.")
    if kind == "parquet":
        return pd.read_parquet(path)
    return pd.read_json(path, lines=True) if kind == "jsonl" else pd.read_csv(path)


def _row(frame, k: int, prompt_column: str) -> str:
    """Where row ``k`` is, for an error message: its 0-based data row and the start of its prompt."""
    text = str(frame[prompt_column].iloc[k])
    return f"row {k} (0-based, header not counted; prompt {text[:60] + ('...' if len(text) > 60 else '')!r})"


def _numeric_block(frame, columns: list[str], what: str, path: Path, prompt_column: str, low: float, high: float, fix: str) -> np.ndarray:
    """``frame[columns]`` as floats, or a clear error naming the first non-numeric, missing, infinite or out-of-range value.

    Every value must lie in ``[low, high]``; ``fix`` says what to do when one does not.
    """
    import pandas as pd

    out = np.empty((len(frame), len(columns)))
    for j, col in enumerate(columns):
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = np.flatnonzero(values.isna().to_numpy() & frame[col].notna().to_numpy())
        if bad.size:
            raise InvalidParameterError(
                f"{path}: {what} column {col!r} must be numeric; {_row(frame, int(bad[0]), prompt_column)} holds "
                f"{frame[col].iloc[bad[0]]!r} ({bad.size} such row(s))."
            )
        arr = values.to_numpy(dtype=float)
        missing = np.flatnonzero(~np.isfinite(arr))
        if missing.size:
            raise InvalidParameterError(
                f"{path}: {what} column {col!r} has {missing.size} missing or infinite value(s), the first {float(arr[missing[0]])!r} at "
                f"{_row(frame, int(missing[0]), prompt_column)}. Every model needs a finite {what} on every row (a replay cannot "
                "show a model's outcome that was never recorded): drop those rows for every model, or fill them in (a failed "
                "call scores 0)."
            )
        outside = np.flatnonzero((arr < low) | (arr > high))
        if outside.size:
            raise InvalidParameterError(
                f"{path}: {what} column {col!r} has {outside.size} value(s) {'below 0' if high == np.inf else f'outside [{low:g}, {high:g}]'}, "
                f"the first {float(arr[outside[0]])!r} "
                f"at {_row(frame, int(outside[0]), prompt_column)}. {fix}"
            )
        out[:, j] = arr
    return out


_SCORE_FIX = ("Scores must lie in [0, 1] (a pass rate, a judge's grade scaled to [0, 1]): the policies' exploration and the "
              "Bernoulli-based rules assume it, and several clip rewards to [0, 1]. Rescale the column first, e.g. a 0-10 rating "
              "divided by 10, or (x - min) / (max - min) with the scale's bounds.")
_COST_FIX = "Costs are what a call costs (dollars per request, say): zero or positive."


def _infer_score_columns(frame, exclude: set[str], path: Path) -> list[str]:
    """The rule when ``score_columns`` is omitted: every numeric or boolean column not named elsewhere, refusing suspect ones.

    A column of integers other than 0 and 1 (a trial index, a seed, an id) or whose name contains
    "cost" is not taken for a model's scores: the table must then name its score columns.
    """
    import pandas as pd

    numeric = [c for c in frame.columns if c not in exclude and pd.api.types.is_numeric_dtype(frame[c])]
    reasons = {}
    for c in numeric:
        values = frame[c].dropna().to_numpy(dtype=float)
        if values.size and np.all(values == np.round(values)) and np.unique(values).size > 2:
            reasons[c] = "holds integers other than 0/1 (a trial index, an id?)"
        elif "cost" in str(c).lower():
            reasons[c] = "looks like a cost (name it in cost_columns)"
    if reasons:
        why = "; ".join(f"{c!r} {r}" for c, r in reasons.items())
        raise InvalidParameterError(
            f"{path}: the score columns cannot be inferred (each numeric column would become a model): {why}. Name them: "
            f"score_columns = {[c for c in numeric if c not in reasons] or ['model_a', 'model_b']}."
        )
    log.info("PromptTable %s: scores from the numeric columns %s (set score_columns to choose).", path, numeric)
    return numeric


@register_environment("prompt-table")
class PromptTable(_LoggedTable):
    """Your own prompts and per-model scores (CSV, Parquet or JSON lines) as a replay, embedded like the real stream.

    One row per prompt *and trial*: a text column and one score column per model (and, optionally,
    one cost column per model, in the same order, and a category column). A prompt that appears on
    several rows has several stored outcomes per model (for example ten sampled answers, each
    passed or failed): a round on that prompt draws one of its rows, and the per-prompt oracle,
    ``opr`` and the regret use the prompt's mean score. Prompts are compared after stripping
    surrounding whitespace (``"Hi "`` and ``"Hi"`` are one prompt; ``"hi"`` is another).

    Refused, with the column, the row and what to do: a missing, non-numeric or infinite score or
    cost (every model needs a value on every row), a score outside [0, 1] (rescale it), a negative
    cost, a blank prompt, and a prompt whose rows carry different categories. An empty category
    cell becomes the category ``"(no category)"``.

    ``score_columns=None`` takes every numeric column that is not the cost or category column,
    and refuses (asking for ``score_columns``) when one of them holds integers other than 0/1, such
    as a trial index. Utility is ``score - price x cost``. ``embedding_model`` is any model
    :class:`genbandit.embeddings.SentenceEmbedder` loads; ``context_dim`` is its dimension.

    >>> import tempfile, pandas as pd
    >>> from genbandit.envs.prompts import PromptTable
    >>> path = tempfile.mkdtemp() + "/scores.csv"
    >>> pd.DataFrame({"prompt": ["sort a list in Python", "capital of Peru?", "capital of Peru?"], "trial": [0, 0, 1],
    ...               "small": [0.9, 0.2, 0.4], "large": [0.8, 0.9, 1.0]}).to_csv(path, index=False)
    >>> env = PromptTable(path=path, score_columns=["small", "large"], cache_dir=tempfile.mkdtemp())
    >>> env.models, env.prompts, env.utilities().round(2).tolist(), env.context_dim
    (['small', 'large'], ['sort a list in Python', 'capital of Peru?'], [[0.9, 0.8], [0.3, 0.95]], 384)
    """

    name = "prompt-table"
    _parameter_constraints = {
        "path": [str, Path],
        "prompt_column": [str],
        "score_columns": [None, list],
        "cost_columns": [None, list],
        "category_column": [None, str],
    }

    def __init__(self, path: str, prompt_column: str = "prompt", score_columns: list[str] | None = None, cost_columns: list[str] | None = None,
                 category_column: str | None = None, price: float = 0.0, order: str = "shuffle", limit: int | None = None,
                 embedding_model: str = "all-MiniLM-L6-v2", cache_dir: str | None = None, seed=None) -> None:
        self.path = path
        self.prompt_column = prompt_column
        self.score_columns = score_columns
        self.cost_columns = cost_columns
        self.category_column = category_column
        self.price = price
        self.order = order
        self.limit = limit
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.seed = seed

    @functools.cached_property
    def _frame(self):
        path = Path(self.path)
        frame = read_table(path)
        named = [self.prompt_column, *(self.score_columns or []), *(self.cost_columns or []), *([self.category_column] if self.category_column else [])]
        missing = [c for c in named if c not in frame]
        if missing:
            raise InvalidParameterError(f"{path} has no column(s) {missing}; its columns: {list(frame.columns)}.")
        twice = sorted({c for c in named if named.count(c) > 1})
        if twice:
            raise InvalidParameterError(f"{path}: the column(s) {twice} are named twice among the prompt, score, cost and category "
                                        "columns; each model needs its own score column (and cost column).")
        if frame[self.prompt_column].isna().any():
            raise InvalidParameterError(f"{path}: the prompt column {self.prompt_column!r} has empty rows (first at row {int(np.flatnonzero(frame[self.prompt_column].isna())[0])}).")
        if len(frame) == 0:
            raise InvalidParameterError(f"{path} has no rows.")
        frame = frame.reset_index(drop=True)
        frame[self.prompt_column] = frame[self.prompt_column].astype(str)
        key = frame[self.prompt_column].str.strip()
        empty = np.flatnonzero(key.to_numpy() == "")
        if empty.size:
            raise InvalidParameterError(f"{path}: the prompt column {self.prompt_column!r} is blank at row {int(empty[0])} (0-based, header not counted).")
        if self.category_column:
            cats = frame[self.category_column]
            frame[self.category_column] = cats.astype(str).where(cats.notna(), _MISSING_CATEGORY)
            per_prompt = frame.groupby(key, sort=False)[self.category_column].nunique()
            if (per_prompt > 1).any():
                prompt = str(per_prompt.index[int(np.argmax(per_prompt.to_numpy() > 1))])
                found = sorted(frame.loc[key == prompt, self.category_column].unique())
                raise InvalidParameterError(
                    f"{path}: the prompt {prompt[:60]!r} has several categories in {self.category_column!r} ({found}) over its rows; "
                    "a prompt's rows are its trials and must share one category."
                )
        return frame

    @functools.cached_property
    def _prompt_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(prompt index of every row, first row of every prompt): rows whose texts agree up to surrounding whitespace are one prompt."""
        import pandas as pd

        codes, _ = pd.factorize(self._frame[self.prompt_column].str.strip(), sort=False)
        return codes, np.unique(codes, return_index=True)[1]

    def _load(self):
        path, frame = Path(self.path), self._frame
        costs_cols = list(self.cost_columns or [])
        exclude = {self.prompt_column, *costs_cols, *([self.category_column] if self.category_column else [])}
        scores_cols = list(self.score_columns) if self.score_columns else _infer_score_columns(frame, exclude, path)
        if len(scores_cols) < 2 or (costs_cols and len(costs_cols) != len(scores_cols)):
            raise InvalidParameterError(
                f"PromptTable needs at least two score columns in {path} (a router chooses between models: with one there is "
                f"nothing to choose) and, if given, one cost column per score column. "
                f"Got scores {scores_cols}, costs {costs_cols} instead. A long table (one row per prompt and model, with a model "
                "column) must be made wide first, one score column per model: "
                "frame.pivot(index=['prompt', 'trial'], columns='model', values='score').reset_index()."
            )
        if self.price and not costs_cols:
            raise InvalidParameterError(f"{path}: price = {self.price:g} weighs the models' costs, but no cost_columns are named: name "
                                        "one cost column per model (in the order of the score columns), or leave the price at 0.")
        codes, first = self._prompt_rows
        texts = frame[self.prompt_column].to_numpy()[first]
        trial = frame.groupby(codes).cumcount().to_numpy()
        shape = (len(texts), len(scores_cols), int(trial.max()) + 1)

        def stack(block: np.ndarray) -> np.ndarray:
            out = np.full(shape, np.nan)
            out[codes, :, trial] = block
            return out

        rewards = stack(_numeric_block(frame, scores_cols, "score", path, self.prompt_column, 0.0, 1.0, _SCORE_FIX))
        costs = stack(_numeric_block(frame, costs_cols, "cost", path, self.prompt_column, 0.0, np.inf, _COST_FIX)) if costs_cols else None
        return [str(t) for t in texts], rewards, costs, scores_cols

    def categories(self) -> tuple[np.ndarray, list[str]] | None:
        """(category index per prompt ``(N,)``, category names), or ``None`` without a ``category_column``.

        Every row of a prompt carries the same category (the table is refused otherwise).
        """
        if self.category_column is None:
            return None
        import pandas as pd

        frame = self._frame
        first = frame[self.category_column].iloc[self._prompt_rows[1]]
        labels, names = pd.factorize(first, sort=True)
        N = len(self._data[0])
        return labels[:N].astype(np.int64), [str(n) for n in names]

    def _init_state(self, n_runs: int) -> None:
        super()._init_state(n_runs)
        self._labels = self.categories()

    def _step(self, actions: np.ndarray) -> Step:
        step = super()._step(actions)
        if self._labels is not None:
            labels, names = self._labels
            of = labels[self._idx]
            for c, name in enumerate(names):
                mask = (of == c).astype(float)
                step.info[f"prompts[{name}]"] = mask
                step.info[f"reward[{name}]"] = mask * step.reward
                step.info[f"best_single_reward[{name}]"] = mask * step.info["best_single_reward"]
                step.info[f"regret[{name}]"] = mask * step.regret
        return step

    @classmethod
    def _check_examples(cls) -> list[Environment]:
        import tempfile

        import pandas as pd

        texts, labels = template_prompts(("code", "math"), per_category=6)
        frame = pd.DataFrame({"prompt": texts, "coder": np.where(labels == 0, 0.9, 0.3), "solver": np.where(labels == 0, 0.4, 0.8),
                              "coder_cost": 0.001, "solver_cost": 0.01, "kind": np.where(labels == 0, "code", "math")})
        path = Path(tempfile.mkdtemp(prefix="genbandit-")) / "scores.parquet"
        frame.to_parquet(path, index=False)
        return [cls(path=str(path), score_columns=["coder", "solver"], cost_columns=["coder_cost", "solver_cost"], category_column="kind",
                    price=2.0, order="iid", seed=0)]


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
@register_metric("otb", "outscore-the-best: mean reward minus the best single model's on the same prompts (Hu et al. 2025)")
def _otb(result, env, policy):
    return (result.reward[:, -1] - _total(result, "best_single_reward", "otb")) / result.horizon


@register_metric("opr", "optimal-pick ratio: share of rounds on the prompt's best model (Hu et al. 2025)")
def _opr(result, env, policy):
    return _total(result, "optimal", "opr") / result.horizon


@register_metric("mean_quality", "average logged reward of the chosen models (before the cost price)")
def _mean_quality(result, env, policy):
    return _total(result, "quality", "mean_quality") / result.horizon


@register_metric("mean_cost", "average dollar cost per decision")
def _mean_cost(result, env, policy):
    return _total(result, "cost", "mean_cost") / result.horizon


@register_metric("headroom_captured", "share of the per-prompt oracle's gain over the best single model that a policy captured (1 - regret / best single's regret)")
def _headroom_captured(result, env, policy):
    room = _total(result, "best_single_regret", "headroom_captured")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(room > 0, 1.0 - result.final_regret / np.where(room > 0, room, 1.0), np.nan)
