"""Drafters: cheap guesses of the target's next tokens, verified by :class:`~genbandit.specdec.SpeculativeDecoder`.

A drafter proposes up to ``k`` tokens that continue the token sequence ``ids`` (prompt plus the
text accepted so far). Copiers (:class:`PromptLookupDrafter`, :class:`SuffixMatchDrafter`) return
a deterministic guess: their proposal law is a point mass, which the sampling verifier of the
Algorithm 6 of the BanditSpec paper (Hou et al., 2025) handles exactly. :class:`ModelDrafter` runs a smaller causal LM with
its own KV cache and returns the law ``Q`` it sampled each token from.

Every drafter sees the whole sequence at each call and keeps only caches keyed on it, so a drafter
that was not chosen for a few rounds catches up by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Draft", "Drafter", "PromptLookupDrafter", "SuffixMatchDrafter", "ModelDrafter"]


@dataclass
class Draft:
    """Proposed tokens and, for a sampled draft, the law each was drawn from.

    ``tokens``: list of ints, length ``<= k``. ``probs``: ``None`` for a deterministic draft (a
    point mass on each token), else a float tensor ``(len(tokens), vocab)`` of the draft laws.
    """

    tokens: list[int]
    probs: Any = None


class Drafter:
    """Base class: ``propose(ids, k, ...) -> Draft``; ``start(prompt_len)`` before each prompt."""

    name = "drafter"
    #: Drafts are a deterministic function of the text that costs microseconds (no model), of Python ints:
    #: the decoder may ask for one in a round where another arm plays, to learn what this drafter would
    #: have accepted, and plays a prefix of it as it is.
    copier = False

    def start(self, prompt_len: int) -> None:
        """Forget anything tied to the previous prompt; the new prompt is ``ids[:prompt_len]``."""
        self._prompt_len = prompt_len

    def follow(self, text: list[int]) -> None:
        """The caller's promise, until the next :meth:`start`: ``text`` (the prompt, then the text accepted so far) will
        only be appended to, never edited or shortened. A drafter that keeps state built from the text may then read only
        the tokens appended since its last call given ``text`` (:class:`~genbandit.specdec.SpeculativeDecoder` calls it after
        :meth:`start`); without it every call's sequence is compared with that state. The base class keeps nothing."""

    def propose(self, ids: Sequence[int], k: int, *, temperature: float = 0.0, generator: Any = None) -> Draft:
        raise NotImplementedError


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena, 2023): copy what followed the last n-gram in the prompt.

    Tries n-gram sizes ``max_ngram`` down to ``min_ngram``: the first size whose last ``n`` tokens
    occur in the prompt wins, and the ``k`` tokens after the latest such occurrence are the draft
    (possibly shorter at the prompt's end). No match gives an empty draft (plain decoding).

    >>> d = PromptLookupDrafter(max_ngram=2)
    >>> prompt = [5, 6, 7, 8, 9, 5, 6]
    >>> d.start(len(prompt))
    >>> d.propose(prompt, 3).tokens          # "5 6" occurred at 0, followed by 7 8 9
    [7, 8, 9]
    >>> d.propose(prompt + [7, 1], 3).tokens  # "7 1" and "1" never occur in the prompt
    []
    """

    name = "pld"
    copier = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram. Got {min_ngram}, {max_ngram} instead.")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def start(self, prompt_len: int) -> None:
        super().start(prompt_len)
        self._index: dict[int, list] | None = None  # the prompt's n-grams, read backwards (below)
        self._prompt: list[int] = []

    def _build(self, prompt: list[int]) -> dict[int, list]:
        """The prompt's n-grams (``n <= max_ngram``) as a trie read backwards from their last token: a node is ``[end, children]``,
        ``end`` the end of the n-gram's latest occurrence, ``children`` the nodes of the n-grams one token longer, keyed on
        that token. A lookup walks back from the text's last token without building a key (it runs every round)."""
        root: dict[int, list] = {}
        for end in range(1, len(prompt)):  # an n-gram ending at the prompt's last token has no continuation
            children = root
            for back in range(1, min(self.max_ngram, end) + 1):
                node = children.setdefault(prompt[end - back], [end, {}])
                node[0] = end  # a later occurrence replaces an earlier one
                children = node[1]
        return root

    def propose(self, ids: Sequence[int], k: int, *, temperature: float = 0.0, generator: Any = None) -> Draft:
        if k <= 0:
            return Draft([])
        index = self._index
        if index is None:
            self._prompt = [int(t) for t in ids[: self._prompt_len]]
            index = self._index = self._build(self._prompt)
        # the longest n-gram ending the text that the prompt holds: the deepest node on the walk back
        end, depth, size = -1, 0, len(ids)
        while depth < self.max_ngram and depth < size:
            node = index.get(ids[size - 1 - depth])
            if node is None:
                break
            end, index = node
            depth += 1
        if depth < self.min_ngram:
            return Draft([])
        return Draft(self._prompt[end : end + k])


class SuffixMatchDrafter(Drafter):
    """Suffix-match copier over the prompt and everything generated so far (a suffix automaton).

    Keeps a suffix automaton of the sequence and, incrementally, the longest suffix of the
    sequence that also occurs earlier in it (ending before the last token), as in SAM decoding
    (Hu et al., 2024). If that match is at least ``min_match`` tokens long, the draft copies the
    ``k`` tokens that followed its first occurrence; a copy that reaches the end of the sequence
    goes on with the tokens it has just copied (an overlapping copy, as in LZ77), so a repeat of
    period ``p`` is extended periodically. Each new token costs amortised O(1); a sequence that does not
    continue the one the automaton holds (edited, not only appended to) rebuilds it. Finding that out
    compares the sequence with what the automaton holds, O(length) a call, except for the list given to
    :meth:`~Drafter.follow` (the decoder's text, which it only appends to): that list's new tokens are
    read and nothing else. Were such a list edited all the same, the drafts would come from
    the stale automaton: in the decoder a draft changes only how many tokens a round emits, never which
    (every draft token is verified against the target), so the output would stay the same.

    >>> d = SuffixMatchDrafter(min_match=2)
    >>> ids = [1, 2, 3, 4, 9, 1, 2]
    >>> d.start(5)
    >>> d.propose(ids, 2).tokens            # "1 2" occurred at 0, followed by 3 4
    [3, 4]
    >>> d.propose(ids + [3, 4, 9, 1], 3).tokens  # generated text is searched too: "1 2 3 4 9 1" -> 2 3 4
    [2, 3, 4]
    >>> d.propose([7, 5, 6, 5, 6, 5], 5).tokens  # "5 6 5" occurred at 1..3: copy 6 5, then go on periodically
    [6, 5, 6, 5, 6]
    """

    name = "suffix"
    copier = True

    def __init__(self, min_match: int = 2) -> None:
        if min_match < 1:
            raise ValueError(f"min_match must be >= 1. Got {min_match} instead.")
        self.min_match = min_match

    def start(self, prompt_len: int) -> None:
        super().start(prompt_len)
        # automaton over self._seq: per state, transitions, suffix link, longest length, first end position
        self._next: list[dict[int, int]] = [{}]
        self._link = [-1]
        self._len = [0]
        self._first = [-1]
        self._last = 0
        self._seq: list[int] = []
        self._match_state = 0  # state of the longest suffix of _seq occurring in _seq[:-1]
        self._match_len = 0
        self._text: list[int] | None = None  # the list given to follow(), appended to only

    def follow(self, text: list[int]) -> None:
        self._text = text

    def _extend(self, c: int) -> None:
        pos = len(self._seq)
        # 1. advance the match using the automaton of _seq (before c is added): occurrences end <= pos - 1
        state, length = self._match_state, self._match_len
        while state != -1 and c not in self._next[state]:
            state = self._link[state]
            length = self._len[state] if state != -1 else 0
        if state == -1:
            state, length = 0, 0
        else:
            state, length = self._next[state][c], length + 1
        self._match_state, self._match_len = state, length
        # 2. add c to the automaton (standard online construction)
        cur = len(self._len)
        self._next.append({})
        self._link.append(-1)
        self._len.append(self._len[self._last] + 1)
        self._first.append(pos)
        p = self._last
        while p != -1 and c not in self._next[p]:
            self._next[p][c] = cur
            p = self._link[p]
        if p == -1:
            self._link[cur] = 0
        else:
            q = self._next[p][c]
            if self._len[p] + 1 == self._len[q]:
                self._link[cur] = q
            else:
                clone = len(self._len)
                self._next.append(dict(self._next[q]))
                self._link.append(self._link[q])
                self._len.append(self._len[p] + 1)
                self._first.append(self._first[q])
                while p != -1 and self._next[p].get(c) == q:
                    self._next[p][c] = clone
                    p = self._link[p]
                self._link[q] = clone
                self._link[cur] = clone
                if self._match_state == q and self._match_len <= self._len[clone]:
                    self._match_state = clone
        self._last = cur
        self._seq.append(c)

    def propose(self, ids: Sequence[int], k: int, *, temperature: float = 0.0, generator: Any = None) -> Draft:
        if not hasattr(self, "_seq"):
            self.start(getattr(self, "_prompt_len", 0))
        # the followed list holds what the automaton holds, and more (the caller's promise): nothing to compare. Any other
        # sequence is compared, and once the automaton has read it the followed list is no longer known to continue it
        if ids is not self._text:
            self._text = None
            if list(ids[: len(self._seq)]) != self._seq:
                self.start(self._prompt_len)
        for c in ids[len(self._seq) :]:
            self._extend(int(c))
        if k <= 0 or self._match_len < self.min_match:
            return Draft([])
        end = self._first[self._match_state]  # end position of the first occurrence of the match (before the last token)
        tokens = self._seq[end + 1 : end + 1 + k]
        if len(tokens) < k:  # an overlapping copy (as in LZ77) extends a repeat periodically: the copied tokens again
            tokens = (tokens * (k // len(tokens) + 1))[:k]
        return Draft(tokens)


class ModelDrafter(Drafter):
    """Draft with a smaller causal LM (same tokenizer as the target), keeping its own KV cache.

    Greedy drafts (``temperature == 0``) take the draft model's argmax; sampled drafts draw from
    ``softmax(logits / temperature)`` and return those laws for the rejection rule. The cache holds
    the longest prefix of the sequence it has already seen and is cropped when the sequence differs
    (after a rejection), so only new tokens are fed.

    The draft model may be of another architecture than the target's and its embedding matrix may
    be padded to another size (``vocab``, set by the decoder to the target's logits width: the draft
    proposes only tokens the target has). Past its own context (``max_position_embeddings``), which
    may be shorter than the target's, it drafts from the last tokens that fit.
    """

    name = "model"

    def __init__(self, model: Any, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.vocab: int | None = None  # the target's vocabulary size; None: the draft model's own

    def start(self, prompt_len: int) -> None:
        super().start(prompt_len)
        self._forget()

    def _forget(self) -> None:
        self._cache = None
        self._cached: list[int] = []  # the tokens whose keys/values the cache holds
        self._ready = None  # the logits after the last of them, while the cache ends where the text does (_sync)
        # the cache cannot be cropped below this length: a sliding-window layer keeps only its window of the positions
        # it held before its last crop (or before it started recording its past, after the first pass)
        self._floor = 0

    def _law_logits(self, logits: Any) -> Any:
        """The draft's logits over the target's vocabulary: padded rows of a larger draft dropped, missing ones at -inf."""
        import torch

        width = logits.shape[-1]
        if self.vocab is None or width == self.vocab:
            return logits
        if width > self.vocab:
            return logits[: self.vocab]
        return torch.cat([logits, logits.new_full((self.vocab - width,), float("-inf"))])

    def _forward(self, feed: list[int]) -> Any:
        """The draft model's logits ``(len(feed), V)`` for ``feed`` after the tokens its cache holds, which it then holds too."""
        import torch

        from .tensors import cached_forward, keep_past

        first = self._cache is None
        with torch.no_grad():
            logits, self._cache = cached_forward(self.model, torch.tensor([feed], device=next(self.model.parameters()).device), self._cache)
        self._cached.extend(feed)
        if first:
            self._cache = keep_past(self._cache)
            self._floor = len(self._cached)
        return logits[0]

    def _fits(self, ids: list[int], k: int) -> bool:
        """Whether ``ids`` and ``k - 1`` drafted tokens fit in the draft model's own context (its positions may end before the
        target's)."""
        from .tensors import context_length

        context = context_length(self.model)
        return context is None or len(ids) + k - 1 <= context

    def _sync(self, ids: list[int]) -> Any:
        """The cache cropped to the longest prefix it shares with ``ids`` (at most all but the last token), then the rest of
        ``ids`` fed in one forward pass: the logits after each fed token, ``(fed, V)``. Kept for the next draft: the logits
        after the last one (``_ready``), so that a draft right after this reads them instead of feeding that token again."""
        from .tensors import crop_cache

        keep = 0
        limit = min(len(self._cached), len(ids) - 1)  # always feed at least the last token
        while keep < limit and self._cached[keep] == ids[keep]:
            keep += 1
        if keep < self._floor:
            self._forget()
            keep = 0
        if self._cache is not None:
            self._cache = crop_cache(self._cache, keep)
            self._floor = keep
        self._cached = self._cached[:keep]
        logits = self._forward(ids[keep:])
        self._ready = logits[-1]
        return logits

    def catch_up(self, ids: Sequence[int], k: int) -> tuple[int, list[int]] | None:
        """Bring the cache up to ``ids`` now, as the next :meth:`propose` of ``k`` tokens on ``ids`` would (it then reads the
        result instead), and return what the pass gives for free: ``(start, predictions)``, ``predictions[i]`` the draft
        model's greedy next token after ``ids[: start + i + 1]``. Under greedy drafting a draft from position ``p`` is
        accepted for as many tokens as these teacher-forced predictions match the text from ``p`` on (the draft's context is
        the text until the first mismatch), so they tell what the drafter would have emitted in the rounds it sat out.
        ``None`` where ``ids`` and the draft do not fit the draft model's context (it then drafts from a window, afresh)."""
        import torch

        ids = [int(t) for t in ids]
        if not ids or not self._fits(ids, k):
            return None
        if not hasattr(self, "_cached"):
            self.start(len(ids))
        logits = self._sync(ids)
        width = logits.shape[-1] if self.vocab is None else min(logits.shape[-1], self.vocab)
        return len(self._cached) - logits.shape[0], torch.argmax(logits[:, :width], dim=-1).tolist()

    def propose(self, ids: Sequence[int], k: int, *, temperature: float = 0.0, generator: Any = None) -> Draft:
        import torch

        from .tensors import context_length, tempered_probs

        if k <= 0:
            return Draft([])
        if not hasattr(self, "_cached"):
            self.start(len(ids))
        ids = [int(t) for t in ids]
        if not self._fits(ids, k):
            # the draft model's positions end before the text does (the target's may go on): draft from the last tokens that
            # fit with the k - 1 fed back, read afresh each round since a cache's positions cannot be shifted. Any draft is
            # verified the same way, so the output does not change; only how often it is accepted
            context = context_length(self.model)
            k = min(k, context)
            ids = ids[len(ids) - (context - k + 1) :]
            self._forget()
        # caught up on exactly this text already (catch_up): its last logits are this draft's first
        ready = self._ready if self._ready is not None and self._cached == ids else None
        logits = ready if ready is not None else self._sync(ids)[-1]
        tokens: list[int] = []
        laws = []
        for step in range(k):
            if step:
                logits = self._forward([tokens[-1]])[-1]
            logits = self._law_logits(logits)
            if temperature > 0:
                p = tempered_probs(logits, temperature)
                # drawn where the decoder's generator lives (the target's device, which may not be the draft's)
                tok = int(torch.multinomial(p if generator is None else p.to(generator.device), 1, generator=generator))
                laws.append(p)
            else:
                tok = int(torch.argmax(logits))
            tokens.append(tok)
        self._ready = None  # the cache now holds drafted tokens past the text
        return Draft(tokens, torch.stack(laws) if laws else None)
