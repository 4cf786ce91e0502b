"""The index of the event store: stream hash -> (event number, log position) entries.

Modules, one concept each::

    hashing.py      the 64-bit stream hash
    memtable.py     the newest entries, in memory
    ptable.py       immutable sorted tables (PTables) on disk or in memory
    bloom.py        the ``.bloomfilter`` sidecar of each PTable
    merge.py        sorting entries and merging sorted tables
    indexmap.py     the ``indexmap`` file: the current tables and the checkpoint
    durable.py      atomic, durable file replacement
    table_index.py  TableIndex: memtable + PTables, dumps, level merges, scavenge
    existence.py    StreamExistenceFilter (.dat + .chk)

The file formats are described in docs/storage-format-index.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evdb.lazy import lazy_getattr

if TYPE_CHECKING:
    from evdb.index.existence import StreamExistenceFilter
    from evdb.index.hashing import stream_hash
    from evdb.index.table_index import IndexScavengeResult, TableIndex, TableScavengeReport

#: where each public name lives: imported on first use, so a module that needs only
#: ``evdb.index.durable`` or ``evdb.index.indexmap`` (the backup command) does not load the index
_LAZY = {
    "IndexScavengeResult": "evdb.index.table_index",
    "StreamExistenceFilter": "evdb.index.existence",
    "TableIndex": "evdb.index.table_index",
    "TableScavengeReport": "evdb.index.table_index",
    "stream_hash": "evdb.index.hashing",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "IndexScavengeResult",
    "StreamExistenceFilter",
    "TableIndex",
    "TableScavengeReport",
    "stream_hash",
]
