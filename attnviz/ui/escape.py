"""What makes user text data in Streamlit's Markdown: text from a visitor, a link or an exception is shown as
typed, never as a link, an image, markup or formatting.
"""

from __future__ import annotations

import re


# What makes links, emphasis, code, HTML, LaTeX or Streamlit's :colour[…] directives in Markdown.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~$#])")
# What GitHub-flavoured Markdown turns into a link by itself, even with every character escaped: a URL
# with a scheme, a "www." address, an e-mail address. These go into a code span instead.
_AUTOLINK = re.compile(r"(?i)(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s'\"<>`]*[^\s'\"<>`.,;:!?)]"
                       r"|[-.\w+]+@[-\w]+(?:\.[-\w]+)+")


def plain(message) -> str:
    """``message`` shown as typed in Streamlit's Markdown (st.error, st.warning, st.markdown, captions).

    The one way text from a visitor, a link or an exception reaches a message: nothing in it can become
    a link, an image, markup or formatting.
    """
    text, out, at = str(message), [], 0
    for m in _AUTOLINK.finditer(text):
        out += [_MARKDOWN.sub(r"\\\1", text[at:m.start()]), code(m.group())]
        at = m.end()
    return "".join(out + [_MARKDOWN.sub(r"\\\1", text[at:])])


def code(value) -> str:
    """``value`` safe in Markdown: as is when it is a plain word or number (``99``, ``no-such-model``),
    else a code span, so whatever a crafted link holds shows as typed, never as a link, an image or
    formatting (a fence longer than any run of backticks inside keeps the span closed)."""
    text = " ".join(str(value).split())
    if re.fullmatch(r"[A-Za-z0-9.+-]+", text) and "www." not in text.lower():  # "www." would autolink
        return text
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"
