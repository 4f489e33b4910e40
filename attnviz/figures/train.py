"""Training curves: loss and accuracy against the step."""

from __future__ import annotations

import plotly.graph_objects as go


def training_curves(history: list[dict], title: str = "") -> go.Figure:
    """Loss (left axis) and accuracy (right axis, fixed 0–1) from ``attnviz.training.loop`` history rows.

    Each row has ``step``, ``loss``, ``accuracy`` (training batch) and ``eval_accuracy`` (held-out or None).
    """
    steps = [h["step"] for h in history]
    evals = [h for h in history if h["eval_accuracy"] is not None]
    return go.Figure([
        go.Scatter(x=steps, y=[h["loss"] for h in history], name="loss", line=dict(color="#d62728"),
                   hovertemplate="step %{x}<br>loss %{y:.4f}<extra></extra>"),
        go.Scatter(x=steps, y=[h["accuracy"] for h in history], name="batch accuracy", yaxis="y2",
                   line=dict(color="#9ecae1"), hovertemplate="step %{x}<br>batch accuracy %{y:.3f}<extra></extra>"),
        go.Scatter(x=[h["step"] for h in evals], y=[h["eval_accuracy"] for h in evals], name="held-out accuracy",
                   yaxis="y2", mode="lines+markers", line=dict(color="#08519c", width=3),
                   hovertemplate="step %{x}<br>held-out accuracy %{y:.3f}<extra></extra>"),
    ], layout=dict(
        title=title,
        xaxis=dict(title="step", rangemode="tozero"),
        yaxis=dict(title="loss", rangemode="tozero"),
        yaxis2=dict(title="accuracy", range=[0, 1.02], overlaying="y", side="right", showgrid=False,
                    tickvals=[0, 0.25, 0.5, 0.75, 1], tickformat=".0%"),
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=10, r=10, t=50 if title else 20, b=10),
        height=360,
    ))


def lm_curves(history: list[dict], title: str = "") -> go.Figure:
    """A language model's loss (left axis) and its best induction and previous-token scores on the standard
    probe (right axis, 0–1) from ``attnviz.training.lm`` history rows: the induction curve's jump is the phase change
    in which induction heads form (Olsson et al. 2022)."""
    steps = [h["step"] for h in history]
    evals = [h for h in history if h["induction"] is not None]
    return go.Figure([
        go.Scatter(x=steps, y=[h["loss"] for h in history], name="loss", line=dict(color="#d62728"),
                   hovertemplate="step %{x}<br>loss %{y:.4f}<extra></extra>"),
        go.Scatter(x=[h["step"] for h in evals], y=[h["induction"] for h in evals], name="induction score",
                   yaxis="y2", mode="lines+markers", line=dict(color="#08519c", width=3),
                   hovertemplate="step %{x}<br>best induction score %{y:.3f}<extra></extra>"),
        go.Scatter(x=[h["step"] for h in evals], y=[h["previous"] for h in evals], name="previous-token score",
                   yaxis="y2", mode="lines+markers", line=dict(color="#2ca02c", width=2, dash="dot"),
                   hovertemplate="step %{x}<br>best previous-token score %{y:.3f}<extra></extra>"),
    ], layout=dict(
        title=title,
        xaxis=dict(title="step", rangemode="tozero"),
        yaxis=dict(title="loss", rangemode="tozero"),
        yaxis2=dict(title="best head's score on the probe", range=[0, 1.02], overlaying="y", side="right",
                    showgrid=False, tickvals=[0, 0.25, 0.5, 0.75, 1]),
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=10, r=10, t=50 if title else 20, b=10),
        height=360,
    ))
