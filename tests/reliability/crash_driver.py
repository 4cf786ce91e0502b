"""The crash matrix's node process: it writes, scavenges, merges, redacts, backs up or restores, and
is killed with SIGKILL at a chosen point (or at a random moment by the parent).

Usage::

    python crash_driver.py WORK_DIR MODE SEED [--kill-at POINT] [--kill-nth N] [--kill-delay SECONDS]

MODE is ``append``, ``index``, ``scavenge``, ``redact``, ``backup``, ``restore`` or ``reload``
(a real TLS node reloading its certificates again and again while a writer appends). Everything the
parent needs to judge the outcome goes to ``WORK_DIR/side.jsonl``, one JSON object a line, written
and fsynced before the driver goes on: ``send`` (a batch about to be appended), ``ack`` (its
acknowledgement), ``removed`` (ids that must never be read again), ``point`` (a kill point reached)
and ``killing`` (the point at which the driver kills itself). So the side file always holds at
least what the process acknowledged.

A kill point is a named moment in the code (a scavenge stage starting, a chunk renamed into place
but the old one not yet deleted, an index table written but indexmap not yet replaced, ...). With
``--kill-at`` the driver sends itself SIGKILL the ``--kill-nth`` time it reaches that point, at once
(delay 0: inside the window) or a random part of ``--kill-delay`` seconds later (somewhere in the
work that follows). SIGKILL cannot be caught: this is the same death as ``kill -9`` from outside.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import ssl
import sys
import threading
import time
import uuid

from evdb.clock import SystemClock
from evdb.database import Database
from evdb.streams import NewEvent

CHUNK_SIZE = 64 * 1024
MEMTABLE = 24
MODES = ("append", "index", "scavenge", "redact", "backup", "restore", "reload")


def db_options() -> dict:
    return {"chunk_size": CHUNK_SIZE, "existence_filter_capacity": 10_000, "max_memtable_entries": MEMTABLE}


def paths(work: str) -> dict[str, str]:
    return {
        "db": os.path.join(work, "db"),
        "index": os.path.join(work, "db", "index"),
        "side": os.path.join(work, "side.jsonl"),
        "backup": os.path.join(work, "backup"),
        "restored": os.path.join(work, "restored"),
        "setup": os.path.join(work, "setup.done"),
        "log": os.path.join(work, "log"),
        "certs": os.path.join(work, "certs"),
        "current": os.path.join(work, "certs", "current"),  # -> gen-N: one atomic switch of all files
    }


class Side:
    """The side file: one fsynced JSON line per fact (thread-safe)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()

    def write(self, **fact) -> None:
        line = (json.dumps(fact, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)


class Killer:
    """Counts the points reached; kills this process at the chosen one."""

    def __init__(self, side: Side, at: str | None, nth: int, delay: float, rng: random.Random) -> None:
        self.side = side
        self.at = at
        self.nth = nth
        self.delay = delay
        self.rng = rng
        self.hits = 0
        #: what the process is doing (names the chunk-switch points: executing, merging, redaction)
        self.stage = "none"
        self._lock = threading.Lock()

    def point(self, name: str) -> None:
        if self.at is None or not _matches(self.at, name):
            return
        with self._lock:  # counted per pattern: "backup-*" counts every backup point
            self.hits += 1
            count = self.hits
        if count != self.nth:
            return
        if self.delay <= 0:
            self.side.write(killing=name, delay=0)
            os.kill(os.getpid(), signal.SIGKILL)
        wait = self.rng.uniform(0, self.delay)
        self.side.write(killing=name, delay=round(wait, 4))

        def later() -> None:
            time.sleep(wait)  # the random moment after the point: this is the kill timing itself
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=later, daemon=True).start()


def _matches(pattern: str, name: str) -> bool:
    return name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1]))


# -- instrumentation: kill points in the real code paths ---------------------------------------------
_context = threading.local()


