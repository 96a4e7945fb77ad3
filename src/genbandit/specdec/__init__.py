"""Speculative decoding on Hugging Face causal LMs, tuned online by a bandit (BanditSpec, Hou et al., ICML 2025).

``SpeculativeDecoder`` verifies drafts losslessly (greedy, and sampling by Algorithm 6 of the paper) with KV
caches; drafters are a smaller LM (:class:`ModelDrafter`), prompt lookup
(:class:`PromptLookupDrafter`) and a suffix-automaton copier (:class:`SuffixMatchDrafter`). Each
arm is a drafter x speculation length; any registered policy picks one per round. Needs the
``specdec`` extra (torch, transformers); importing this package does not import them.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__all__ = [
    "SpeculativeDecoder",
    "GenerationResult",
    "Arm",
    "make_policy",
    "Drafter",
    "Draft",
    "ModelDrafter",
    "PromptLookupDrafter",
    "SuffixMatchDrafter",
    "ByteTokenizer",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        f"{__name__}.decoder": ("SpeculativeDecoder", "GenerationResult", "Arm", "make_policy"),
        f"{__name__}.drafters": ("Drafter", "Draft", "ModelDrafter", "PromptLookupDrafter", "SuffixMatchDrafter"),
        f"{__name__}.tokenizer": ("ByteTokenizer",),
    },
)
