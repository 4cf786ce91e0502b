"""The procedures' steps, in the spec's order, on a closed database folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from backup_helpers import append_events, files_in, open_db, progress

from evdb.backup import (
    MixedSources,
    ScavengeDuringBackup,
    ScavengeRunning,
    run_backup,
    verify_backup,
)
from evdb.backup.layout import COMPLETE_MARKER, MANIFEST, chunk_files, index_table_files
from evdb.index.indexmap import IndexMap


def _is_table(relative: str) -> bool:
    return relative.startswith("index/") and bool(
        index_table_files.__globals__["_TABLE_FILE"].fullmatch(relative[6:])
    )


def _kind(relative: str) -> str:
    name = os.path.basename(relative)
    if relative.startswith("index/"):
        if name.endswith(".chk"):
            return "index-chk"
        return "index-other"
    if name.endswith(".chk"):
        return "db-chk"
    return "chunk"


def test_full_backup_copies_in_the_spec_order(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    p = progress()
    result = run_backup(db_dir, index_dir, dest, progress=p)

    # 1 index checkpoints, 2 other index files, 3 database checkpoints, 4 chunks: never back
    kinds = [_kind(r) for r in p.copied]
    assert kinds == sorted(kinds, key=["index-chk", "index-other", "db-chk", "chunk"].index)
    assert p.copied[0] == "index/stream-existence/streamExistenceFilter.chk"
    tables = index_table_files(index_dir)
    chunks = chunk_files(db_dir)
    expected = (
        ["index/stream-existence/streamExistenceFilter.chk", "index/indexmap"]
        + [f"index/{n}" for n in tables]
        + ["index/stream-existence/streamExistenceFilter.dat"]
        + [f"db/{n}" for n in ("chaser.chk", "epoch.chk", "proposal.chk", "truncate.chk", "writer.chk")]
        + [f"db/{n}" for n in chunks]
    )
    assert p.copied == expected
    assert len(chunks) >= 4 and len(tables) >= 4
    assert result.files_copied == len(expected)
    assert os.path.exists(os.path.join(dest, COMPLETE_MARKER))
    manifest = json.loads(Path(dest, MANIFEST).read_text())
    assert set(manifest["chunk_ids"]) == set(chunks)
    assert verify_backup(dest).ok
    with (
        open(os.path.join(dest, "db", chunks[0]), "rb") as a,
        open(os.path.join(db_dir, chunks[0]), "rb") as b,
    ):
        assert a.read() == b.read()


def test_differential_steps_and_only_new_or_changed_files(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    chunks_before = chunk_files(db_dir)
    tables_before = set(index_table_files(index_dir))

    with open_db(db_dir, index_dir) as db:
        append_events(db, 600)
    chunks_after = chunk_files(db_dir)
    tables_after = set(index_table_files(index_dir))
    new_chunks = [n for n in chunks_after if n not in chunks_before]
    assert new_chunks

    p = progress("differential")
    steps = []
    p.listeners.append(
        lambda body: (
            steps.append((body.get("part"), body.get("step"))) if body["state"] == "running" else None
        )
    )
    result = run_backup(db_dir, index_dir, dest, differential=True, progress=p)

    order = []
    for step in steps:
        if not order or order[-1] != step:
            order.append(step)
    assert order == [
        ("backup", 0),
        ("index", 1),
        ("index", 2),
        ("index", 6),
        ("index", 7),
        ("index", 8),
        ("index", 9),
        ("log", 1),
        ("log", 2),
        ("log", 3),
        ("log", 4),
        ("log", 5),
        ("backup", 0),
    ]
    copied_chunks = [r for r in p.copied if r.startswith("db/chunk-")]
    # the backup's last chunk (renamed .old) is copied again, plus every chunk that is new
    assert copied_chunks == [f"db/{chunks_before[-1]}"] + [f"db/{n}" for n in new_chunks]
    copied_tables = {r[len("index/") :] for r in p.copied if _is_table(r)}
    assert copied_tables == tables_after - tables_before
    db_checkpoints = [r for r in p.copied if r.startswith("db/") and r.endswith(".chk")]
    assert db_checkpoints == ["db/chaser.chk", "db/epoch.chk", "db/writer.chk", "db/proposal.chk"]
    assert result.files_skipped >= len(chunks_before) - 1
    # the backup now mirrors the source: no .old, no table the indexmap does not name
    assert chunk_files(os.path.join(dest, "db")) == chunks_after
    assert not [n for n in os.listdir(os.path.join(dest, "db")) if n.endswith(".old")]
    assert set(index_table_files(os.path.join(dest, "index"))) == tables_after
    assert verify_backup(dest).ok


def test_differential_with_nothing_new_copies_only_the_last_chunk_and_small_files(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    p = progress("differential")
    run_backup(db_dir, index_dir, dest, differential=True, progress=p)
    big = [r for r in p.copied if r.startswith("db/chunk-") or _is_table(r)]
    assert big == [f"db/{chunk_files(db_dir)[-1]}"]


def test_index_loop_copies_again_when_indexmap_changes(source, tmp_path, monkeypatch):
    """Step 5: indexmap differs after the tables were copied -> back to step 2."""
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    import evdb.backup.procedures as procedures

    calls = {"n": 0}
    original = procedures._Backup._same_indexmap

    def changing(self):
        calls["n"] += 1
        if calls["n"] == 1:
            # a merge lands while the tables are copied: the source gets a new indexmap
            indexmap = IndexMap.read(index_dir)
            IndexMap(indexmap.checkpoint, indexmap.max_auto_merge_level - 1, indexmap.tables).write(index_dir)
        return original(self)

    monkeypatch.setattr(procedures._Backup, "_same_indexmap", changing)
    p = progress("differential")
    run_backup(db_dir, index_dir, dest, differential=True, progress=p)
    assert calls["n"] == 2
    assert p.copied.count("index/indexmap") == 2
    with (
        open(os.path.join(dest, "index", "indexmap"), "rb") as a,
        open(os.path.join(index_dir, "indexmap"), "rb") as b,
    ):
        assert a.read() == b.read()


def test_index_folder_without_files_skips_to_step_7(tmp_path):
    db_dir = str(tmp_path / "db")
    index_dir = str(tmp_path / "index")
    with open_db(db_dir, index_dir) as db:
        append_events(db, 10)
    for name in os.listdir(index_dir):
        path = os.path.join(index_dir, name)
        if os.path.isfile(path):
            os.unlink(path)
    p = progress("differential")
    steps = []
    p.listeners.append(lambda body: steps.append((body.get("part"), body.get("step"))))
    run_backup(db_dir, index_dir, str(tmp_path / "bk"), differential=True, progress=p)
    index_steps = sorted({s for part, s in steps if part == "index"})
    assert index_steps == [1, 7, 8, 9]


def test_refuses_a_backup_of_another_node_in_the_same_folder(source, tmp_path):
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    other_db = str(tmp_path / "other" / "db")
    with open_db(other_db) as db:
        append_events(db, 50)
    before = files_in(dest)
    for differential in (False, True):
        with pytest.raises(MixedSources, match="never be mixed"):
            run_backup(other_db, None, dest, differential=differential)
    assert files_in(dest) == before


def test_refuses_chunks_of_another_node_under_the_same_names(source, tmp_path):
    """A differential whose backup holds a same-named chunk with a different id (e.g. the source
    folder was restored from another node's backup since) is refused (spec rule 3)."""
    db_dir, index_dir = source
    dest = str(tmp_path / "bk")
    run_backup(db_dir, index_dir, dest)
    other_db = str(tmp_path / "other" / "db")
    with open_db(other_db) as db:
        append_events(db, 1000)
    first = chunk_files(db_dir)[0]
    os.replace(os.path.join(other_db, first), os.path.join(dest, "db", first))
    with pytest.raises(MixedSources, match="chunk ids"):
        run_backup(db_dir, index_dir, dest, differential=True)
    problems = verify_backup(dest).problems
    assert any("not the chunk this backup copied" in p for p in problems)


def test_refuses_a_non_empty_folder_that_is_not_a_backup(source, tmp_path):
    db_dir, index_dir = source
    dest = tmp_path / "bk"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me")
    from evdb.backup import BackupError

    with pytest.raises(BackupError, match="not empty"):
        run_backup(db_dir, index_dir, str(dest))
    assert os.listdir(dest) == ["precious.txt"]


class FakeGuard:
    can_stop = True

    def __init__(self, current=None, last="s0"):
        self._current = current
        self._last = last
        self.calls = []

    def current(self):
        return self._current

    def last(self):
        return self._last

    def settings(self, scavenge_id):
        return {"threads": 2, "throttlePercent": 50}

    def stop(self, scavenge_id):
        self.calls.append(("stop", scavenge_id))
        self._last, self._current = self._current, None

    def start(self, settings):
        self.calls.append(("start", settings))
        self._current = "s2"
        self._last = "s2"
        return "s2"


def test_refuses_while_a_scavenge_runs(source, tmp_path):
    db_dir, index_dir = source
    guard = FakeGuard(current="s1")
    with pytest.raises(ScavengeRunning, match="--stop-scavenge"):
        run_backup(db_dir, index_dir, str(tmp_path / "bk"), guard=guard)
    assert guard.calls == []
    assert not os.path.exists(tmp_path / "bk" / COMPLETE_MARKER)


def test_stop_scavenge_stops_backs_up_and_restarts_with_the_same_settings(source, tmp_path):
    db_dir, index_dir = source
    guard = FakeGuard(current="s1")
    result = run_backup(db_dir, index_dir, str(tmp_path / "bk"), guard=guard, stop_scavenge=True)
    assert guard.calls == [("stop", "s1"), ("start", {"threads": 2, "throttlePercent": 50})]
    assert result.scavenge_restarted == "s2"
    assert verify_backup(str(tmp_path / "bk")).ok


def test_a_scavenge_started_during_the_backup_fails_it_cleanly(source, tmp_path):
    db_dir, index_dir = source
    guard = FakeGuard()
    dest = str(tmp_path / "bk")

    def scavenge_starts():
        guard._current = guard._last = "s9"

    with pytest.raises(ScavengeDuringBackup, match="s9"):
        run_backup(db_dir, index_dir, dest, guard=guard, before_finish=scavenge_starts)
    assert not os.path.exists(os.path.join(dest, COMPLETE_MARKER))
    assert "did not finish" in verify_backup(dest).problems[0]


def test_a_scavenge_that_ran_and_finished_during_the_backup_is_detected(source, tmp_path):
    db_dir, index_dir = source
    guard = FakeGuard()

    def scavenge_ran():
        guard._last = "s9"

    with pytest.raises(ScavengeDuringBackup, match="ran during the backup"):
        run_backup(db_dir, index_dir, str(tmp_path / "bk"), guard=guard, before_finish=scavenge_ran)


def test_switched_chunks_are_detected_without_a_node(source, tmp_path):
    """No node to ask: a chunk replaced by a new version during the copy still fails the backup."""
    db_dir, index_dir = source
    first = chunk_files(db_dir)[0]

    def chunk_switched():
        os.rename(os.path.join(db_dir, first), os.path.join(db_dir, first[:-6] + "000001"))

    with pytest.raises(ScavengeDuringBackup, match="replaced"):
        run_backup(db_dir, index_dir, str(tmp_path / "bk"), before_finish=chunk_switched)


def test_temporary_scavenge_files_mean_a_scavenge_runs(source, tmp_path):
    db_dir, index_dir = source
    open(os.path.join(db_dir, "abc.scavenge.tmp"), "wb").close()
    with pytest.raises(ScavengeRunning):
        run_backup(db_dir, index_dir, str(tmp_path / "bk"))


def test_progress_json_lines_carry_step_files_bytes_and_speed(source, tmp_path):
    db_dir, index_dir = source
    p = progress()
    lines = []
    p.listeners.append(lines.append)
    run_backup(db_dir, index_dir, str(tmp_path / "bk"), progress=p)
    chunk_lines = [b for b in lines if b.get("part") == "full" and b.get("step") == 4]
    assert chunk_lines[-1]["filesDone"] == chunk_lines[-1]["filesTotal"] == len(chunk_files(db_dir))
    assert chunk_lines[-1]["bytesTotal"] >= chunk_lines[-1]["bytesDone"] > 0
    assert lines[-1]["state"] == "completed"
    assert lines[-1]["bytesPerSecond"] > 0
    json.dumps(lines)
