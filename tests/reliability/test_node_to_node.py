"""The node-to-node listener (votes, replication, forwarded writes) lets in only a client that shows
a certificate from a trusted CA carrying the reserved node common name. Each way in is tried."""

from __future__ import annotations

import ssl

import httpx
import pytest

from evdb.node import Node
from evdb.options import load_options
from evdb.tls import create_ca, create_node_certificate

RESERVED = "eventstoredb-node"
ENDPOINTS = [("POST", "/internal/vote"), ("POST", "/internal/write"), ("GET", "/internal/replicate")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = create_ca(base / "ca")
    other_cert, other_key = create_ca(base / "other-ca")
    made = {
        "node": create_node_certificate(ca_cert, ca_key, base / "node"),
        "peer": create_node_certificate(ca_cert, ca_key, base / "peer"),
        "wrong-cn": create_node_certificate(ca_cert, ca_key, base / "wrong-cn", common_name="intruder"),
        "other-ca": create_node_certificate(other_cert, other_key, base / "other-ca-node"),
    }
    return {"ca": ca_cert, "ca_dir": ca_cert.parent, **made}


@pytest.fixture
async def node(pki, tmp_path):
    cert, key = pki["node"]
    options = load_options(
        [
            "--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--http-port", "0",
            "--replication-port", "0", "--chunk-size", "65536", "--stats-period-sec", "0",
            "--certificate-file", str(cert), "--certificate-private-key-file", str(key),
            "--trusted-root-certificates-path", str(pki["ca_dir"]),
        ],
        {},
    )  # fmt: skip
    async with Node(options, name="n2n") as n:
        yield n


def _context(pki, client: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if client is not None:
        cert, key = pki[client]
        context.load_cert_chain(str(cert), str(key))
    return context


async def _call(url: str, method: str, path: str, verify) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, verify=verify, timeout=10) as c:
        return await c.request(method, path, content=b"{}", headers={"Content-Type": "application/json"})


def _listener(node) -> str:
    return f"https://127.0.0.1:{node.cluster.replication_port}"


async def test_without_a_client_certificate_the_handshake_fails(node, pki):
    for method, path in ENDPOINTS:
        with pytest.raises(httpx.HTTPError):
            await _call(_listener(node), method, path, _context(pki, None))


async def test_a_certificate_of_another_ca_is_refused(node, pki):
    for method, path in ENDPOINTS:
        with pytest.raises(httpx.HTTPError):
            await _call(_listener(node), method, path, _context(pki, "other-ca"))


async def test_a_trusted_certificate_without_the_reserved_name_is_refused(node, pki):
    for method, path in ENDPOINTS:
        r = await _call(_listener(node), method, path, _context(pki, "wrong-cn"))
        assert r.status_code == 403
        assert RESERVED in r.text and "intruder" in r.text  # says why; carries no data


async def test_plain_http_gets_nothing(node):
    url = f"http://127.0.0.1:{node.cluster.replication_port}"
    for method, path in ENDPOINTS:
        try:
            r = await _call(url, method, path, False)
        except httpx.HTTPError:
            continue  # the TLS listener drops the connection
        assert r.status_code == 400 and b"internal" not in r.content


async def test_the_public_port_does_not_serve_the_internal_endpoints(node, pki):
    for method, path in ENDPOINTS:
        r = await _call(node.http_url, method, path, _context(pki, "peer"))
        assert r.status_code in (401, 404, 405)


async def test_a_node_certificate_gets_through_to_the_handler(node, pki):
    for method, path in ENDPOINTS:
        r = await _call(_listener(node), method, path, _context(pki, "peer"))
        assert r.status_code not in (401, 403), r.text
        assert r.status_code < 500, r.text
