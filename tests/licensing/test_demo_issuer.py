"""The demo issuer's private key ships with evdb, so a node trusts it only when asked (issue 20, item 9):
``LicenseTrustedIssuers: demo``, dev mode, or the local cluster launcher (which writes the option);
a node that trusts it says so at start with a warning."""

from __future__ import annotations

import logging

import pytest
import yaml

from evdb.cluster.launcher import LocalCluster
from evdb.licensing import LicenseWrongIssuer, check_license, load_license
from evdb.licensing.issuers import issue_demo_license
from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options

NOW = 1_800_000_000
WARNING = "Licences signed by evdb's demo issuer are trusted"


def _options(tmp_path, *extra):
    return load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure",
            "--http-port", "0", "--stats-period-sec", "0", *extra,
        ],
        {},
    )  # fmt: skip


def _log(node: Node) -> list[dict]:
    return [line for path in node_log_files(node.options.log, node.name) for line in read_log_lines(path)]


def _demo_warnings(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["@m"].startswith(WARNING)]


def test_the_default_trusts_no_issuer_and_refuses_a_demo_licence(tmp_path, caplog):
    options = _options(tmp_path, "--license-key", issue_demo_license(NOW))
    assert options.license_trusted_issuers == ""
    check = check_license(options, NOW + 1)
    assert check.license is None and isinstance(check.error, LicenseWrongIssuer)
    assert "demo issuer" in str(check.error) and "LicenseTrustedIssuers" in str(check.error)
    logger = logging.getLogger("test.licence.default")
    with caplog.at_level(logging.INFO, logger="test.licence.default"):
        assert load_license(options, logger, NOW + 1) is None
    assert "Licence key rejected (wrong issuer)" in caplog.text
    assert WARNING not in caplog.text


async def test_a_node_on_defaults_refuses_a_demo_licence(tmp_path, clock):
    options = _options(tmp_path, "--license-key", issue_demo_license(clock.time()))
    async with Node(options, clock=clock, name="defaults") as node:
        assert node.license is None
        lines = _log(node)
    assert any(line["@m"].startswith("Licence key rejected (wrong issuer)") for line in lines)
    assert not _demo_warnings(lines)


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (("--dev",), "dev mode"),
        (("--license-trusted-issuers", "demo"), "LicenseTrustedIssuers includes demo"),
    ],
)
async def test_dev_mode_or_the_option_trusts_the_demo_issuer_with_a_warning(tmp_path, clock, extra, why):
    options = _options(tmp_path, "--license-key", issue_demo_license(clock.time()), *extra)
    async with Node(options, clock=clock, name="demo") as node:
        assert node.license is not None and node.license.licensee == "evdb demo"
        lines = _log(node)
    (warning,) = _demo_warnings(lines)
    assert warning["@l"] == "Warning" and why in warning["@m"] and "development" in warning["@m"]


async def test_the_local_cluster_trusts_the_demo_issuer_with_a_warning(tmp_path, clock):
    cluster = LocalCluster(tmp_path / "cluster")
    info = cluster.create(nodes=1, insecure=True)  # writes the node.yaml files, starts nothing
    config_path = info["nodes"][0]["config"]
    with open(config_path) as f:
        config = yaml.safe_load(f)
    assert config["LicenseTrustedIssuers"] == "demo"
    config["HttpPort"] = 0  # the node runs in this process here; the launcher's port may be taken since
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    options = load_options(["--config", config_path], {})
    async with Node(options, name="node1") as node:
        assert node.license is not None and "REDACTION" in node.license.entitlements
        lines = _log(node)
    (warning,) = _demo_warnings(lines)
    assert warning["@l"] == "Warning"
