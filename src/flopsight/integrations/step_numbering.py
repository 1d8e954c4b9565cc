"""The warning that ``profile_step`` counts differently since flopsight 0.1.0.

flopsight 0.1.0's Hugging Face callback and :func:`flopsight.attach` took ``profile_step=N``
as the N-th optimizer step. They now count as DeepSpeed's engine and the Lightning callback
do: the optimizer steps taken before the profiled one, so the same ``N`` profiles one step
later. For one release each says so, once per process, through :func:`warn_numbering_changed`.
"""

from __future__ import annotations

import warnings

__all__ = ["warn_numbering_changed"]


def warn_numbering_changed(given: str, step: int, like: str, profiled: str, stacklevel: int = 2) -> None:
    """Warn (``FutureWarning``) that ``given`` (how the caller got ``profile_step=step``) now
    profiles ``profiled``, counting ``like`` another does, and how to get 0.1.0's step.

    ``stacklevel`` as ``warnings.warn`` counts it from the caller.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_numbering_changed("f(profile_step=2)", 2, "DeepSpeed's engine does", "step 3")
    >>> print(str(caught[0].message).replace(". ", ".\\n"))
    flopsight: f(profile_step=2) now counts the optimizer steps taken before the profiled one, as DeepSpeed's engine does: it profiles step 3; profile_step=0 is the first step.
    flopsight 0.1.0 profiled step 2 here: pass profile_step=1 for that one.
    This warning goes away in the next release.
    """  # noqa: E501  (a doctest's expected output, as printed)
    warnings.warn(
        f"flopsight: {given} now counts the optimizer steps taken before the profiled one, as {like}: it profiles "
        f"{profiled}; profile_step=0 is the first step. flopsight 0.1.0 profiled step {step} here: pass "
        f"profile_step={step - 1} for that one. This warning goes away in the next release.",
        FutureWarning, stacklevel=stacklevel + 1)
