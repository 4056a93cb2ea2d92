"""Moved to :mod:`deltasink.stream.checkpoint` (the stream side's package); this path is
kept for ``bench/origin_cost.py`` (still importing it), until they import the new path."""

from __future__ import annotations

from deltasink.stream.checkpoint import stream_origin

__all__ = ["stream_origin"]
