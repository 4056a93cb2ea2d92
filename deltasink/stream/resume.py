"""Where a new streaming query starts to continue right after the newest version a
writer holds (``deltasink offsets``, :meth:`~deltasink.DeltaSink.offsets`), from the
origins its versions recorded (:mod:`deltasink.ops.origin`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deltasink.ops.origin import BatchOrigin

from .checkpoint import is_auto_loader

__all__ = ["ResumePoint", "resume_point"]

#: Delta's source offset index meaning "every file of that version was read".
_DELTA_END_INDEX = 2**63 - 1


@dataclass(frozen=True)
class ResumePoint:
    """Where the target stands for one writer, and where a new query starts.

    Attributes:
        version: The committed version (``None``: nothing committed).
        target_version: The target's Delta version holding it.
        origin: The origin recorded for the newest version held (``through``), or the
            newest one recorded before it when it recorded none (then ``exact`` is
            false); ``None`` if none was recorded.
        starting: Per source, what a new query starts from: ``{"kind": "kafka",
            "startingOffsets": "<json>"}``, ``{"kind": "delta", "startingVersion": n}``,
            ``{"kind": "files", "files": [...]}`` (every file the writer holds: a query
            resumed with ``resume=True`` leaves their rows out by itself), or
            ``{"kind": "unknown"}``.
        exact: Whether ``origin`` is the newest version's own (false when it recorded
            none, e.g. a batch job's write: the positions are then behind it).
        pending: Versions staged and not yet published, ascending: a resumed query
            publishes them before its first batch, so the positions are after them.
        through: The newest version held (the last pending one, else the committed
            one): the version a resumed query's first batch follows.
    """

    version: int | None
    target_version: int | None = None
    origin: BatchOrigin | None = None
    starting: tuple[dict[str, Any], ...] = ()
    exact: bool = True
    pending: tuple[int, ...] = ()
    through: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "version": self.version,
            "target_version": self.target_version,
            "pending": list(self.pending),
            "through": self.through,
            "origin": None if self.origin is None else self.origin.to_dict(),
            "starting": list(self.starting),
            "exact": self.exact,
        }


def _starting(source: Any, index: int, files: Sequence[str]) -> dict[str, Any]:
    if isinstance(source, dict) and "reservoirVersion" in source:
        version, at = int(source["reservoirVersion"]), int(source.get("index", -1))
        out: dict[str, Any] = {"kind": "delta", "source": index}
        if at == -1:
            out["startingVersion"] = version
        else:
            out["startingVersion"] = version + 1
            if at != _DELTA_END_INDEX:
                out["note"] = (
                    f"the last batch ended inside version {version} (file index {at}); "
                    f"startingVersion {version + 1} skips that version's later files"
                )
        return out
    if isinstance(source, dict) and ("logOffset" in source or is_auto_loader(source)):
        return {"kind": "files", "source": index, "files": list(files)}
    if (
        isinstance(source, dict)
        and source
        and all(
            isinstance(p, dict) and all(isinstance(o, int) for o in p.values())
            for p in source.values()
        )
    ):
        return {
            "kind": "kafka",
            "source": index,
            "startingOffsets": json.dumps(source, separators=(",", ":"), sort_keys=True),
        }
    return {"kind": "unknown", "source": index, "offset": source}


def resume_point(
    version: int | None,
    target_version: int | None,
    origin: BatchOrigin | None,
    earlier: Sequence[BatchOrigin] = (),
    *,
    pending: Sequence[int] = (),
    exact: bool = True,
) -> ResumePoint:
    """The :class:`ResumePoint` after the newest version held: ``origin`` is its recorded
    origin (or the newest recorded before it, ``exact=False``); ``earlier``: the origins
    of every other version held (any order), for the files a file source already
    delivered (by any query: a new one leaves them all out); ``pending``: the versions
    staged and not yet published."""
    through = pending[-1] if pending else version
    if origin is None:
        return ResumePoint(version, target_version, pending=tuple(pending), through=through)
    starting = []
    for index, source in enumerate(origin.sources):
        files: list[str] = []
        for o in [origin, *earlier]:
            for one in (o, *o.earlier):
                if index < len(one.sources):
                    entry = one.sources[index]
                    if isinstance(entry, dict):
                        files.extend(entry.get("files") or ())
        starting.append(_starting(source, index, sorted(set(files))))
    return ResumePoint(
        version,
        target_version,
        origin,
        tuple(starting),
        exact,
        pending=tuple(pending),
        through=through,
    )
