from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import stat
import subprocess

import pytest

from evdb.cli import main as evdb_main
from evdb.tls import CertificateError, create_ca, create_node_certificate, load_node_tls


@pytest.fixture
def pki(tmp_path):
    ca_cert, ca_key = create_ca(tmp_path / "ca")
    cert, key = create_node_certificate(
        ca_cert, ca_key, tmp_path / "node1", ip_addresses=["127.0.0.1"], dns_names=["localhost"]
    )
    return tmp_path, ca_cert, ca_key, cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_openssl_verifies_the_chain(pki):
    _, ca_cert, _, cert, _ = pki
    out = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca_cert), str(cert)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert ": OK" in out.stdout


def test_keys_are_private_and_files_are_not_overwritten(pki):
    _, ca_cert, ca_key, _cert, key = pki
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ca_key).st_mode) == 0o600
    with pytest.raises(Exception, match="already exists"):
        create_node_certificate(ca_cert, ca_key, key.parent)


def test_loading_checks_everything(pki, tmp_path):
    base, ca_cert, _ca_key, cert, key = pki
    tls = load_node_tls(str(cert), str(key), str(ca_cert))
    assert tls.common_name == "eventstoredb-node" and tls.san_ip_addresses == ["127.0.0.1"]
    with pytest.raises(CertificateError, match="does not exist"):
        load_node_tls(str(cert), str(base / "missing.key"), str(ca_cert))
    other_ca, other_key = create_ca(tmp_path / "other")
    other_cert, other_node_key = create_node_certificate(other_ca, other_key, tmp_path / "othernode")
    with pytest.raises(CertificateError, match="does not belong"):
        load_node_tls(str(cert), str(other_node_key), str(ca_cert))
    with pytest.raises(CertificateError, match="chain validation failed"):
        load_node_tls(str(other_cert), str(other_node_key), str(ca_cert))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(CertificateError, match="not a PEM certificate"):
        load_node_tls(str(garbage), str(key), str(ca_cert))
    with pytest.raises(CertificateError, match="no trusted root"):
        empty = tmp_path / "empty"
        empty.mkdir()
        load_node_tls(str(cert), str(key), str(empty))


def test_symlink_repoint_loads_the_new_certificate(pki, tmp_path):
    _base, ca_cert, ca_key, cert, key = pki
    second_cert, second_key = create_node_certificate(ca_cert, ca_key, tmp_path / "node1b")
    links = tmp_path / "links"
    links.mkdir()
    (links / "node.crt").symlink_to(cert)
    (links / "node.key").symlink_to(key)
    first = load_node_tls(str(links / "node.crt"), str(links / "node.key"), str(ca_cert)).fingerprint_sha256
    for name, target in (("node.crt", second_cert), ("node.key", second_key)):
        (links / name).unlink()
        (links / name).symlink_to(target)
    second = load_node_tls(str(links / "node.crt"), str(links / "node.key"), str(ca_cert)).fingerprint_sha256
    assert first != second


async def test_mutual_tls_handshake(pki, tmp_path):
    _, ca_cert, _ca_key, cert, key = pki
    tls = load_node_tls(str(cert), str(key), str(ca_cert))

    async def handle(reader, writer):
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(
        handle, "127.0.0.1", 0, ssl=tls.server_context(require_client_cert=True)
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls.client_context(), server_hostname="localhost"
    )
    assert await reader.read() == b"hello"
    writer.close()
    other_ca, other_key = create_ca(tmp_path / "other")
    other_cert, other_node_key = create_node_certificate(other_ca, other_key, tmp_path / "othernode")
    stranger = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    stranger.load_cert_chain(other_cert, other_node_key)
    stranger.load_verify_locations(str(ca_cert))
    try:  # TLS 1.3 reports a refused client certificate after the handshake, on the first read
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=stranger, server_hostname="localhost"
        )
        received = await reader.read()
    except (ssl.SSLError, ConnectionResetError):
        received = None
    assert received != b"hello"  # a node certificate from another CA is refused
    server.close()
    await server.wait_closed()


def test_cli(tmp_path, capsys):
    assert evdb_main(["certs", "create-ca", "--out", str(tmp_path / "ca")]) == 0
    assert (
        evdb_main(
            [
                "certs",
                "create-node",
                "--ca-certificate",
                str(tmp_path / "ca" / "ca.crt"),
                "--ca-key",
                str(tmp_path / "ca" / "ca.key"),
                "--out",
                str(tmp_path / "node1"),
                "--ip-addresses",
                "127.0.0.1,10.0.0.1",
            ]
        )
        == 0
    )
    assert evdb_main(["certs", "inspect", str(tmp_path / "node1" / "node.crt")]) == 0
    assert "10.0.0.1" in capsys.readouterr().out
    assert evdb_main(["certs", "create-ca", "--out", str(tmp_path / "ca")]) == 1  # exists
