"""The figures the attention page sends for one trace, and their bytes as Streamlit sends them."""

from __future__ import annotations

import plotly.io

import common  # noqa: F401  (puts the repo root on sys.path)
from attention_payload import page_figures  # noqa: F401  (exactly what pages/1_Attention.py draws)


def payload(fig) -> int:
    """Bytes of the JSON spec ``st.plotly_chart`` sends for ``fig``, or of the HTML ``st.html`` sends (the text
    shaded by a token's weights)."""
    if isinstance(fig, str):
        return len(fig.encode())
    return len(plotly.io.to_json(fig, validate=False).encode())
