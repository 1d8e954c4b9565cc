"""Cost formulas, one op family per module, all registered in :data:`REGISTRY`."""

from .registry import REGISTRY, ZERO, Cost, Registry, op_key

# Importing a family registers its formulas; an op the running torch lacks is skipped.
with REGISTRY.builtins_loading():
    from . import (  # noqa: E402,F401  isort: skip
        activation,
        attention,
        complex_numbers,
        conv,
        dropout,
        elementwise,
        embedding,
        fft,
        interpolate,
        linalg,
        loss,
        lowp_matmul,
        matmul,
        norm,
        pooling,
        reduction,
        rnn,
        sparse,
        zero_cost,
    )

__all__ = ["REGISTRY", "ZERO", "Cost", "Registry", "op_key"]
