"""Loading a node's certificates, all or nothing.

:func:`load_node_tls` reads and checks every piece first (files, key against certificate, the chain to a
trusted root, validity, key usages) and only then returns a :class:`NodeTls`; on any failure it raises
:class:`CertificateError` naming the file, and the caller keeps the configuration it had. A ``NodeTls``
holds the bytes it validated, so the ssl contexts it builds later never re-read files that may have been
repointed since.

Peer checks for node-to-node TLS (:func:`check_peer_common_name`, :func:`common_name_matches`) follow
KurrentDB's matching of a certificate's common name against ``CertificateReservedNodeCommonName``.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import types
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evdb.errors import EvdbError

__all__ = [
    "MAX_FILE_SIZE",
    "TRUSTED_ROOT_SUFFIXES",
    "CertificateError",
    "CertificateInfo",
    "NodeTls",
    "check_peer_common_name",
    "check_peer_node_certificate",
    "common_name_matches",
    "describe_certificate",
    "load_node_tls",
    "read_certificates",
]

#: Files of a trusted-root folder that are read (KurrentDB's list); others, such as ``ca.key``, are ignored.
TRUSTED_ROOT_SUFFIXES = (".crt", ".pem", ".cer", ".der")

#: The largest certificate, key or trusted-root file read (10 MiB); a larger one is refused.
MAX_FILE_SIZE = 10 * 1024 * 1024

#: Longest chain accepted from the node certificate up to its root.
_MAX_CHAIN_LENGTH = 8


class CertificateError(EvdbError):
    """A certificate, key or trusted root cannot be used; ``path`` is the file or folder at fault."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


@dataclass(frozen=True)
class CertificateInfo:
    """What the dashboard, the logs and ``evdb certs inspect`` show of one certificate."""

    subject: str
    issuer: str
    common_name: str
    serial_number: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    fingerprint_sha256: str
    thumbprint: str  # SHA-1, upper-case hex: what KurrentDB logs
    san_ip_addresses: tuple[str, ...]
    san_dns_names: tuple[str, ...]
    is_ca: bool

    def to_json(self) -> dict[str, object]:
        """JSON-ready fields, camelCase like the rest of the HTTP API."""
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "commonName": self.common_name,
            "serialNumber": self.serial_number,
            "notBefore": self.not_before.isoformat(),
            "notAfter": self.not_after.isoformat(),
            "fingerprintSha256": self.fingerprint_sha256,
            "thumbprint": self.thumbprint,
            "ipAddresses": list(self.san_ip_addresses),
            "dnsNames": list(self.san_dns_names),
            "isCa": self.is_ca,
        }


def describe_certificate(certificate: x509.Certificate) -> CertificateInfo:
    """The :class:`CertificateInfo` of a parsed certificate."""
    sans = _subject_alternative_names(certificate)
    return CertificateInfo(
        subject=certificate.subject.rfc4514_string(),
        issuer=certificate.issuer.rfc4514_string(),
        common_name=_common_name(certificate),
        serial_number=format(certificate.serial_number, "x"),
        not_before=certificate.not_valid_before_utc,
        not_after=certificate.not_valid_after_utc,
        fingerprint_sha256=certificate.fingerprint(hashes.SHA256()).hex(),
        thumbprint=certificate.fingerprint(hashes.SHA1()).hex().upper(),
        san_ip_addresses=tuple(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)) if sans else (),
        san_dns_names=tuple(sans.get_values_for_type(x509.DNSName)) if sans else (),
        is_ca=_is_ca(certificate),
    )


