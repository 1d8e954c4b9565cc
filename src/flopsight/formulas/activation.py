"""Formulas: activation (being written)."""
