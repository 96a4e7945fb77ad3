"""RFF-UCB / LinUCB (genbandit) side by side with ParetoBandit, MABWiser LinUCB and Vowpal Wabbit cb_explore_adf.

Same real stream (the prompts and logged LLM outcomes that the ``paretobandit`` package ships), same
MiniLM embeddings, same random prompt order per seed; each round reveals only the chosen model's
utility (reward - price x dollar cost). Prints a Markdown table of mean utility, OPR and
milliseconds per decision (select + update, prompt embedding excluded on every side; ParetoBandit's
own PCA projection of the embedding is done before the clock starts too). ParetoBandit runs twice:
in its default pipeline (its 26-d PCA features) and on the same 384-d embeddings as the others.

Run by hand (not in CI):

    PYTHONPATH=src python benchmarks/pak_ucb_peers.py --rounds 3609 --seeds 5 > docs/reproductions/pak-ucb/peers.md
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from genbandit.envs.prompts import ParetoBanditReplay, load_paretobandit  # noqa: E402
from genbandit.policies.kernel import RFFUCB, BestSingle, LinUCB, default_eta  # noqa: E402


class Peer:
    """select(i) -> arm for prompt i; update(i, arm, utility)."""

    name = ""

    def select(self, i: int) -> int:
        raise NotImplementedError

    def update(self, i: int, arm: int, reward: float) -> None:
        raise NotImplementedError


class Genbandit(Peer):
    def __init__(self, name, policy, X):
        self.name, self.policy, self.X = name, policy, X
        policy.reset(1)

    def select(self, i):
        return self.policy.select(self.X[i])

    def update(self, i, arm, reward):
        self.policy.update(arm, reward, context=self.X[i])


class ParetoBandit(Peer):
    """ParetoBandit's BanditRouter, cold start.

    ``pca=True``: its default pipeline, 26-d features (its shipped PCA of the same MiniLM embeddings,
    computed before the clock). ``pca=False``: the same 384-d embeddings every other router gets
    (``FeatureService.for_precomputed``), the like-for-like comparison.
    """

    def __init__(self, name, X, models, cost_penalty, feedback, seed, pca=True):
        from pareto_bandit import BanditRouter, FeatureService
        from pareto_bandit.config import DEFAULT_PCA_PATH

        logging.getLogger("pareto_bandit").setLevel(logging.ERROR)
        X32 = X.astype(np.float32)
        self._next = 0
        if pca:
            lookup = {i: X32[i] for i in range(len(X32))}
            fs = FeatureService(custom_encoder=lambda text: lookup[int(text)], pca_path=DEFAULT_PCA_PATH, embedding_dim=X.shape[1])
            # features precomputed here, outside the timed loop (the embedding is excluded on every side)
            self.F = np.stack([fs.extract_features(str(i)) for i in range(len(X))])
        else:
            fs = FeatureService.for_precomputed(X.shape[1])
            self.F = X32
        np.random.seed(seed)
        self.router = BanditRouter.create(feature_service=fs, priors="none", cost_penalty=cost_penalty)
        self.models, self.name, self.feedback = models, name, feedback
        self._pending = None

    def select(self, i):
        model_id, log = self.router.route(self.F[i])
        self._pending = log.request_id
        return self.models.index(model_id)

    def update(self, i, arm, reward):
        self.router.process_feedback(self._pending, float(np.clip(reward, 0.0, 1.0)))


class MabwiserLinUCB(Peer):
    """MABWiser's LinUCB (disjoint per-arm ridge), partial_fit every round."""

    def __init__(self, X, n_arms, alpha, seed):
        from mabwiser.mab import MAB, LearningPolicy

        self.X, self.n_arms, self.name = X, n_arms, "MABWiser LinUCB"
        self.mab = MAB(arms=list(range(n_arms)), learning_policy=LearningPolicy.LinUCB(alpha=alpha, l2_lambda=1.0), seed=seed)
        self._fitted = False
        self._rng = np.random.default_rng(seed)

    def select(self, i):
        if not self._fitted:
            return int(self._rng.integers(self.n_arms))
        return int(self.mab.predict(self.X[i : i + 1]))

    def update(self, i, arm, reward):
        if not self._fitted:
            self.mab.fit([arm], [reward], self.X[i : i + 1])
            self._fitted = True
        else:
            self.mab.partial_fit([arm], [reward], self.X[i : i + 1])


