"""When auto-scavenge runs: the YAML option, the licence, dev mode and MemDb, the earlier plugin form;
and the log lines that say so."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import httpx
import pytest

from evdb.autoscavenge.enabling import AutoScavengeNotLicensed, decide, installation_directory
from evdb.licensing import License
from evdb.licensing.issuers import issue_demo_license
from evdb.licensing.loading import check_license
from evdb.node import VERSION, Node
from evdb.options import load_options
from tests.autoscavenge.conftest import ADMIN, OPS, USER, add_plain_user, log_messages, options_for

NOW = 1_700_000_000.0


def _license(at: float = NOW, entitlements: tuple[str, ...] | None = None) -> License:
    token = issue_demo_license(at, entitlements=entitlements)
    options = load_options(["--license-key", token, "--license-trusted-issuers", "demo"], {})
    lic = check_license(options, at).license
    assert lic is not None
    return lic


def _decide(tmp_path, caplog, *argv: str, license: License | None = None, now: float = NOW):
    options = load_options(["--installation-directory", str(tmp_path / "install"), *argv], {})
    logger = logging.getLogger("test.enabling")
    caplog.set_level(logging.INFO, "test.enabling")
    return decide(options, license, now, logger, VERSION)


def _plugin(
    tmp_path, *, enabled: bool | None = True, manifest: dict | None = None, dll: bool = False
) -> None:
    folder = tmp_path / "install" / "plugins" / "my-auto-scavenge"
    folder.mkdir(parents=True)
    if dll:
        (folder / "EventStore.AutoScavenge.dll").write_bytes(b"MZ")
    else:
        (folder / "plugin.json").write_text(
            json.dumps(manifest or {"name": "AutoScavenge", "version": "0.0.1"})
        )
    if enabled is not None:
        config = tmp_path / "install" / "config"
        config.mkdir(parents=True)
        body = {"Service": {"Plugins": {"AutoScavenge": {"Enabled": enabled}}}}
        (config / "auto-scavenge-plugin-config.json").write_text(json.dumps(body))


def test_on_by_default_with_a_valid_licence(tmp_path, caplog):
    e = _decide(tmp_path, caplog, license=_license())
    assert (e.mapped, e.active, e.plugin_form) == (True, True, False)
    assert f'"AutoScavenge" "{VERSION}" plugin enabled.' in caplog.text  # KurrentDB's line


def test_off_without_a_licence_naming_the_setting(tmp_path, caplog):
    e = _decide(tmp_path, caplog)
    assert (e.mapped, e.active) == (False, False)
    assert (
        f'"AutoScavenge" "{VERSION}" plugin disabled. "To enable AutoScavenge: set LicenseKey' in caplog.text
    )


def test_off_with_an_expired_licence_or_without_the_entitlement(tmp_path, caplog):
    assert not _decide(tmp_path, caplog, license=_license(NOW - 40 * 86400), now=NOW).active
    assert "the licence has expired" in caplog.text
    assert not _decide(tmp_path, caplog, license=_license(entitlements=("REDACTION",))).active
    assert "does not grant the AUTO_SCAVENGE entitlement" in caplog.text


def test_enabled_false_turns_it_off(tmp_path, caplog):
    e = _decide(tmp_path, caplog, "--auto-scavenge-enabled", "false", license=_license())
    assert not e.mapped
    assert (
        "plugin disabled. \"To enable AutoScavenge: Do not set 'AutoScavenge:Enabled' to 'false'\""
        in caplog.text
    )


@pytest.mark.parametrize(("flag", "words"), [("--dev", "dev mode"), ("--mem-db", "mem-db")])
@pytest.mark.parametrize("explicit", [False, True])
def test_refused_in_dev_mode_and_with_mem_db(tmp_path, caplog, flag, words, explicit):
    argv = [flag, *(["--auto-scavenge-enabled", "true"] if explicit else [])]
    e = _decide(tmp_path, caplog, *argv, license=_license())
    assert (e.mapped, e.active) == (False, False)
    assert f'plugin disabled. "AutoScavenge is not compatible with {words}' in caplog.text


def test_explicitly_enabled_without_a_licence_maps_the_endpoints_but_does_not_run(tmp_path, caplog):
    e = _decide(tmp_path, caplog, "--auto-scavenge-enabled", "true")
    assert (e.mapped, e.active) == (True, False)
    assert "AutoScavenge is not licensed, stopping." in caplog.text


def test_the_yaml_form_and_the_default_installation_directory(tmp_path):
    config = tmp_path / "conf" / "node.yaml"
    config.parent.mkdir()
    config.write_text("AutoScavenge:\n  Enabled: false\n  NodeTimeoutSec: 42\n")
    options = load_options(["--config", str(config)], {})
    assert options.auto_scavenge_enabled is False
    assert options.auto_scavenge_node_timeout_sec == 42
    assert installation_directory(options) == config.parent.resolve()


def test_the_earlier_plugin_form(tmp_path, caplog):
    _plugin(tmp_path)
    e = _decide(tmp_path, caplog, license=_license())
    assert (e.mapped, e.active, e.plugin_form, e.version) == (True, True, True, "0.0.1")
    assert "Plugins found in" in caplog.text and "AutoScavenge 0.0.1 (my-auto-scavenge)" in caplog.text
    assert "Loaded plugin AutoScavenge 0.0.1" in caplog.text
    assert '"AutoScavenge" "0.0.1" plugin enabled.' in caplog.text


def test_the_plugin_form_accepts_kurrentdbs_plugin_folder(tmp_path, caplog):
    _plugin(tmp_path, dll=True)
    assert _decide(tmp_path, caplog, license=_license()).plugin_form


def test_the_plugin_form_is_off_until_the_json_enables_it(tmp_path, caplog):
    _plugin(tmp_path, enabled=None)
    e = _decide(tmp_path, caplog, license=_license())
    assert not e.mapped
    assert "set Service:Plugins:AutoScavenge:Enabled to true in a JSON file in" in caplog.text


def test_a_plugin_folder_without_the_plugin_is_ignored(tmp_path, caplog):
    _plugin(tmp_path, manifest={"name": "SomethingElse"})
    e = _decide(tmp_path, caplog, license=_license())
    assert (e.mapped, e.plugin_form) == (True, False)
    assert "holds no evdb plugin" in caplog.text


def test_the_plugin_form_without_a_licence_refuses_to_start(tmp_path, caplog):
    _plugin(tmp_path)
    with pytest.raises(AutoScavengeNotLicensed):
        _decide(tmp_path, caplog)
    assert "AutoScavenge is not licensed, stopping." in caplog.text


def test_the_plugin_form_without_a_licence_exits_the_process(tmp_path):
    _plugin(tmp_path)
    config = tmp_path / "install" / "node.yaml"
    config.write_text(f"Db: {tmp_path / 'db'}\nLog: {tmp_path / 'log'}\nInsecure: true\nHttpPort: 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "evdb.cli", "node", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "AutoScavenge is not licensed, stopping" in done.stderr


async def test_a_node_without_the_feature_does_not_map_the_endpoints(tmp_path, clock):
    node = Node(options_for(tmp_path), clock=clock, name="plain")
    async with node, httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as c:
        for path in ("/auto-scavenge/enabled", "/auto-scavenge/status"):
            assert (await c.get(path)).status_code == 404
        assert (await c.post("/auto-scavenge/pause")).status_code == 404
        assert "/auto-scavenge/status" not in (await c.get("/openapi.json")).json()["paths"]
    assert any("plugin disabled" in m for m in log_messages(tmp_path, "plain"))


async def test_explicitly_enabled_without_a_licence_answers_enabled_false(tmp_path, clock):
    options = options_for(tmp_path, "--auto-scavenge-enabled", "true")
    async with (
        Node(options, clock=clock, name="unlicensed") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as c,
    ):
        assert (await c.get("/auto-scavenge/enabled")).json() == {"enabled": False}
        r = await c.get("/auto-scavenge/status")
        assert r.status_code == 503
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert r.json()["detail"] == "AutoScavenge is not enabled"


async def test_a_licence_that_expires_while_running_stops_the_feature(tmp_path, clock):
    async with (
        Node(options_for(tmp_path, license_at=clock.time()), clock=clock, name="expiring") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as c,
    ):
        assert (await c.get("/auto-scavenge/enabled")).json() == {"enabled": True}
        clock.advance(31 * 86400)
        await node.auto_scavenge.tick()
        assert (await c.get("/auto-scavenge/enabled")).json() == {"enabled": False}
        assert (await c.get("/auto-scavenge/status")).status_code == 503
    assert any(
        "AutoScavenge is not licensed, stopping. The licence has expired" in m
        for m in log_messages(tmp_path, "expiring")
    )


async def test_plugin_form_roles(tmp_path, clock):
    """Plugin 0.0.1: /enabled is anonymous, every other endpoint needs $ops or $admins."""
    _plugin(tmp_path)
    async with (
        Node(options_for(tmp_path, license_at=clock.time()), clock=clock, name="plugin") as node,
        httpx.AsyncClient(base_url=node.http_url) as anon,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN) as admin,
        httpx.AsyncClient(base_url=node.http_url, auth=OPS) as ops,
        httpx.AsyncClient(base_url=node.http_url, auth=USER) as user,
    ):
        await add_plain_user(admin)
        assert (await anon.get("/auto-scavenge/enabled")).json() == {"enabled": True}
        assert (await anon.get("/auto-scavenge/status")).status_code == 401
        assert (await user.get("/auto-scavenge/status")).status_code == 403
        assert (await ops.get("/auto-scavenge/status")).status_code == 200
    messages = log_messages(tmp_path, "plugin")
    assert '"AutoScavenge" "0.0.1" plugin enabled.' in messages
