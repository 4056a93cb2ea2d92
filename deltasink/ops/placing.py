"""Moved to :mod:`deltasink.stream.placing` (the stream side's package); this path is kept
for ``bench/origin_cost.py`` (still importing it), until they import the new path."""

from __future__ import annotations

from deltasink.stream.placing import Held, resolve

__all__ = ["Held", "resolve"]
