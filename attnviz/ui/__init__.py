"""The only Streamlit-aware part of attnviz: cached loaders, the shared frame, URL state."""
