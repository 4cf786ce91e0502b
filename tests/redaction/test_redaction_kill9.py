"""kill -9 of the real ``evdb-redact`` process: the node serves the old or the redacted chunk, never a mix."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

import pytest
from redaction_helpers import chunk_files, running_node, verify_all_chunks, write_events
from waiting import until

from evdb.redaction.tool import CRASH_ENV

TARGETS = [("orders", 2), ("orders", 5), ("orders", 33)]  # two in chunk 0, one in chunk 1
TOOL = os.path.join(os.path.dirname(sys.executable), "evdb-redact")


async def start_tool(db_dir: str, crash_at: str | None = None) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    events = ",".join(f"{n}@{s}" for s, n in TARGETS)
    return await asyncio.create_subprocess_exec(
        TOOL,
        "--db",
        db_dir,
        "--events",
        events,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def states(db, originals) -> dict[tuple[str, int], str]:
    """Each target event: "old" or "redacted"; anything else fails the test."""
    out = {}
    for t, original in originals.items():
        record = db.read_event(*t)
        if record == original:
            out[t] = "old"
        elif record.is_redacted and record.data == b"\xff" * len(original.data):
            assert record._replace(flags=original.flags, data=original.data) == original
            out[t] = "redacted"
        else:
            raise AssertionError(f"{t} is neither the old nor the redacted event: {record}")
    return out


def assert_whole_chunks(db, originals, seen) -> None:
    """Events that share a chunk are in the same state: a chunk is switched whole or not at all."""
    by_chunk: dict[str, set[str]] = {}
    for t, state in seen.items():
        chunk = db.log.chunk_for(originals[t].log_position).start_number
        by_chunk.setdefault(chunk, set()).add(state)
    assert all(len(s) == 1 for s in by_chunk.values()), by_chunk


async def prepare(r):
    await write_events(r.db, "orders", 45)
    originals = {t: r.db.read_event(*t) for t in TARGETS}
    assert len({r.db.log.chunk_for(o.log_position).start_number for o in originals.values()}) == 2
    return originals


@pytest.mark.parametrize(
    ("step", "expected_first_chunk"),
    [
        ("locked", "old"),
        ("copied", "old"),
        ("redacted", "old"),
        ("switch-sent", "redacted"),
        ("switched", "redacted"),
    ],
)
async def test_kill9_at_each_step(tmp_path, clock, step, expected_first_chunk):
    async with running_node(tmp_path, clock) as r:
        originals = await prepare(r)
        proc = await start_tool(r.db_dir, step)
        assert await proc.wait() == -signal.SIGKILL
        # the node ends the session when the connection drops (after finishing a switch under way)
        await until(lambda: not r.db.log.chunk_lock.locked(), "the chunk lock to be released", 20.0)
        seen = states(r.db, originals)
        assert_whole_chunks(r.db, originals, seen)
        assert seen[("orders", 2)] == expected_first_chunk
        assert seen[("orders", 33)] == "old"  # the second chunk was never reached
        leftovers = [n for n in os.listdir(r.db_dir) if n.endswith(".tmp")]
        assert len(leftovers) <= 1
    # restart: the node removes the leftover, verifies every chunk and serves the same state
    async with running_node(tmp_path, clock) as r:
        assert states(r.db, originals) == seen
        assert not [n for n in os.listdir(r.db_dir) if n.endswith(".tmp")]
        verify_all_chunks(r.db_dir)
        proc = await start_tool(r.db_dir)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert set(states(r.db, originals).values()) == {"redacted"}
        assert len([n for n in chunk_files(r.db_dir) if n.startswith("chunk-000000.")]) == 1


async def test_kill9_at_random_moments(tmp_path, clock):
    rng = random.Random(20240611)
    outcomes = []
    for run in range(3):
        root = tmp_path / f"run{run}"
        async with running_node(root, clock) as r:
            originals = await prepare(r)
            proc = await start_tool(r.db_dir)
            # once the tool holds the chunk lock, kill it a random moment later (this is the kill timing)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while not r.db.log.chunk_lock.locked() and proc.returncode is None and loop.time() < deadline:
                await asyncio.sleep(0.001)
            locked = r.db.log.chunk_lock.locked()
            await asyncio.sleep(rng.uniform(0.0, 0.012))
            if proc.returncode is None:
                proc.kill()
            code = await proc.wait()
            said = (await proc.stdout.read()).decode()
            await until(lambda r=r: not r.db.log.chunk_lock.locked(), "the chunk lock to be released", 20.0)
            seen = states(r.db, originals)
            assert_whole_chunks(r.db, originals, seen)
            # mid-work: killed after the tool took the chunk lock, before it reported both chunks switched
            mid_work = locked and code == -signal.SIGKILL and said.count("Redacted ") < 2
            outcomes.append((sorted(set(seen.values())), "mid-work" if mid_work else f"exit {code}"))
        async with running_node(root, clock) as r:
            assert states(r.db, originals) == seen
            verify_all_chunks(r.db_dir)
            proc = await start_tool(r.db_dir)
            _, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
            assert set(states(r.db, originals).values()) == {"redacted"}
    print("outcomes of the random kills:", outcomes)
    assert any(kind == "mid-work" for _, kind in outcomes), outcomes