def instrument(db: Database, killer: Killer) -> None:
    """Wrap the log's chunk switch and completion, and the index's dump, merge and indexmap writes."""
    from evdb.index import table_index as ti

    log = db.log
    rename = log._rename_into_place
    complete = log.complete_active_chunk

    def rename_into_place(chunk):
        where = killer.stage
        killer.point(f"switch-before-rename@{where}")
        result = rename(chunk)
        killer.point(f"switch-renamed@{where}")  # new chunk durable, old files not yet deleted
        return result

    def complete_active_chunk():
        killer.point("chunk-complete-before")
        complete()
        killer.point("chunk-complete-after")

    log._rename_into_place = rename_into_place
    log.complete_active_chunk = complete_active_chunk

    index = db.index
    dump, merge_level, write_indexmap = index._dump, index._merge_level, index._write_indexmap

    def tagged(fn, tag):
        def run(*a, **kw):
            _context.index = tag
            try:
                return fn(*a, **kw)
            finally:
                _context.index = None

        return run

    def indexmap(*a, **kw):
        tag = getattr(_context, "index", None) or "scavenge"
        killer.point(f"index-{tag}-table-written")  # new PTable durable, indexmap still the old one
        write_indexmap(*a, **kw)
        killer.point(f"index-{tag}-indexmap-written")  # old tables not yet deleted

    index._dump = tagged(dump, "dump")
    index._merge_level = tagged(merge_level, "merge")
    index._write_indexmap = indexmap
    assert ti.TableIndex._write_indexmap is not indexmap


# -- the writer ------------------------------------------------------------------------------------------
class Writer:
    """Appends batches forever on its own thread, recording each in the side file."""

    def __init__(self, db: Database, side: Side, killer: Killer, seed: int, prefix: str = "live") -> None:
        self.db, self.side, self.killer = db, side, killer
        self.rng = random.Random(seed)
        self.seed = seed
        self.prefix = prefix
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True, name="crash-writer")

    def batch(self, n: int) -> None:
        rng = self.rng
        stream = f"{self.prefix}-{rng.randrange(5)}"
        ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(rng.randrange(1, 5))]
        events = [NewEvent("E", rng.randbytes(rng.randrange(10, 700)), event_id=uuid.UUID(i)) for i in ids]
        name = f"{self.seed}-{n}"
        self.side.write(send=name, stream=stream, ids=ids)
        result = self.db.append(stream, events)
        self.side.write(ack=name, first=result.first_event_number)
        self.killer.point("ack")

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            self.batch(n)
            n += 1


# -- modes -----------------------------------------------------------------------------------------------
def setup_doomed(db: Database, side: Side, rng: random.Random) -> None:
    """Streams whose events must never be read again: hard-deleted, soft-deleted and truncated by
    $maxCount; the chunk holding them is completed so a scavenge can remove them for good."""
    nonce = rng.getrandbits(32)  # a setup cut short by a kill is done again under new names
    hard = []
    for k in range(3):
        for kind in ("hard", "soft", "trunc"):
            stream = f"doomed-{kind}-{k}-{nonce}"
            ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(12)]
            events = [NewEvent("D", rng.randbytes(400), event_id=uuid.UUID(i)) for i in ids]
            db.append(stream, events)
            if kind == "hard":
                db.delete_stream(stream, hard=True)
                hard += ids
                side.write(doomed=stream, kind=kind, removed=ids, kept=[])
            elif kind == "soft":
                db.delete_stream(stream)
                side.write(doomed=stream, kind=kind, removed=ids, kept=[])
            else:
                db.set_stream_metadata(stream, {"$maxCount": 3})
                side.write(doomed=stream, kind=kind, removed=ids[:-3], kept=ids[-3:])
    db.call_in_writer(lambda ctx: ctx.complete_active_chunk())
    side.write(setup="done", hard=hard)


