"""Renderers: format a ProfileResult; they never measure."""
