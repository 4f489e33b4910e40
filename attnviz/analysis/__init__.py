"""Pure analyses of traces: what each head does, rollout and flow, ablation, comparison.

The caveat every view repeats: attention weights alone are not an explanation of a prediction
(Jain & Wallace 2019; Wiegreffe & Pinter 2019).
"""

from .ablation import ablation, head_importance
from .compare import difference, match
from .heads import HEAD_STATS, head_stats, head_table
from .rollout import FLOW_MAX_TOKENS, ROLLOUT_MAX_TOKENS, attention_flow, residual_attention, rollout

CAVEAT = (
    "Attention weights show where a head looks, not why the model decides: on their own they are not an "
    "explanation (Jain & Wallace 2019, *Attention is not Explanation*; Wiegreffe & Pinter 2019, "
    "*Attention is not not Explanation*)."
)

__all__ = [
    "CAVEAT", "HEAD_STATS", "head_stats", "head_table", "rollout", "residual_attention", "attention_flow",
    "FLOW_MAX_TOKENS", "ROLLOUT_MAX_TOKENS", "head_importance", "ablation", "match", "difference",
]
