"""The word-level tokenizer of attnviz's trained models: a fixed token list, four specials, unknown words as [UNK].

It lives with the backends that load those models; the training code that makes their vocabularies imports it.
"""

from __future__ import annotations

import re
from typing import Sequence

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIALS = (PAD, UNK, BOS, EOS)  # ids 0..3 in every vocabulary; PAD is 0, the models' pad_id

_WORD = re.compile(r"\w+|[^\w\s]")


def split(text: str) -> list[str]:
    """Lower-cased words and single punctuation marks: "March 5, 2021" -> march 5 , 2021."""
    return _WORD.findall(text.lower())


class Vocab:
    """A word-level tokenizer over a fixed token list; unknown words map to [UNK]."""

    def __init__(self, tokens: Sequence[str], joiner: str = " "):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {', '.join(SPECIALS)}")
        self.itos = list(tokens)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("a vocabulary must not repeat a token")
        self.joiner = joiner  # how decode joins tokens: " " for words, "" for "2021-03-05"

    def __len__(self) -> int:
        return len(self.itos)

    def tokens(self, text: str) -> list[str]:
        """The tokens the model sees: known words as they are, others as [UNK]."""
        return [t if t in self.stoi else UNK for t in split(text)]

    def ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, self.stoi[UNK]) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        """Text from ids, specials dropped."""
        return self.joiner.join(self.itos[i] for i in ids if self.itos[i] not in SPECIALS)

    def to_json(self) -> dict:
        return {"tokens": self.itos, "joiner": self.joiner}

    @classmethod
    def from_json(cls, d: dict) -> "Vocab":
        return cls(d["tokens"], d["joiner"])
