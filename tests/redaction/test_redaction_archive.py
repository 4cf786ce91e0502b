"""evdb-redact on a node with an archive (issue 37): an event whose chunk the archive holds is redacted
in the node's chunk file and in the archived object, through the node's socket; afterwards no file of
the node and no object of the archive holds the plaintext, and the archive verifies whole."""

from __future__ import annotations

import asyncio
import logging
import os

from redaction_helpers import CHUNK_SIZE, running_node, write_events

from evdb.archive.archiver import Archiver, DatabaseChunks, chunk_object_name, read_checkpoint
from evdb.archive.cache import download_verified
from evdb.archive.filesystem import FileSystemStore
from evdb.redaction import RedactionClient, socket_path
from evdb.redaction.tool import main as redact_main
from evdb.streams import NewEvent

SECRET = b"PLAINTEXT-OF-CUSTOMER-7"


def _holding(root, needle: bytes) -> list[str]:
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not name.endswith(".sock"):
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
    return found


async def test_evdb_redact_reaches_the_archived_copy_and_leaves_no_plaintext(tmp_path, clock):
    archive = tmp_path / "archive"
    archive.mkdir()
    extra = (
        "--archive-enabled", "true", "--archive-storage-type", "FileSystem",
        "--archive-file-system-path", str(archive), "--archive-retain-at-least-days", "1",
        "--archive-retain-at-least-logical-bytes", "0",
    )  # fmt: skip
    async with running_node(tmp_path, clock, *extra) as running:
        db = running.db
        await asyncio.to_thread(
            db.append, "customer-7", [NewEvent("Registered", data=SECRET * 10, metadata=b"", is_json=False)]
        )
        await write_events(db, "filler", 60)  # three chunks and more
        store = FileSystemStore(str(archive))
        archiver = Archiver(
            store, DatabaseChunks(lambda: running.db, CHUNK_SIZE), name="test", logger=logging.getLogger("t")
        )
        while await asyncio.to_thread(archiver.step):
            pass
        assert read_checkpoint(store).position >= 2 * CHUNK_SIZE
        assert SECRET in store.get_bytes(chunk_object_name(0))

        def positions_of() -> list[dict]:
            with RedactionClient(socket_path(running.db_dir)) as client:
                return client.call("getEventPositions", stream="customer-7", eventNumber=0)["positions"]

        positions = await asyncio.to_thread(positions_of)
        assert [p.get("archived", False) for p in positions] == [False, True]  # the local file, the archive
        code = await asyncio.to_thread(redact_main, ["--db", running.db_dir, "--events", "0@customer-7"])
        assert code == 0
        assert _holding(tmp_path, SECRET) == []  # the database folder, the node's log, the archive folder
        event = await asyncio.to_thread(db.read_event, "customer-7", 0)
        assert event.data == b"\xff" * len(SECRET * 10)
        archived, _ = download_verified(store, 0, CHUNK_SIZE, str(tmp_path / "c.tmp"), str(tmp_path / "c"))
        assert archived.version >= 1
        # a second run finds both redacted already and changes nothing
        assert await asyncio.to_thread(redact_main, ["--db", running.db_dir, "--events", "0@customer-7"]) == 0
