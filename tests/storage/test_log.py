from __future__ import annotations

import os

import pytest

from evdb.errors import CorruptedFile
from evdb.storage import records as rec
from evdb.storage.chunk import chunk_file_name
from evdb.storage.log import TransactionLog

CHUNK = 16 * 1024


def write_events(
    log: TransactionLog, count: int, start_number: int = 0, data: bytes = b"d" * 100
) -> list[int]:
    positions = []
    size = rec.event_frame_size(1, 1, len(data), 0)
    for i in range(count):
        log.ensure_space(size)
        position = log.end
        f = rec.encode_event(
            log_position=position,
            event_number=start_number + i,
            stream="s",
            event_type="t",
            event_id=os.urandom(16),
            timestamp=0,
            flags=0,
            data=data,
            metadata=b"",
        )
        assert log.write(f) == position
        positions.append(position)
    log.flush()
    return positions


def numbers(records) -> list[int]:
    return [r.event_number for r in records]


@pytest.mark.parametrize("in_memory", [False, True])
def test_write_read_across_chunks(tmp_path, in_memory):
    log = TransactionLog.open(None if in_memory else str(tmp_path), chunk_size=CHUNK)
    positions = write_events(log, 400)
    assert len(log.distinct_chunks()) > 2
    assert numbers(log.iter_forward(0)) == list(range(400))
    assert numbers(log.iter_backward(log.committed)) == list(reversed(range(400)))
    for i in (0, 1, 150, 399):
        assert log.read_record(positions[i]).event_number == i
    # starting mid-way, forward includes the record at the position, backward excludes it
    assert numbers(log.iter_forward(positions[200]))[0] == 200
    assert numbers(log.iter_backward(positions[200]))[0] == 199
    assert not log.is_record_boundary(positions[5] + 1)
    assert log.is_record_boundary(positions[5])
    log.close()


def test_reopen_keeps_everything(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 300)
    committed = log.committed
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert log.committed == committed
    assert numbers(log.iter_forward(0)) == list(range(300))
    write_events(log, 10, start_number=300)
    assert numbers(log.iter_forward(0))[-1] == 309
    log.close()


def test_unflushed_tail_is_ignored_after_crash(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 5)
    committed = log.committed
    # written but never flushed/acknowledged: the writer checkpoint does not cover it
    f = rec.encode_event(
        log_position=log.end,
        event_number=5,
        stream="s",
        event_type="t",
        event_id=os.urandom(16),
        timestamp=0,
        flags=0,
        data=b"x",
        metadata=b"",
    )
    log.write(f)
    log.active_chunk.close()  # simulate a crash: no flush, no checkpoint
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert log.committed == committed
    assert numbers(log.iter_forward(0)) == list(range(5))
    log.close()


def test_crash_after_completion_before_writer_moved(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 3)
    end_of_data = log.committed
    log.active_chunk.complete()  # completed, but writer.chk still says end_of_data
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert log.committed == CHUNK  # moved to the start of the next chunk
    assert log.checkpoints.writer.value == CHUNK
    assert numbers(log.iter_forward(0)) == [0, 1, 2]
    assert end_of_data < CHUNK
    log.close()


def test_truncate_at_start(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    positions = write_events(log, 400)
    log.checkpoints.truncate.write(positions[123])
    log.checkpoints.chaser.write(log.committed)
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert log.checkpoints.truncate.value == -1
    assert log.committed == positions[123]
    assert log.checkpoints.chaser.value == positions[123]
    assert numbers(log.iter_forward(0)) == list(range(123))
    write_events(log, 2, start_number=123)
    assert numbers(log.iter_forward(0)) == list(range(125))
    log.close()
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("chunk-"))
    assert len({n[:12] for n in names}) == len(names)  # one version per chunk number


