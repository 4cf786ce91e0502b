"""The contract of the dashboard's node port (tui/client.py ``NodeClient``): what every request answers,
as the dashboard relies on it. One suite, inherited by the real client against a real in-process node
and by the real client against each fake node the dashboard tests use (tests/tui/fake_node.py), so a
fake cannot drift from what a node answers unnoticed.

A subclass gives the ``world`` fixture: the port, the node's URL, and a way to write events (setup only,
not through the port). Each clause is named ``test_<port method>...``: tests/tui/test_client_contract.py
checks that every method of the port has one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tui.answers import json_or_text
from tui.calls import ScavengeForm, stop_scavenge
from tui.client import NodeClient

#: how long a started scavenge may take to show in /admin/scavenge/last (a loaded machine)
SCAVENGE_SHOWS_WITHIN = 30.0


@dataclass
class World:
    client: NodeClient
    node: str  # base URL
    append: Callable[[str, int], Awaitable[None]]  # write n events of type "Counted" to a stream


class NodeClientContract:
    """Every clause holds for an evdb node with auto-scavenge licensed, certificates and persistent
    subscriptions served (the fakes' worlds switch those on)."""

    # -- gossip, info, options ----------------------------------------------------------------------
    async def test_gossip_names_the_node_itself(self, world: World) -> None:
        response = await world.client.gossip(world.node)
        assert response.status_code == 200
        body = response.json()
        url = urlsplit(world.node)
        own = [
            m
            for m in body["members"]
            if (m.get("httpEndPointIp"), m.get("httpEndPointPort")) == (url.hostname, url.port)
            or (body.get("serverIp"), body.get("serverPort"))
            == (m.get("httpEndPointIp"), m.get("httpEndPointPort"))
        ]
        assert own, body
        assert own[0]["isAlive"] is True and isinstance(own[0]["state"], str) and own[0]["state"]
        assert isinstance(own[0]["writerCheckpoint"], int)

    async def test_info_says_evdb(self, world: World) -> None:
        response = await world.client.info(world.node)
        assert response.status_code == 200
        assert response.json()["features"]["evdb"] is True

    async def test_options_are_rows_by_name(self, world: World) -> None:
        response = await world.client.options(world.node)
        assert response.status_code == 200
        rows = response.json()
        assert isinstance(rows, list) and rows
        assert all(isinstance(row, dict) and isinstance(row.get("name"), str) for row in rows)

    # -- scavenge -----------------------------------------------------------------------------------
    async def test_scavenge_current_names_none_when_idle(self, world: World) -> None:
        response = await world.client.scavenge_current(world.node)
        assert response.status_code == 200
        assert json_or_text(response).get("scavengeId") == ""

    async def test_scavenge_progress_says_whether_one_runs(self, world: World) -> None:
        response = await world.client.scavenge_progress(world.node)
        assert response.status_code == 200
        body = response.json()
        assert body["running"] is False
        assert body.get("last") is None or isinstance(body["last"], dict)

    async def test_scavenge_last_names_an_id_and_a_result(self, world: World) -> None:
        response = await world.client.scavenge_last(world.node)
        assert response.status_code == 200
        body = response.json()
        assert isinstance(body.get("scavengeId"), str) and isinstance(body.get("scavengeResult"), str)

    async def test_send_a_start_answers_the_scavenge_id_which_the_node_then_reports(
        self, world: World
    ) -> None:
        started = await world.client.send(ScavengeForm().call(world.node))
        assert started.status_code == 200, started.text
        scavenge_id = json_or_text(started).get("scavengeId")
        assert isinstance(scavenge_id, str) and scavenge_id
        deadline = time.monotonic() + SCAVENGE_SHOWS_WITHIN
        try:
            while True:
                last = (await world.client.scavenge_last(world.node)).json()
                progress = (await world.client.scavenge_progress(world.node)).json()
                named = (
                    progress.get("scavengeId")
                    if progress["running"]
                    else (progress.get("last") or {}).get("scavengeId")
                )
                if last.get("scavengeId") == scavenge_id and named == scavenge_id:
                    break
                assert time.monotonic() < deadline, (last, progress)
                await asyncio.sleep(0.05)
        finally:  # the node is left idle for the other clauses (404: it had ended)
            stopped = await world.client.send(stop_scavenge(world.node, scavenge_id))
            assert stopped.status_code in (200, 404), stopped.text

    async def test_send_a_stop_of_no_such_scavenge_is_404(self, world: World) -> None:
        response = await world.client.send(stop_scavenge(world.node, "no-such-scavenge"))
        assert response.status_code == 404
        assert "Scavenge Id does not exist" in response.text

    async def test_metrics_are_prometheus_text_with_the_statuses(self, world: World) -> None:
        response = await world.client.metrics(world.node)
        assert response.status_code == 200
        assert "kurrentdb_statuses{" in response.text

    # -- streams ------------------------------------------------------------------------------------
    async def test_read_stream_pages_newest_first_with_the_data(self, world: World) -> None:
        await world.append("contract-counted", 3)
        forward = await world.client.read_stream(world.node, "contract-counted", 0, "forward", 2)
        assert forward.status_code == 200
        entries = forward.json()["entries"]
        assert [e["eventNumber"] for e in entries] == [1, 0]  # a feed is newest first, read either way
        assert all(e["eventType"] == "Counted" and e["streamId"] == "contract-counted" for e in entries)
        assert entries[1]["data"] == {"n": 0} and isinstance(entries[1]["updated"], str)
        backward = await world.client.read_stream(world.node, "contract-counted", count=2)
        assert [e["eventNumber"] for e in backward.json()["entries"]] == [2, 1]

    async def test_read_stream_of_no_such_stream_is_404(self, world: World) -> None:
        response = await world.client.read_stream(world.node, "contract-never-written", count=1)
        assert response.status_code == 404

    # -- auto-scavenge, backup, certificates, subscriptions -----------------------------------------
    async def test_auto_scavenge_status_says_its_state(self, world: World) -> None:
        response = await world.client.auto_scavenge_status(world.node)
        assert response.status_code == 200
        assert isinstance(response.json()["state"], str)

    async def test_auto_scavenge_progress_is_an_object(self, world: World) -> None:
        response = await world.client.auto_scavenge_progress(world.node)
        assert response.status_code == 200
        assert isinstance(response.json(), dict)

    async def test_backup_current_of_a_node_never_backed_up_is_204(self, world: World) -> None:
        response = await world.client.backup_current(world.node)
        assert response.status_code == 204 and not response.content

    async def test_certificates_say_whether_tls_is_on(self, world: World) -> None:
        response = await world.client.certificates(world.node)
        assert response.status_code == 200
        body = response.json()
        assert isinstance(body["secure"], bool) and "lastReload" in body

    async def test_subscriptions_are_a_list(self, world: World) -> None:
        response = await world.client.subscriptions(world.node)
        assert response.status_code == 200
        assert isinstance(response.json(), list)

    async def test_subscription_info_of_no_such_group_is_404(self, world: World) -> None:
        response = await world.client.subscription_info(world.node, "contract-stream", "no-such-group")
        assert response.status_code == 404

    async def test_stats_are_grouped_with_no_archive_figures_where_the_archive_is_off(
        self, world: World
    ) -> None:
        response = await world.client.stats(world.node)
        assert response.status_code == 200
        body = response.json()
        assert isinstance(body["es"], dict) and "archive" not in body["es"]  # Archive: Enabled is off

    async def test_mirror_status_of_a_node_is_404(self, world: World) -> None:
        """A node is not a mirror: what ``--mirror`` pointed at a node reads."""
        response = await world.client.mirror_status(world.node)
        assert response.status_code == 404

    async def test_aclose_ends_the_client(self, world: World) -> None:
        await world.client.aclose()