class VowpalWabbit(Peer):
    """Vowpal Wabbit cb_explore_adf (epsilon-greedy 0.05, its default), shared prompt features + one action feature per model."""

    def __init__(self, X, n_arms, seed):
        import vowpalwabbit

        self.vw = vowpalwabbit.Workspace(f"--cb_explore_adf --epsilon 0.05 --quiet --random_seed {seed} -q sa")
        self.shared = [" ".join(f"f{j}:{v:.6f}" for j, v in enumerate(row)) for row in X]
        self.n_arms, self.name = n_arms, "Vowpal Wabbit cb_explore_adf"
        self._rng = np.random.default_rng(seed)
        self._pmf = None

    def _example(self, i, label=None):
        lines = [f"shared |s {self.shared[i]}"]
        for a in range(self.n_arms):
            prefix = f"0:{label[1]}:{label[2]} " if label is not None and label[0] == a else ""
            lines.append(f"{prefix}|a model{a}")
        return "\n".join(lines)

    def select(self, i):
        pmf = np.asarray(self.vw.predict(self._example(i)), dtype=float)
        pmf /= pmf.sum()
        arm = int(self._rng.choice(self.n_arms, p=pmf))
        self._pmf = pmf[arm]
        return arm

    def update(self, i, arm, reward):
        self.vw.learn(self._example(i, (arm, -reward, self._pmf)))


def play(peer: Peer, order: np.ndarray, U: np.ndarray) -> dict:
    spent, total, optimal = 0.0, 0.0, 0
    best = U.max(1)
    for i in order:
        start = time.perf_counter()
        arm = peer.select(int(i))
        spent += time.perf_counter() - start
        reward = float(U[i, arm])
        start = time.perf_counter()
        peer.update(int(i), arm, reward)
        spent += time.perf_counter() - start
        total += reward
        optimal += int(U[i, arm] >= best[i] - 1e-12)
    n = len(order)
    return {"mean": total / n, "opr": optimal / n, "ms": 1e3 * spent / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3609)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--prices", default="0,5")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    texts, rewards, costs, models, _ = load_paretobandit()
    X = ParetoBanditReplay().embeddings()
    G = len(models)
    eta = default_eta(G)
    out = [
        "# Side by side on the paretobandit stream",
        "",
        f"Command: `PYTHONPATH=src python benchmarks/pak_ucb_peers.py --rounds {args.rounds} --seeds {args.seeds}` "
        f"({len(texts)} prompts, {G} LLMs; each seed replays a random order of the first {args.rounds} prompts of it; "
        "mean ± standard error over seeds; ms = select + update per decision, embedding excluded; BLAS one thread; "
        f"1-minute load average {os.getloadavg()[0]:.2f} at the start).",
        "",
    ]
    for price in [float(p) for p in args.prices.split(",")]:
        U = rewards - price * costs
        best_arm = int(U.mean(0).argmax())
        rows: dict[str, list[dict]] = {}
        for seed in range(args.seeds):
            order = np.random.default_rng(seed).permutation(len(texts))[: args.rounds]
            peers = [
                Genbandit("genbandit best-single (oracle)", BestSingle(n_arms=G, arm=best_arm, seed=seed), X),
                Genbandit("genbandit RFF-UCB-RBF (sigma 0.5, D 200)", RFFUCB(n_arms=G, n_features=384, sigma=0.5, seed=seed), X),
                Genbandit("genbandit RFF-UCB-RBF (sigma 5, D 200)", RFFUCB(n_arms=G, n_features=384, sigma=5.0, seed=seed), X),
                Genbandit("genbandit RFF-UCB-RBF (sigma 0.5, D 200, cos-phase map: 200 features)",
                          RFFUCB(n_arms=G, n_features=384, sigma=0.5, feature_map="cos-phase", seed=seed), X),
                Genbandit("genbandit LinUCB (shared)", LinUCB(n_arms=G, n_features=384, seed=seed), X),
                ParetoBandit("ParetoBandit (cold start, cost_penalty 0, feedback = utility)", X, models, 0.0, "utility", seed),
                ParetoBandit("ParetoBandit on the same 384-d embeddings (no PCA, cost_penalty 0)", X, models, 0.0, "utility", seed, pca=False),
            ]
            if price > 0:
                peers.append(ParetoBandit("ParetoBandit (cold start, its own cost_penalty 0.3, feedback = utility)", X, models, 0.3, "utility", seed))
            peers += [MabwiserLinUCB(X, G, eta, seed), VowpalWabbit(X, G, seed)]
            for peer in peers:
                rows.setdefault(peer.name, []).append(play(peer, order, U))
                print(f"price {price} seed {seed} {peer.name}: {rows[peer.name][-1]}", file=sys.stderr, flush=True)
        out += [
            f"## utility = reward - {price:g} x dollar cost (best single model: {models[best_arm]}, {U[:, best_arm].mean():.4f} on the whole stream)",
            "",
            "| router | mean utility | OPR | ms per decision |",
            "|---|---|---|---|",
        ]
        for name, rs in rows.items():
            m = np.array([[r["mean"], r["opr"], r["ms"]] for r in rs])
            stderr = m.std(0, ddof=1) / np.sqrt(len(rs)) if len(rs) > 1 else np.zeros(3)
            out.append(f"| {name} | {m[:, 0].mean():.4f} ± {stderr[0]:.4f} | {m[:, 1].mean():.3f} | {m[:, 2].mean():.3f} |")
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
