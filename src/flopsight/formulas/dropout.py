"""Formulas: dropout (being written)."""
