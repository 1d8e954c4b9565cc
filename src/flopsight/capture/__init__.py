"""Capture: run the model and record raw facts (ops, module spans, phases)."""
