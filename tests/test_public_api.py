"""The public API is small, sorted and matches DESIGN.md's contract."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Generic

import pytest

import deltasink
from deltasink import DeltaSink, MergeSpec, SinkStatus


def test_all_is_sorted_and_exported() -> None:
    assert deltasink.__all__ == sorted(deltasink.__all__)
    for name in deltasink.__all__:
        assert hasattr(deltasink, name), name
    public = {n for n in vars(deltasink) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if inspect.ismodule(getattr(deltasink, n))}
    exported_modules = {"checks", "hooks"}  # used as namespaces: checks.no_nulls(...)
    assert exported_modules <= modules
    assert public - modules == set(deltasink.__all__) - {"__version__"} - exported_modules


def test_design_contract_names() -> None:
    params = inspect.signature(DeltaSink).parameters
    assert list(params)[:4] == ["target", "app_id", "merge", "staging"]
    assert params["staging"].default is None
    for method in ("pre_commit", "commit", "write", "abort", "recover", "status", "foreach_batch"):
        assert callable(getattr(DeltaSink, method)), method
    spec = inspect.signature(MergeSpec).parameters
    assert {"keys", "mode", "sequence_by", "delete_when"} <= set(spec)
    assert {"committed_version", "pending_versions"} <= {
        f.name for f in SinkStatus.__dataclass_fields__.values()
    }
    assert callable(deltasink.embedded_spark)


def test_public_signatures_name_spark_and_arrow_types() -> None:
    """What a batch and a session are is in the signature, not ``object``/``Any``."""

    def annotation(function: object, name: str) -> object:
        return inspect.signature(function).parameters[name].annotation  # type: ignore[arg-type]

    for method in ("pre_commit", "write", "foreach_batch"):
        assert annotation(getattr(DeltaSink, method), "df") == "Batch", method
    assert annotation(DeltaSink, "spark") == "SparkSession | None"
    assert annotation(DeltaSink.ledger, "spark") == "SparkSession | None"
    assert inspect.signature(DeltaSink.ledger).return_annotation == "DataFrame"
    assert annotation(deltasink.SinkGroup.write, "batches") == "Mapping[str, Batch]"
    assert annotation(deltasink.ForeachBatchWriter.sink, "spark") == "SparkSession | None"
    assert "DataFrame" in str(deltasink.inputs.Batch)
    assert "pyarrow" in str(deltasink.inputs.Batch)


def test_merge_spec_is_frozen_and_keyword_only() -> None:
    spec = MergeSpec(keys="id")
    assert spec.keys == ("id",)
    assert MergeSpec.from_json(spec.to_json()) == spec
    try:
        MergeSpec(["id"])  # type: ignore[misc]
    except TypeError:
        pass
    else:
        raise AssertionError("MergeSpec must be keyword-only")


def test_stream_identity_errors_are_exported() -> None:
    """Issue 24's named errors: a reset checkpoint is a refused version (callers that
    caught InvalidVersionError for "batch below the committed version" still do)."""
    assert issubclass(deltasink.CheckpointResetError, deltasink.InvalidVersionError)
    assert issubclass(deltasink.ReplayMismatchError, deltasink.InvalidInputError)
    assert {"CheckpointResetError", "ReplayMismatchError"} <= set(deltasink.__all__)
    params = inspect.signature(DeltaSink.foreach_batch).parameters
    assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY] == [
        "resume",
        "checkpoint",
    ]
    assert callable(DeltaSink.offsets)


def test_replay_warning_is_exported_and_a_user_warning() -> None:
    """Issue 44: a write of a committed version says so through :mod:`warnings`."""
    assert issubclass(deltasink.ReplayWarning, UserWarning)
    assert "ReplayWarning" in deltasink.__all__


def test_the_library_logger_has_a_null_handler_and_propagates() -> None:
    """As libraries do: no output of deltasink's own (no last-resort handler printing
    to stderr); the application's logging configuration receives every record."""
    import logging

    logger = logging.getLogger("deltasink")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.propagate
    assert not any(type(h) is not logging.NullHandler for h in logger.handlers)


def test_grouped_settings_are_the_flat_keywords(tmp_path: Any) -> None:
    """``timeouts=``, ``audit=`` and ``store=`` are the flat keywords grouped: a sink
    given a group resolves to the settings of one given its flat spellings (kept for one
    release), and a group beside its own flat keywords is refused by name."""
    from datetime import timedelta

    from deltasink import AuditChecks, ConfigurationError, StoreOptions, Timeouts, checks

    target = str(tmp_path / "t")
    spec = MergeSpec(keys=["id"])
    flat = DeltaSink(
        target,
        "app",
        spec,
        transaction_timeout=timedelta(hours=1),
        timeout_warning_ratio=0.5,
        checks=[checks.no_nulls("id")],
        on_quarantine="raise",
        check_samples=True,
        storage_options={"timeout": "30s"},
    )
    grouped = DeltaSink(
        target,
        "app",
        spec,
        timeouts=Timeouts(transaction_timeout=timedelta(hours=1), warning_ratio=0.5),
        audit=AuditChecks(
            checks=flat.settings.audit.checks, on_quarantine="raise", check_samples=True
        ),
        store=StoreOptions(storage_options={"timeout": "30s"}),
    )
    assert grouped.settings == flat.settings
    assert flat.settings.timeouts.timeout_s == 3600.0
    assert flat.settings.storage_options == {"timeout": "30s"}
    with pytest.raises(ConfigurationError, match=r"audit= and check_samples=, on_quarantine="):
        DeltaSink(
            target, "app", spec, audit=AuditChecks(), on_quarantine="raise", check_samples=True
        )
    with pytest.raises(ConfigurationError, match=r"timeouts= and transaction_timeout="):
        DeltaSink(target, "app", spec, timeouts=Timeouts(), transaction_timeout=5)
    with pytest.raises(ConfigurationError, match=r"store= and allow_unsafe_commits="):
        DeltaSink(target, "app", spec, store=StoreOptions(), allow_unsafe_commits=True)
    with pytest.raises(ConfigurationError, match=r"on_quarantine must be"):
        AuditChecks(on_quarantine="stop")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        grouped.settings.app_id = "other"  # type: ignore[misc]


def test_the_sink_is_composed_of_parts_not_mixins() -> None:
    """``DeltaSink`` inherits nothing: its stream writer and operations are members it
    delegates to, each documented by the part's contract."""
    from deltasink.operations import Operations
    from deltasink.stream.writer import StreamWriter

    assert DeltaSink.__mro__ == (DeltaSink, object)
    assert StreamWriter.__mro__ == (StreamWriter, object)
    assert Operations.__mro__ == (Operations, object)
    assert DeltaSink.status.__doc__ == Operations.status.__doc__
    assert DeltaSink.foreach_batch.__doc__ == StreamWriter.foreach_batch.__doc__
    # the core holds its publishing run as a part too
    from deltasink.core.protocol import TwoPhaseCommit
    from deltasink.core.publishing import PublishRun

    assert PublishRun not in TwoPhaseCommit.__mro__
    assert PublishRun.__mro__ == (PublishRun, Generic, object)
