"""The warnings deltasink gives its caller through :mod:`warnings`, beside the records of
the ``deltasink`` logger: visible where logging is not configured (a notebook, a script),
filtered or turned into errors as any warning (``warnings.simplefilter("error",
ReplayWarning)``)."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["ReplayWarning", "warn_caller"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ReplayWarning(UserWarning):
    """``write()`` or ``pre_commit()`` was given a version the target's marker already
    covers, so nothing was written: a re-run after a crash (expected), or a batch
    that should have had a new version (its rows are not in the target). Versions are
    never applied twice, whatever rows they carry."""


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first caller outside the deltasink package
    (the line of the job that called ``write``)."""
    level = 1
    frame = sys._getframe(0)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)
