"""What the archive tests share: the S3 test environment and a small-chunk database archived."""

from __future__ import annotations

import json
import logging
import os
import uuid

import yaml

from evdb.archive.archiver import Archiver, DatabaseChunks
from evdb.database import Database
from evdb.storage.checkpoints import Checkpoint
from evdb.storage.log import ARCHIVED_CHECKPOINT
from evdb.streams import NewEvent

REGION = "eu-west-1"
#: what every test's S3 store reads as its environment: moto accepts any keys; nothing of the
#: developer's own AWS environment or files is read (HOME points nowhere)
KEYS = {"AWS_ACCESS_KEY_ID": "evdb-test", "AWS_SECRET_ACCESS_KEY": "evdb-test-secret"}
CHUNK = 64 * 1024
LOGGER = logging.getLogger("test.archiver")


def environ_for(endpoint: str, home) -> dict[str, str]:
    """An S3 store's environment: the test keys, ``endpoint``, and a HOME with no AWS files."""
    return {**KEYS, "AWS_ENDPOINT_URL": endpoint, "HOME": str(home)}


def database(path, clock, chunks: float = 3.5, **options) -> Database:
    """A database of ``chunks`` chunks of 64 KiB (the last one active); ``options``: more of Database.open's."""
    options.setdefault("existence_filter_capacity", 10_000)
    db = Database.open(str(path), clock=clock, chunk_size=CHUNK, **options)
    fill(db, chunks)
    return db


def fill(db: Database, chunks: float) -> None:
    """About ``chunks`` chunks of 64 KiB of events, ten to an append (fewer syncs, the same chunks)."""
    events = int(chunks * CHUNK / 1100)
    for first in range(0, events, 10):
        batch = range(first, min(first + 10, events))
        db.append(f"order-{first % 7}", [NewEvent("Placed", data=bytes([i % 251]) * 1000) for i in batch])


def archiver(store, db, name="archiver", **kw) -> Archiver:
    return Archiver(store, DatabaseChunks(lambda: db, CHUNK), name=name, logger=LOGGER, **kw)


def drain(archiver: Archiver) -> int:
    """Step until there is nothing more to upload; the number of chunks archived."""
    steps = 0
    while archiver.step():
        steps += 1
    return steps


def records(chunk) -> list:
    return list(chunk.iter_records())


def all_events(db: Database) -> list[tuple]:
    """Every event of ``$all`` as (stream, number, data)."""
    return [(e.stream, e.event_number, e.data) for e in db.read_all_forward(0, 100_000).events]


def leave_archived(path, clock, store, **options) -> list[tuple]:
    """Write 3.5 chunks at ``path``, archive chunks 0-2 into ``store`` and delete their local files as a
    scavenge under the retention policy does; the events written (stream, number, data). The index of
    chunks 0-2 is on disk (a reopen does not read them again to index them)."""
    db = database(path, clock, max_memtable_entries=64, **options)
    try:
        assert drain(archiver(store, db)) == 3
        written = all_events(db)
        db.index.wait_idle()
        assert db.index.checkpoint >= 3 * CHUNK
        with db.log.chunk_lock:
            deleted = db.log.leave_to_archive(3)
        assert [os.path.basename(p) for p in deleted] == [f"chunk-00000{i}.000000" for i in range(3)]
        return written
    finally:
        db.close()


def write_filler(local, url: str, kib: int) -> None:
    """About ``kib`` KiB of events over HTTP to the node at ``url`` of a LocalCluster, 40 to an append."""
    with local.client(url, timeout=30) as client:
        for _ in range(kib // 40):
            batch = [
                {"eventId": str(uuid.uuid4()), "eventType": "Filler", "data": {"p": "x" * 1000}}
                for _ in range(40)
            ]
            r = client.post(
                f"/streams/filler-{uuid.uuid4().hex[:6]}",
                content=json.dumps(batch),
                headers={"Content-Type": "application/vnd.kurrent.events+json"},
            )
            assert r.status_code == 201, r.text


def filesystem_archive(folder, *, days: int, logical_bytes: int) -> dict:
    """A node's ``Archive`` options: the file-system archive in ``folder``, the retention policy."""
    return {
        "Enabled": True,
        "StorageType": "FileSystem",
        "FileSystem": {"Path": str(folder)},
        "RetainAtLeast": {"Days": days, "LogicalBytes": logical_bytes},
    }


def node_of(local, name: str) -> dict:
    """Node ``name`` of a LocalCluster, as its cluster.json describes it."""
    return next(n for n in local.info()["nodes"] if n["name"] == name)


def node_config(local, name: str) -> dict:
    with open(node_of(local, name)["config"]) as f:
        return yaml.safe_load(f)


def save_node_config(local, name: str, config: dict) -> None:
    with open(node_of(local, name)["config"], "w") as f:
        yaml.safe_dump(config, f)


def make_archiver(local, name: str = "replica1") -> dict:
    """Make replica ``name`` the cluster's archiver (``Archiver: true``); its configuration."""
    config = node_config(local, name)
    config["Archiver"] = True
    save_node_config(local, name, config)
    return config


def archived_chk(db: str) -> int:
    """The node's ``archived.chk`` in folder ``db`` (0 while there is none), read as the log reads it."""
    checkpoint = Checkpoint(os.path.join(db, ARCHIVED_CHECKPOINT), 0)
    try:
        return checkpoint.value
    finally:
        checkpoint.close()
