"""The package's version, read by everything that needs it (never from the package itself)."""

__version__ = "0.1.0"
