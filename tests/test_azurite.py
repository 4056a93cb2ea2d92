"""ADLS / Blob against Azurite on 127.0.0.1 (tests/azurite.py installs it with npm).

The same scenarios as on S3 (tests/test_s3.py), on the Blob API: commit files created
only if absent; write / pre_commit / commit / recover / status / gc and the CLI with
``-o``; two writers of one app (fencing); two apps racing on the same new keys; a
SIGKILL at every fault point, then recovery; storage errors by kind.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from deltasink import DeltaSink, FencedError, MergeSpec, StorageAccessError, StorageError
from deltasink._faults import POINTS
from deltasink.cli import EXIT_ERROR, app
from tests import forks
from tests.azurite import Azurite, azurite_main
from tests.test_s3 import DIRECT_POINTS, _rerun

CONTAINER = "lake"
runner = CliRunner()


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    pytest.importorskip("azure.storage.blob", reason="the dev extra's azure-storage-blob")
    main = azurite_main()
    if isinstance(main, str):
        pytest.skip(main)
    server = Azurite(main)
    saved = {k: os.environ.get(k) for k in server.environ()}
    os.environ.update(server.environ())  # read by delta-rs, here and in child processes
    try:
        server.service().create_container(CONTAINER)
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture
def uri() -> str:
    return f"az://{CONTAINER}/{uuid.uuid4().hex[:12]}/orders"


def rows(uri: str, options: dict[str, str]) -> list[dict[str, Any]]:
    return DeltaTable(uri, storage_options=options).to_pyarrow_table().sort_by("id").to_pylist()


def markers(uri: str, options: dict[str, str], app_id: str) -> dict[int, int]:
    """For each Delta version of the target: ``app_id``'s marker carried by that commit."""
    table = DeltaTable(uri, storage_options=options)
    found = {}
    # Compared with the marker as of the version before, not with the last one recorded
    # (which read a marker again after two commits of the other app in a row).
    previous = None
    for version in range(table.version() + 1):
        snapshot = DeltaTable(uri, storage_options=options, version=version)
        marker = snapshot.transaction_version(app_id)
        if marker is not None and marker != previous:
            found[version] = marker
        previous = marker
    return found


def _sink(uri: str, options: dict[str, str], app_id: str = "orders", **kw: Any) -> DeltaSink:
    return DeltaSink(uri, app_id, MergeSpec(keys=["id"]), storage_options=options, **kw)


def _o(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def test_a_commit_file_is_created_only_if_absent(azurite: Azurite, uri: str) -> None:
    options = azurite.storage_options()
    write_deltalake(uri, pa.table({"id": [0]}), storage_options=options)
    stale = DeltaTable(uri, storage_options=options)
    write_deltalake(uri, pa.table({"id": [1]}), storage_options=options, mode="append")
    write_deltalake(stale, pa.table({"id": [2]}), mode="append")  # conflict, then v2
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2]


def test_the_protocol_and_the_cli_on_azurite(azurite: Azurite, uri: str) -> None:
    options = azurite.storage_options()
    sink = _sink(uri, options)
    sink.write(pa.table({"id": [1, 2], "v": ["a", "b"]}), 0)
    sink.pre_commit(pa.table({"id": [2, 3], "v": ["c", "d"]}), 1)
    sink.pre_commit(pa.table({"id": [4], "v": ["e"]}), 2)
    assert sink.commit(1).committed_version == 1
    result = runner.invoke(app, ["status", uri, "--app", "orders", "--json", *_o(options)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pending_versions"] == [2]
    result = runner.invoke(app, ["recover", uri, "--app", "orders", *_o(options)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["gc", uri, "--app", "orders", *_o(options)]).exit_code == 0
    assert rows(uri, options) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "c"},
        {"id": 3, "v": "d"},
        {"id": 4, "v": "e"},
    ]
    assert markers(uri, options, "orders") == {0: 0, 1: 1, 2: 2}


def test_two_writers_of_one_app_the_older_is_fenced(azurite: Azurite, uri: str) -> None:
    options = azurite.storage_options()
    old = _sink(uri, options)
    old.pre_commit(pa.table({"id": [1], "v": ["a"]}), 0)
    new = _sink(uri, options)
    new.recover()
    new.write(pa.table({"id": [2], "v": ["b"]}), 1)
    with pytest.raises(FencedError):
        old.write(pa.table({"id": [3], "v": ["zombie"]}), 2)
    assert rows(uri, options) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert markers(uri, options, "orders") == {0: 0, 1: 1}


def test_two_apps_racing_on_the_same_new_keys(azurite: Azurite, uri: str) -> None:
    options = azurite.storage_options()
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(app_id: str) -> None:
        try:
            sink = _sink(uri, options, app_id=app_id, max_commit_attempts=50)
            start.wait()
            for version in range(4):
                ids = [version * 2, version * 2 + 1]
                sink.write(pa.table({"id": ids, "v": [app_id] * 2}), version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert [r["id"] for r in rows(uri, options)] == list(range(8))  # each key once
    carried = {}
    for app_id in ("left", "right"):
        found = markers(uri, options, app_id)
        assert sorted(found.values()) == [0, 1, 2, 3]
        carried.update(found)
    # no commit lost: every commit carries a marker (two versions of the two apps may
    # share one: a group commit of the sinks of this process)
    assert sorted(carried) == list(range(DeltaTable(uri, storage_options=options).version() + 1))


@pytest.mark.parametrize(
    ("path", "point"), [("staged", p) for p in POINTS] + [("direct", p) for p in DIRECT_POINTS]
)
def test_sigkill_at_a_fault_point_then_recover(
    azurite: Azurite, uri: str, path: str, point: str
) -> None:
    options = azurite.storage_options()
    code, output = forks.run(forks.sigkilled_job, uri, path, options, point)
    assert code == -signal.SIGKILL, output
    report = DeltaSink(uri, "crashy", MergeSpec(mode="append"), storage_options=options).recover()
    assert all(r.outcome == "committed" for r in report.results)
    _rerun(uri, path, options)
    got = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    assert sorted(got["id"].to_pylist()) == [1, 2, 3, 4, 5]  # 0 lost, 0 duplicated
    assert sorted(markers(uri, options, "crashy").values()) == [0, 1, 2]


def test_a_wrong_key_is_a_storage_access_error(azurite: Azurite, uri: str) -> None:
    options = azurite.storage_options(AZURE_STORAGE_ACCOUNT_KEY="d3Jvbmcta2V5")
    with pytest.raises(StorageAccessError, match="403") as err:
        _sink(uri, options).status()
    assert "\n" not in str(err.value)
    result = runner.invoke(app, ["status", uri, "--app", "orders", "--json", *_o(options)])
    assert result.exit_code == EXIT_ERROR
    assert json.loads(result.output)["error"] == "StorageAccessError"


def test_a_missing_container_is_a_storage_error(azurite: Azurite) -> None:
    uri = "az://no-such-container/orders"
    options = azurite.storage_options()
    with pytest.raises(StorageError, match="ContainerNotFound") as err:
        _sink(uri, options).write(pa.table({"id": [1]}), 0)
    assert not isinstance(err.value, StorageAccessError)
    assert "\n" not in str(err.value)
    result = runner.invoke(app, ["status", uri, "--app", "orders", "--json", *_o(options)])
    assert result.exit_code == EXIT_ERROR
    assert json.loads(result.output)["error"] == "StorageError"
