"""``evdb-redact``: blank out the data of chosen events on one running node.

    evdb-redact --db PATH --events 3@orders,0@users

Runs on the node's machine, as the node's user, while the node runs with ``EnableUnixSocket: true``
and a licence with the REDACTION entitlement. In one session on ``<Db>/evdb.sock`` it locks the
chunks (no scavenge switches one meanwhile), asks where each event is stored, checks every event
before changing anything, then for each chunk writes a redacted copy (``*.redact.tmp`` in the
database folder) and has the node switch it in atomically. Exit codes: 0 done, 1 the node could not
be reached or refused, 2 bad input (nothing changed).

Events of system streams (names starting with ``$``) are refused before anything is done (see
rules.py). Events in the active (not yet completed) chunk are refused: the active chunk is still
being written, so it cannot be replaced. Complete it first (a scavenge does so when it writes its
scavenge point), then run the tool again.

For crash tests, the environment variable ``EVDB_REDACT_CRASH_AT`` names a step (``locked``,
``copied``, ``redacted``, ``switch-sent``, ``switched``) at which the tool kills itself with SIGKILL.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass

from evdb.redaction.protocol import RedactionClient, RedactionError, RedactionRefused, socket_path
from evdb.redaction.rewrite import TEMP_SUFFIX, EventToRedact, write_redacted_copy
from evdb.redaction.rules import MAX_EVENT_NUMBER, check_redaction_target
from evdb.storage.chunk import parse_chunk_file_name

__all__ = ["EventRef", "main", "parse_events"]

CRASH_ENV = "EVDB_REDACT_CRASH_AT"


class UsageError(Exception):
    """Bad input: exit code 2, nothing changed."""


@dataclass(frozen=True)
class EventRef:
    event_number: int
    stream: str

    def __str__(self) -> str:
        return f"{self.event_number}@{self.stream}"


def parse_events(text: str) -> list[EventRef]:
    """``3@orders,0@users`` → events in order, without repeats. The stream name is everything after the
    first ``@`` (it may hold more); a stream name holding a comma cannot be given."""
    events: list[EventRef] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise UsageError(f"--events {text!r}: an empty entry; give <eventNumber>@<streamName>[,...]")
        number, at, stream = item.partition("@")
        if not at or not stream:
            raise UsageError(f"--events: {item!r} is not <eventNumber>@<streamName>")
        if not number.isascii() or not number.isdigit():
            raise UsageError(f"--events: {item!r}: the event number {number!r} is not a number of at least 0")
        value = int(number)
        if value > MAX_EVENT_NUMBER:
            raise UsageError(f"--events: {item!r}: the event number is too large")
        try:
            check_redaction_target(stream, value)
        except RedactionError as exc:
            raise UsageError(f"--events: {exc}") from None
        ref = EventRef(value, stream)
        if ref not in events:
            events.append(ref)
    return events


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evdb-redact",
        description="Redact events on the running node whose database folder is --db: each event's data "
        "becomes 0xFF bytes of the same length and its record is flagged IsRedacted. The node must run "
        "with EnableUnixSocket: true and a licence with REDACTION. Run it on every node. "
        "See docs/operations/redaction.md.",
    )
    parser.add_argument(
        "--db", required=True, metavar="PATH", help="the node's database folder (chunk files)"
    )
    parser.add_argument(
        "--events",
        required=True,
        metavar="LIST",
        help="comma-separated <eventNumber>@<streamName>, e.g. 3@orders,0@users",
    )
    return parser


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _say(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        events = parse_events(args.events)
        db = _check_db(args.db)
    except UsageError as exc:
        print(f"evdb-redact: {exc}", file=sys.stderr)
        return 2
    try:
        client = _connect(db)
    except RedactionError as exc:
        print(f"evdb-redact: {exc}", file=sys.stderr)
        return 1
    try:
        with client:
            return _run(client, db, events)
    except UsageError as exc:
        print(f"evdb-redact: {exc}", file=sys.stderr)
        print("evdb-redact: nothing was changed.", file=sys.stderr)
        return 2
    except RedactionRefused as exc:
        print(f"evdb-redact: the node refused: {exc} ({exc.code})", file=sys.stderr)
        return 1
    except (RedactionError, OSError) as exc:
        print(f"evdb-redact: {exc}", file=sys.stderr)
        return 1


def _check_db(path: str) -> str:
    db = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(db):
        raise UsageError(f"--db {path}: no such folder")
    if not any(parse_chunk_file_name(name) for name in os.listdir(db)):
        raise UsageError(f"--db {path}: not a database folder (it holds no chunk files)")
    return db


def _connect(db: str) -> RedactionClient:
    path = socket_path(db)
    if not os.path.exists(path):
        raise RedactionError(
            "NoSocket",
            f"no redaction socket at {path}: the node is not running, or runs without "
            "EnableUnixSocket: true (set it and restart the node)",
        )
    try:
        return RedactionClient(path)
    except (ConnectionRefusedError, FileNotFoundError):
        raise RedactionError(
            "NotRunning", f"the node is not running (nothing listens on {path}); start it and try again"
        ) from None
    except PermissionError:
        raise RedactionError(
            "Forbidden", f"no permission to use {path}: run evdb-redact as the node's user"
        ) from None


def _remove_leftovers(db: str) -> None:
    """Temporary files of an earlier run that was killed (safe: this session holds the chunk lock)."""
    for name in os.listdir(db):
        if name.endswith(TEMP_SUFFIX):
            try:
                os.unlink(os.path.join(db, name))
                _say(f"Removed leftover temporary file {name}")
            except FileNotFoundError:
                pass


def _run(client: RedactionClient, db: str, events: list[EventRef]) -> int:
    client.call("lockChunks")
    _crash_point("locked")
    _remove_leftovers(db)
    by_chunk: dict[str, list[EventToRedact]] = defaultdict(list)
    by_archive: dict[int, list[dict]] = defaultdict(list)
    problems = []
    for ref in events:
        try:
            positions = client.call("getEventPositions", stream=ref.stream, eventNumber=ref.event_number)[
                "positions"
            ]
        except RedactionRefused as exc:
            if exc.code == "SystemStream":
                problems.append(str(exc))
                continue
            if exc.code != "EventNotFound":
                raise
            problems.append(f"event {ref} does not exist on this node")
            continue
        for p in positions:
            if p.get("archived"):  # the archive's copy: redacted by the node (redactArchived)
                by_archive[int(p["chunkNumber"])].append(
                    {"stream": ref.stream, "eventNumber": ref.event_number, "logPosition": p["logPosition"]}
                )
                continue
            if not p["chunkComplete"]:
                problems.append(
                    f"event {ref} is in the active chunk {p['chunkFile']}, which is still being written and "
                    "cannot be redacted yet. Complete it first (start a scavenge: writing its scavenge point "
                    "completes the active chunk, e.g. `evdb scavenge start --node URL`; or wait until the "
                    "chunk is full), then run evdb-redact again"
                )
                continue
            by_chunk[p["chunkFile"]].append(
                EventToRedact(ref.stream, ref.event_number, p["logPosition"], p["chunkEventOffset"])
            )
    if problems:
        raise UsageError("; ".join(problems))
    failures = 0
    for chunk_file, chunk_events in sorted(by_chunk.items()):
        failures += _redact_chunk(client, db, chunk_file, chunk_events)
    for number, archived_events in sorted(by_archive.items()):
        failures += _redact_archived(client, number, archived_events)
    client.call("unlockChunks")
    return 1 if failures else 0


def _redact_chunk(client: RedactionClient, db: str, chunk_file: str, events: list[EventToRedact]) -> int:
    names = ", ".join(f"{e.event_number}@{e.stream}" for e in events)
    temp = os.path.join(db, f"{chunk_file}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")
    try:
        copy = write_redacted_copy(os.path.join(db, chunk_file), temp, events, step=_crash_point)
    except (RedactionError, OSError) as exc:
        print(f"evdb-redact: could not redact {chunk_file} ({names}): {exc}", file=sys.stderr)
        return 1
    try:
        for event in copy.already:
            _say(f"Event {event.event_number}@{event.stream} in {chunk_file} was redacted already")
        if not copy.redacted:
            return 0
        client.send("switchChunk", targetChunkFile=chunk_file, newChunkFile=os.path.basename(temp))
        _crash_point("switch-sent")
        try:
            answer = client.receive()
        except RedactionRefused as exc:
            print(
                f"evdb-redact: the node refused to switch {chunk_file}: {exc} ({exc.code})", file=sys.stderr
            )
            return 1
        _crash_point("switched")
        done = ", ".join(f"{e.event_number}@{e.stream}" for e in copy.redacted)
        _say(f"Redacted {done}: {chunk_file} -> {answer['chunkFile']}")
        return 0
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def _redact_archived(client: RedactionClient, number: int, events: list[dict]) -> int:
    """The archive's copy of chunk ``number`` redacted by the node (evdb/redaction/archived.py)."""
    try:
        answer = client.call("redactArchived", chunkNumber=number, events=events)
    except RedactionRefused as exc:
        print(
            f"evdb-redact: the node refused to redact the archive's chunk {number}: {exc} ({exc.code})",
            file=sys.stderr,
        )
        return 1
    where = f"the archived {answer['object']}"
    for event in answer["already"]:
        _say(f"Event {event} in {where} was redacted already")
    for event in answer["missing"]:
        _say(f"Event {event} is not in {where} (a scavenge removed it)")
    if answer["redacted"]:
        _say(f"Redacted {', '.join(answer['redacted'])}: {where} replaced")
    return 0


def entry_point() -> None:
    sys.exit(main())
