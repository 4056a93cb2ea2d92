"""The types of what a sink accepts, for the public signatures (static typing only:
at run time any object with the same behaviour is accepted, e.g. a PySpark 3.5 Spark
Connect DataFrame, which does not derive from ``pyspark.sql.DataFrame``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, Union

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Batch"]

#: A batch: a PySpark DataFrame (classic or Spark Connect) or Arrow data.
Batch: TypeAlias = Union["DataFrame", pa.Table, pa.RecordBatch, pa.RecordBatchReader]
