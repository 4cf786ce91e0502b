"""Bad input to the tool and to the socket: clear errors, nothing changed, no leftovers."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import struct
from pathlib import Path

import pytest
import xxhash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from redaction_helpers import CHUNK_SIZE, chunk_files, running_node, write_events

from evdb.licensing.issuers import issue_demo_license
from evdb.licensing.token import issue_license
from evdb.redaction import SWITCH_ERRORS, RedactionClient, RedactionRefused, socket_path
from evdb.redaction.rewrite import EventToRedact, write_redacted_copy
from evdb.redaction.tool import UsageError, parse_events
from evdb.redaction.tool import main as redact_main
from evdb.storage.chunk import HEADER_SIZE, ChunkHeader


async def redact(db_dir: str, events: str) -> int:
    return await asyncio.to_thread(redact_main, ["--db", db_dir, "--events", events])


def snapshot(db_dir: str) -> dict[str, bytes]:
    return {n: Path(db_dir, n).read_bytes() for n in chunk_files(db_dir)}


def test_parse_events():
    assert [str(e) for e in parse_events("3@orders, 0@users,3@orders,1@a@b")] == [
        "3@orders",
        "0@users",
        "1@a@b",
    ]
    bad_lists = ("", "3", "orders", "x@orders", "-1@orders", "3@", "3@a,,4@b", "99999999999999999999@a")
    for bad in (*bad_lists, "0@$user-admin", "1@orders,0@$$orders", "0@$epochs", "0@$scavenges-x"):
        with pytest.raises(UsageError):
            parse_events(bad)


async def test_tool_bad_input_changes_nothing(tmp_path, clock, capsys):
    async with running_node(tmp_path, clock) as r:
        await write_events(r.db, "orders", 30)
        before = snapshot(r.db_dir)
        cases = [
            ("3orders", "is not <eventNumber>@<streamName>"),
            ("3@orders,7@nosuchstream", "event 7@nosuchstream does not exist"),
            ("3@orders,500@orders", "event 500@orders does not exist"),
            ("29@orders", "is in the active chunk"),
        ]
        for events, message in cases:
            assert await redact(r.db_dir, events) == 2, events
            err = capsys.readouterr().err
            assert message in err, err
        assert snapshot(r.db_dir) == before
        assert not [n for n in os.listdir(r.db_dir) if n.endswith(".tmp")]
        assert await asyncio.to_thread(redact_main, ["--db", str(tmp_path / "nope"), "--events", "1@a"]) == 2
        assert "no such folder" in capsys.readouterr().err
        assert await asyncio.to_thread(redact_main, ["--db", str(tmp_path), "--events", "1@a"]) == 2
        assert "holds no chunk files" in capsys.readouterr().err
        # leftovers of a killed run are removed by the next run
        leftover = os.path.join(r.db_dir, "chunk-000000.000000.deadbeef.redact.tmp")
        Path(leftover).write_bytes(b"partial")
        assert await redact(r.db_dir, "3@orders") == 0
        assert not os.path.exists(leftover)
        assert r.db.read_event("orders", 3).is_redacted


async def test_node_not_running_or_socket_disabled(tmp_path, clock, capsys):
    async with running_node(tmp_path, clock, "--enable-unix-socket", "false") as r:
        await write_events(r.db, "orders", 30)
        assert not os.path.exists(socket_path(r.db_dir))
        assert await redact(r.db_dir, "0@orders") == 1
        assert "EnableUnixSocket: true" in capsys.readouterr().err
    async with running_node(tmp_path, clock):
        pass
    db_dir = str(tmp_path / "db")
    assert not os.path.exists(socket_path(db_dir))  # removed at stop
    assert await redact(db_dir, "0@orders") == 1
    assert "not running" in capsys.readouterr().err
    # a socket file left by a killed node: nothing listens
    import socket as socketlib

    s = socketlib.socket(socketlib.AF_UNIX)
    s.bind(socket_path(db_dir))
    s.close()
    assert await redact(db_dir, "0@orders") == 1
    assert "not running" in capsys.readouterr().err
    async with running_node(tmp_path, clock) as r:  # the node replaces the stale socket file
        assert await redact(r.db_dir, "0@orders") == 0


@pytest.mark.parametrize(
    ("license_key", "reason"),
    [
        ("", "No licence key is set"),
        ("expired", "expired"),
        ("auto-only", "does not include REDACTION"),
        ("foreign", "does not trust"),
    ],
)
async def test_refused_without_a_redaction_licence(tmp_path, clock, capsys, license_key, reason):
    now = clock.time()
    if license_key == "expired":
        license_key = issue_demo_license(now - 40 * 86400, days=30)
    elif license_key == "auto-only":
        license_key = issue_demo_license(now, entitlements=("AUTO_SCAVENGE",))
    elif license_key == "foreign":
        license_key = issue_license(
            Ed25519PrivateKey.generate(),
            licensee="x",
            issued_at=int(now),
            expires_at=int(now) + 86400,
            entitlements=["REDACTION"],
        )
    async with running_node(tmp_path, clock, license_key=license_key) as r:
        await write_events(r.db, "orders", 30)
        before = snapshot(r.db_dir)
        assert await redact(r.db_dir, "0@orders") == 1
        err = capsys.readouterr().err
        assert "NotLicensed" in err and reason in err, err
        assert snapshot(r.db_dir) == before


async def test_licence_expiring_while_the_node_runs(tmp_path, clock, capsys):
    async with running_node(tmp_path, clock, license_key=issue_demo_license(clock.time(), days=1)) as r:
        await write_events(r.db, "orders", 30)
        clock.advance(2 * 86400)
        assert await redact(r.db_dir, "0@orders") == 1
        assert "expired" in capsys.readouterr().err


async def test_socket_is_private(tmp_path, clock):
    async with running_node(tmp_path, clock) as r:
        st = os.stat(socket_path(r.db_dir))
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.getuid()
        assert not [n for n in os.listdir(r.db_dir) if n.startswith(".evdb-sock-")]


async def test_protocol_errors(tmp_path, clock):
    async with running_node(tmp_path, clock) as r:
        with RedactionClient(socket_path(r.db_dir)) as c:
            for call, fields, code in [
                ("nope", {}, "UnknownCall"),
                ("getEventPositions", {"stream": "", "eventNumber": 0}, "BadRequest"),
                ("getEventPositions", {"stream": "a", "eventNumber": -1}, "BadRequest"),
                ("getEventPositions", {"stream": "a", "eventNumber": True}, "BadRequest"),
                ("getEventPositions", {"stream": "a", "eventNumber": 0}, "EventNotFound"),
            ]:
                with pytest.raises(RedactionRefused) as info:
                    await asyncio.to_thread(c.call, call, **fields)
                assert info.value.code == code
            c._sock.sendall(b"not json\n")
            with pytest.raises(RedactionRefused) as info:
                await asyncio.to_thread(c.receive)
            assert info.value.code == "BadRequest"


async def test_every_switch_check(tmp_path, clock):
    """Each validation the reference lists answers its own error, and nothing is switched."""
    async with running_node(tmp_path, clock) as r:
        db = r.db
        await asyncio.to_thread(db.set_stream_metadata, "orders", {"$maxCount": 100})
        await write_events(db, "orders", 50)
        d = r.db_dir
        with RedactionClient(socket_path(d)) as c:
            pos = (await asyncio.to_thread(c.call, "getEventPositions", stream="orders", eventNumber=2))[
                "positions"
            ][0]
            target = pos["chunkFile"]
            assert target == "chunk-000000.000000" and pos["chunkComplete"]
            event = EventToRedact("orders", 2, pos["logPosition"], pos["chunkEventOffset"])
            good = os.path.join(d, "good.redact.tmp")
            await asyncio.to_thread(write_redacted_copy, os.path.join(d, target), good, [event])
            active = db.log.active_chunk.file_name

            def variant(name: str, mutate) -> str:
                path = os.path.join(d, name)
                shutil.copyfile(good, path)
                data = bytearray(Path(path).read_bytes())
                mutate(data)
                Path(path).write_bytes(bytes(data))
                return name

            def header_of(data, **change):
                h = ChunkHeader.decode(bytes(data[:128]), "x")
                fields = {
                    "chunk_size": h.chunk_size,
                    "start_number": h.start_number,
                    "end_number": h.end_number,
                    "is_scavenged": h.is_scavenged,
                    "chunk_id": h.chunk_id,
                    "version": h.version,
                    **change,
                }
                data[:128] = ChunkHeader(**fields).encode()

            def with_checksum(data) -> None:
                data[len(data) - 16 :] = xxhash.xxh3_128(bytes(data[: len(data) - 16])).digest()

            def bad_trailer(
                data,
            ) -> None:  # the first record's trailing length disagrees with its leading one
                (n,) = struct.unpack_from("<I", data, HEADER_SIZE)
                struct.pack_into("<I", data, HEADER_SIZE + 8 + n, n + 1)
                with_checksum(data)

            meta = db.read_event("$$orders", 0)
            system = EventToRedact(
                "$$orders", 0, meta.log_position, db.log.chunk_for(0).physical_offset(meta.log_position)
            )
            await asyncio.to_thread(
                write_redacted_copy, os.path.join(d, target), os.path.join(d, "sys.tmp"), [system, event]
            )
            shutil.copyfile(os.path.join(d, "chunk-000001.000000"), os.path.join(d, "other.tmp"))
            cases = [
                ("../" + target, "good.redact.tmp", "InvalidFileName"),
                (target, "a/b.tmp", "InvalidFileName"),
                (target, "..\\x.tmp", "InvalidFileName"),
                ("orders.dat", "good.redact.tmp", "TargetNotAChunkFile"),
                (target, variant("good.redact.bin", lambda b: None), "NewChunkFileNotTmp"),
                ("chunk-000000.000007", "good.redact.tmp", "TargetChunkFileNotFound"),
                (target, "missing.tmp", "NewChunkFileNotFound"),
                (active, "good.redact.tmp", "TargetChunkNotCompleted"),
                (target, variant("h.tmp", lambda b: b.__setitem__(slice(0, 8), b"XXXXXXXX")), "NewChunkHeaderInvalid"),
                (target, variant("nf.tmp", lambda b: b.__setitem__(slice(len(b) - 128, len(b) - 120), b"\0" * 8)), "NewChunkNotCompleted"),
                (target, variant("ft.tmp", lambda b: b.extend(b"\0" * 16)), "NewChunkNotCompleted"),
                (target, variant("fs.tmp", lambda b: b.__setitem__(slice(len(b) - 116, len(b) - 108), (1).to_bytes(8, "little"))), "NewChunkFooterInvalid"),
                (target, "other.tmp", "ChunkRangeMismatch"),
                (target, variant("cs.tmp", lambda b: header_of(b, chunk_size=CHUNK_SIZE * 2)), "ChunkSizeMismatch"),
                (target, variant("v.tmp", lambda b: header_of(b, version=0)), "NewChunkVersionTooLow"),
                (target, variant("sum.tmp", lambda b: b.__setitem__(500, b[500] ^ 1)), "NewChunkChecksumMismatch"),
                (target, variant("rec.tmp", bad_trailer), "NewChunkRecordsInvalid"),
                (target, "sys.tmp", "NewChunkRedactsSystemStream"),
            ]  # fmt: skip
            before = snapshot(d)
            codes = set()
            for tgt, new, code in cases:
                with pytest.raises(RedactionRefused) as info:
                    await asyncio.to_thread(c.call, "switchChunk", targetChunkFile=tgt, newChunkFile=new)
                assert info.value.code == code, (tgt, new, str(info.value))
                codes.add(code)
            assert snapshot(d) == before  # no failed call changed a chunk file
            squatter = os.path.join(d, "chunk-000000.000001")
            Path(squatter).write_bytes(b"x")
            with pytest.raises(RedactionRefused) as info:
                await asyncio.to_thread(
                    c.call, "switchChunk", targetChunkFile=target, newChunkFile="good.redact.tmp"
                )
            assert info.value.code == "NewChunkVersionInUse"
            codes.add(info.value.code)
            os.unlink(squatter)
            answer = await asyncio.to_thread(
                c.call, "switchChunk", targetChunkFile=target, newChunkFile="good.redact.tmp"
            )
            assert answer["chunkFile"] == "chunk-000000.000001"
            assert not os.path.exists(os.path.join(d, target))
            # the target must be the chunk in use: after the switch the old name no longer is
            shutil.copyfile(os.path.join(d, "chunk-000000.000001"), os.path.join(d, target))
            with pytest.raises(RedactionRefused) as info:
                await asyncio.to_thread(c.call, "switchChunk", targetChunkFile=target, newChunkFile="h.tmp")
            assert info.value.code == "TargetChunkNotInUse"
            codes.add(info.value.code)
            os.unlink(os.path.join(d, target))
        assert db.read_event("orders", 2).is_redacted
        assert codes == set(SWITCH_ERRORS)
