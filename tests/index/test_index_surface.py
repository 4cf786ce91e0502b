"""The index's public surface: what evdb.database and the scavenge code import and call."""

from __future__ import annotations

import inspect

import evdb.index
from evdb.index import IndexScavengeResult, StreamExistenceFilter, TableIndex, TableScavengeReport


def test_public_names_are_pinned():
    assert evdb.index.__all__ == [
        "IndexScavengeResult",
        "StreamExistenceFilter",
        "TableIndex",
        "TableScavengeReport",
        "stream_hash",
    ]


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_table_index_api_is_the_contract():
    assert parameters(TableIndex.open) == ["directory", "max_memtable_entries", "max_auto_merge_level"]
    assert parameters(TableIndex.add) == ["self", "entries", "position"]
    assert parameters(TableIndex.iter_backward) == ["self", "h", "before_number"]
    assert parameters(TableIndex.iter_forward) == ["self", "h", "from_number"]
    assert parameters(TableIndex.get) == ["self", "h", "event_number"]
    assert parameters(TableIndex.scavenge) == ["self", "keep"]
    for name in ("entry_count", "merge_indexes", "wait_idle", "close"):
        assert parameters(getattr(TableIndex, name)) == ["self"]
    assert isinstance(TableIndex.checkpoint, property)


def test_scavenge_report_fields_are_what_the_scavenge_logs():
    assert [f for f in TableScavengeReport.__dataclass_fields__] == [
        "level",
        "index",
        "entries_kept",
        "entries_deleted",
        "space_saved",
        "time_taken",
    ]
    result = IndexScavengeResult((TableScavengeReport(0, 0, 5, 2, 100, 0.1),), memtable_entries_deleted=3)
    assert result.entries_deleted == 5 and result.space_saved == 100


def test_existence_filter_api_is_the_contract():
    assert parameters(StreamExistenceFilter.open) == ["directory", "capacity", "error_rate"]
    for name, expected in {
        "add": ["self", "name"],
        "might_exist": ["self", "name"],
        "flush": ["self", "position"],
        "close": ["self"],
    }.items():
        assert parameters(getattr(StreamExistenceFilter, name)) == expected
    assert isinstance(StreamExistenceFilter.checkpoint, property)
