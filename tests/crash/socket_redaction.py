"""The crash matrix's redaction mode: a real node redacts through its own unix-socket service.

The driver process (tests/reliability/crash_driver.py, mode ``redact``) runs a node with
``EnableUnixSocket: true`` and a licence with the REDACTION entitlement, a writer appending to it, and
a redaction client that talks to the node over ``<Db>/evdb.sock`` exactly as ``evdb-redact`` does
(evdb/redaction/protocol.py): ``lockChunks``, ``getEventPositions``, a redacted copy written under a
``*.redact.tmp`` name, ``switchChunk`` (the node's checks and its chunk switch), ``unlockChunks``.
Nothing of the redaction is done by reaching into the node: a kill can land in the client's steps or
in the node's switch, and the parent checks the folder as for every other mode.

Kill points (passed to the driver's killer): ``redact-locked`` (the session holds the chunk lock),
``redact-copied`` and ``redact-redacted`` (the copy written, then redacted and fsynced: the client's
side), ``switch-before-rename@redaction`` and ``switch-renamed@redaction`` (inside the node's switch,
from the driver's instrumentation of the log), ``redact-switched`` (the node answered the switch; the
session still holds the lock).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from evdb.licensing.issuers import issue_demo_license
from evdb.node import Node
from evdb.options import load_options
from evdb.redaction.protocol import RedactionClient, socket_path
from evdb.redaction.rewrite import TEMP_SUFFIX, EventToRedact, write_redacted_copy
from evdb.streams import NewEvent

__all__ = ["SocketRedaction", "redaction_node_options", "run_socket_redactions"]


def redaction_node_options(p: dict, chunk_size: int, memtable: int):
    """An insecure node on the crash folder with the redaction socket on and a REDACTION licence."""
    return load_options(
        [
            "--db", p["db"], "--log", p["log"], "--insecure", "--http-port", "0", "--replication-port", "0",
            "--chunk-size", str(chunk_size), "--max-mem-table-size", str(memtable), "--stats-period-sec", "0",
            "--enable-unix-socket", "true", "--license-key", issue_demo_license(time.time(), days=30),
            "--license-trusted-issuers", "demo",
        ],
        {},
    )  # fmt: skip


class SocketRedaction:
    """One session on the node's redaction socket; :meth:`redact` takes evdb-redact's steps in order."""

    def __init__(self, db_dir: str, point: Callable[[str], None]) -> None:
        self.db_dir = db_dir
        self.point = point
        self.client = RedactionClient(socket_path(db_dir), timeout=60)

    def redact(self, stream: str, number: int) -> list[str]:
        """Redact event ``number`` of ``stream`` in every completed chunk that stores it; returns the
        chunk files the node switched in."""
        client = self.client
        client.call("lockChunks")
        self.point("redact-locked")
        positions = client.call("getEventPositions", stream=stream, eventNumber=number)["positions"]
        switched = []
        for where in positions:
            if not where["chunkComplete"]:
                raise AssertionError(f"{number}@{stream} is in the active chunk {where['chunkFile']}")
            chunk_file = where["chunkFile"]
            temp = os.path.join(self.db_dir, f"{chunk_file}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")
            write_redacted_copy(
                os.path.join(self.db_dir, chunk_file),
                temp,
                [EventToRedact(stream, number, where["logPosition"], where["chunkEventOffset"])],
                step=lambda name: self.point(f"redact-{name}"),
            )
            answer = client.call(
                "switchChunk", targetChunkFile=chunk_file, newChunkFile=os.path.basename(temp)
            )
            switched.append(answer["chunkFile"])
        self.point("redact-switched")
        client.call("unlockChunks")
        return switched

    def close(self) -> None:
        self.client.close()


def _redactions(db: Any, db_dir: str, side: Any, killer: Any, seed: int) -> None:
    """Write a few secret events, complete their chunk, redact one of them through the socket; again
    and again until killed."""
    rng = random.Random(f"{seed}-maintenance")  # not the writer's sequence: no shared event ids
    session = SocketRedaction(db_dir, killer.point)
    try:
        for _ in range(200):
            stream = f"secret-{rng.getrandbits(32)}"
            ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3)]
            events = [NewEvent("S", b"secret" + rng.randbytes(200), event_id=uuid.UUID(i)) for i in ids]
            db.append(stream, events)
            db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
            number = rng.randrange(3)
            side.write(redact=stream, number=number, id=ids[number])
            session.redact(stream, number)
            side.write(redacted=stream, number=number)
    finally:
        session.close()


def run_socket_redactions(
    p: dict,
    side: Any,
    killer: Any,
    seed: int,
    *,
    chunk_size: int,
    memtable: int,
    instrument: Callable[[Any, Any], None],
    writer: Callable[..., Any],
) -> None:
    """The ``redact`` mode's run: the node, its writer and the socket redactions (until killed).

    ``instrument(db, killer)`` adds the driver's kill points to the node's log and index;
    ``writer(db, side, killer, seed)`` is the driver's appending thread (its ``thread`` is started).
    """

    async def run() -> None:
        async with Node(redaction_node_options(p, chunk_size, memtable), name="crash-redact") as node:
            if node.redaction is None or not node.redaction.is_serving:
                raise AssertionError("the node's redaction service is not serving")
            instrument(node.db, killer)
            killer.stage = "redaction"
            writer(node.db, side, killer, seed).thread.start()
            await asyncio.to_thread(_redactions, node.db, os.path.abspath(p["db"]), side, killer, seed)

    asyncio.run(run())
