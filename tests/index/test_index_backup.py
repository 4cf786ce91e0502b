"""The spec's differential backup, index part, run against a live index that dumps and merges.

The procedure copies ``indexmap``, then every ``<GUID>`` and ``<GUID>.bloomfilter`` not yet in
the backup, and starts again if ``indexmap`` changed meanwhile. It is only right if tables never
change once visible, and indexmap never names a table that is not whole: each backup taken must
open, and hold exactly the entries before its checkpoint.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from evdb.index.ptable import TABLE_NAME
from evdb.index.table_index import TableIndex


def index_file(name: str) -> bool:
    return bool(TABLE_NAME.fullmatch(name.removesuffix(".bloomfilter")))


def differential_backup(source: Path, backup: Path) -> int:
    """Steps 2 to 6 of "Differential backup, index part"; returns how many rounds it took."""
    rounds = 0
    while True:
        rounds += 1
        try:
            indexmap = (source / "indexmap").read_bytes()  # step 2
        except FileNotFoundError:
            continue
        (backup / "indexmap").write_bytes(indexmap)
        index_files = [n for n in os.listdir(source) if index_file(n)]  # step 3
        for name in index_files:  # step 4
            if not (backup / name).exists():
                try:
                    shutil.copyfile(source / name, backup / name)
                except FileNotFoundError:
                    pass  # merged away meanwhile: indexmap has changed, step 5 goes round again
        try:
            if (source / "indexmap").read_bytes() != indexmap:  # step 5
                continue
        except FileNotFoundError:
            continue
        for name in os.listdir(backup):  # step 6
            if index_file(name) and name not in index_files:
                os.unlink(backup / name)
        return rounds


def test_backups_taken_during_dumps_and_merges_restore_consistently(tmp_path):
    source = tmp_path / "index"
    index = TableIndex.open(str(source), max_memtable_entries=5)
    done = threading.Event()

    def writer() -> None:
        for i in range(800):
            index.add([(i % 4, i // 4, i * 10)], i * 10 + 10)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    backups = 0
    rounds: list[int] = []
    while not done.is_set() or backups < 3:
        backup = tmp_path / f"backup-{backups % 2}"  # differential: the same folder is updated again
        backup.mkdir(exist_ok=True)
        rounds.append(differential_backup(source, backup))
        backups += 1
        restored_dir = tmp_path / "restored"
        shutil.rmtree(restored_dir, ignore_errors=True)
        shutil.copytree(backup, restored_dir)
        restored = TableIndex.open(str(restored_dir), max_memtable_entries=5)  # verifies every checksum
        checkpoint = restored.checkpoint
        expected = [p for p in range(0, 8000, 10) if p < checkpoint]
        assert restored.entry_count() == len(expected)
        for h in range(4):
            assert [p for _, p in restored.iter_forward(h)] == [p for p in expected if (p // 10) % 4 == h]
        restored.close()
    thread.join()
    index.close()
    assert backups >= 3 and sum(rounds) >= backups
