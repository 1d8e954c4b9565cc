"""Formulas: loss (being written)."""