@dataclass(frozen=True)
class NodeTls:
    """A node's validated certificate, key and trusted roots; builds the ssl contexts the node uses."""

    certificate_file: str
    private_key_file: str
    trusted_root_path: str
    certificate: x509.Certificate = field(repr=False, compare=False)
    intermediates: tuple[x509.Certificate, ...] = field(repr=False, compare=False)
    trusted_roots: tuple[x509.Certificate, ...] = field(repr=False, compare=False)
    trusted_root_files: tuple[str, ...] = field(repr=False, compare=False)
    #: The node certificate followed by its intermediates (PEM), as sent in a handshake.
    certificate_chain_pem: bytes = field(repr=False, compare=False)
    #: The private key (unencrypted PKCS#8 PEM). Never logged.
    private_key_pem: bytes = field(repr=False, compare=False)
    trusted_roots_pem: bytes = field(repr=False, compare=False)
    info: CertificateInfo = field(compare=False)

    @property
    def subject(self) -> str:
        return self.info.subject

    @property
    def issuer(self) -> str:
        return self.info.issuer

    @property
    def common_name(self) -> str:
        return self.info.common_name

    @property
    def not_after(self) -> datetime.datetime:
        return self.info.not_after

    @property
    def fingerprint_sha256(self) -> str:
        return self.info.fingerprint_sha256

    @property
    def san_ip_addresses(self) -> list[str]:
        return list(self.info.san_ip_addresses)

    @property
    def san_dns_names(self) -> list[str]:
        return list(self.info.san_dns_names)

    def describe(self) -> dict[str, object]:
        """The node certificate's fields plus where everything was loaded from (for the dashboard)."""
        return {
            **self.info.to_json(),
            "certificateFile": self.certificate_file,
            "privateKeyFile": self.private_key_file,
            "trustedRootCertificatesPath": self.trusted_root_path,
            "intermediates": [c.subject.rfc4514_string() for c in self.intermediates],
            "trustedRoots": [c.subject.rfc4514_string() for c in self.trusted_roots],
        }

    def trust_anchor(self) -> x509.Certificate | None:
        """The trusted root the node certificate chains to (the CA in use), found as the loader found it."""
        current = self.certificate
        for _ in range(_MAX_CHAIN_LENGTH):
            root = _find_issuer(current, self.trusted_roots)
            if root is not None:
                return root
            issuer = _find_issuer(current, self.intermediates)
            if issuer is None or issuer.subject == issuer.issuer:
                return None
            current = issuer
        return None

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        """A TLS server context presenting the node certificate.

        Client certificates are requested and, when sent, must chain to a trusted root; with
        ``require_client_cert`` (the node-to-node listener) a client without one is refused.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._configure(context)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        return context

    def client_context(self, *, check_hostname: bool = True) -> ssl.SSLContext:
        """A TLS client context that verifies the server against the trusted roots and presents the
        node certificate as its client certificate (node-to-node TLS)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._configure(context)
        context.check_hostname = check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _configure(self, context: ssl.SSLContext) -> None:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with _pem_paths(self.certificate_chain_pem, self.private_key_pem) as (chain, key):
            context.load_cert_chain(chain, key)
        context.load_verify_locations(cadata=self.trusted_roots_pem.decode("ascii"))


def load_node_tls(
    certificate_file: str | os.PathLike[str] | None,
    private_key_file: str | os.PathLike[str] | None,
    trusted_root_path: str | os.PathLike[str] | None,
    *,
    now: datetime.datetime | None = None,
) -> NodeTls:
    """Read and check the node certificate, its key and the trusted roots; return them only if all are
    valid, else raise :class:`CertificateError` naming the file. ``now`` defaults to the current time."""
    now = now or datetime.datetime.now(datetime.UTC)
    if not certificate_file:
        raise CertificateError("No node certificate is configured (CertificateFile).")
    if not private_key_file:
        raise CertificateError("No node private key is configured (CertificatePrivateKeyFile).")
    if not trusted_root_path:
        raise CertificateError("No trusted root certificates are configured (TrustedRootCertificatesPath).")
    certificate_file, private_key_file = os.fspath(certificate_file), os.fspath(private_key_file)
    trusted_root_path = os.fspath(trusted_root_path)

    # Read and parse every file first, then check how they fit together.
    bundle = read_certificates(certificate_file, "node certificate")
    certificate, intermediates = bundle[0], tuple(bundle[1:])
    key = _read_private_key(private_key_file)
    roots, root_files = _read_trusted_roots(trusted_root_path)
    if _public_der(key.public_key()) != _public_der(certificate.public_key()):
        raise CertificateError(
            f"{private_key_file}: the private key does not match the node certificate {certificate_file}.",
            private_key_file,
        )
    _check_validity(certificate, now, f"{certificate_file}: the node certificate", certificate_file)
    _check_server_certificate_usage(certificate, certificate_file)
    _verify_chain(certificate, intermediates, roots, now, certificate_file, trusted_root_path)

    pem = serialization.Encoding.PEM
    tls = NodeTls(
        certificate_file=certificate_file,
        private_key_file=private_key_file,
        trusted_root_path=trusted_root_path,
        certificate=certificate,
        intermediates=intermediates,
        trusted_roots=roots,
        trusted_root_files=root_files,
        certificate_chain_pem=b"".join(c.public_bytes(pem) for c in bundle),
        private_key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        trusted_roots_pem=b"".join(c.public_bytes(pem) for c in roots),
        info=describe_certificate(certificate),
    )
    try:  # OpenSSL has the last word: build both contexts once, exactly as the node will
        tls.server_context(require_client_cert=True)
        tls.client_context()
    except ssl.SSLError as exc:
        raise CertificateError(
            f"{certificate_file}: OpenSSL refuses the node certificate or its key: {exc}", certificate_file
        ) from None
    return tls


