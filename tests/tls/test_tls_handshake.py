"""Real TLS handshakes on loopback between the contexts a loaded NodeTls builds."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from evdb.tls import (
    CertificateError,
    NodeTls,
    check_peer_node_certificate,
    create_ca,
    create_node_certificate,
    load_node_tls,
)

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> dict[str, NodeTls]:
    """``n1`` and ``n2`` share a CA; ``stranger`` has its own."""
    base = tmp_path_factory.mktemp("handshake")
    ca_cert, ca_key = create_ca(base / "ca")
    other_cert, other_key = create_ca(base / "other-ca")
    loaded = {}
    for name, (cert, key) in {
        "n1": (ca_cert, ca_key),
        "n2": (ca_cert, ca_key),
        "stranger": (other_cert, other_key),
    }.items():
        node_cert, node_key = create_node_certificate(cert, key, base / name, ip_addresses=["127.0.0.1"])
        loaded[name] = load_node_tls(node_cert, node_key, cert)
    return loaded


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "127.0.0.1"
) -> tuple[dict[str, object], dict[str, object]]:
    """One connection: the server sends b"hello" after its handshake. Returns what each side saw."""
    served: dict[str, object] = {}
    received: dict[str, object] = {}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)

        def serve() -> None:
            try:
                connection, _ = listener.accept()
                connection.settimeout(TIMEOUT)
                with server.wrap_socket(connection, server_side=True) as tls:
                    served["peer"] = tls.getpeercert(binary_form=True)
                    tls.sendall(b"hello")
                    tls.recv(1)  # wait for the client to close
            except (OSError, ssl.SSLError) as exc:
                served["error"] = exc

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=TIMEOUT) as raw,
                client.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                received["peer"] = tls.getpeercert(binary_form=True)
                received["data"] = tls.recv(5)
        except (OSError, ssl.SSLError) as exc:
            received["error"] = exc
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    return served, received


def test_mutual_tls_between_two_nodes_of_one_ca(nodes):
    n1, n2 = nodes["n1"], nodes["n2"]
    served, received = handshake(n1.server_context(require_client_cert=True), n2.client_context())
    assert received.get("data") == b"hello", received
    assert "error" not in served, served
    assert served["peer"] == n2.certificate.public_bytes(Encoding.DER)
    assert received["peer"] == n1.certificate.public_bytes(Encoding.DER)
    check_peer_node_certificate(served["peer"], "eventstoredb-node")  # type: ignore[arg-type]
    with pytest.raises(CertificateError, match="does not match the reserved node common name 'other-node'"):
        check_peer_node_certificate(served["peer"], "other-node")  # type: ignore[arg-type]


def test_the_server_refuses_a_client_certificate_from_another_ca(nodes):
    served, received = handshake(
        nodes["n1"].server_context(require_client_cert=True), _client_trusting(nodes["stranger"], nodes["n1"])
    )
    assert isinstance(served.get("error"), ssl.SSLError), served
    assert "certificate verify failed" in str(served["error"])
    assert received.get("data") != b"hello"


def test_the_server_refuses_a_client_without_a_certificate_when_required(nodes):
    anonymous = ssl.create_default_context(cadata=nodes["n1"].trusted_roots_pem.decode())
    served, received = handshake(nodes["n1"].server_context(require_client_cert=True), anonymous)
    assert isinstance(served.get("error"), ssl.SSLError), served
    assert received.get("data") != b"hello"
    served, received = handshake(nodes["n1"].server_context(), anonymous)  # requested, not required
    assert received.get("data") == b"hello", received
    assert served["peer"] is None


def test_the_client_refuses_a_server_from_another_ca(nodes):
    served, received = handshake(nodes["stranger"].server_context(), nodes["n1"].client_context())
    assert isinstance(received.get("error"), ssl.SSLCertVerificationError), received
    assert "error" in served


def test_the_client_checks_the_server_name(nodes):
    _, received = handshake(nodes["n2"].server_context(), nodes["n1"].client_context(), "node9.example.com")
    assert isinstance(received.get("error"), ssl.SSLCertVerificationError), received
    _, received = handshake(
        nodes["n2"].server_context(), nodes["n1"].client_context(check_hostname=False), "node9.example.com"
    )
    assert received.get("data") == b"hello", received


def _client_trusting(presenting: NodeTls, trusting: NodeTls) -> ssl.SSLContext:
    """A client that presents ``presenting``'s certificate but trusts ``trusting``'s roots."""
    context = presenting.client_context()
    context.load_verify_locations(cadata=trusting.trusted_roots_pem.decode())
    return context
