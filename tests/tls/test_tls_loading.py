"""Loading a node's certificates: every check, each failure naming its file, and symlink repoints."""

from __future__ import annotations

import datetime
import os
import shutil

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evdb.errors import EvdbError
from evdb.tls import (
    CertificateError,
    create_ca,
    create_node_certificate,
    load_node_tls,
    read_certificates,
    repoint_link,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Two independent CAs, each with a node certificate: ``a`` and ``b``."""
    base = tmp_path_factory.mktemp("pki")
    sets = {}
    for name in ("a", "b"):
        ca_cert, ca_key = create_ca(base / name / "ca")
        cert, key = create_node_certificate(
            ca_cert, ca_key, base / name, ip_addresses=["127.0.0.1"], dns_names=["localhost"]
        )
        sets[name] = {"ca": ca_cert, "ca_key": ca_key, "cert": cert, "key": key, "ca_dir": ca_cert.parent}
    return sets


def test_a_valid_set_loads_and_describes_itself(pki):
    a = pki["a"]
    tls = load_node_tls(a["cert"], a["key"], a["ca_dir"])  # the ca folder holds ca.key too: ignored
    (certificate,) = read_certificates(a["cert"])
    assert tls.common_name == "eventstoredb-node"
    assert tls.subject == "CN=eventstoredb-node"
    assert tls.issuer == read_certificates(a["ca"])[0].subject.rfc4514_string()
    assert tls.san_ip_addresses == ["127.0.0.1"] and tls.san_dns_names == ["localhost"]
    assert tls.fingerprint_sha256 == certificate.fingerprint(hashes.SHA256()).hex()
    assert tls.not_after == certificate.not_valid_after_utc
    assert tls.trusted_root_files == (str(a["ca"]),)
    described = tls.describe()
    assert described["certificateFile"] == str(a["cert"]) and described["ipAddresses"] == ["127.0.0.1"]
    assert b"PRIVATE KEY" not in repr(tls).encode()


@pytest.mark.parametrize("missing", ["cert", "key", "ca"])
def test_a_missing_file_is_named(pki, tmp_path, missing):
    paths = {k: pki["a"][k] for k in ("cert", "key", "ca")}
    paths[missing] = tmp_path / f"gone.{missing}"
    with pytest.raises(CertificateError, match="does not exist") as error:
        load_node_tls(paths["cert"], paths["key"], paths["ca"])
    assert str(paths[missing]) in str(error.value)
    assert error.value.path == str(paths[missing])
    assert isinstance(error.value, EvdbError)


def test_nothing_configured_names_the_option(pki):
    with pytest.raises(CertificateError, match="CertificatePrivateKeyFile"):
        load_node_tls(pki["a"]["cert"], None, pki["a"]["ca"])


def test_a_key_that_does_not_match_the_certificate_is_refused(pki):
    a, b = pki["a"], pki["b"]
    with pytest.raises(CertificateError, match="does not match the node certificate") as error:
        load_node_tls(a["cert"], b["key"], a["ca"])
    assert str(b["key"]) in str(error.value)


def test_a_certificate_from_another_ca_does_not_chain(pki):
    a, b = pki["a"], pki["b"]
    with pytest.raises(CertificateError, match="chain could not be built to a trusted root") as error:
        load_node_tls(b["cert"], b["key"], a["ca"])
    assert str(b["cert"]) in str(error.value) and str(a["ca"]) in str(error.value)


def test_an_unusable_trusted_root_path_is_named(pki, tmp_path):
    a = pki["a"]
    dangling = tmp_path / "ca-link"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CertificateError, match="does not exist") as error:
        load_node_tls(a["cert"], a["key"], dangling)
    assert str(dangling) in str(error.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "ca.key").write_bytes(a["ca_key"].read_bytes())
    with pytest.raises(CertificateError, match="no trusted root certificate file") as error:
        load_node_tls(a["cert"], a["key"], empty)
    assert str(empty) in str(error.value)

    garbage = tmp_path / "roots"
    garbage.mkdir()
    shutil.copy(a["ca"], garbage / "ca.crt")
    (garbage / "broken.pem").write_text("not a certificate\n")
    with pytest.raises(CertificateError, match="neither a PEM nor a DER certificate") as error:
        load_node_tls(a["cert"], a["key"], garbage)
    assert str(garbage / "broken.pem") in str(error.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_trusted_root_folder_is_named(pki, tmp_path):
    a = pki["a"]
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copy(a["ca"], locked / "ca.crt")
    locked.chmod(0)
    try:
        with pytest.raises(CertificateError, match="cannot be read") as error:
            load_node_tls(a["cert"], a["key"], locked)
    finally:
        locked.chmod(0o755)
    assert str(locked) in str(error.value)


def test_a_folder_given_as_a_file_is_named(pki, tmp_path):
    with pytest.raises(CertificateError, match="is a folder") as error:
        load_node_tls(tmp_path, pki["a"]["key"], pki["a"]["ca"])
    assert str(tmp_path) in str(error.value)


@pytest.mark.parametrize(
    ("which", "content", "message"),
    [
        ("cert", b"garbage\n", "neither a PEM nor a DER certificate"),
        ("cert", b"-----BEGIN CERTIFICATE-----\nbm90IGRlcg==\n-----END CERTIFICATE-----\n", "no valid PEM"),
        ("key", b"garbage\n", "no valid PEM private key"),
        ("key", b"", "no valid PEM private key"),
    ],
)
def test_garbage_is_named(pki, tmp_path, which, content, message):
    paths = {k: pki["a"][k] for k in ("cert", "key", "ca")}
    paths[which] = tmp_path / f"garbage.{which}"
    paths[which].write_bytes(content)
    with pytest.raises(CertificateError, match=message) as error:
        load_node_tls(paths["cert"], paths["key"], paths["ca"])
    assert str(paths[which]) in str(error.value)


def test_an_encrypted_key_is_refused_with_the_reason(pki, tmp_path):
    a = pki["a"]
    key = serialization.load_pem_private_key(a["key"].read_bytes(), None)
    encrypted = tmp_path / "node.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(CertificateError, match="is encrypted"):
        load_node_tls(a["cert"], encrypted, a["ca"])


def test_validity_is_checked_against_now(pki):
    a = pki["a"]
    (certificate,) = read_certificates(a["cert"])
    later = certificate.not_valid_after_utc + datetime.timedelta(seconds=1)
    with pytest.raises(CertificateError, match="the node certificate expired on") as error:
        load_node_tls(a["cert"], a["key"], a["ca"], now=later)
    assert str(a["cert"]) in str(error.value)
    earlier = certificate.not_valid_before_utc - datetime.timedelta(seconds=1)
    with pytest.raises(CertificateError, match="is not valid before"):
        load_node_tls(a["cert"], a["key"], a["ca"], now=earlier)


def test_a_trusted_root_folder_reads_pem_and_der_and_trusts_them_all(pki, tmp_path):
    a, b = pki["a"], pki["b"]
    roots = tmp_path / "roots"
    roots.mkdir()
    shutil.copy(a["ca"], roots / "a.pem")
    (roots / "b.der").write_bytes(read_certificates(b["ca"])[0].public_bytes(serialization.Encoding.DER))
    (roots / "notes.txt").write_text("ignored\n")
    assert len(load_node_tls(a["cert"], a["key"], roots).trusted_roots) == 2
    assert load_node_tls(b["cert"], b["key"], roots).common_name == "eventstoredb-node"


def test_an_intermediate_must_be_in_the_certificate_file(tmp_path):
    root_cert, root_key = create_ca(tmp_path / "root")
    inter_cert, inter_key = create_ca(tmp_path / "inter", issuer_certificate=root_cert, issuer_key=root_key)
    cert, key = create_node_certificate(inter_cert, inter_key, tmp_path / "node")
    leaf_only = tmp_path / "leaf.crt"
    leaf_only.write_bytes(read_certificates(cert)[0].public_bytes(serialization.Encoding.PEM))
    with pytest.raises(CertificateError, match="chain could not be built") as error:
        load_node_tls(leaf_only, key, root_cert)
    assert str(leaf_only) in str(error.value)
    assert len(load_node_tls(cert, key, root_cert).intermediates) == 1
    # Trusting the intermediate alone is not enough: the chain must end at a self-signed trusted root.
    with pytest.raises(CertificateError, match="chain could not be built"):
        load_node_tls(cert, key, inter_cert)
    # A root carried in the certificate file is not trusted for being there.
    with_root = tmp_path / "with-root.crt"
    with_root.write_bytes(cert.read_bytes() + root_cert.read_bytes())
    with pytest.raises(CertificateError, match="is not among the trusted roots") as error:
        load_node_tls(with_root, key, inter_cert)
    assert str(with_root) in str(error.value)


def _sign_node_like(pki_set, path, extended_usages):
    """A node certificate from the same CA but with chosen extended key usages."""
    ca = read_certificates(pki_set["ca"])[0]
    ca_key = serialization.load_pem_private_key(pki_set["ca_key"].read_bytes(), None)
    key = serialization.load_pem_private_key(pki_set["key"].read_bytes(), None)
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "eventstoredb-node")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage(extended_usages), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def test_a_node_certificate_needs_client_and_server_authentication(pki, tmp_path):
    a = pki["a"]
    server_only = _sign_node_like(a, tmp_path / "server-only.crt", [ExtendedKeyUsageOID.SERVER_AUTH])
    with pytest.raises(CertificateError, match="Client Authentication") as error:
        load_node_tls(server_only, a["key"], a["ca"])
    assert str(server_only) in str(error.value)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    assert load_node_tls(_sign_node_like(a, tmp_path / "ok.crt", both), a["key"], a["ca"])


def test_repointed_symlinks_load_the_new_certificates(pki, tmp_path):
    """The spec's rolling update: ``ca``, ``node.crt`` and ``node.key`` links move to a new CA's files."""
    a, b = pki["a"], pki["b"]
    links = tmp_path / "links"
    links.mkdir()
    for name, target in (("ca", a["ca_dir"]), ("node.crt", a["cert"]), ("node.key", a["key"])):
        (links / name).symlink_to(target)
    first = load_node_tls(links / "node.crt", links / "node.key", links / "ca")
    assert first.fingerprint_sha256 == load_node_tls(a["cert"], a["key"], a["ca"]).fingerprint_sha256

    for name, target in (("ca", b["ca_dir"]), ("node.crt", b["cert"]), ("node.key", b["key"])):
        repoint_link(links / name, target)
    second = load_node_tls(links / "node.crt", links / "node.key", links / "ca")
    assert second.fingerprint_sha256 == load_node_tls(b["cert"], b["key"], b["ca"]).fingerprint_sha256
    assert second.fingerprint_sha256 != first.fingerprint_sha256
    assert second.trusted_roots != first.trusted_roots
    assert sorted(os.listdir(links)) == ["ca", "node.crt", "node.key"]


def test_a_half_done_repoint_fails_as_a_whole(pki, tmp_path):
    """node.crt moved to the new CA's certificate but node.key not yet: nothing is returned."""
    a, b = pki["a"], pki["b"]
    links = tmp_path / "links"
    links.mkdir()
    (links / "node.crt").symlink_to(b["cert"])
    (links / "node.key").symlink_to(a["key"])
    with pytest.raises(CertificateError, match="does not match"):
        load_node_tls(links / "node.crt", links / "node.key", a["ca"])


def test_a_loaded_set_does_not_follow_files_changed_afterwards(pki, tmp_path):
    a = pki["a"]
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("node.crt", "node.key", "ca.crt"):
        shutil.copy(
            a["cert"] if name == "node.crt" else a["key"] if name == "node.key" else a["ca"], folder / name
        )
    tls = load_node_tls(folder / "node.crt", folder / "node.key", folder / "ca.crt")
    shutil.rmtree(folder)
    assert tls.server_context(require_client_cert=True) is not None
    assert tls.client_context() is not None


def test_repoint_link_refuses_to_replace_a_real_file(tmp_path):
    real = tmp_path / "node.crt"
    real.write_text("x")
    with pytest.raises(CertificateError, match="not a symlink"):
        repoint_link(real, tmp_path / "elsewhere")
    assert real.read_text() == "x"


def test_a_pkcs8_key_loads_too(pki, tmp_path):
    """Keys written by other tools load as well: here PKCS#8 rather than es-gencert-cli's PKCS#1."""
    a = pki["a"]
    original = serialization.load_pem_private_key(a["key"].read_bytes(), None)
    pkcs8 = tmp_path / "node.key"
    pkcs8.write_bytes(
        original.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    assert load_node_tls(a["cert"], pkcs8, a["ca"]).common_name == "eventstoredb-node"
