"""The S3 store's download in ranged pieces (evdb/archive/s3.py: each piece collected by obstore outside
the GIL): an object of several pieces arrives whole, an empty one as an empty file, and an object
replaced between two pieces is read again from its start, never a mix of two versions. Against moto's
S3 server; the piece size is made small so that a few KiB take several pieces."""

from __future__ import annotations

import os

import pytest
from archive_helpers import REGION

from evdb.archive import s3
from evdb.archive.s3 import S3Store
from evdb.archive.store import ObjectMissing

PIECE = 1000


@pytest.fixture
def bucket(s3_environ, make_bucket, monkeypatch) -> S3Store:
    monkeypatch.setattr(s3, "DOWNLOAD_PIECE", PIECE)
    return S3Store(make_bucket(), REGION, s3_environ)


@pytest.mark.parametrize("size", [1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7])
def test_an_object_of_several_pieces_arrives_whole(bucket, tmp_path, size):
    data = os.urandom(size)
    stored = bucket.put_bytes("chunk-000000.000001", data)
    info = bucket.download("chunk-000000.000001", str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == data
    assert (info.size, info.etag) == (size, stored.etag)


def test_an_empty_object_arrives_empty_and_a_missing_one_is_missing(bucket, tmp_path):
    bucket.put_bytes("empty", b"")
    assert bucket.download("empty", str(tmp_path / "copy")).size == 0
    assert (tmp_path / "copy").read_bytes() == b""
    with pytest.raises(ObjectMissing):
        bucket.download("chunk-000009.000001", str(tmp_path / "nothing"))


class _ReplacedOnce(S3Store):
    """A bucket whose object is replaced right after the first piece of the first download is read
    (an archive scavenge writing a new version of the chunk meanwhile)."""

    replacement = b""

    def _piece(self, name, start, etag):
        piece = super()._piece(name, start, etag)
        if start == 0 and self.replacement:
            self.put_bytes(name, self.replacement)
            self.replacement = b""
        return piece


def test_an_object_replaced_during_a_download_is_read_again_from_its_start(
    s3_environ, make_bucket, monkeypatch, tmp_path
):
    monkeypatch.setattr(s3, "DOWNLOAD_PIECE", PIECE)
    store = _ReplacedOnce(make_bucket(), REGION, s3_environ)
    old, new = os.urandom(3 * PIECE), os.urandom(3 * PIECE)
    store.put_bytes("chunk-000000.000001", old)
    store.replacement = new
    info = store.download("chunk-000000.000001", str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == new
    assert info.etag == store.head("chunk-000000.000001").etag
