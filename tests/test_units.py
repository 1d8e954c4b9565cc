"""The string helpers give DeepSpeed's outputs, minus its plain bugs."""

import pytest

from flopsight import (
    bytes_to_string,
    duration_to_string,
    flops_to_string,
    macs_to_string,
    number_to_string,
    params_to_string,
)


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, "0 "),
        (117, "117 "),
        (1700, "1.7 K"),
        (10_580_000, "10.58 M"),
        (89_450_000_000, "89.45 G"),
        (6279.86e9, "6.28 T"),
        (0.5, "500 m"),
        (698.8e-6, "698.8 u"),
    ],
)
def test_number_to_string_matches_deepspeed(value, expected):
    assert number_to_string(value) == expected


def test_derived_helpers_match_deepspeed():
    assert macs_to_string(640) == "640 MACs"
    assert macs_to_string(5.21e6) == "5.21 MMACs"
    assert flops_to_string(2.44e6) == "2.44 MFLOPS"
    assert flops_to_string(0) == "0 FLOPS"
    assert bytes_to_string(2048) == "2.05 KB"
    assert params_to_string(109.48e6) == "109.48 M"
    assert params_to_string(1.3e9) == "1.3 B"
    assert params_to_string(0) == "0"
    assert duration_to_string(135.52e-3) == "135.52 ms"
    assert duration_to_string(1.89) == "1.89 s"


def test_explicit_units_and_precision():
    assert number_to_string(1234567, units="K") == "1234.57 K"
    assert number_to_string(1234567, units="M", precision=4) == "1.2346 M"
    assert params_to_string(2.5e9, units="B") == "2.5 B"


def test_fixed_deepspeed_bugs():
    # negative numbers: DeepSpeed printed '-1500000000 u'
    assert number_to_string(-1500) == "-1.5 K"
    assert flops_to_string(-2e9) == "-2 GFLOPS"
    # rounding up into the next unit: DeepSpeed printed '1000 K'
    assert number_to_string(999_999) == "1 M"
    assert number_to_string(999.996) == "1 K"
    # a seconds unit: DeepSpeed printed '0.01 mss'
    assert duration_to_string(0.005, units="ms") == "5 ms"
    assert duration_to_string(0.005, units="us") == "5000 us"
    assert duration_to_string(2, units="s") == "2 s"


def test_unknown_units_are_an_error():
    with pytest.raises(ValueError, match="units: expected one of"):
        number_to_string(5, units="X")
