"""``evdb certs`` through ``evdb.cli.main``, and the documentation of every sub-command and option."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from evdb.cli import main
from evdb.tls import load_node_tls
from evdb.tls.cli import COMMANDS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "certificates.md"


def test_create_ca_and_node_with_the_default_layout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["certs", "create-ca"]) == 0
    assert main(["certs", "create-node"]) == 0
    out = capsys.readouterr().out
    assert "certs/ca/ca.crt" in out and "127.0.0.1, localhost" in out
    tls = load_node_tls("certs/node1/node.crt", "certs/node1/node.key", "certs/ca")
    assert tls.san_ip_addresses == ["127.0.0.1"] and tls.san_dns_names == ["localhost"]
    assert stat.S_IMODE(os.stat("certs/node1/node.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat("certs/ca/ca.key").st_mode) == 0o600


def test_es_gencert_cli_command_lines_work_unchanged(tmp_path, capsys):
    ca = tmp_path / "es-ca"
    assert main(["certs", "create-ca", "-out", str(ca), "-days", "30", "--name", "Test CA"]) == 0
    argv = ["certs", "create-node", "-ca-certificate", str(ca / "ca.crt"), "-ca-key", str(ca / "ca.key")]
    argv += ["-out", str(tmp_path / "node1"), "-ip-addresses", "127.0.0.1,172.20.240.1"]
    argv += ["-dns-names", "localhost,eventstore-node1.localhost.com", "-common-name", "my-node"]
    assert main(argv) == 0
    tls = load_node_tls(tmp_path / "node1" / "node.crt", tmp_path / "node1" / "node.key", ca / "ca.crt")
    assert tls.san_ip_addresses == ["127.0.0.1", "172.20.240.1"]
    assert tls.san_dns_names == ["localhost", "eventstore-node1.localhost.com"]
    assert tls.common_name == "my-node" and tls.issuer == "CN=Test CA,O=evdb"


def test_existing_files_need_force(tmp_path, capsys):
    out = str(tmp_path / "ca")
    assert main(["certs", "create-ca", "--out", out]) == 0
    before = (tmp_path / "ca" / "ca.crt").read_bytes()
    capsys.readouterr()
    assert main(["certs", "create-ca", "--out", out]) == 1
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "ca" / "ca.crt").read_bytes() == before
    assert main(["certs", "create-ca", "--out", out, "--force"]) == 0
    assert (tmp_path / "ca" / "ca.crt").read_bytes() != before


def test_bad_input_is_an_error_message_and_exit_code_1(tmp_path, capsys):
    assert main(["certs", "create-ca", "--out", str(tmp_path / "ca")]) == 0
    argv = ["certs", "create-node", "--ca-certificate", str(tmp_path / "ca" / "ca.crt")]
    argv += ["--ca-key", str(tmp_path / "ca" / "ca.key"), "--out", str(tmp_path / "n")]
    assert main([*argv, "--ip-addresses", "1.2.3"]) == 1
    assert "'1.2.3' is not a valid IP address" in capsys.readouterr().err
    assert main(["certs", "create-node", "--ca-certificate", str(tmp_path / "nope.crt")]) == 1
    assert str(tmp_path / "nope.crt") in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["certs"])
    assert exit_.value.code == 2


@pytest.fixture(scope="module")
def node_files(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("cli")
    assert main(["certs", "create-ca", "--out", str(tmp_path / "ca")]) == 0
    argv = ["certs", "create-node", "--ca-certificate", str(tmp_path / "ca" / "ca.crt")]
    argv += ["--ca-key", str(tmp_path / "ca" / "ca.key"), "--out", str(tmp_path / "node1")]
    assert main([*argv, "--ip-addresses", "127.0.0.1,10.0.0.1", "--dns-names", "n1.example.com"]) == 0
    return tmp_path / "ca", tmp_path / "node1" / "node.crt", tmp_path / "node1" / "node.key"


def test_inspect_prints_the_fields(node_files, capsys):
    _, cert, _ = node_files
    capsys.readouterr()
    assert main(["certs", "inspect", str(cert)]) == 0
    out = capsys.readouterr().out
    for field in ("subject: CN=eventstoredb-node", "issuer: CN=evdb CA", "notBefore:", "notAfter:"):
        assert field in out
    assert "ipAddresses: 127.0.0.1, 10.0.0.1" in out and "dnsNames: n1.example.com" in out
    assert re.search(r"fingerprintSha256: [0-9a-f]{64}", out)


def test_inspect_json(node_files, capsys):
    _, cert, key = node_files
    capsys.readouterr()
    assert main(["certs", "inspect", str(cert), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["subject"] == "CN=eventstoredb-node" and data["ipAddresses"] == ["127.0.0.1", "10.0.0.1"]
    assert data["fingerprintSha256"] == load_node_tls(cert, key, cert.parent.parent / "ca").fingerprint_sha256
    assert data["additionalCertificates"] == [] and data["isCa"] is False
    assert main(["certs", "inspect", str(key)]) == 1
    assert str(key) in capsys.readouterr().err


def test_verify_runs_the_node_loader(node_files, tmp_path, capsys):
    ca, cert, key = node_files
    base = ["certs", "verify", "--certificate-file", str(cert), "--certificate-private-key-file", str(key)]
    capsys.readouterr()
    assert main([*base, "--trusted-root-certificates-path", str(ca)]) == 0
    assert capsys.readouterr().out.startswith("OK")
    assert main([*base, "--trusted-root-certificates-path", str(ca), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    argv = [*base, "--trusted-root-certificates-path", str(ca), "--certificate-reserved-node-common-name"]
    assert main([*argv, "other"]) == 1
    assert "CertificateReservedNodeCommonName" in capsys.readouterr().err
    assert main([*base, "--trusted-root-certificates-path", str(tmp_path / "missing")]) == 1
    assert str(tmp_path / "missing") in capsys.readouterr().err


def test_every_command_and_option_is_documented():
    from evdb.cli import build_parser

    text = DOCS.read_text()
    parser = build_parser()
    certs = parser._subparsers._group_actions[0].choices["certs"]  # type: ignore[union-attr]
    commands = certs._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(commands) == sorted(COMMANDS)
    for name, sub in commands.items():
        assert f"evdb certs {name}" in text, f"docs/certificates.md does not show `evdb certs {name}`"
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in text, f"docs/certificates.md does not mention {option} of {name}"
