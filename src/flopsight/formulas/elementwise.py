"""Formulas: elementwise (being written)."""
