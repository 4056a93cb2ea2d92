"""How the Spark backend spells tables and columns in Spark SQL: table references (a
path as ``delta.`path```, a catalog name quoted part by part), DDL types, string
literals, and :class:`Tables`, the two tables of one writer with their references.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltasink.errors import ConfigurationError
from deltasink.input.sql import quote
from deltasink.locations import is_catalog_name

__all__ = [
    "Tables",
    "ddl_columns",
    "ddl_type",
    "fill_select",
    "props_sql",
    "sql_string",
    "struct",
    "table_ref",
]

#: Scratch column of deltasink's window queries (never written).


@dataclass(frozen=True)
class Tables:
    """The target and staging tables of one writer, as given and as Spark SQL references.

    Attributes:
        target: Target path/URI or catalog name (``catalog.schema.table``).
        staging: Staging path/URI or catalog name.
        app_id: The writer.
        target_ref: :func:`table_ref` of ``target``.
        staging_ref: :func:`table_ref` of ``staging``.

    Raises:
        ConfigurationError: A malformed catalog name (unbalanced backticks, empty parts).
    """

    target: str
    staging: str
    app_id: str
    target_ref: str = field(init=False)
    staging_ref: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_ref", table_ref(self.target))
        object.__setattr__(self, "staging_ref", table_ref(self.staging))

    @property
    def target_in_catalog(self) -> bool:
        """Whether the target is a catalog name rather than a path."""
        return is_catalog_name(self.target)

    @property
    def staging_in_catalog(self) -> bool:
        """Whether the staging table is a catalog name rather than a path."""
        return is_catalog_name(self.staging)


def _name_parts(name: str) -> list[str]:
    """``cat.db.tbl`` (parts optionally backtick-quoted) as its unquoted parts."""
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if name.startswith("`", i):
            start, chars = i + 1, []
            while True:
                close = name.find("`", start)
                if close < 0:
                    raise ConfigurationError(f"unbalanced backtick in table name {name!r}.")
                chars.append(name[start:close])
                if not name.startswith("``", close):
                    break
                chars.append("`")
                start = close + 2
            part, i = "".join(chars), close + 1
        else:
            dot = name.find(".", i)
            end = n if dot < 0 else dot
            part, i = name[i:end], end
            if "`" in part:
                raise ConfigurationError(f"table name {name!r}: a backtick inside part {part!r}.")
        if not part:
            raise ConfigurationError(f"table name {name!r} has an empty part.")
        parts.append(part)
        if i == n:
            return parts
        if name[i] != ".":
            raise ConfigurationError(f"table name {name!r}: expected '.' at position {i}.")
        i += 1


def table_ref(location: str) -> str:
    """A Spark SQL reference to a Delta table: ``delta.`/path``` for a path or URI,
    the quoted parts for a catalog name (``catalog.schema.table``)."""
    if is_catalog_name(location):
        return ".".join(quote(part) for part in _name_parts(location))
    return f"delta.{quote(location)}"


def ddl_type(data_type: Any) -> str:
    """A Spark SQL type as DDL text, field names quoted (``simpleString`` does not quote
    them). Every nested field is nullable, as in tables deltasink creates."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        fields = ", ".join(f"{quote(f.name)}: {ddl_type(f.dataType)}" for f in data_type.fields)
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{ddl_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{ddl_type(data_type.keyType)}, {ddl_type(data_type.valueType)}>"
    return str(data_type.simpleString())


def ddl_columns(schema: Any) -> str:
    """``\\`a\\` BIGINT, \\`b\\` STRING`` for a Spark ``StructType``."""
    return ", ".join(f"{quote(f.name)} {ddl_type(f.dataType)}" for f in schema.fields)


def struct(fields: Sequence[Any]) -> Any:
    """A Spark ``StructType`` of ``fields``."""
    from pyspark.sql.types import StructType

    return StructType(list(fields))


def fill_select(fields: Iterable[Any], present: Iterable[str]) -> list[str]:
    """``SELECT`` items giving every one of ``fields`` (Spark ``StructField``\\ s): the
    column itself where ``present`` has it, else a NULL of the field's type."""
    have = set(present)
    return [
        quote(f.name)
        if f.name in have
        else f"CAST(NULL AS {ddl_type(f.dataType)}) AS {quote(f.name)}"
        for f in fields
    ]


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def props_sql(props: Mapping[str, str]) -> str:
    """``'k' = 'v', ...``: the body of a ``TBLPROPERTIES (...)`` clause."""
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
