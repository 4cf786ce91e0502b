"""Certificate generation, in the layout KurrentDB's certificate tool (es-gencert-cli) makes::

    ca/ca.crt  ca/ca.key  node1/node.crt  node1/node.key  node2/...

Keys are RSA 2048 in PKCS#1 PEM (``BEGIN RSA PRIVATE KEY``), as es-gencert-cli writes them, so the two
tools can sign with each other's CA and OpenSSL, Python's ssl, gRPC and .NET all accept the result.
Node certificates carry Digital Signature and Key Encipherment, server and client authentication (nodes
use them as client certificates towards each other), the node common name and the node's IP addresses and
DNS names. Private keys are created with mode 0600; every file is written to a temporary name, fsynced and
renamed, and an existing file is never replaced unless ``force`` is given.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, types
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evdb.tls.loading import CertificateError, load_node_tls, read_certificates

__all__ = [
    "CA_DAYS",
    "DEFAULT_NODE_COMMON_NAME",
    "KEY_SIZE",
    "LEAF_KEY_USAGE",
    "NODE_DAYS",
    "ClusterCertificates",
    "DevCertificates",
    "NodeCertRequest",
    "NodeCertificates",
    "create_ca",
    "create_cluster_certificates",
    "create_node_certificate",
    "generate_dev_certificates",
    "repoint_link",
]

DEFAULT_NODE_COMMON_NAME = "eventstoredb-node"
KEY_SIZE = 2048
#: Default validity, as es-gencert-cli: five years for a CA, one year for a node.
CA_DAYS = 5 * 365
NODE_DAYS = 365
#: Certificates start a few minutes in the past so that nodes with a slightly slow clock accept them.
_BACKDATE = datetime.timedelta(minutes=5)
_KEY_MODE = 0o600
_CERT_MODE = 0o644


@dataclass(frozen=True)
class NodeCertRequest:
    """One node of :func:`create_cluster_certificates`: its folder name and what its certificate names."""

    folder: str  # "node1", "node2", ...
    ip_addresses: tuple[str, ...] = ("127.0.0.1",)
    dns_names: tuple[str, ...] = ("localhost",)
    common_name: str = DEFAULT_NODE_COMMON_NAME


@dataclass(frozen=True)
class NodeCertificates:
    cert_path: Path
    key_path: Path


@dataclass(frozen=True)
class ClusterCertificates:
    """What :func:`create_cluster_certificates` wrote: ``ca/`` and one folder per node."""

    ca_path: Path  # ca/ca.crt: the TrustedRootCertificatesPath of every node (or its folder)
    ca_key_path: Path
    nodes: dict[str, NodeCertificates]


@dataclass(frozen=True)
class DevCertificates:
    """Dev mode's throw-away CA and node certificate; ``ca_path`` is the trusted root file."""

    ca_path: Path
    cert_path: Path
    key_path: Path


