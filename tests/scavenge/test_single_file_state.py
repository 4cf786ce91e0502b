"""``index/scavenging/scavenging.db`` is the only file in its directory, and holds all its content,
whenever a file copy may read it (the spec's backup procedures copy that one file): while a node
runs, after a scavenge, after a kill -9 in the middle of a state write and its reopening. evdb
backup's SQLite online-backup copy gives the same content."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import httpx
import pytest

from evdb.backup.copying import copy_sqlite
from evdb.node import Node
from evdb.scavenge.state import ScavengeState, StreamRow
from evdb.streams import NewEvent
from tests.node.conftest import ADMIN, node_options

EVENTS = "application/vnd.kurrent.events+json"
TABLES = ("checkpoint", "streams", "hash_users", "collisions", "chunk_timestamps", "chunk_weights")


def content(path: str) -> dict[str, list[tuple]]:
    """Every row of the scavenge tables, read from the file at ``path`` alone (opened read-only,
    nothing beside it)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        known = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in TABLES if t in known}
    finally:
        conn.close()


def plain_copy(path: str, folder) -> str:
    """What an operator's file copy does: the one file, byte for byte, into an empty folder."""
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "scavenging.db")
    shutil.copyfile(path, target)
    return target


def test_each_commit_leaves_the_whole_content_in_the_one_file(tmp_path):
    path = str(tmp_path / "scavenging" / "scavenging.db")
    state = ScavengeState(path)
    try:
        for k in range(3):
            with state.transaction():
                for i in range(500):
                    state.save_row(StreamRow(f"s-{k}-{i}", max_count=i))
                state.add_weights({k: 2.0})
                state.update_checkpoint(stage="Accumulating", accumulatedTo=k)
            assert os.listdir(tmp_path / "scavenging") == ["scavenging.db"]
            copied = content(plain_copy(path, tmp_path / f"copy-{k}"))
            assert len(copied["streams"]) == 500 * (k + 1)
            assert copied["chunk_weights"] == [(n, 2.0) for n in range(k + 1)]
            assert json.loads(copied["checkpoint"][0][1])["accumulatedTo"] == k
    finally:
        state.close()
    assert content(path) == copied


