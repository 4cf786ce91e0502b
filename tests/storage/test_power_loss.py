"""Power loss, not just kill -9: what the database acknowledged survives when only synced data does.

Each seed runs the real :class:`~evdb.database.Database` on a folder with the disk model installed
(:mod:`evdb.storage.disk_model`): two threads append batches to their own streams (small chunks, so
chunks are completed and created often; a small memtable, so index tables are written), the power is
cut at a random disk call (or after the last acknowledgement), the model decides what the disk kept,
and the folder is opened again on the real disk. Then:

- the database opens: every chunk verifies, the checkpoints and the index open;
- every acknowledged append is read back, whole, at its place;
- each stream holds whole appends in the order they were made and nothing else (an append that was
  not acknowledged may be there or not, but never in part);
- the database takes a new append.

``test_the_check_catches_a_missing_sync`` runs the same with the fdatasync that precedes every
acknowledgement removed, and shows that the check then fails.

``test_a_power_cut_at_every_disk_call_of_the_log`` is exhaustive where the database test is random:
one writer appends to the transaction log itself (no threads, so the disk calls come in the same
order every run), and the power is cut at each of its calls in turn, with three outcomes of the power
loss for each.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from evdb.database import Database
from evdb.errors import CorruptedFile, EvdbError, StreamNotFound
from evdb.storage import records as rec
from evdb.storage.chunk import Chunk
from evdb.storage.disk import use_disk
from evdb.storage.disk_model import DiskModel
from evdb.storage.log import TransactionLog
from evdb.streams import NewEvent

OPTS = {"chunk_size": 4096, "max_memtable_entries": 16, "existence_filter_capacity": 1000}
SEEDS = 150
WRITERS = 2


@dataclass
class Outcome:
    violations: list[str] = field(default_factory=list)
    acknowledged: int = 0
    cut_by_model: bool = False
    report: str = ""


def _plan(rng: random.Random, writer: int) -> list[tuple[str, list[bytes]]]:
    """(stream, event datas) of each append one writer makes, in order."""
    plan = []
    for k in range(rng.randint(5, 30)):
        stream = f"w{writer}-s{rng.randrange(3)}"
        datas = [
            f"{stream}/{k}/{i}/".encode() + rng.randbytes(rng.choice((8, 60, 300, 900)))
            for i in range(rng.randint(1, 3))
        ]
        plan.append((stream, datas))
    return plan


def run_power_loss(root: Path, seed: int) -> Outcome:
    rng = random.Random(seed)
    db_dir = str(root / f"db-{seed}")
    model = DiskModel(str(root / f"scratch-{seed}"))
    plans = [_plan(rng, w) for w in range(WRITERS)]
    written: dict[str, list[list[bytes]]] = {}  # stream -> each append tried, in order
    acknowledged: dict[str, int] = {}  # stream -> how many of them were acknowledged (a prefix)
    for plan in plans:
        for stream, _ in plan:
            written[stream], acknowledged[stream] = [], 0
    outcome = Outcome()

    def writer(plan: list[tuple[str, list[bytes]]]) -> None:
        for stream, datas in plan:
            written[stream].append(datas)
            try:
                db.append(stream, [NewEvent("E", d) for d in datas])
            except (OSError, EvdbError):
                return  # the power went (an I/O error, or the database refuses writes after one)
            acknowledged[stream] += 1

    with use_disk(model):
        db = Database.open(db_dir, **OPTS)
        try:
            model.cut_after(rng.randint(1, 300))
            threads = [threading.Thread(target=writer, args=(p,)) for p in plans]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
                assert not t.is_alive(), "a writer is stuck"
            outcome.cut_by_model = model.state == "cut"
            model.cut()  # if the cut did not come yet: the power goes after the last acknowledgement
            outcome.report = model.power_loss(random.Random(seed)).summary()
        finally:
            db.close()  # the disk is off: closing changes nothing on it
    outcome.acknowledged = sum(acknowledged.values())
    outcome.violations = _check(db_dir, written, acknowledged)
    return outcome


def _check(db_dir: str, written: dict[str, list[list[bytes]]], acknowledged: dict[str, int]) -> list[str]:
    try:
        db = Database.open(db_dir, **OPTS)
    except EvdbError as exc:
        return [f"the database does not open after the power loss: {exc}"]
    violations = []
    try:
        total = 0
        for stream, appends in written.items():
            try:
                got = [bytes(e.data) for e in db.read_stream_forward(stream, 0, 10_000).events]
            except StreamNotFound:
                got = []
            at = whole = 0
            for datas in appends:
                if got[at : at + len(datas)] != datas:
                    break
                at += len(datas)
                whole += 1
            total += len(got)
            if at != len(got):
                violations.append(f"{stream}: event {at} is not part of a whole append in order")
            if whole < acknowledged[stream]:
                violations.append(f"{stream}: {acknowledged[stream]} appends acknowledged, {whole} survived")
        in_all = sum(1 for r in db.iter_all(0) if r.stream in written)
        if in_all != total:
            violations.append(f"$all holds {in_all} of the streams' events, the streams {total}")
        db.append("after-the-power-loss", [NewEvent("E", b"ok")])
        db.index.wait_idle()
    except EvdbError as exc:
        violations.append(f"reading after the power loss failed: {exc}")
    finally:
        db.close()
    return violations


def test_acknowledged_appends_survive_a_power_loss(tmp_path):
    failures = []
    cuts = acknowledged = 0
    for seed in range(SEEDS):
        outcome = run_power_loss(tmp_path, seed)
        cuts += outcome.cut_by_model
        acknowledged += outcome.acknowledged
        if outcome.violations:
            failures.append(f"seed {seed}: {outcome.violations}\n{outcome.report}")
    assert not failures, "\n".join(failures[:3])
    # the seeds cover both kinds of cut, and real work
    assert SEEDS // 4 < cuts < SEEDS, cuts
    assert acknowledged > SEEDS * 5, acknowledged


def test_the_check_catches_a_missing_sync(tmp_path, monkeypatch):
    """Without the fdatasync before each acknowledgement, acknowledged appends are lost (or the log no
    longer opens) for some seed: the model and the check above can see a missing sync."""
    monkeypatch.setattr(Chunk, "flush", lambda self: None)
    caught = []
    for seed in range(SEEDS):
        outcome = run_power_loss(tmp_path, seed)
        if outcome.violations:
            caught.append((seed, outcome.violations))
            if len(caught) >= 3:
                break
    assert caught, "no seed detected the missing fdatasync"
    assert any("acknowledged" in v or "does not open" in v for _, vs in caught for v in vs), caught


def _log_run(root: Path, cut: int | None, seed: int) -> tuple[int, str | None]:
    """Append to a bare log until the cut; returns the disk calls made and the violation, if any."""
    name = f"{cut}-{seed}"
    model = DiskModel(str(root / f"scratch-{name}"))
    acknowledged = []
    flags = rec.RecordFlags.TRANSACTION_BEGIN | rec.RecordFlags.TRANSACTION_END

    def frame(position: int, n: int) -> bytes:
        return rec.encode_event(
            log_position=position, event_number=n, stream="s", event_type="t",
            event_id=n.to_bytes(16, "big"), timestamp=0, flags=flags, data=bytes([n]) * 700, metadata=b"",
        )  # fmt: skip

    with use_disk(model):
        log = TransactionLog.open(str(root / name), chunk_size=OPTS["chunk_size"])
        if cut is not None:
            model.cut_after(cut)
        try:
            for n in range(14):  # about three chunks
                log.ensure_space(len(frame(0, n)))
                log.write(frame(log.end, n))
                log.flush()  # what the database does before it acknowledges
                acknowledged.append(n)
        except OSError:
            pass
        model.cut()
        model.power_loss(random.Random(seed))
        log.close()
    try:
        log = TransactionLog.open(str(root / name), chunk_size=OPTS["chunk_size"])
    except CorruptedFile as exc:
        return model.calls, f"the log does not open: {exc}"
    try:
        got = [r.event_number for r in log.iter_forward(0)]
    finally:
        log.close()
    if got != list(range(len(got))) or len(got) < len(acknowledged):
        return model.calls, f"read {got}, acknowledged {acknowledged}"
    return model.calls, None


def test_a_power_cut_at_every_disk_call_of_the_log(tmp_path):
    calls, violation = _log_run(tmp_path, None, 0)
    assert violation is None
    assert calls > 60, calls
    failures = []
    for cut in range(1, calls + 1):
        for seed in range(3):
            _, violation = _log_run(tmp_path, cut, seed)
            if violation:
                failures.append(f"cut at disk call {cut}, seed {seed}: {violation}")
    assert not failures, "\n".join(failures)
