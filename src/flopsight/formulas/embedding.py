"""Formulas: embedding (being written)."""
