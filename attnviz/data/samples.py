"""Sample texts per model: each model is offered texts it can read (the seed's trained models know only
the words of their generated tasks; anything else is [UNK] to them)."""

from __future__ import annotations

GENERAL = {
    "Coreference": "The animal didn't cross the street because it was too tired.",
    "Syntax": "The keys to the cabinet that the old man repaired are on the table.",
    "Repetition": "Alice gave Bob a book. Later, Bob gave Alice a pen, and Alice thanked Bob.",
    "Numbers": "On 5 March 2021 the team shipped version 2.0, two years after 1.0.",
}
REVIEWS = {  # the sentiment task's words: a cue word decides, a negation right before it flips it
    "Negated praise": "Honestly, the new film was not very good, and it was long",
    "Praise": "Overall, the hotel was truly excellent",
    "Negated complaint": "Frankly, the service was never bad",
    "Complaint": "The concert was really boring, but it was short today",
}
DATES = {  # the date task: written-out dates in, ISO dates out
    "Weekday and date": "Friday, the 5th of March 2021",
    "Another century": "Monday, the 21st of June 1999",
    "No weekday": "the 3rd of January 2030",
    "Autumn": "Sunday, the 12th of October 1986",
}
STORIES = {  # builtin:lm's generated stories: their words only, and spans that come back (what induction heads copy)
    "A story that repeats": "anna saw the red ball . then ben found the box in the garden . anna saw the red ball .",
    "Two friends": "one day mia and leo made a cake . the cake was big , and the cup was blue . mia and leo made a cake",
    "By the river": "the sleepy fox was by the river . then kim watched the fox by the river . the sleepy fox was",
    "A run of words": "moon lamp brave hill cup moon lamp brave hill cup moon lamp brave",
}
# Compare starts with A's text against one that changes a single thing; texts not here start with B empty.
CONTRASTS = {
    GENERAL["Coreference"]: "The animal didn't cross the street because it was too wide.",
    GENERAL["Syntax"]: "The key to the cabinets that the old man repaired is on the table.",
    GENERAL["Repetition"]: "Alice gave Bob a book. Later, Carol gave Dave a pen, and Erin thanked Frank.",
    GENERAL["Numbers"]: "On 6 April 2022 the team shipped version 3.0, one year after 2.0.",
    **{text: other for pair in (REVIEWS, DATES, STORIES) for text, other in zip(pair.values(), list(pair.values())[1:])},
}
BY_MODEL = {
    "builtin:classifier": REVIEWS,
    "builtin:translator": DATES,
    "session:classifier": REVIEWS,  # trained on the Train page: the same tasks, the same words
    "session:translator": DATES,
    "builtin:lm": STORIES,
    "session:lm": STORIES,
}
ALL_SAMPLES = frozenset(t for texts in (GENERAL, *BY_MODEL.values()) for t in texts.values())
UNKNOWN = frozenset({"[UNK]", "<unk>", "<UNK>"})  # the unknown-word tokens of WordPiece, SentencePiece, BPE vocabularies
TOO_MANY_UNKNOWN = 1 / 5  # a larger share of unknown tokens leaves little to look at


def samples_for(model: str) -> dict[str, str]:
    """name -> text: the samples that suit ``model``."""
    return BY_MODEL.get(model, GENERAL)


def unknown_share(tokens, special) -> tuple[int, int]:
    """(unknown tokens, tokens) among the tokens that are not special, the unknown ones counted whatever their
    flag (some vocabularies mark [UNK] special)."""
    words = [t for t, s in zip(tokens, special) if not s or t in UNKNOWN]
    return sum(t in UNKNOWN for t in words), len(words)
