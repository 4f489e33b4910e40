"""Every head at a glance: one PNG mosaic of L×H small heatmaps, with one clickable point per head.

The mosaic is an image, so 512 tokens cost about as much as 64: each tile is max-pooled to at most
``TILE`` pixels a side (a sharp weight stays visible). Images are not selectable in plotly, so an
invisible scatter puts one point on each tile; selecting it gives ``customdata = [layer, head]``.
"""

from __future__ import annotations

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.utils import image_array_to_data_uri

from ..core.weights import pool
from .view import Options, colour_position, colour_tops, layer_views
from .common import NUMBERS_LEFT, head_points, lut, top_title

TILE = 64  # pixels per tile side at most; more than a tile ever gets on screen in a 12-head row
MASK_COLOUR = "#d9d9d9"  # cells a causal model cannot attend to (future tokens), here and in the heatmaps


def tiles(attn: np.ndarray, tile: int = TILE) -> np.ndarray:
    """(..., ≤tile, ≤tile): each head of (..., Tq, Tk) max-pooled (``core.weights.pool``) to what its overview tile
    shows; pooling tiles again changes nothing, so ``head_grid`` takes either."""
    attn = np.asarray(attn, np.float32)
    return pool(pool(attn, tile, attn.ndim - 2), tile, attn.ndim - 1)


def stack_tiles(stack, options: Options, tile: int = TILE) -> np.ndarray:
    """(L, H, ≤tile, ≤tile): the ``tiles`` of every head of a trace's ``Stack`` as displayed with ``options``, made
    one layer at a time (never every weight at once)."""
    return np.stack([tiles(v.attn[0], tile) for v in layer_views(stack, options)])


def mosaic(attn: np.ndarray, masked: np.ndarray | None = None, log_scale: bool = False, tile: int = TILE,
           gap: int = 1, full_range: bool = False) -> np.ndarray:
    """(L·(Sq+gap)−gap, H·(Sk+gap)−gap, 3) uint8 RGB image of every head, white gaps between tiles.

    Colours are 0–1 with ``full_range``, else each tile's own up to its head's high quantile (``colour_tops``).
    """
    L, H = attn.shape[:2]
    pooled = tiles(attn, tile)  # (L, H, Sq, Sk)
    Sq, Sk = pooled.shape[2:]
    top = 1.0 if full_range or log_scale else colour_tops(pooled)[..., None, None]  # (L, H, 1, 1)
    rgb = lut()[np.rint(colour_position(pooled, log_scale, top) * 255).astype(np.uint8)]  # (L, H, Sq, Sk, 3)
    if masked is not None:
        # A pixel is grey only when its whole block is masked.
        blocks = pool(pool(np.asarray(masked, np.uint8), tile, 0, "min"), tile, 1, "min")
        rgb[:, :, blocks.astype(bool)] = np.array(plotly.colors.hex_to_rgb(MASK_COLOUR), np.uint8)
    padded = np.full((L, H, Sq + gap, Sk + gap, 3), 255, np.uint8)
    padded[:, :, :Sq, :Sk] = rgb
    image = padded.transpose(0, 2, 1, 3, 4).reshape(L * (Sq + gap), H * (Sk + gap), 3)  # (L·(Sq+g), H·(Sk+g), 3)
    return image[: L * (Sq + gap) - gap, : H * (Sk + gap) - gap]


def head_grid(attn: np.ndarray, masked: np.ndarray | None = None, selected: tuple | None = None,
              log_scale: bool = False, tile: int = TILE, full_range: bool = False) -> go.Figure:
    """Every head of (L, H, Tq, Tk), or of its ``tiles``, as a tile; ``selected`` (layer, head or None for a whole
    layer) is outlined; ``masked`` is (Tq, Tk) at full size.

    Each tile is coloured up to its own head's high quantile, so a diffuse head is not blank; 0–1 with
    ``full_range``.
    """
    L, H = attn.shape[:2]
    image = mosaic(attn, masked, log_scale, tile, full_range=full_range)
    sq, sk = (image.shape[0] + 1) // L, (image.shape[1] + 1) // H  # tile pitch in pixels, gap included
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,) each point's layer and head
    shapes = []
    if selected is not None:
        l, h = selected
        x0, x1 = (-1, H * sk - 1) if h is None else (h * sk - 1, h * sk + sk - 1)
        # On the gap pixels around the tile (or the row).
        shapes.append(dict(type="rect", x0=x0, x1=x1, y0=l * sq - 1, y1=l * sq + sq - 1,
                           line=dict(color="#d62728", width=2)))
    scale = "colours 0–1" if full_range or log_scale else "each head on its own colour range"
    title, top = top_title(f"all {L} layers × {H} heads · {scale} · click a head to open it")
    return go.Figure(
        [
            go.Image(source=image_array_to_data_uri(image), hoverinfo="skip"),
            head_points(head * sk + (sk - 2) / 2, layer * sq + (sq - 2) / 2, H,
                        "layer %{customdata[0]}, head %{customdata[1]}<br>click to open<extra></extra>",
                        customdata=np.stack([layer, head], 1)),  # (L·H, 2)
        ],
        layout=dict(
            title=title,
            xaxis=dict(title="head", tickvals=np.arange(H) * sk + (sk - 2) / 2, ticktext=[str(h) for h in range(H)],
                       side="top", fixedrange=True, showgrid=False, zeroline=False, range=[-0.5, image.shape[1] - 0.5]),
            # Pixels need not be square: the mosaic fills whatever width the page gives it, with no empty bands.
            yaxis=dict(title="layer", tickvals=np.arange(L) * sq + (sq - 2) / 2, ticktext=[str(l) for l in range(L)],
                       fixedrange=True, showgrid=False, zeroline=False, scaleanchor=False,
                       range=[image.shape[0] - 0.5, -0.5]),
            shapes=shapes,
            hovermode="closest",
            hoverdistance=-1,
            dragmode=False,
            margin=dict(l=NUMBERS_LEFT, r=10, t=top, b=10),
            height=top + int(min(700, max(200, 40 + 900 * L / H))),
        ),
    )
