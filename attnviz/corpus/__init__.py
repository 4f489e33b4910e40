"""Corpus mode: every head's statistics over many texts, read within budgets, run locally or on Ray."""