def scavenge_service(db: Database, index_dir: str, logger: logging.Logger):
    from evdb.scavenge.service import ScavengeService

    return ScavengeService(
        db,
        clock=SystemClock(),
        state_path=ScavengeService.state_path_for(index_dir),
        logger=logger,
        merging=True,
    )


def run_scavenge(db: Database, p: dict, side: Side, killer: Killer, seed: int) -> None:
    from evdb.scavenge.service import ScavengeRequest

    rng = random.Random(f"{seed}-maintenance")  # not the writer's sequence: no shared event ids
    if not os.path.exists(p["setup"]):
        setup_doomed(db, side, rng)
        with open(p["setup"], "w") as f:
            f.write("done")
            f.flush()
            os.fsync(f.fileno())
    writer = Writer(db, side, killer, seed)
    writer.thread.start()
    service = scavenge_service(db, p["index"], logging.getLogger("crash.scavenge"))
    service.mark_interrupted()

    def stage(name: str) -> None:
        killer.stage = name
        killer.point(f"stage:{name}")

    service.stage_hook = stage
    for _ in range(50):  # scavenge again and again until killed
        # keep some chunks worth scavenging: more doomed events each round
        extra = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(6)]
        stream = f"doomed-round-{rng.getrandbits(32)}"
        db.append(stream, [NewEvent("D", rng.randbytes(300), event_id=uuid.UUID(i)) for i in extra])
        db.delete_stream(stream, hard=True)
        side.write(doomed=stream, kind="hard", removed=extra, kept=[])
        service.start(ScavengeRequest(threads=rng.choice((1, 2))))
        service.wait(60)
        killer.point("scavenge-done")


def run_redact(p: dict, side: Side, killer: Killer, seed: int) -> None:
    """A real node redacts through its own unix-socket service (tests/crash/socket_redaction.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "crash"))
    from socket_redaction import run_socket_redactions

    run_socket_redactions(
        p, side, killer, seed, chunk_size=CHUNK_SIZE, memtable=MEMTABLE, instrument=instrument, writer=Writer
    )


def patch_copies(killer: Killer, prefix: str, modules) -> None:
    """Kill points in the backup's file copies: ``<prefix>-copy`` as a file starts to be copied,
    ``<prefix>-rename`` as a copied, fsynced temporary file is renamed to its final name."""
    from evdb.backup import copying

    for attr, name in (("copy_file", "copy"), ("_copy_to_temp", "copy"), ("_sync_and_rename", "rename")):
        original = getattr(copying, attr, None)
        if original is None:
            continue

        def run(*a, _fn=original, _name=f"{prefix}-{name}", **kw):
            killer.point(_name)
            return _fn(*a, **kw)

        for module in modules:
            if getattr(module, attr, None) is original:
                setattr(module, attr, run)


def run_backup(db: Database, p: dict, side: Side, killer: Killer, seed: int) -> None:
    from evdb.backup import run_backup as backup
    from evdb.backup.progress import Progress

    class Points(Progress):
        def begin_step(self, part, number, name, files=0, size=0):
            killer.point(f"backup-{part}-{number}")
            return super().begin_step(part, number, name, files, size)

    from evdb.backup import copying, procedures

    # file copies: each through a temporary file, renamed into place once fsynced
    patch_copies(killer, "backup", (copying, procedures))
    writer = Writer(db, side, killer, seed)
    writer.thread.start()
    for round_ in range(50):
        differential = os.path.exists(os.path.join(p["backup"], "BACKUP-COMPLETE"))
        backup(
            p["db"],
            p["index"],
            p["backup"],
            differential=differential and round_ % 2 == 1,
            progress=Points("backup", logging.getLogger("crash.backup")),
        )
        killer.point("backup-done")


def run_restore(p: dict, killer: Killer) -> None:
    from evdb.backup.progress import Progress
    from evdb.backup.restore import restore_backup

    class Points(Progress):
        def begin_step(self, part, number, name, files=0, size=0):
            killer.point(f"restore-{part}-{number}")
            return super().begin_step(part, number, name, files, size)

    import evdb.backup.restore as restore_module
    from evdb.backup import copying

    patch_copies(killer, "restore", (copying, restore_module))
    restore_backup(
        p["backup"],
        p["restored"],
        overwrite=True,
        progress=Points("restore", logging.getLogger("crash.restore")),
    )
    killer.point("restore-done")
    # the restore finished before its kill point came: die the same way, after it
    killer.side.write(killing="after-restore", delay=0)
    os.kill(os.getpid(), signal.SIGKILL)


# -- certificate reload ----------------------------------------------------------------------------------
def make_generation(p: dict, n: int) -> str:
    """``certs/gen-N/``: a new CA (its certificate alone in ``ca/``, the trusted roots) and a node
    certificate it signed; returns the node certificate's SHA-256 fingerprint (hex)."""
    from evdb.tls.certs import create_ca, create_node_certificate

    base = os.path.join(p["certs"], f"gen-{n}")
    if os.path.isdir(base):  # made by a run cut short before it was linked: made again
        import shutil

        shutil.rmtree(base)
    ca_cert, ca_key = create_ca(os.path.join(base, "ca-private"), common_name=f"crash CA gen {n}")
    os.makedirs(os.path.join(base, "ca"))
    with open(ca_cert, "rb") as src, open(os.path.join(base, "ca", "ca.crt"), "wb") as dst:
        dst.write(src.read())
    cert, _ = create_node_certificate(ca_cert, ca_key, base)
    return certificate_fingerprint(cert)


