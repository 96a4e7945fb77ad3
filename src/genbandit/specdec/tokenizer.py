"""A byte-level tokenizer: every byte is a token, plus an end-of-text token (no downloads, lossless)."""

from __future__ import annotations

__all__ = ["ByteTokenizer"]


class ByteTokenizer:
    """Token ``b`` for byte ``b`` (0..255) and ``eos_token_id = 256``; ``vocab_size = 257``.

    >>> tok = ByteTokenizer()
    >>> tok.encode("def f():")
    [100, 101, 102, 32, 102, 40, 41, 58]
    >>> tok.decode(tok.encode("héllo") + [tok.eos_token_id])
    'héllo'
    """

    vocab_size = 257
    eos_token_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")
