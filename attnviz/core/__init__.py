"""The record, with no model and no UI: weights, the trace, tokens, budgets."""
