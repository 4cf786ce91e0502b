"""A real in-process node: backups under continuous appends, restore, a node on the restore; and
the scavenge interplay over the node's HTTP API."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
from backup_helpers import progress

from evdb.backup import HttpScavengeGuard, ScavengeRunning, restore_backup, run_backup, verify_backup
from evdb.backup.layout import MANIFEST, chunk_files
from evdb.errors import StreamNotFound
from evdb.node import Node
from evdb.options import load_options
from evdb.streams import NewEvent

ADMIN = ("admin", "changeit")
CHUNK = 65536


def options(root):
    return load_options(
        [
            "--db", str(root / "db"), "--log", str(root / "log"), "--insecure", "--http-port", "0",
            "--chunk-size", str(CHUNK), "--max-mem-table-size", "64", "--stats-period-sec", "0",
        ],
        {},
    )  # fmt: skip


async def wait_for(condition, timeout=30.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


class Appender:
    """Appends continuously from a thread and records every acknowledged event."""

    def __init__(self, db) -> None:
        self.db = db
        self.acked: list[tuple[str, int, int]] = []  # stream, event number, log position
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            stream = f"orders-{i % 16}"
            result = self.db.append(stream, [NewEvent("OrderPlaced", b'{"n":%d}' % i + b" " * 80)])
            self.acked.append((stream, result.first_event_number, result.position))
            i += 1

    def __enter__(self) -> Appender:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


async def test_full_differential_restore_and_a_node_on_the_restore(tmp_path, clock):
    dest = str(tmp_path / "backup")
    async with Node(options(tmp_path / "src"), clock=clock, name="src") as node:
        db_dir = node.db_config.db_dir
        index_dir = node.db_config.resolved_index_dir
        guard = HttpScavengeGuard(node.http_url, auth=ADMIN)
        try:
            with Appender(node.db) as appender:
                await wait_for(lambda: node.db.committed_position > 3 * CHUNK)
                full = await asyncio.to_thread(
                    run_backup, db_dir, index_dir, dest, guard=guard, node_url=node.http_url
                )
                assert full.files_copied > 0 and verify_backup(dest).ok
                chunks_after_full = chunk_files(os.path.join(dest, "db"))
                target = node.db.committed_position + 3 * CHUNK
                await wait_for(lambda: node.db.committed_position > target)
                acked_before_differential = len(appender.acked)
                p = progress("differential")
                differential = await asyncio.to_thread(
                    run_backup,
                    db_dir,
                    index_dir,
                    dest,
                    differential=True,
                    guard=guard,
                    node_url=node.http_url,
                    progress=p,
                )
        finally:
            guard.close()
        acked = list(appender.acked)
        source_chunks = chunk_files(db_dir)

    report = verify_backup(dest)
    assert report.ok, report.problems
    backup_chunks = chunk_files(os.path.join(dest, "db"))
    new_chunks = [n for n in backup_chunks if n not in chunks_after_full]
    copied_chunks = [r[3:] for r in p.copied if r.startswith("db/chunk-")]
    # only new or changed chunks: the old last one (renamed .old) and the ones written since
    assert copied_chunks == [chunks_after_full[-1], *new_chunks]
    assert len(new_chunks) >= 3
    assert differential.files_skipped >= len(chunks_after_full) - 1
    assert len(copied_chunks) < len(source_chunks)

    manifest = json.loads(Path(dest, MANIFEST).read_text())
    chaser = manifest["chaser"]
    assert chaser == differential.chaser
    # every event acknowledged before the differential started lies before its chaser position
    assert all(position < chaser for _, _, position in acked[:acked_before_differential])

    restored = tmp_path / "restored"
    result = await asyncio.to_thread(restore_backup, dest, str(restored / "db"))
    assert result.truncate_to == chaser
    async with Node(options(restored), clock=clock, name="restored") as node2:
        assert node2.db.committed_position >= chaser  # plus the epoch record it writes as leader
        readable = [(s, n) for s, n, position in acked if position < chaser]
        assert len(readable) >= acked_before_differential
        for stream, number in readable:
            assert node2.db.read_event(stream, number).event_number == number
        # and nothing after the chaser position
        later = [(s, n) for s, n, position in acked if position >= chaser]
        for stream, number in later[:5]:
            with pytest.raises(StreamNotFound):
                node2.db.read_event(stream, number)


class ReleasingGuard(HttpScavengeGuard):
    """Releases the test's held scavenge when the backup asks the node to stop it."""

    def __init__(self, url, gate, **kw) -> None:
        super().__init__(url, **kw)
        self.gate = gate

    def stop(self, scavenge_id):
        self.gate.set()
        super().stop(scavenge_id)


async def test_a_running_scavenge_is_refused_or_stopped_and_restarted(tmp_path, clock):
    async with Node(options(tmp_path / "src"), clock=clock, name="src") as node:
        for i in range(300):
            node.db.append(f"gone-{i % 5}", [NewEvent("E", b"x" * 100)])
        for i in range(5):
            node.db.delete_stream(f"gone-{i}")
        gate = threading.Event()
        node.scavenge.stage_hook = lambda stage: gate.wait(30)
        scavenge_id = await asyncio.to_thread(node.scavenge.start, _request())
        db_dir = node.db_config.db_dir
        index_dir = node.db_config.resolved_index_dir
        dest = str(tmp_path / "bk")
        guard = ReleasingGuard(node.http_url, gate, auth=ADMIN)
        try:
            with pytest.raises(ScavengeRunning, match=scavenge_id):
                await asyncio.to_thread(run_backup, db_dir, index_dir, dest, guard=guard)
            assert node.scavenge.current_id() == scavenge_id
            result = await asyncio.to_thread(
                run_backup, db_dir, index_dir, dest, guard=guard, stop_scavenge=True
            )
        finally:
            guard.close()
        assert result.scavenge_restarted and result.scavenge_restarted != scavenge_id
        assert verify_backup(dest).ok
        await asyncio.to_thread(node.scavenge.wait, 30)
        assert node.scavenge.last() == (result.scavenge_restarted, "Success")


def _request():
    from evdb.scavenge.service import ScavengeRequest

    return ScavengeRequest()
