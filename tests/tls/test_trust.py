"""FollowedTrust: a client keeps trusting the old CA and takes the new one when the CA link moves."""

from __future__ import annotations

import os
import ssl

from evdb.tls import create_ca, create_node_certificate, load_node_tls
from evdb.tls.certs import repoint_link
from evdb.tls.trust import FollowedTrust
from tests.tls.test_tls_handshake import handshake


def _server(base, name, ca_cert, ca_key) -> ssl.SSLContext:
    cert, key = create_node_certificate(ca_cert, ca_key, base / name, ip_addresses=["127.0.0.1"])
    return load_node_tls(cert, key, ca_cert).server_context(require_client_cert=False)


def test_a_repointed_ca_link_adds_the_new_ca_and_keeps_the_old_one(tmp_path):
    old_cert, old_key = create_ca(tmp_path / "gen-1")
    new_cert, new_key = create_ca(tmp_path / "gen-2")
    old_node = _server(tmp_path, "old-node", old_cert, old_key)
    new_node = _server(tmp_path, "new-node", new_cert, new_key)
    link = tmp_path / "ca"
    os.symlink("gen-1", link)
    trust = FollowedTrust(link / "ca.crt")

    assert trust.refresh() is False  # nothing changed
    assert handshake(old_node, trust.context)[1].get("data") == b"hello"
    refused = handshake(new_node, trust.context)[1].get("error")
    assert isinstance(refused, ssl.SSLCertVerificationError), refused

    repoint_link(link, "gen-2")
    assert trust.refresh() is True
    assert trust.refresh() is False
    # the same context, as a client already holds it: both generations are trusted now
    assert handshake(new_node, trust.context)[1].get("data") == b"hello"
    assert handshake(old_node, trust.context)[1].get("data") == b"hello"


def test_a_missing_ca_file_is_tried_again_later(tmp_path):
    create_ca(tmp_path / "gen-1")
    create_ca(tmp_path / "gen-2")
    link = tmp_path / "ca"
    os.symlink("gen-1", link)
    trust = FollowedTrust(link / "ca.crt")
    repoint_link(link, "gen-3")  # not there yet
    assert trust.refresh() is False
    (tmp_path / "gen-2").rename(tmp_path / "gen-3")
    assert trust.refresh() is True
    assert (
        handshake(
            _server(tmp_path, "n", tmp_path / "gen-3" / "ca.crt", tmp_path / "gen-3" / "ca.key"),
            trust.context,
        )[1].get("data")
        == b"hello"
    )
