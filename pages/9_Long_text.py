"""The old Long text page: its links open the Attention page, which explores a long text, with every query
parameter kept (a zoomed window, a layer, a head, a token open the same view)."""

import streamlit as st

st.switch_page("pages/1_Attention.py", query_params={k: st.query_params.get_all(k) for k in st.query_params})
