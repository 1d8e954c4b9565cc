"""Formulas: attention (being written)."""
