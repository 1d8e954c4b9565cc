"""Formulas: zero (being written)."""