# --- reading -----------------------------------------------------------------------------------


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _link_note(path: str) -> str:
    """`` (a link to TARGET)`` when ``path`` goes through a symlink, so the message names both."""
    target = os.path.realpath(path)
    return f" (a link to {target})" if target != os.path.abspath(path) else ""


def _check_regular(path: str, what: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise CertificateError(f"{path}: the {what} path is a folder, not a file.", path)
    if not stat.S_ISREG(st.st_mode):
        raise CertificateError(
            f"{path}{_link_note(path)}: the {what} path is {_file_kind(st.st_mode)}, not a regular file.",
            path,
        )
    if st.st_size > MAX_FILE_SIZE:
        raise CertificateError(
            f"{path}{_link_note(path)}: the {what} file is {st.st_size} bytes, larger than the "
            f"{MAX_FILE_SIZE} bytes a certificate or key file may have.",
            path,
        )


def _read_bytes(path: str, what: str) -> bytes:
    """The bytes of a certificate, key or trusted-root file: a regular file (symlinks followed) of at
    most MAX_FILE_SIZE bytes. A FIFO or a device is refused before it is opened (reading one would
    block, or never end); the opened file is checked again, and never more than the limit is read."""
    try:
        _check_regular(path, what, os.stat(path))
        # O_NONBLOCK: should the path have become a FIFO since, opening it does not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CertificateError(f"{path}: the {what} file does not exist.", path) from None
    except OSError as exc:
        raise CertificateError(f"{path}: the {what} file cannot be read: {exc.strerror}.", path) from None
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            _check_regular(path, what, os.fstat(f.fileno()))
            data = f.read(MAX_FILE_SIZE + 1)
    except OSError as exc:
        raise CertificateError(f"{path}: the {what} file cannot be read: {exc.strerror}.", path) from None
    if len(data) > MAX_FILE_SIZE:  # it grew since it was checked
        raise CertificateError(
            f"{path}{_link_note(path)}: the {what} file is larger than the {MAX_FILE_SIZE} bytes a certificate or key "
            "file may have.",
            path,
        )
    return data


def read_certificates(path: str | os.PathLike[str], what: str = "certificate") -> list[x509.Certificate]:
    """Every certificate in a PEM file (in order), or the one in a DER file; raises
    :class:`CertificateError` naming the file when there is none."""
    path = os.fspath(path)
    data = _read_bytes(path, what)
    if b"-----BEGIN" in data:
        try:
            certificates = x509.load_pem_x509_certificates(data)
        except ValueError:
            raise CertificateError(f"{path}: the {what} file holds no valid PEM certificate.", path) from None
        return certificates
    try:
        return [x509.load_der_x509_certificate(data)]
    except ValueError:
        raise CertificateError(
            f"{path}: the {what} file is neither a PEM nor a DER certificate.", path
        ) from None


def _read_private_key(path: str) -> types.PrivateKeyTypes:
    data = _read_bytes(path, "node private key")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise CertificateError(
            f"{path}: the node private key is encrypted; evdb needs an unencrypted PEM key.", path
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise CertificateError(
            f"{path}: the node private key file holds no valid PEM private key.", path
        ) from None


def _read_trusted_roots(path: str) -> tuple[tuple[x509.Certificate, ...], tuple[str, ...]]:
    """Trusted roots from one certificate file or a folder of them; symlinks are followed."""
    if not os.path.exists(path):
        raise CertificateError(f"{path}: the trusted root certificates path does not exist.", path)
    if os.path.isdir(path):
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise CertificateError(
                f"{path}: the trusted root certificates folder cannot be read: {exc.strerror}.", path
            ) from None
        files = [
            os.path.join(path, name)
            for name in names
            if name.lower().endswith(TRUSTED_ROOT_SUFFIXES) and os.path.isfile(os.path.join(path, name))
        ]
        if not files:
            raise CertificateError(
                f"{path}: no trusted root certificate file ({', '.join(TRUSTED_ROOT_SUFFIXES)}) in this folder.",
                path,
            )
    else:
        files = [path]
    roots: list[x509.Certificate] = []
    for file in files:
        roots += read_certificates(file, "trusted root certificate")
    return tuple(roots), tuple(files)


# --- checks ------------------------------------------------------------------------------------


def _check_validity(certificate: x509.Certificate, now: datetime.datetime, label: str, path: str) -> None:
    if certificate.not_valid_after_utc < now:
        raise CertificateError(
            f"{label} expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC.", path
        )
    if certificate.not_valid_before_utc > now:
        raise CertificateError(
            f"{label} is not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC.", path
        )


def _check_server_certificate_usage(certificate: x509.Certificate, path: str) -> None:
    """KurrentDB's rules for a node certificate: digital signature plus key encipherment or key agreement;
    if extended key usages are listed, both server and client authentication."""
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is None or not usage.digital_signature:
        raise CertificateError(f"{path}: the node certificate lacks the key usage Digital Signature.", path)
    if not (usage.key_encipherment or usage.key_agreement):
        raise CertificateError(
            f"{path}: the node certificate lacks the key usage Key Encipherment or Key Agreement.", path
        )
    try:
        extended = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    for oid, name in (
        (ExtendedKeyUsageOID.SERVER_AUTH, "Server Authentication"),
        (ExtendedKeyUsageOID.CLIENT_AUTH, "Client Authentication"),
    ):
        if oid not in extended:
            raise CertificateError(
                f"{path}: the node certificate lacks the extended key usage {name} "
                "(nodes use their certificate as server and as client certificate).",
                path,
            )


def _verify_chain(
    certificate: x509.Certificate,
    intermediates: tuple[x509.Certificate, ...],
    roots: tuple[x509.Certificate, ...],
    now: datetime.datetime,
    certificate_file: str,
    roots_path: str,
) -> None:
    """Walk from the node certificate through the bundled intermediates to a self-signed trusted root."""
    current = certificate
    for _ in range(_MAX_CHAIN_LENGTH):
        issuer = _find_issuer(current, roots)
        trusted = issuer is not None
        if issuer is None:
            issuer = _find_issuer(current, intermediates)
        if issuer is None:
            raise CertificateError(
                f"{certificate_file}: a certificate chain could not be built to a trusted root authority: "
                f"no certificate in {roots_path} or in the certificate file issued '{current.subject.rfc4514_string()}' "
                f"(its issuer is '{current.issuer.rfc4514_string()}').",
                certificate_file,
            )
        where = roots_path if trusted else certificate_file
        if not _is_ca(issuer):
            raise CertificateError(
                f"{where}: '{issuer.subject.rfc4514_string()}' signs the chain but is not a CA certificate.",
                where,
            )
        kind = "trusted root" if trusted else "intermediate"
        _check_validity(
            issuer, now, f"{where}: the {kind} certificate '{issuer.subject.rfc4514_string()}'", where
        )
        if trusted and issuer.subject == issuer.issuer:
            return
        if not trusted and issuer.subject == issuer.issuer:
            raise CertificateError(
                f"{certificate_file}: a certificate chain could not be built to a trusted root authority: "
                f"its root '{issuer.subject.rfc4514_string()}' is not among the trusted roots in {roots_path}.",
                certificate_file,
            )
        current = issuer
    raise CertificateError(f"{certificate_file}: the certificate chain is too long.", certificate_file)


def _find_issuer(
    certificate: x509.Certificate, candidates: tuple[x509.Certificate, ...]
) -> x509.Certificate | None:
    for candidate in candidates:
        if candidate.subject != certificate.issuer:
            continue
        try:
            certificate.verify_directly_issued_by(candidate)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return candidate
    return None


# --- peers -------------------------------------------------------------------------------------


def common_name_matches(common_name: str, reserved_common_name: str) -> bool:
    """Whether a node certificate's CN satisfies ``CertificateReservedNodeCommonName``, as KurrentDB decides.

    Case-insensitive. A wildcard CN (``*.example.com``) must equal the reserved name. Otherwise the reserved
    name is matched like a certificate name against a host (RFC 6125): exactly, or, when it is
    ``*.example.com``, the CN ``node1.example.com`` (one label in place of the ``*``, at least three labels).
    IP addresses only ever match exactly.
    """
    if common_name.startswith("*.") and _name_matches(common_name, "a" + common_name[1:]):
        return common_name.lower() == reserved_common_name.lower()
    return _name_matches(reserved_common_name, common_name)


def check_peer_common_name(peer_cert_der: bytes, reserved_common_name: str) -> None:
    """Raise :class:`CertificateError` unless a peer node's certificate (DER) has a common name matching
    ``CertificateReservedNodeCommonName`` (see :func:`common_name_matches`)."""
    certificate = _load_peer(peer_cert_der)
    cn = _common_name(certificate)
    if not cn or not common_name_matches(cn, reserved_common_name):
        raise CertificateError(
            f"The node certificate's common name '{cn}' does not match the reserved node common name "
            f"'{reserved_common_name}' (CertificateReservedNodeCommonName)."
        )


def check_peer_node_certificate(peer_cert_der: bytes, reserved_common_name: str) -> None:
    """What a node checks of another node's client certificate, as KurrentDB does: the common name
    (:func:`check_peer_common_name`) and at least one IP address or DNS name among its alternative names."""
    check_peer_common_name(peer_cert_der, reserved_common_name)
    sans = _subject_alternative_names(_load_peer(peer_cert_der))
    if not sans or not (sans.get_values_for_type(x509.IPAddress) or sans.get_values_for_type(x509.DNSName)):
        raise CertificateError(
            "The node certificate does not have any IP or DNS Subject Alternative Names (SAN)."
        )


def _load_peer(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        raise CertificateError("The peer's certificate cannot be parsed.") from None


def _name_matches(certificate_name: str, name: str) -> bool:
    """RFC 6125 matching of a certificate name (which may start with a ``*`` label) against a name."""
    if not certificate_name or not name:
        return False
    if _is_ip(certificate_name) or _is_ip(name):
        return certificate_name.lower() == name.lower()
    cert_labels, name_labels = certificate_name.split("."), name.split(".")
    if len(cert_labels) != len(name_labels) or "" in cert_labels or "" in name_labels:
        return False
    try:
        cert_labels = [_ascii_label(label) for label in cert_labels]
        name_labels = [_ascii_label(label) for label in name_labels]
    except UnicodeError:
        return False
    if not (cert_labels[0] == "*" or _valid_label(cert_labels[0])):
        return False
    if not all(_valid_label(label) for label in cert_labels[1:] + name_labels):
        return False
    if cert_labels[0] != "*":
        return [label.lower() for label in cert_labels] == [label.lower() for label in name_labels]
    if len(cert_labels) <= 2:
        return False
    return [label.lower() for label in cert_labels[1:]] == [label.lower() for label in name_labels[1:]]


def _ascii_label(label: str) -> str:
    return label if label.isascii() else label.encode("idna").decode("ascii")


def _valid_label(label: str) -> bool:
    return all(c.isascii() and (c.isalnum() or c == "-") for c in label)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# --- small helpers -----------------------------------------------------------------------------


def _common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _subject_alternative_names(certificate: x509.Certificate) -> x509.SubjectAlternativeName | None:
    try:
        return certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        return certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _public_der(key: types.PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@contextlib.contextmanager
def _pem_paths(*blobs: bytes) -> Iterator[list[str]]:
    """Paths OpenSSL can open for in-memory PEM data (``load_cert_chain`` takes only paths): anonymous
    memory files where the system has them, else files in a private temporary folder."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for blob in blobs:
                fd = os.memfd_create("evdb-tls", os.MFD_CLOEXEC)
                fds.append(fd)
                with os.fdopen(fd, "wb", closefd=False) as f:
                    f.write(blob)
            yield [f"/proc/self/fd/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="evdb-tls-") as folder:
        paths = []
        for i, blob in enumerate(blobs):
            path = os.path.join(folder, f"{i}.pem")
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(blob)
            paths.append(path)
        yield paths