def certificate_fingerprint(cert_path) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    with open(cert_path, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())[0].fingerprint(hashes.SHA256()).hex()


def linked_generation(p: dict) -> int:
    """The generation ``certs/current`` points to (the files a starting node reads)."""
    return int(os.readlink(p["current"]).rsplit("-", 1)[1])


def node_options(p: dict):
    """A TLS node reading its certificate, key and trusted roots through ``certs/current``."""
    from evdb.options import load_options

    current = p["current"]
    return load_options(
        [
            "--db", p["db"], "--log", p["log"], "--http-port", "0", "--replication-port", "0",
            "--chunk-size", str(CHUNK_SIZE), "--max-mem-table-size", str(MEMTABLE), "--stats-period-sec", "0",
            "--certificate-file", os.path.join(current, "node.crt"),
            "--certificate-private-key-file", os.path.join(current, "node.key"),
            "--trusted-root-certificates-path", os.path.join(current, "ca"),
        ],
        _node_environment(),
    )  # fmt: skip


def _node_environment() -> dict[str, str]:
    """The environment the node's options are read from, at start as at each reload (a reload reads
    the process's environment again): only the suite's password hash cost (tests/conftest.py) passes."""
    from evdb.options.spec import env_name

    name = env_name("PasswordHashCost")
    return {name: os.environ[name]} if name in os.environ else {}


def presented_fingerprint(port: int, ca_file: str) -> str:
    """A fresh handshake with the node, verified against ``ca_file``: the certificate it presents."""
    import hashlib
    import socket

    context = ssl.create_default_context(cafile=ca_file)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def instrument_reload(reloader, killer: Killer) -> None:
    """Kill points around the reload's two steps (evdb/tls/reload.py): the new files read (certificate,
    key, trusted roots checked), the whole plan built (ssl contexts too) but nothing switched yet, and
    everything switched."""
    import evdb.tls.reload as reload_module

    load = reload_module.load_node_tls

    def load_node_tls(*a, **kw):
        tls = load(*a, **kw)
        killer.point("reload-files-read")
        return tls

    reload_module.load_node_tls = load_node_tls
    prepare, apply = reloader._prepare, reloader._apply

    def _prepare():
        plan = prepare()
        killer.point("reload-prepared")
        return plan

    def _apply(plan, label):
        record = apply(plan, label)
        killer.point("reload-switched")
        return record

    reloader._prepare = _prepare
    reloader._apply = _apply