def test_a_database_an_earlier_version_left_in_wal_mode_becomes_one_file(tmp_path):
    """Killed with its content in ``-wal`` (as a WAL node was): opened, it is folded into the file."""
    path = str(tmp_path / "scavenging.db")
    script = textwrap.dedent(
        f"""
        import os, sqlite3
        c = sqlite3.connect({path!r}, isolation_level=None)
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("CREATE TABLE checkpoint (id INTEGER PRIMARY KEY CHECK (id = 0), data TEXT NOT NULL)")
        c.execute("INSERT INTO checkpoint VALUES (0, '{{\\"stage\\": \\"Done\\", \\"lastPoint\\": 4}}')")
        os._exit(0)  # no close: no checkpoint, the content stays in -wal
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert os.path.getsize(path + "-wal") > 0
    state = ScavengeState(path)
    try:
        assert state.journal_mode == "delete"
        assert state.checkpoint() == {"stage": "Done", "lastPoint": 4}
        assert sorted(os.listdir(tmp_path)) == ["scavenging.db"]
    finally:
        state.close()
    assert json.loads(content(plain_copy(path, tmp_path / "copy"))["checkpoint"][0][1])["lastPoint"] == 4


_WRITER = """
import os, signal, sys
from evdb.scavenge.state import ScavengeState, StreamRow

path, commits, steps, in_run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "run"
# a small page cache: a transaction's pages spill into the file before it commits
state = ScavengeState(path, cache_size_bytes=160 * 1024)
k = state.checkpoint().get("done", -1) + 1
dies_in = k + commits


def write(k):
    if k == dies_in:  # dies after ``steps`` SQLite instructions of this transaction
        state._conn.set_progress_handler(lambda: os.kill(os.getpid(), signal.SIGKILL), steps)
    with state.transaction():
        for i in range(2000):
            state.save_row(StreamRow(f"stream-{k:06d}-{i:04d}-" + "x" * 64, max_count=k))
        state.add_weights({k: 2.0})
        state.update_checkpoint(done=k)


if in_run:  # as a scavenge run writes: WAL
    with state.running(print):
        while True:
            write(k)
            k += 1
while True:  # as the node writes between runs (a run's beginning, an interrupted run's mark)
    write(k)
    k += 1
"""


@pytest.mark.parametrize("steps", [2_000, 20_000, 45_000])
@pytest.mark.parametrize("when", ["between runs", "run"])
def test_a_kill_9_in_the_middle_of_a_state_write_leaves_a_readable_database(tmp_path, steps, when):
    folder = tmp_path / "scavenging"
    path = str(folder / "scavenging.db")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = -1
    for commits in (0, 2, 1):
        child = subprocess.run(
            [sys.executable, "-c", _WRITER, path, str(commits), str(steps), when], env=env, timeout=120
        )
        assert child.returncode == -signal.SIGKILL
        # killed in the middle of a transaction: its journal (between runs) or the run's log is there
        assert os.path.exists(path + ("-wal" if when == "run" else "-journal"))
        if when == "run":  # read-only readers (evdb backup, a verification) read it before any open
            assert len(content(path)["streams"]) % 2000 == 0
        state = ScavengeState(path)  # what the node does as it starts
        try:
            assert state.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            # (the handler may fire in a later transaction than the one it was set in)
            assert state.checkpoint().get("done", -1) >= done + commits
            done = state.checkpoint().get("done", -1)
            assert state.stream_count() == 2000 * (done + 1)  # every committed transaction, whole
            assert state.weights() == {k: 2.0 for k in range(done + 1)}
        finally:
            state.close()
        assert os.listdir(folder) == ["scavenging.db"]
        assert len(content(plain_copy(path, tmp_path / "copy"))["streams"]) == 2000 * (done + 1)


def test_a_run_stopped_at_any_stage_leaves_one_file_with_all_of_it(harness):
    """What a backup sees after stopping the running scavenge (evdb backup does, before it copies)."""
    from evdb.scavenge.scavenger import STAGES

    folder = harness.path / "db" / "index" / "scavenging"
    path = str(folder / "scavenging.db")
    for k in range(20):
        harness.db.append(f"s-{k}", [NewEvent.json("E", {"i": i}) for i in range(4)])
        harness.db.set_stream_metadata(f"s-{k}", {"$maxCount": 1})
    seen = []

    def look(stage: str) -> None:
        seen.append((stage, sorted(os.listdir(folder))))
        if stage == "ExecutingIndex":
            harness.service._current.stop()

    harness.service.stage_hook = look
    assert harness.scavenge()[1] == "Stopped"
    assert all("scavenging.db-wal" in names for _, names in seen)  # a run writes through its log
    assert os.listdir(folder) == ["scavenging.db"]
    copied = content(plain_copy(path, harness.path / "copy"))
    assert content(path) == copied
    assert json.loads(copied["checkpoint"][0][1])["stage"] == "ExecutingIndex"
    assert {f"s-{k}" for k in range(20)} <= {row[0] for row in copied["streams"]}
    harness.service.stage_hook = lambda stage: None
    assert harness.scavenge()[1] == "Success"
    assert os.listdir(folder) == ["scavenging.db"]
    assert json.loads(content(path)["checkpoint"][0][1])["stage"] == "Done"
    assert [s for s, _ in seen] == [s for s, _ in STAGES][: len(seen)]


async def _scavenge(client) -> None:
    r = await client.post("/admin/scavenge", headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    scavenge_id = r.json()["scavengeId"]
    for _ in range(6000):
        current = (await client.get("/admin/scavenge/current", headers={"Accept": "application/json"})).json()
        if current["scavengeId"] != scavenge_id:
            break
        await asyncio.sleep(0.01)
    last = (await client.get("/admin/scavenge/last", headers={"Accept": "application/json"})).json()
    assert last["scavengeResult"] == "Success", last


async def test_while_a_node_runs_a_plain_copy_of_the_scavenge_database_has_all_of_it(tmp_path, clock):
    folder = tmp_path / "db" / "index" / "scavenging"
    path = str(folder / "scavenging.db")
    async with (
        Node(node_options(tmp_path), clock=clock, name="single-file") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as client,
    ):
        for k in range(30):
            body = [{"eventId": str(uuid.uuid4()), "eventType": "E", "data": {"i": i}} for i in range(5)]
            r = await client.post(
                f"/streams/s-{k}", content=json.dumps(body), headers={"Content-Type": EVENTS}
            )
            assert r.status_code == 201, r.text
            r = await client.post(f"/streams/s-{k}/metadata", json={"$maxCount": 2})
            assert r.status_code == 201, r.text
        await _scavenge(client)

        assert os.listdir(folder) == ["scavenging.db"]
        copied = content(plain_copy(path, tmp_path / "copy"))
        assert {f"s-{k}" for k in range(30)} <= {row[0] for row in copied["streams"]}
        assert json.loads(copied["checkpoint"][0][1])["stage"] == "Done"
        # evdb backup's copy (SQLite's online backup) gives the same, the node still running
        backed_up = tmp_path / "backup" / "scavenging.db"
        os.makedirs(backed_up.parent)
        assert copy_sqlite(path, str(backed_up)) > 0
        assert content(str(backed_up)) == copied
        assert os.listdir(folder) == ["scavenging.db"]


def test_a_hot_journal_a_kill_left_is_read_rolled_back_and_the_files_stay_as_they_are(tmp_path):
    """A kill in the middle of a rollback-journal write (the open's, the switch between modes) leaves
    a hot journal, which a read-only connection cannot roll back ("attempt to write a readonly
    database", CI's crash matrix): verification and evdb backup read a rolled-back copy instead."""
    from evdb.backup.verify import VerifyReport, _verify_index
    from evdb.scavenge.state import reading

    index = tmp_path / "index"
    path = str(index / "scavenging" / "scavenging.db")
    state = ScavengeState(path)
    with state.transaction():
        for i in range(2000):
            state.save_row(StreamRow(f"s-{i}", max_count=i))
    state.close()
    before = content(path)
    writer = textwrap.dedent(
        f"""
        import os, sqlite3
        c = sqlite3.connect({path!r}, isolation_level=None)
        c.execute("PRAGMA cache_size = 2")  # the change spills into the file before the commit
        c.execute("BEGIN")
        c.execute("DELETE FROM streams")
        os.kill(os.getpid(), 9)
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=False)
    assert os.path.getsize(path + "-journal") > 0
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        content(path)  # what the readers did before
    files = {p: Path(p).read_bytes() for p in (path, path + "-journal")}

    with reading(path) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT COUNT(*) FROM streams").fetchone()[0] == 2000
    report = VerifyReport(str(tmp_path))
    _verify_index(report, str(index))
    assert report.problems == []
    target = str(tmp_path / "copy" / "scavenging.db")
    os.makedirs(os.path.dirname(target))
    copy_sqlite(path, target)
    assert content(target) == before
    assert {p: Path(p).read_bytes() for p in files} == files  # nothing written beside the node's files