def test_switch_chunk_keeps_logical_positions(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    positions = write_events(log, 400)
    first, second = log.distinct_chunks()[:2]
    builder = log.new_chunk_builder(first.start_number, second.end_number)
    kept = []
    for chunk in (first, second):
        offset = 0
        while offset < chunk.physical_end:
            record, nxt = chunk.read_at(offset)
            if record.event_number % 2 == 0:
                builder.add(chunk.raw_frame(offset), record.log_position)
                kept.append(record.event_number)
            offset = nxt
    merged = builder.finish()
    old = log.switch_chunk(merged)
    assert old == [first, second]
    assert os.path.basename(merged.path) == chunk_file_name(0, 1)
    assert not os.path.exists(first.path) and not os.path.exists(second.path)
    for n in kept:
        assert log.read_record(positions[n]).event_number == n
    assert log.read_record(positions[1]) is None
    all_numbers = numbers(log.iter_forward(0))
    assert all_numbers[: len(kept)] == kept
    assert numbers(log.iter_backward(log.committed))[-len(kept) :] == list(reversed(kept))
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert numbers(log.iter_forward(0)) == all_numbers
    log.close()


def test_crash_during_switch_keeps_newer_version(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 400)
    first = log.distinct_chunks()[0]
    builder = log.new_chunk_builder(0, 0)
    offset = 0
    while offset < first.physical_end:
        record, nxt = first.read_at(offset)
        if record.event_number != 0:
            builder.add(first.raw_frame(offset), record.log_position)
        offset = nxt
    new = builder.finish()
    os.rename(new.path, os.path.join(str(tmp_path), chunk_file_name(0, 1)))  # renamed, old not yet deleted
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert not os.path.exists(first.path)
    assert numbers(log.iter_forward(0))[0] == 1
    log.close()


def test_missing_chunk_is_reported(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 400)
    victim = log.distinct_chunks()[1].path
    log.close()
    os.unlink(victim)
    with pytest.raises(CorruptedFile) as err:
        TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert "chunk 1 is missing" in str(err.value)


def test_leftover_temp_files_are_removed(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    log.close()
    (tmp_path / "abc.scavenge.tmp").write_bytes(b"junk")
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert not (tmp_path / "abc.scavenge.tmp").exists()
    log.close()


def test_wrong_chunk_size_is_refused(tmp_path):
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    log.close()
    with pytest.raises(CorruptedFile, match="ChunkSize"):
        TransactionLog.open(str(tmp_path), chunk_size=CHUNK * 2)


def _frame_at(log: TransactionLog, number: int, flags: int) -> bytes:
    return rec.encode_event(
        log_position=log.end,
        event_number=number,
        stream="s",
        event_type="t",
        event_id=os.urandom(16),
        timestamp=0,
        flags=flags,
        data=b"x" * 10,
        metadata=b"",
    )


def test_durable_appends_after_a_stale_writer_checkpoint_are_recovered(tmp_path):
    begin, end = rec.RecordFlags.TRANSACTION_BEGIN, rec.RecordFlags.TRANSACTION_END
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    write_events(log, 2)
    stale = log.committed
    log.checkpoints.writer.flush()
    # a whole append (begin..end), fsynced, acknowledged; the checkpoint was not synced after it
    log.write(_frame_at(log, 2, begin))
    log.write(_frame_at(log, 3, end))
    whole = log.end
    # then a torn append: its begin record reached the disk, its end record did not
    log.write(_frame_at(log, 4, begin))
    log.active_chunk.flush()
    log.checkpoints.writer.write(stale)
    log.active_chunk.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert log.committed == whole
    assert numbers(log.iter_forward(0)) == [0, 1, 2, 3]
    log.close()


def test_truncated_tail_is_never_revived(tmp_path):
    flags = rec.RecordFlags.TRANSACTION_BEGIN | rec.RecordFlags.TRANSACTION_END
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    positions = []
    for i in range(5):
        positions.append(log.end)
        log.write(_frame_at(log, i, flags))
    log.flush()
    log.checkpoints.truncate.write(positions[2])
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)
    assert numbers(log.iter_forward(0)) == [0, 1]
    log.close()
    log = TransactionLog.open(str(tmp_path), chunk_size=CHUNK)  # and again: still cut
    assert numbers(log.iter_forward(0)) == [0, 1]
    log.close()
