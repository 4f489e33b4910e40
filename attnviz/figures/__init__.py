"""Pure figure builders: arrays and labels in, ``plotly.graph_objects.Figure`` out. One module per view."""
