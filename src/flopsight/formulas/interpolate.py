"""Formulas: interpolate (being written)."""
