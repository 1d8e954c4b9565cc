"""Formulas: rnn (being written)."""
