"""The crash matrix: kill -9 the driver at each kill point, restart, check, repeat.

Used by tests/reliability/test_crash_matrix.py (bounded, CI) and bench/soak_crash.py (long).
After every kill the folder is opened again and checked:

- every file verifies: each completed chunk's checksum and the last chunk's records (the database
  opens with verification on), each index table indexmap names (size and checksum) and the
  scavenge database (``PRAGMA quick_check``);
- no acknowledged event is lost: each acknowledged batch is read back whole, at the number it was
  acknowledged with, and no stream has a gap or a duplicate; an unacknowledged batch is all or nothing;
- no removed event reappears: events of deleted streams, and those cut by ``$maxCount``, are never
  read; after the scavenge completes, the hard-deleted streams' events are gone from ``$all`` too;
- a stopped scavenge resumes: the scavenge the kill cut short is recorded as Interrupted, the next
  one says it resumes from the stage it reached and completes with Success;
- a redaction is whole: a redacted event reads fully redacted, an event under redaction reads old
  or redacted, never a mix;
- a backup or restore killed halfway is never taken for a finished one; run again it completes and
  verifies, and the restored database holds every acknowledged event;
- a certificate reload killed halfway (new files read, plan built, switched): the node restarts and a
  fresh handshake, verified against the CA of the generation on disk, shows that generation's
  certificate (the old one or the new one, never a mix); every reload that ran to its end had switched
  the served certificate; no acknowledged event is lost.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from crash_driver import db_options, linked_generation, node_options, paths, presented_fingerprint

from evdb.backup import run_backup, verify_backup
from evdb.backup.layout import COMPLETE_MARKER
from evdb.backup.restore import restore_backup
from evdb.backup.verify import VerifyReport, _verify_index
from evdb.clock import SystemClock
from evdb.database import Database
from evdb.errors import StreamDeleted, StreamNotFound
from evdb.scavenge import state as scavenge_state

DRIVER = Path(__file__).with_name("crash_driver.py")

#: mode -> kill points: (point pattern, largest nth, delay after the point in seconds)
POINTS: dict[str, list[tuple[str, int, float]]] = {
    "append": [("ack", 40, 0.02), ("chunk-complete-before", 2, 0.0), ("chunk-complete-after", 2, 0.0)],
    "index": [
        ("index-dump-table-written", 4, 0.0),
        ("index-dump-indexmap-written", 4, 0.0),
        ("index-merge-table-written", 2, 0.0),
        ("index-merge-indexmap-written", 2, 0.0),
    ],
    "scavenge": [
        ("stage:Accumulating", 1, 0.03),
        ("stage:Calculating", 1, 0.03),
        ("stage:ExecutingChunks", 1, 0.05),
        ("stage:MergingChunks", 1, 0.05),
        ("stage:ExecutingIndex", 1, 0.03),
        ("stage:Cleaning", 1, 0.0),
        ("switch-before-rename@ExecutingChunks", 2, 0.0),
        ("switch-renamed@ExecutingChunks", 2, 0.0),
        ("switch-before-rename@MergingChunks", 1, 0.0),
        ("switch-renamed@MergingChunks", 1, 0.0),
        ("index-scavenge-table-written", 1, 0.0),
        ("index-scavenge-indexmap-written", 1, 0.0),
    ],
    "redact": [
        ("redact-locked", 3, 0.0),
        ("redact-copied", 3, 0.0),
        ("redact-redacted", 3, 0.0),
        ("switch-before-rename@redaction", 3, 0.0),
        ("switch-renamed@redaction", 3, 0.0),
        ("redact-switched", 3, 0.0),
    ],
    "backup": [
        ("backup-full-*", 3, 0.0),
        ("backup-index-*", 6, 0.0),
        ("backup-log-*", 5, 0.0),
        ("backup-backup-0", 2, 0.0),  # prepare, finish (manifest and marker)
        ("backup-copy", 10, 0.005),
        ("backup-rename", 10, 0.0),
        ("ack", 30, 0.02),
    ],
    "restore": [("restore-restore-*", 3, 0.0), ("restore-copy", 6, 0.0)],
    "reload": [
        ("reload-linked", 3, 0.0),  # new files on disk (one symlink switch), no reload yet
        ("reload-files-read", 3, 0.0),  # certificate, key and roots read and checked; not switched
        ("reload-prepared", 3, 0.0),  # the whole plan built (ssl contexts too); not switched
        ("reload-switched", 3, 0.0),  # switched: new connections get the new certificate
        ("reload-switched", 2, 0.03),  # ... and a moment later
        ("ack", 40, 0.02),  # mid-append while reloads go on
    ],
}
RUN_TIMEOUT = 12.0  # a run whose point never comes is killed from outside at this age


@dataclass
class Kill:
    mode: str
    point: str  # where it died: the point named, or "outside" when the parent killed it
    seconds: float


@dataclass
class Facts:
    """What the side file says happened, over every run in one folder."""

    sent: dict[str, dict] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    doomed: dict[str, dict] = field(default_factory=dict)  # stream -> {kind, removed, kept}
    hard: set[str] = field(default_factory=set)  # hard-deleted before a completed setup
    redacting: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (stream, number)
    redacted: set[tuple[str, int]] = field(default_factory=set)
    killing: list[str] = field(default_factory=list)
    certs: dict[int, str] = field(default_factory=dict)  # generation -> node certificate fingerprint
    linked: list[int] = field(default_factory=list)
    reloaded: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    last_run_reloads: int = 0  # reloads that ran to their end in the last run

    @classmethod
    def read(cls, path: str) -> Facts:
        f = cls()
        if not os.path.exists(path):
            return f
        with open(path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    continue  # a line cut by the kill: not fsynced, so nothing was acknowledged after it
                line = json.loads(raw)
                if "send" in line:
                    f.sent[line["send"]] = line
                elif "ack" in line:
                    f.acked[line["ack"]] = line["first"]
                elif "doomed" in line:
                    f.doomed[line["doomed"]] = line
                elif "setup" in line:
                    f.hard.update(line["hard"])
                elif "redact" in line:
                    f.redacting[line["id"]] = (line["redact"], line["number"])
                elif "redacted" in line:
                    f.redacted.add((line["redacted"], line["number"]))
                elif "killing" in line:
                    f.killing.append(line["killing"])
                elif "cert" in line:
                    f.certs[line["cert"]] = line["fingerprint"]
                elif "linked" in line:
                    f.linked.append(line["linked"])
                elif "reloaded" in line:
                    f.reloaded.append(line["reloaded"])
                    f.last_run_reloads += 1
                elif "started" in line:
                    f.last_run_reloads = 0
                elif "problem" in line:
                    f.problems.append(line["problem"])
        return f


class CheckFailed(AssertionError):
    pass


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def verify_files(db_dir: str, index_dir: str) -> VerifyReport:
    """Index tables and the scavenge database (the chunks are verified when the database opens)."""
    report = VerifyReport(db_dir)
    if os.path.isdir(index_dir):
        _verify_index(report, index_dir)
    state = os.path.join(index_dir, "scavenging", "scavenging.db")
    if os.path.exists(state):
        with scavenge_state.reading(state) as conn:  # as the node would find it (a hot journal rolled back)
            _require(conn.execute("PRAGMA quick_check").fetchone()[0] == "ok", f"{state} fails quick_check")
    return report


def check_database(db: Database, facts: Facts, where: str) -> dict[str, int]:
    """Acknowledged events all there, nothing half-written, nothing removed visible, redactions whole."""
    by_id: dict[str, tuple[str, int]] = {}
    streams = {s["stream"] for s in facts.sent.values()}
    for stream in sorted(streams):
        try:
            events = db.read_stream_forward(stream, 0, 1_000_000).events
        except StreamNotFound:
            events = []
        numbers = [e.event_number for e in events]
        _require(numbers == list(range(len(numbers))), f"gap or duplicate in {stream} ({where})")
        for e in events:
            _require(str(e.id) not in by_id, f"event {e.id} written twice ({where})")
            by_id[str(e.id)] = (stream, e.event_number)
    for name, batch in facts.sent.items():
        present = [i for i in batch["ids"] if i in by_id]
        if name in facts.acked:
            _require(len(present) == len(batch["ids"]), f"acknowledged batch {name} lost ({where})")
            _require(
                by_id[batch["ids"][0]][1] == facts.acked[name],
                f"acknowledged batch {name} moved ({where})",
            )
        else:
            _require(len(present) in (0, len(batch["ids"])), f"batch {name} half-written ({where})")
    # removed events: never read again, through a stream read
    removed = 0
    for stream, fact in facts.doomed.items():
        try:
            shown = [str(e.id) for e in db.read_stream_forward(stream, 0, 1000).events]
        except (StreamDeleted, StreamNotFound):
            shown = []
        _require(not set(shown) & set(fact["removed"]), f"a removed event of {stream} reappeared ({where})")
        _require(shown == fact["kept"], f"{stream} shows {shown}, expected {fact['kept']} ({where})")
        removed += len(fact["removed"])
    # redactions: the bytes are the old ones or fully redacted, never a mix
    redacted = 0
    for event_id, (stream, number) in facts.redacting.items():
        record = db.read_event(stream, number)
        _require(str(record.id) == event_id, f"{number}@{stream} is another event ({where})")
        if record.is_redacted:
            _require(set(record.data) == {0xFF}, f"{number}@{stream} is partly redacted ({where})")
            redacted += 1
        else:
            _require(record.data.startswith(b"secret"), f"{number}@{stream} is damaged ({where})")
            _require((stream, number) not in facts.redacted, f"{number}@{stream} redaction undone ({where})")
    return {"events": len(by_id), "acked": len(facts.acked), "redacted": redacted, "removed": removed}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def resume_scavenge(db: Database, index_dir: str) -> dict:
    """Mark a cut-short scavenge Interrupted; resume it to completion; the hard-deleted events go."""
    from evdb.scavenge.service import ScavengeRequest, ScavengeService

    logger = logging.getLogger("crash.check.scavenge")
    capture = _Capture()
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    service = ScavengeService(
        db,
        clock=SystemClock(),
        state_path=ScavengeService.state_path_for(index_dir),
        logger=logger,
        merging=True,
    )
    try:
        stage = service.state.checkpoint().get("stage")
        interrupted = service.mark_interrupted()
        resumed = bool(stage and stage != "Done")
        service.start(ScavengeRequest())
        _require(service.wait(60), "the resumed scavenge did not finish in 60 s")
        _require(service.last()[1] == "Success", f"the resumed scavenge ended {service.last()[1]}")
        if resumed:
            _require(
                any(f"from stage {stage}" in m for m in capture.messages),
                f"the scavenge cut short in {stage} did not resume from it: {capture.messages[:5]}",
            )
        if interrupted:
            _require(
                any(f"Scavenge {interrupted} was interrupted" in m for m in capture.messages),
                "the interrupted scavenge was not recorded",
            )
        return {"resumed": int(resumed), "interrupted": int(bool(interrupted)), "stage": stage}
    finally:
        service.close()
        logger.removeHandler(capture)


def check_reload(work: str) -> dict:
    """Restart the TLS node on the folder: it serves the certificate on disk, old or new, whole."""
    import asyncio

    from evdb.node import Node

    p = paths(work)
    facts = Facts.read(p["side"])
    _require(not facts.problems, f"the driver saw: {facts.problems}")
    on_disk = linked_generation(p)
    # the link is switched before `linked` is written: a kill in between leaves the newest generation
    newest = max(facts.certs)
    _require(
        on_disk in (facts.linked[-1], newest), f"certs/current -> gen-{on_disk}, linked {facts.linked[-3:]}"
    )
    ca = os.path.join(p["certs"], f"gen-{on_disk}", "ca", "ca.crt")

    async def restart() -> tuple[str, dict]:
        async with Node(node_options(p), name="crash-check") as node:
            served = await asyncio.to_thread(presented_fingerprint, node.port, ca)
            return served, check_database(node.db, facts, "reload after kill")

    try:
        served, out = asyncio.run(restart())
    except Exception as exc:  # the node did not start, or its certificate does not verify
        raise CheckFailed(f"the node did not come back with gen-{on_disk}'s certificate: {exc!r}") from exc
    _require(
        served == facts.certs[on_disk],
        f"the restarted node presents {served}, not gen-{on_disk}'s {facts.certs[on_disk]}",
    )
    verify_files(p["db"], p["index"])
    return {**out, "reloads": facts.last_run_reloads, "restarts_with_tls": 1}


def check_folder(work: str, mode: str) -> dict:
    if mode == "reload":
        return check_reload(work)
    p = paths(work)
    facts = Facts.read(p["side"])
    verify_files(p["db"], p["index"])
    out: dict = {}
    with Database.open(p["db"], **db_options()) as db:  # verifies every chunk
        out.update(check_database(db, facts, f"{mode} after kill"))
        if mode == "scavenge":
            out.update(resume_scavenge(db, p["index"]))
            ids = {str(e.id) for e in db.iter_all(0)}
            back = ids & facts.hard
            _require(not back, f"{len(back)} hard-deleted events still in $all after the scavenge completed")
            check_database(db, facts, "after the resumed scavenge")
    verify_files(p["db"], p["index"])
    if mode == "backup":
        out.update(check_backup(p, facts))
    return out


def check_backup(p: dict, facts: Facts) -> dict:
    """A cut-short backup is not taken for a finished one; the re-run completes, verifies, restores."""
    complete = os.path.exists(os.path.join(p["backup"], COMPLETE_MARKER))
    if os.path.isdir(p["backup"]):
        report = verify_backup(p["backup"])
        _require(
            report.ok == complete, f"backup marked complete={complete} but verify says {report.problems}"
        )
    run_backup(p["db"], p["index"], p["backup"], differential=complete)
    report = verify_backup(p["backup"])
    _require(report.ok, f"the re-run backup does not verify: {report.problems}")
    restore_backup(p["backup"], p["restored"], overwrite=True)
    with Database.open(p["restored"], **db_options()) as db:
        check_database(db, facts, "restored backup")
    return {"backup_was_complete": int(complete)}


def prepare_restore(work: str, seed: int) -> None:
    """A source with events and a finished backup for the restore kills to restore from."""
    p = paths(work)
    if os.path.exists(os.path.join(p["backup"], COMPLETE_MARKER)):
        return
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), work, "append", str(seed), "--kill-at", "ack", "--kill-nth", "150"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    proc.wait(60)
    run_backup(p["db"], p["index"], p["backup"])


def check_restore(work: str) -> dict:
    p = paths(work)
    facts = Facts.read(p["side"])
    restore_backup(p["backup"], p["restored"], overwrite=True)
    with Database.open(p["restored"], **db_options()) as db:
        out = check_database(db, facts, "restore re-run after kill")
    verify_files(p["restored"], os.path.join(p["restored"], "index"))
    return out


def run_once(work: str, mode: str, seed: int, rng: random.Random) -> Kill:
    pattern, most, delay = rng.choice(POINTS[mode])
    nth = rng.randint(1, most)
    argv = [sys.executable, str(DRIVER), work, mode, str(seed), "--kill-at", pattern, "--kill-nth", str(nth)]
    if delay:
        argv += ["--kill-delay", str(delay)]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT)
        outside = False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)  # the point never came: kill -9 from outside, at this moment
        _, err = proc.communicate()
        outside = True
    if proc.returncode != -signal.SIGKILL:
        raise CheckFailed(f"driver {mode} exited {proc.returncode}, not by SIGKILL:\n{err.decode()[-3000:]}")
    facts = Facts.read(paths(work)["side"])
    point = "outside" if outside or not facts.killing else facts.killing[-1]
    return Kill(mode, point, time.monotonic() - started)


@dataclass
class Summary:
    kills: list[Kill] = field(default_factory=list)
    checks: int = 0
    seconds: float = 0.0
    figures: Counter = field(default_factory=Counter)

    @property
    def points(self) -> set[tuple[str, str]]:
        return {(k.mode, k.point) for k in self.kills}

    def table(self) -> str:
        counts = Counter((k.mode, k.point) for k in self.kills)
        lines = ["| mode | kill point | kills |", "|---|---|---|"]
        lines += [f"| {m} | `{pt}` | {n} |" for (m, pt), n in sorted(counts.items())]
        return "\n".join(lines)


def run_matrix(root: str, *, seconds: float, seed: int, modes=tuple(POINTS), min_rounds: int = 1) -> Summary:
    """Kill each mode in turn until ``seconds`` have passed (at least ``min_rounds`` rounds)."""
    rng = random.Random(seed)
    summary = Summary()
    started = time.monotonic()
    round_ = 0
    while round_ < min_rounds or time.monotonic() - started < seconds:
        for mode in modes:
            work = os.path.join(root, mode)
            os.makedirs(work, exist_ok=True)
            if mode == "restore":
                prepare_restore(work, seed)
            kill = run_once(work, mode, seed * 1000 + len(summary.kills), rng)
            summary.kills.append(kill)
            if mode == "restore":
                summary.figures.update(check_restore(work))
            else:
                summary.figures.update(
                    {k: v for k, v in check_folder(work, mode).items() if isinstance(v, int)}
                )
            summary.checks += 1
        round_ += 1
    summary.seconds = time.monotonic() - started
    return summary
