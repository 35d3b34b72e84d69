"""Token estimate used for budgets: code points >= 0x3000 count 1.5 tokens, the rest 1/4."""

from __future__ import annotations

import math


def estimate_tokens(text: str) -> int:
    wide = sum(1 for ch in text if ord(ch) >= 0x3000)
    narrow = len(text) - wide
    return math.ceil(wide * 1.5 + narrow / 4)
