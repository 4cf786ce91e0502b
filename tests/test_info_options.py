"""``GET /info/options``: each option's value in effect, what the configuration now gives, and whether
it waits for a restart (a restart-only option changed in the file) or for a reload."""

from __future__ import annotations

import httpx
import yaml

from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")


def write(config, **values) -> None:
    config.write_text(yaml.safe_dump(values))


async def test_info_options_shows_what_waits_for_a_restart_and_what_for_a_reload(tmp_path):
    config = tmp_path / "node.yaml"
    base = {
        "Insecure": True,
        "Db": str(tmp_path / "db"),
        "Log": str(tmp_path / "log"),
        "HttpPort": 0,
        "StatsPeriodSec": 0,
        "LicenseKey": "not-shown",
    }
    write(config, **base)
    async with Node(load_options(["--config", str(config)], {}), name="options") as node:
        async with httpx.AsyncClient(base_url=node.http_url, timeout=30) as anonymous:
            assert (await anonymous.get("/info/options")).status_code == 401
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:

            async def rows() -> dict[str, dict]:
                answer = await c.get("/info/options")
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert isinstance(body, list)
                return {row["name"]: row for row in body}

            before = await rows()
            unix = before["EnableUnixSocket"]
            assert (unix["value"], unix["configured"], unix["restartPending"]) == (False, False, False)
            assert before["LicenseKey"]["value"] == "****" and before["LicenseKey"]["source"] == "yaml"
            assert not any(row["restartPending"] or row["reloadPending"] for row in before.values())

            write(config, **base, EnableUnixSocket=True, LogLevel="Warning")
            after = await rows()
            unix = after["EnableUnixSocket"]
            assert (unix["value"], unix["configured"], unix["restartPending"]) == (False, True, True)
            level = after["LogLevel"]
            assert (level["value"], level["configured"]) == ("Information", "Warning")
            assert level["reloadPending"] is True and level["restartPending"] is False
            assert [n for n, row in after.items() if row["restartPending"]] == ["EnableUnixSocket"]

            # a reload refuses, naming the option and both values, and changes nothing
            assert (await c.post("/admin/reloadconfig")).status_code == 200
            error = (await c.get("/admin/certificates")).json()["lastReload"]["error"]
            assert "EnableUnixSocket changed, which needs a restart" in error
            assert "EnableUnixSocket runs with false, configured true" in error
            assert node.options.log_level == "Information"

            # a configuration that cannot be read: nothing pending, and why
            config.write_text("EnableUnixSocket: [\n")
            broken = await rows()
            assert broken["EnableUnixSocket"]["configured"] is None
            assert not broken["EnableUnixSocket"]["restartPending"]
            assert broken["EnableUnixSocket"]["configurationError"]
