"""The package version (read by packaging and ``deltasink version``)."""

__version__ = "0.1.0"
