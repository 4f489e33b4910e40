"""Write the shipped corpus again: ``python -m attnviz.data.make``."""

from . import CORPUS, sentences

CORPUS.write_text("\n".join(sentences(400)) + "\n", encoding="utf-8")
print(f"wrote {CORPUS}")
