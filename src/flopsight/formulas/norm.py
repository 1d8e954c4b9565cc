"""Formulas: norm (being written)."""
