"""The system projections in a real ``evdb node`` process killed with SIGKILL while appends go on: after
a restart every link stream holds exactly one link per source event, in ``$all`` order (nothing lost,
nothing twice), and the projections resume from their checkpoints rather than from the start."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import defaultdict
from urllib.parse import urlsplit

import pytest
from kurrentdbclient import KurrentDBClient, NewEvent, StreamState
from kurrentdbclient.exceptions import NotFoundError
from waiting import wait_until

from evdb.cluster.launcher import LocalCluster

pytestmark = pytest.mark.slow

CATEGORIES = ("alpha", "beta", "gamma")
TYPES = ("Made", "Moved")
FIRST = 4200  # more handled events than KurrentDB's checkpoint threshold (4000): a checkpoint is written


def _client(url: str) -> KurrentDBClient:
    return KurrentDBClient(f"kurrentdb://{urlsplit(url).netloc}?tls=false")


def _links(client: KurrentDBClient, stream: str) -> list[str]:
    try:
        return [e.data.decode() for e in client.get_stream(stream, resolve_links=False)]
    except NotFoundError:
        return []


class Writer(threading.Thread):
    """Appends one event at a time to streams of three categories until stopped or the node dies."""

    def __init__(self, url: str) -> None:
        super().__init__(name="kill9-writer", daemon=True)
        self.client = _client(url)
        self.acked = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                stream = f"{CATEGORIES[n % 3]}-live{n % 17}"
                event = NewEvent(type=TYPES[n % 2], data=json.dumps({"n": n}).encode())
                self.client.append_to_stream(
                    stream, events=[event], current_version=StreamState.ANY, timeout=5
                )
                self.acked += 1
                n += 1
        except Exception:  # the node was killed under it
            pass
        finally:
            self.client.close()


def test_kill9_while_appending_neither_loses_nor_duplicates_links(tmp_path):
    local = LocalCluster(tmp_path / "single")
    options = {"RunProjections": "System", "StartStandardProjections": "true"}
    local.up(nodes=1, insecure=True, options=options, timeout=60, log=lambda *_: None)
    try:
        node = local.info()["nodes"][0]
        client = _client(node["url"])
        # enough events in a few appends that a checkpoint (4000 handled) is written before the kill
        for batch in range(FIRST // 100):
            events = [NewEvent(type=TYPES[k % 2], data=b'{"first":true}') for k in range(100)]
            stream = f"{CATEGORIES[batch % 3]}-first{batch}"
            client.append_to_stream(stream, events=events, current_version=StreamState.NO_STREAM)

        def checkpointed() -> bool:
            stats = client.get_projection_statistics(name="$by_category")
            return stats.last_checkpoint not in ("", "C:0/P:-1")

        wait_until(checkpointed, 20, "the first checkpoint of $by_category")
        client.close()

        writer = Writer(node["url"])
        writer.start()
        wait_until(lambda: writer.acked >= 300, 20, "appends under way")
        os.kill(int(node["pid"]), signal.SIGKILL)  # mid-append, projections mid-batch
        writer.join(30)
        assert not writer.is_alive()

        local.start_node("node1")
        local.wait_for_node("node1", timeout=60)
        client = _client(node["url"])
        try:
            client.append_to_stream(
                "alpha-after",
                events=[NewEvent(type="Made", data=b"{}")],
                current_version=StreamState.NO_STREAM,
            )
            sources = [e for e in client.read_all() if not e.stream_name.startswith("$")]
            expected_ce: dict[str, list[str]] = defaultdict(list)
            expected_et: dict[str, list[str]] = defaultdict(list)
            expected_streams: list[str] = []
            for e in sources:
                link = f"{e.stream_position}@{e.stream_name}"
                expected_ce[e.stream_name.split("-", 1)[0]].append(link)
                expected_et[e.type].append(link)
                if e.stream_position == 0:
                    expected_streams.append(link)
            assert len(sources) >= FIRST + 300 + 1

            def caught_up() -> bool:
                return _links(client, "$ce-alpha")[-1:] == ["0@alpha-after"] and all(
                    len(_links(client, f"$et-{t}")) == len(expected_et[t]) for t in TYPES
                )

            wait_until(caught_up, 30, "the projections to catch up after the restart")
            for category in CATEGORIES:
                assert _links(client, f"$ce-{category}") == expected_ce[category], category
            for kind in TYPES:
                assert _links(client, f"$et-{kind}") == expected_et[kind], kind
            streams = [
                link for link in _links(client, "$streams") if not link.split("@", 1)[1].startswith("$")
            ]
            assert streams == expected_streams

            # resumed from its checkpoint: it handled far fewer events than there are since this start
            stats = client.get_projection_statistics(name="$by_category")
            assert stats.status == "Running"
            assert 0 < stats.events_processed_after_restart < len(sources) - FIRST // 2
            # $by_event_type wrote its start's $Checkpoint to $et at the checkpoint it resumed from
            et = client.get_stream("$et", resolve_links=False)
            assert {e.type for e in et} == {"$Checkpoint"} and len(et) >= 3
        finally:
            client.close()
    finally:
        local.down(timeout=15, log=lambda *_: None)
