"""Human-readable numbers, with DeepSpeed's names, arguments and output format.

Outputs match ``deepspeed.profiling.flops_profiler`` except for its plain bugs, fixed here:
negative numbers get a sensible unit, ``duration_to_string(x, units="ms")`` works, and a value
that rounds up to 1000 moves to the next unit (``"1 M"``, not ``"1000 K"``).

>>> number_to_string(89_450_000_000)
'89.45 G'
>>> macs_to_string(640), params_to_string(117), duration_to_string(698.8e-6)
('640 MACs', '117', '698.8 us')
>>> number_to_string(999_999), number_to_string(-1500)
('1 M', '-1.5 K')
>>> duration_to_string(0.005, units="ms")
'5 ms'
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_PRECISION",
    "number_to_string",
    "macs_to_string",
    "flops_to_string",
    "bytes_to_string",
    "params_to_string",
    "shared_params_mark",
    "duration_to_string",
]

DEFAULT_PRECISION = 2

# Largest first; "" covers [1, 1000) and exactly 0.
_UNITS = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3), ("", 1.0), ("m", 1e-3), ("u", 1e-6))
_MAGNITUDE = dict(_UNITS)


def _auto_unit(num: float, precision: int) -> tuple[str, float]:
    size = abs(num)
    for i, (unit, magnitude) in enumerate(_UNITS):
        if size >= magnitude or (unit == "" and size == 0) or unit == "u":
            # rounding may carry into the next unit up: 999999 -> "1 M", not "1000 K"
            if i > 0 and round(size / magnitude, precision) >= 1000:
                return _UNITS[i - 1]
            return unit, magnitude
    raise AssertionError("unreachable")


def number_to_string(num: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    """``num`` scaled to a unit (T, G, M, K, '', m, u) and rounded, e.g. ``'1.7 K'``."""
    if units is None:
        units, magnitude = _auto_unit(num, precision)
    elif units in _MAGNITUDE:
        magnitude = _MAGNITUDE[units]
    else:
        raise ValueError(f"units: expected one of {sorted(_MAGNITUDE)} or None, got {units!r}")
    return f"{round(num / magnitude, precision):g} {units}"


def macs_to_string(macs: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    return f"{number_to_string(macs, units=units, precision=precision)}MACs"


def flops_to_string(flops: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    return f"{number_to_string(flops, units=units, precision=precision)}FLOPS"


def bytes_to_string(b: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    return f"{number_to_string(b, units=units, precision=precision)}B"


def params_to_string(params_num: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    """Parameters use B for billions (``'1.3 B'``) and no trailing space."""
    units = units.replace("B", "G") if units else units
    return number_to_string(params_num, units=units, precision=precision).replace("G", "B").strip()


def shared_params_mark(shared: float | None) -> str:
    """What follows a module's params when ``shared`` of them are tied to modules outside it
    (each module holding them counts them, the model's total once): every report marks them so.

    >>> params_to_string(1_500_000) + shared_params_mark(500_000), shared_params_mark(0)
    ('1.5 M (500 K shared)', '')
    """
    return f" ({params_to_string(shared)} shared)" if shared else ""


def duration_to_string(duration: float, units: str | None = None, precision: int = DEFAULT_PRECISION) -> str:
    """Seconds as ``'698.8 us'``; ``units`` may be given with or without the ``s`` (``'ms'``, ``'m'``)."""
    if units is not None and units.endswith("s"):
        units = units[:-1]
    return f"{number_to_string(duration, units=units, precision=precision)}s"