def run_reload(p: dict, side: Side, killer: Killer, seed: int) -> None:
    """A real TLS node; a writer appends through it while the certificate files are switched to a new
    generation (new CA, new node certificate: one atomic symlink switch) and the node reloads."""
    import asyncio

    from evdb.node import Node
    from evdb.tls.certs import repoint_link

    os.makedirs(p["certs"], exist_ok=True)
    if not os.path.islink(p["current"]):
        side.write(cert=1, fingerprint=make_generation(p, 1))
        repoint_link(p["current"], "gen-1")
        side.write(linked=1)

    async def run() -> None:
        async with Node(node_options(p), name="crash-reload") as node:
            generation = linked_generation(p)
            ca = os.path.join(p["certs"], f"gen-{generation}", "ca", "ca.crt")
            served = await asyncio.to_thread(presented_fingerprint, node.port, ca)
            side.write(served=generation, fingerprint=served, at="start")
            instrument_reload(node.reloader, killer)
            writer = Writer(node.db, side, killer, seed)
            writer.thread.start()
            for _ in range(50):
                n = (
                    max(int(name.split("-")[1]) for name in os.listdir(p["certs"]) if name.startswith("gen-"))
                    + 1
                )
                fingerprint = await asyncio.to_thread(make_generation, p, n)
                side.write(cert=n, fingerprint=fingerprint)
                repoint_link(p["current"], f"gen-{n}")  # the files on disk: all new, in one step
                side.write(linked=n)
                killer.point("reload-linked")
                record = await node.reloader.reload("SIGHUP")
                if not record.succeeded:
                    side.write(problem=f"reload of gen-{n} failed: {record.error}")
                    continue
                side.write(reloaded=n)
                ca = os.path.join(p["certs"], f"gen-{n}", "ca", "ca.crt")
                try:
                    served = await asyncio.to_thread(presented_fingerprint, node.port, ca)
                except ssl.SSLError as exc:
                    served = f"no certificate of gen-{n} ({exc})"
                side.write(served=n, fingerprint=served, at="reload")
                if served != fingerprint:
                    side.write(problem=f"after the reload of gen-{n} the node presents {served}")
                killer.point("reload-done")

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("seed", type=int)
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--kill-nth", type=int, default=1)
    parser.add_argument("--kill-delay", type=float, default=0.0)
    args = parser.parse_args()
    p = paths(args.work)
    os.makedirs(args.work, exist_ok=True)
    side = Side(p["side"])
    rng = random.Random(args.seed * 7919)
    killer = Killer(side, args.kill_at, args.kill_nth, args.kill_delay, rng)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.mode == "restore":
        run_restore(p, killer)
        return
    if args.mode in ("reload", "redact"):  # a real node in this process
        side.write(started=args.mode, seed=args.seed)
        (run_reload if args.mode == "reload" else run_redact)(p, side, killer, args.seed)
        side.write(finished=args.mode)
        os._exit(3)
    db = Database.open(p["db"], **db_options())
    instrument(db, killer)
    side.write(started=args.mode, seed=args.seed)
    if args.mode in ("append", "index"):
        writer = Writer(db, side, killer, args.seed)
        if args.mode == "index":
            # a second writer on other streams: more memtable dumps and level merges per second
            other = Writer(db, side, killer, args.seed + 10_000_000, prefix="idx")
            other.thread.start()
        writer.run()
    elif args.mode == "scavenge":
        run_scavenge(db, p, side, killer, args.seed)
    elif args.mode == "backup":
        run_backup(db, p, side, killer, args.seed)
    # a run that reached the end without being killed: the parent counts this as "not killed"
    side.write(finished=args.mode)
    os._exit(3)


if __name__ == "__main__":
    main()
