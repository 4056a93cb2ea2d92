"""``TableSpec``: how deltasink creates the target table, and the check that an
existing target does not contradict it.

The definition is applied once, in the commit that creates the target (the first
publish). Later writers only compare: a target whose partitioning, clustering,
properties or comment differ from what the sink was given is refused with a
:class:`~deltasink.errors.TableDefinitionError` before anything is written, instead of
being written to with a silently different layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from deltasink.errors import ConfigurationError, TableDefinitionError

__all__ = ["TableDefinition", "TableSpec", "check_definition"]


@dataclass(frozen=True, kw_only=True)
class TableSpec:
    """The definition of the target table, used when deltasink creates it.

    Args:
        partition_by: Partition columns (Hive-style directories). Each must be a column
            of the first batch.
        cluster_by: Liquid-clustering columns, on the spark engine (Delta 3.1+ and
            Databricks); the embedded engine refuses it before anything is written.
            Exclusive with ``partition_by``.
        properties: Delta table properties set at creation, e.g.
            ``{"delta.enableChangeDataFeed": "true"}``.
        comment: The table's description (``COMMENT``).

    An existing target is compared with the spec on a writer's first write: different
    partition or clustering columns, a property with another value (or missing), or
    another comment raise :class:`~deltasink.errors.TableDefinitionError`. Properties the
    spec does not name are left alone.

    Raises:
        ConfigurationError: The spec itself is invalid.
    """

    partition_by: Sequence[str] = ()
    cluster_by: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    comment: str | None = None

    def __post_init__(self) -> None:
        for name in ("partition_by", "cluster_by"):
            value = getattr(self, name)
            columns = (value,) if isinstance(value, str) else tuple(value)
            if not all(isinstance(c, str) and c for c in columns):
                raise ConfigurationError(f"TableSpec.{name} must be column names, got {value!r}.")
            if len({c.lower() for c in columns}) != len(columns):
                raise ConfigurationError(f"TableSpec.{name} names a column twice: {value!r}.")
            object.__setattr__(self, name, columns)
        if self.partition_by and self.cluster_by:
            raise ConfigurationError(
                "TableSpec: partition_by and cluster_by exclude each other (Delta does not "
                "cluster a partitioned table)."
            )
        if not isinstance(self.properties, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in self.properties.items()
        ):
            raise ConfigurationError(
                f"TableSpec.properties must map names to string values, got {self.properties!r}."
            )
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))
        if self.comment is not None and not isinstance(self.comment, str):
            raise ConfigurationError(f"TableSpec.comment must be a string, got {self.comment!r}.")

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the definition needs in the batch that creates the table."""
        return (*self.partition_by, *self.cluster_by)

    def check_columns(self, have: Sequence[str], *, table: str) -> None:
        """Raise before the creating write when the batch lacks a partition or
        clustering column."""
        present = {c.lower() for c in have}
        missing = [c for c in self.columns if c.lower() not in present]
        if missing:
            raise TableDefinitionError(
                f"TableSpec names {missing} but the batch creating {table} has no such "
                f"column (it has {list(have)}).",
                table=table,
            )


@dataclass(frozen=True)
class TableDefinition:
    """What an engine read of an existing table's definition."""

    partition_by: tuple[str, ...]
    cluster_by: tuple[str, ...] | None  # None: the engine cannot tell
    properties: Mapping[str, str]
    comment: str | None


def check_definition(spec: TableSpec, found: TableDefinition, *, table: str) -> None:
    """Raise :class:`TableDefinitionError` listing every way ``found`` contradicts
    ``spec``; properties the spec does not name are not compared."""
    problems: list[str] = []

    def lowered(columns: Sequence[str]) -> list[str]:
        return [c.lower() for c in columns]

    if lowered(spec.partition_by) != lowered(found.partition_by):
        problems.append(
            f"partitioned by {list(found.partition_by)}, the spec says {list(spec.partition_by)}"
        )
    if found.cluster_by is not None and lowered(spec.cluster_by) != lowered(found.cluster_by):
        problems.append(
            f"clustered by {list(found.cluster_by)}, the spec says {list(spec.cluster_by)}"
        )
    for key, value in spec.properties.items():
        have = found.properties.get(key)
        if have is None or have.lower() != value.lower():
            problems.append(f"property {key}={have!r}, the spec says {value!r}")
    if spec.comment is not None and (found.comment or None) != (spec.comment or None):
        problems.append(f"comment {found.comment!r}, the spec says {spec.comment!r}")
    if problems:
        raise TableDefinitionError(
            f"the existing target {table} contradicts the sink's TableSpec: "
            + "; ".join(problems)
            + ". Change the table (ALTER TABLE) or the spec; nothing was written.",
            table=table,
        )