#: the key usage of a certificate that is not a CA's (a node's; a user's, as es-gencert-cli makes them):
#: signatures and key encipherment, nothing else
LEAF_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=True,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def create_ca(
    out: str | os.PathLike[str],
    *,
    common_name: str | None = None,
    days: int = CA_DAYS,
    issuer_certificate: str | os.PathLike[str] | None = None,
    issuer_key: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> tuple[Path, Path]:
    """Write ``ca.crt`` and ``ca.key`` in ``out`` and return their paths.

    A root CA by default (common name ``evdb CA <serial>`` unless given); an intermediate CA when the
    issuing CA's certificate and key are given, in which case ``ca.crt`` holds the intermediate followed by
    the issuer's own intermediates, ready to sign node certificates.
    """
    _check_days(days)
    if (issuer_certificate is None) != (issuer_key is None):
        raise CertificateError("An intermediate CA needs both the issuing CA's certificate and its key.")
    out = Path(out)
    cert_path, key_path = out / "ca.crt", out / "ca.key"
    _refuse_existing([cert_path, key_path], force)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    serial = x509.random_serial_number()
    intermediate = issuer_certificate is not None
    label = "evdb Intermediate CA" if intermediate else "evdb CA"
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "evdb"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name or f"{label} {serial:x}"),
        ]
    )
    if issuer_certificate is not None and issuer_key is not None:
        issuer_chain, signing_key = _read_ca(issuer_certificate, issuer_key)
        issuer_name, issuer_public = issuer_chain[0].subject, signing_key.public_key()
        extra_chain = _chain_above(issuer_chain)
    else:
        issuer_name, issuer_public, signing_key, extra_chain = name, key.public_key(), key, []
    now = _now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None if intermediate else 2), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_public), critical=False)  # type: ignore[arg-type]
        .sign(signing_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write_files(
        [
            (key_path, _key_pem(key), _KEY_MODE),
            (cert_path, _certificates_pem([certificate, *extra_chain]), _CERT_MODE),
        ],
        force,
    )
    return cert_path, key_path


def create_node_certificate(
    ca_certificate: str | os.PathLike[str],
    ca_key: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    ip_addresses: Sequence[str] = ("127.0.0.1",),
    dns_names: Sequence[str] = ("localhost",),
    common_name: str = DEFAULT_NODE_COMMON_NAME,
    days: int = NODE_DAYS,
    force: bool = False,
) -> tuple[Path, Path]:
    """Write ``node.crt`` and ``node.key`` in ``out``, signed by the CA, and return their paths.

    When the CA is an intermediate, ``node.crt`` also carries the CA's chain up to (not including) the
    root, so that peers that trust only the root can verify it.
    """
    _check_days(days)
    if not common_name.strip():
        raise CertificateError("A node certificate needs a common name.")
    sans = _alternative_names(ip_addresses, dns_names)
    out = Path(out)
    cert_path, key_path = out / "node.crt", out / "node.key"
    _refuse_existing([cert_path, key_path], force)
    ca_chain, ca_private = _read_ca(ca_certificate, ca_key)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    now = _now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_chain[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(LEAF_KEY_USAGE, critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_private.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_private, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write_files(
        [
            (key_path, _key_pem(key), _KEY_MODE),
            (cert_path, _certificates_pem([certificate, *_chain_above(ca_chain)]), _CERT_MODE),
        ],
        force,
    )
    return cert_path, key_path


def create_cluster_certificates(
    directory: str | os.PathLike[str],
    nodes: Sequence[NodeCertRequest],
    *,
    ca_common_name: str | None = None,
    days: int = NODE_DAYS,
    force: bool = False,
) -> ClusterCertificates:
    """One CA in ``directory/ca`` and one certificate per node in ``directory/<folder>``."""
    directory = Path(directory)
    folders = [n.folder for n in nodes]
    for folder in folders:
        if not folder or folder in (".", "..", "ca") or "/" in folder or os.sep in folder:
            raise CertificateError(f"'{folder}' cannot be a node certificate folder name.")
    if len(set(folders)) != len(folders):
        raise CertificateError("Two nodes have the same certificate folder name.")
    ca_cert, ca_key = create_ca(directory / "ca", common_name=ca_common_name, force=force)
    written = {
        n.folder: NodeCertificates(
            *create_node_certificate(
                ca_cert,
                ca_key,
                directory / n.folder,
                ip_addresses=n.ip_addresses,
                dns_names=n.dns_names,
                common_name=n.common_name,
                days=days,
                force=force,
            )
        )
        for n in nodes
    }
    return ClusterCertificates(ca_cert, ca_key, written)


def generate_dev_certificates(
    directory: str | os.PathLike[str],
    *,
    ip_addresses: Sequence[str] = ("127.0.0.1", "::1"),
    dns_names: Sequence[str] = ("localhost",),
    common_name: str = DEFAULT_NODE_COMMON_NAME,
) -> DevCertificates:
    """Throw-away certificates for dev mode in ``directory/ca`` and ``directory/node``.

    Ones made earlier are reused while they load, carry the requested names and stay valid for more than
    a day, so clients that trusted the dev CA keep working across restarts; otherwise new ones replace them.
    """
    directory = Path(directory)
    dev = DevCertificates(
        directory / "ca" / "ca.crt", directory / "node" / "node.crt", directory / "node" / "node.key"
    )
    wanted_ips = {str(ipaddress.ip_address(ip)) for ip in ip_addresses}
    try:
        existing = load_node_tls(dev.cert_path, dev.key_path, dev.ca_path)
    except CertificateError:
        existing = None
    if (
        existing is not None
        and existing.common_name == common_name
        and wanted_ips <= set(existing.san_ip_addresses)
        and set(dns_names) <= set(existing.san_dns_names)
        and existing.not_after > _now() + datetime.timedelta(days=1)
    ):
        return dev
    ca_cert, ca_key = create_ca(directory / "ca", common_name=None, days=365, force=True)
    create_node_certificate(
        ca_cert,
        ca_key,
        directory / "node",
        ip_addresses=ip_addresses,
        dns_names=dns_names,
        common_name=common_name,
        days=365,
        force=True,
    )
    return dev


def repoint_link(link: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Make the symlink ``link`` point to ``target`` in one atomic step (a new link, renamed over the old).

    This is step 2 of a rolling certificate update: repoint ``ca``, ``node.crt`` and ``node.key``, then
    reload the node. A reader sees the old target or the new one, never a missing file.
    """
    link = Path(link)
    if link.exists() and not link.is_symlink():
        raise CertificateError(f"{link}: is not a symlink; refusing to replace a real file or folder.", link)
    temporary = link.with_name(f".{link.name}.{uuid.uuid4().hex}.link")
    os.symlink(target, temporary)
    try:
        os.replace(temporary, link)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_folder(link.parent)


# --- helpers -----------------------------------------------------------------------------------


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _check_days(days: int) -> None:
    if days <= 0:
        raise CertificateError(f"The validity must be a positive number of days, not {days}.")


def _alternative_names(ip_addresses: Sequence[str], dns_names: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for text in ip_addresses:
        if not text.strip():
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(text.strip())))
        except ValueError:
            raise CertificateError(f"'{text}' is not a valid IP address.") from None
    for text in dns_names:
        name = text.strip()
        if not name:
            continue
        if not name.isascii() or any(c.isspace() or c in "/\\:@" for c in name):
            raise CertificateError(f"'{text}' is not a valid DNS name (use the ASCII form of the name).")
        names.append(x509.DNSName(name))
    if not names:
        raise CertificateError(
            "A node certificate needs at least one IP address or DNS name (--ip-addresses or --dns-names)."
        )
    return names


def _read_ca(
    certificate: str | os.PathLike[str], key: str | os.PathLike[str]
) -> tuple[list[x509.Certificate], types.CertificateIssuerPrivateKeyTypes]:
    """The CA's certificate file (its certificate first, then any chain) and its private key."""
    chain = read_certificates(certificate, "CA certificate")
    key_path = os.fspath(key)
    try:
        data = Path(key_path).read_bytes()
    except FileNotFoundError:
        raise CertificateError(f"{key_path}: the CA key file does not exist.", key_path) from None
    except OSError as exc:
        raise CertificateError(
            f"{key_path}: the CA key file cannot be read: {exc.strerror}.", key_path
        ) from None
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise CertificateError(f"{key_path}: not an unencrypted PEM private key.", key_path) from None
    public_format = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if private.public_key().public_bytes(der, public_format) != chain[0].public_key().public_bytes(
        der, public_format
    ):
        raise CertificateError(
            f"{key_path}: this key does not belong to the CA certificate {os.fspath(certificate)}.", key_path
        )
    try:
        is_ca = chain[0].extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise CertificateError(
            f"{os.fspath(certificate)}: not a CA certificate (no CA basic constraint).",
            os.fspath(certificate),
        )
    return chain, private  # type: ignore[return-value]


def _chain_above(ca_chain: list[x509.Certificate]) -> list[x509.Certificate]:
    """The certificates a child of this CA must send along: the CA and its intermediates, unless the CA
    is itself a self-signed root (which every peer already trusts)."""
    return [c for c in ca_chain if c.subject != c.issuer]


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificates_pem(certificates: list[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def _refuse_existing(paths: list[Path], force: bool) -> None:
    if force:
        return
    for path in paths:
        if os.path.lexists(path):
            raise CertificateError(
                f"{path} already exists; existing files are never overwritten (use --force to replace them).",
                path,
            )


def _write_files(files: list[tuple[Path, bytes, int]], force: bool) -> None:
    """Write every file or none: each goes to a temporary name first (created with its final mode), is
    fsynced, then renamed into place; without ``force`` an existing file stops the whole write."""
    _refuse_existing([path for path, _, _ in files], force)
    temporaries: list[Path] = []
    published: list[Path] = []
    try:
        for path, data, mode in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            temporaries.append(temporary)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for (path, _, _), temporary in zip(files, temporaries, strict=True):
            if force:
                os.replace(temporary, path)
            else:
                _publish_new(temporary, path)
            published.append(path)
    except FileExistsError as exc:
        for path in published:
            path.unlink(missing_ok=True)
        raise CertificateError(
            f"{exc.filename} already exists; existing files are never overwritten (use --force to replace them).",
            exc.filename,
        ) from None
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
    for folder in {path.parent for path, _, _ in files}:
        _fsync_folder(folder)


def _publish_new(temporary: Path, path: Path) -> None:
    """Rename ``temporary`` to ``path`` only if ``path`` does not exist, without a race (a hard link fails
    on an existing name); file systems without hard links fall back to check-then-rename."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise FileExistsError(0, "exists", os.fspath(path)) from None
    except OSError:
        if os.path.lexists(path):
            raise FileExistsError(0, "exists", os.fspath(path)) from None
        os.replace(temporary, path)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
