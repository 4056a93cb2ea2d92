"""Generated predicates through the real predicate fields of an engine: one write per
field carries many predicates at once.

The grammar's rows are repeated once per group ``g`` (``Id`` made unique), and the
predicates of a sample are joined into one: ``(g = 0 AND (p0)) OR (g = 1 AND (p1)) ...``,
so each group's rows are selected by its own predicate, through the field's real code
path (translation, row checks, the MERGE or overwrite, the check query). Each field's
outcome is what the target holds afterwards (``Id`` and a marker ``v``: ``old`` as
written first, ``new`` as written by the version under test), compared by the suite with
what the oracle's selection implies:

* ``replace_where``: a ``replace`` of the selected rows by ``new`` ones;
* ``target_predicate``: an upsert of the selected rows (``new``): an unselected match
  would insert its key twice;
* ``not_matched_by_source_condition``: an upsert of one new row that deletes the
  selected target rows;
* ``delete_when``: an upsert of every row (``new``) deleting the selected ones;
* ``expect``: an append of the selected rows passes the check; of every row, it is
  quarantined when some row is not selected.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from tests import predicate_grammar

FIELDS = (
    "delete_when",
    "replace_where",
    "target_predicate",
    "not_matched_by_source_condition",
    "expect",
)
Outcome = list[tuple[int, str]] | str


def grouped_rows(groups: int) -> pa.Table:
    """The grammar's rows once per group, ``Id`` = group * 1000 + Id, marker ``old``."""
    base = predicate_grammar.rows()
    parts = []
    for g in range(groups):
        ids = pc.add(base.column("Id"), pa.scalar(g * 1000, pa.int64()))
        part = base.set_column(0, "Id", ids)
        part = part.append_column("g", pa.array([g] * base.num_rows, pa.int32()))
        parts.append(part.append_column("v", pa.array(["old"] * base.num_rows, pa.string())))
    return pa.concat_tables(parts)


def combined(predicates: Sequence[str], *, qualified: bool = False) -> str:
    """One predicate selecting, in group ``i``, the rows ``predicates[i]`` selects."""
    g = "t.g" if qualified else "g"
    return " OR ".join(f"({g} = {i} AND ({p}))" for i, p in enumerate(predicates))


def selected_ids(selected: Sequence[set[int]]) -> set[int]:
    """The grouped ``Id`` s the per-group selections (of base ``Id`` s) pick."""
    return {g * 1000 + i for g, ids in enumerate(selected) for i in ids}


def _contents(path: str) -> list[tuple[int, str]]:
    table = DeltaTable(path).to_pyarrow_table(columns=["Id", "v"])
    return sorted(zip(table.column("Id").to_pylist(), table.column("v").to_pylist(), strict=False))


def comparable(outcome: Any) -> Outcome:
    """An outcome as :func:`run` returns it, also after a JSON round trip (a worker's)."""
    if isinstance(outcome, list):
        return [(int(i), str(v)) for i, v in outcome]
    return str(outcome)


def run(
    engine: str,
    rows: pa.Table,
    plain: str,
    qualified: str,
    chosen: set[int],
    *,
    spark: Any = None,
    folder: str | None = None,
) -> dict[str, Outcome]:
    """Each field of :data:`FIELDS` on ``engine`` (``embedded`` with Arrow input,
    ``embedded-classic`` with ``spark``'s DataFrames, ``spark`` on ``spark``), its
    predicate ``plain`` (``qualified``: with ``t.``), the oracle's ``chosen`` ``Id`` s
    deciding which rows the batches hold. Returns each field's outcome (or its error)."""
    from deltasink import DeltaSink, MergeSpec, checks

    where = Path(folder or tempfile.mkdtemp(prefix="deltasink-fields-"))
    true_rows = rows.filter(pa.array([i in chosen for i in rows.column("Id").to_pylist()]))
    new = pa.array(["new"] * true_rows.num_rows, pa.string())
    true_new = true_rows.set_column(true_rows.schema.get_field_index("v"), "v", new)
    all_new = rows.set_column(
        rows.schema.get_field_index("v"), "v", pa.array(["new"] * rows.num_rows, pa.string())
    )
    fresh = pa.Table.from_pylist([{"Id": -1, "g": -1, "v": "new"}], schema=rows.schema)
    kwargs: dict[str, Any] = {"engine": "spark" if engine == "spark" else "embedded"}
    if spark is not None:
        kwargs["spark"] = spark

    def batch(table: pa.Table) -> Any:
        if engine == "embedded":
            return table
        from deltasink.input.arrow import spark_frame

        return spark_frame(spark, table)

    def target(name: str) -> str:
        path = str(where / name)
        write_deltalake(path, rows)
        return path

    out: dict[str, Outcome] = {}
    zone = predicate_grammar.ZONE  # the recorded session time zone, as the oracle's
    plans: dict[str, tuple[MergeSpec, pa.Table, bool]] = {
        "replace_where": (
            MergeSpec(mode="replace", replace_where=plain, time_zone=zone),
            true_new,
            True,
        ),
        "target_predicate": (
            MergeSpec(keys=["Id"], target_predicate=qualified, time_zone=zone),
            true_new,
            True,
        ),
        "not_matched_by_source_condition": (
            MergeSpec(
                keys=["Id"],
                when_not_matched_by_source="delete",
                not_matched_by_source_condition=qualified,
                time_zone=zone,
            ),
            fresh,
            True,
        ),
        "delete_when": (MergeSpec(keys=["Id"], delete_when=plain, time_zone=zone), all_new, True),
    }
    for field, (spec, data, exists) in plans.items():
        path = target(field) if exists else str(where / field)
        try:
            DeltaSink(path, f"fields-{field}", spec, **kwargs).write(batch(data), 0)
            out[field] = _contents(path)
        except Exception as exc:
            out[field] = f"error: {type(exc).__name__}: {str(exc)[-1500:]}"
    if engine == "embedded-classic":
        return out  # SQL checks run on the embedded engine's Sail: the "embedded" run
    path = str(where / "expect")
    try:
        sink = DeltaSink(
            path,
            "fields-expect",
            MergeSpec(mode="append"),
            checks=[checks.expect(plain, time_zone=zone)],
            **kwargs,
        )
        passed = not sink.write(batch(true_rows), 0).quarantined_versions
        quarantined = bool(sink.write(batch(rows), 1).quarantined_versions)
        out["expect"] = f"passed={passed} quarantined={quarantined}"
    except Exception as exc:
        out["expect"] = f"error: {type(exc).__name__}: {str(exc)[-1500:]}"
    return out


def expected(rows: pa.Table, chosen: set[int]) -> dict[str, Outcome]:
    """What each field leaves when it selects exactly ``chosen``."""
    ids = rows.column("Id").to_pylist()
    kept_old = [(i, "old") for i in ids if i not in chosen]
    replaced = sorted(kept_old + [(i, "new") for i in ids if i in chosen])
    return {
        "replace_where": replaced,
        "target_predicate": replaced,
        "not_matched_by_source_condition": sorted([*kept_old, (-1, "new")]),
        "delete_when": sorted((i, "new") for i in ids if i not in chosen),
        "expect": f"passed=True quarantined={len(chosen) < len(ids)}",
    }
