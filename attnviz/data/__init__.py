"""A small, licence-clean corpus that attnviz generates itself: ``sentences(n)``; ``python -m attnviz.data.make``
writes ``attnviz/data/corpus.txt`` (400 sentences, one per line) for the tests and the Corpus page's demo."""

from __future__ import annotations

import random
from pathlib import Path

CORPUS = Path(__file__).with_name("corpus.txt")

SUBJECTS = ["the cat", "a young doctor", "my neighbour", "the old fisherman", "a small robot", "the committee",
            "our teacher", "the tired traveller", "a curious child", "the baker", "two students", "the pilot"]
VERBS = ["found", "painted", "repaired", "forgot", "described", "borrowed", "carried", "noticed", "sold", "opened"]
OBJECTS = ["a red umbrella", "the broken clock", "three letters", "an unusual map", "the heavy suitcase",
           "a bowl of soup", "the museum's oldest painting", "twelve apples", "a wooden boat", "the secret recipe"]
PLACES = ["in the kitchen", "near the station", "at the market", "behind the library", "on the bridge",
          "in 1987", "after midnight", "during the storm", "before breakfast", "at 7:30"]
CLAUSES = ["because it was raining", "although nobody asked", "while the music played", "so that everyone could see",
           "when the bell rang", "and then laughed", "but it did not work", "as the sun went down"]
ENDS = [".", ".", ".", "!", "?"]


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` generated English sentences of 6 to 30 words, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(PLACES)]
        for _ in range(rng.randint(0, 2)):
            words.append(("," if rng.random() < 0.5 else "") + " " + rng.choice(CLAUSES))
        text = " ".join(words[:4]) + "".join(words[4:]) + rng.choice(ENDS)
        out.append(text[0].upper() + text[1:])
    return out

