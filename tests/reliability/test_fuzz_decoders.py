"""Every on-disk decoder fed malformed bytes: a typed error (or, for caches, "not usable, rebuild"),
never a hang and never an unhandled exception.

Inputs are valid encodings with bytes flipped, cut or appended, plus arbitrary bytes. Each call runs
under an alarm: a decoder that loops on bad input fails the test instead of hanging CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evdb.errors import EvdbError
from evdb.index.bloom import BloomSidecar, build_bloom, decode_sidecar, encode_sidecar
from evdb.index.existence import StreamExistenceFilter
from evdb.index.indexmap import IndexMap, IndexMapEntry
from evdb.index.ptable import PTable, write_table
from evdb.licensing.issuers import demo_private_key, demo_public_key
from evdb.licensing.token import LicenseError, issue_license, read_unverified, verify_license
from evdb.storage import records as rec
from evdb.storage.checkpoints import Checkpoint
from evdb.storage.chunk import Chunk, ChunkHeader

FUZZ = settings(
    max_examples=int(os.environ.get("EVDB_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
HANG_SECONDS = 5


@contextlib.contextmanager
def no_hang(seconds: int = HANG_SECONDS):
    def expired(signum, frame):
        raise TimeoutError(f"decoder still running after {seconds} s: a hang on malformed input")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@st.composite
def damaged(draw, valid: bytes) -> bytes:
    """``valid`` with a few bytes flipped, cut short, extended, or replaced by arbitrary bytes."""
    how = draw(st.sampled_from(["flip", "cut", "extend", "random", "flip+cut"]))
    raw = bytearray(valid)
    if how == "random":
        return draw(st.binary(max_size=2 * len(valid) + 16))
    if how in ("flip", "flip+cut") and raw:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= draw(st.integers(1, 255))
    if how in ("cut", "flip+cut"):
        raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    if how == "extend":
        raw += draw(st.binary(min_size=1, max_size=64))
    return bytes(raw)


# -- the transaction log ---------------------------------------------------------------------------
def _valid_chunk() -> bytes:
    from evdb.database import Database
    from evdb.streams import NewEvent

    with tempfile.TemporaryDirectory() as d:
        with Database.open(d, chunk_size=4096 * 2, max_memtable_entries=16) as db:
            for i in range(12):
                db.append(f"s-{i % 3}", [NewEvent("T", b"x" * 200, metadata=b"{}")])
        first = sorted(n for n in os.listdir(d) if n.startswith("chunk-"))[0]
        with open(os.path.join(d, first), "rb") as f:
            return f.read()


CHUNK = _valid_chunk()
HEADER = ChunkHeader(65536, 0, 0, False, uuid.uuid4().bytes, 0).encode()


@FUZZ
@given(damaged(HEADER))
def test_chunk_header(raw):
    with no_hang():
        try:
            header = ChunkHeader.decode(raw, "chunk-000000.000000")
        except EvdbError as exc:
            assert "chunk-000000.000000" in str(exc)
        else:
            assert header.end_number >= header.start_number >= 0 and header.chunk_size > 0


@FUZZ
@given(raw=damaged(CHUNK), writable=st.booleans())
def test_chunk_file_header_footer_and_records(tmp_path_factory, raw, writable):
    path = str(tmp_path_factory.mktemp("c") / "chunk-000000.000000")
    with open(path, "wb") as f:
        f.write(raw)
    with no_hang():
        try:
            chunk = Chunk.open(path, verify=True, writable=writable)
        except EvdbError as exc:
            assert path in str(exc)
            return
        try:
            if not chunk.is_completed:
                chunk.recover_active(max(0, len(raw) - 4096), verify=True)
        except EvdbError as exc:
            assert path in str(exc)
        finally:
            chunk.close()


FRAME = rec.encode_event(
    log_position=123,
    event_number=4,
    stream="orders-1",
    event_type="Placed",
    event_id=uuid.uuid4().bytes,
    timestamp=1,
    flags=0,
    data=b'{"a":1}',
    metadata=b"{}",
)


@FUZZ
@given(st.data())
def test_record_frames(data):
    raw = data.draw(damaged(FRAME))
    with no_hang():
        for call in (
            lambda: rec.read_frame(raw, 0, len(raw), where="fuzz"),
            lambda: rec.read_frames(raw, 0, len(raw), 10, where="fuzz"),
            lambda: rec.read_frame_before(raw, len(raw), 0, where="fuzz"),
        ):
            try:
                call()
            except EvdbError as exc:
                assert "fuzz" in str(exc)


@FUZZ
@given(body=st.binary(min_size=1, max_size=300))
def test_a_frame_with_a_valid_checksum_around_garbage_is_a_typed_error(body):
    """The CRC matches, the body is nonsense: decoding still ends in CorruptedFile, not a crash."""
    raw = rec._frame(body)
    with no_hang():
        try:
            record, end = rec.read_frame(raw, 0, len(raw), where="fuzz")
        except EvdbError as exc:
            assert "fuzz" in str(exc)
        else:
            assert end == len(raw)
            assert isinstance(record, (rec.EventRecord, rec.SystemRecord))


@FUZZ
@given(raw=st.binary(max_size=16))
def test_checkpoint(tmp_path_factory, raw):
    path = str(tmp_path_factory.mktemp("k") / "writer.chk")
    with open(path, "wb") as f:
        f.write(raw)
    with no_hang():
        try:
            chk = Checkpoint(path, 0)
        except EvdbError as exc:
            assert path in str(exc)
        else:
            assert isinstance(chk.value, int)
            chk.close()


# -- the index --------------------------------------------------------------------------------------
def _valid_table() -> tuple[bytes, bytes]:
    """A PTable's bytes and its bloom filter sidecar's."""
    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        entries = sorted(((h * 7919) % 2**63, n, h * 100 + n) for h in range(1, 40) for n in range(3))
        hashes, numbers, positions = (np.array(c, dtype=np.uint64 if i == 0 else np.int64) for i, c in
                                      enumerate(zip(*entries, strict=True)))  # fmt: skip
        table = write_table(d, 0, hashes, numbers, positions)
        name = table.name
        del table
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        with open(os.path.join(d, name + ".bloomfilter"), "rb") as f:
            sidecar = f.read()
        return data, sidecar


TABLE, SIDECAR = _valid_table()
INDEXMAP = IndexMap(checkpoint=1234, tables=(IndexMapEntry(0, 0, str(uuid.UUID(int=7))),)).encode()


@FUZZ
@given(raw=damaged(TABLE))
def test_ptable(tmp_path_factory, raw):
    d = str(tmp_path_factory.mktemp("t"))
    name = str(uuid.uuid4())
    with open(os.path.join(d, name), "wb") as f:
        f.write(raw)
    with no_hang():
        try:
            table = PTable.open(d, name)
        except EvdbError as exc:
            assert name in str(exc)
        else:
            assert raw == TABLE  # only the intact table opens
            del table


@FUZZ
@given(raw=damaged(SIDECAR))
def test_bloom_sidecar(raw):
    with no_hang():
        sidecar = decode_sidecar(raw)
    assert sidecar is None or isinstance(sidecar, BloomSidecar)
    if raw != SIDECAR:
        assert sidecar is None or encode_sidecar(sidecar) == raw


def test_a_valid_sidecar_decodes():
    import numpy as np

    bloom, count = build_bloom(np.arange(1, 50, dtype=np.uint64))
    raw = encode_sidecar(BloomSidecar(bloom, count, b"\1" * 16))
    assert decode_sidecar(raw) is not None


@FUZZ
@given(raw=damaged(INDEXMAP))
def test_indexmap(raw):
    with no_hang():
        try:
            decoded = IndexMap.decode(raw, "indexmap")
        except EvdbError as exc:
            assert "indexmap" in str(exc)
        else:
            assert decoded.checkpoint >= -1


@FUZZ
@given(raw=st.binary(max_size=300))
def test_existence_filter(tmp_path_factory, raw):
    d = str(tmp_path_factory.mktemp("e"))
    with open(os.path.join(d, "streamExistenceFilter.dat"), "wb") as f:
        f.write(raw)
    with no_hang():
        existence = StreamExistenceFilter.open(d, capacity=1000)
    assert existence.checkpoint >= -1
    existence.close()


# -- licence tokens ---------------------------------------------------------------------------------
TOKEN = issue_license(
    demo_private_key(), licensee="Acme", issued_at=1, expires_at=2**31, entitlements=["REDACTION"]
)


@FUZZ
@given(raw=st.one_of(damaged(TOKEN.encode()), st.binary(max_size=200)))
def test_licence_token(raw):
    text = raw.decode("utf-8", "replace")
    with no_hang():
        try:
            verify_license(text, [demo_public_key()], 100)
        except LicenseError:
            pass
        else:
            assert text == TOKEN or text.strip() == TOKEN
        try:
            read_unverified(text)
        except LicenseError:
            pass
