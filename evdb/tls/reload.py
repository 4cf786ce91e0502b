"""Reloading a node's configuration without a restart: ``POST /admin/reloadconfig`` and SIGHUP.

A reload is all or nothing. :meth:`ConfigReloader.reload` first builds everything new, off the event
loop: the options (the YAML file and the environment read again, :func:`evdb.options.reload_options`),
the certificate, its key and the trusted roots (:func:`evdb.tls.loading.load_node_tls`, which checks the
key against the certificate and the chain to a trusted root), the common-name rule and the ssl contexts
of both listeners. Only when every piece is ready does it swap them in, in one step on the event loop.
Any failure is logged and reported, and the node keeps its whole current configuration.

The listeners keep the ssl context they were started with; that context's ``sni_callback`` hands every
new connection the current one (:class:`SwappableServerContext`), so new HTTPS connections, on the HTTP
port and on the node-to-node port, present the new certificate and check client certificates against
the new trusted roots at once. Node-to-node client connections take the new certificate when they are
next made, at the next ConnectionResetInterval (evdb/cluster/service.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.hazmat.primitives import hashes

from evdb.errors import EvdbError
from evdb.tls.loading import CertificateError, NodeTls, common_name_matches, load_node_tls

if TYPE_CHECKING:
    from evdb.clock import Clock
    from evdb.options import Options

__all__ = [
    "RELOAD_FAILED",
    "RELOAD_REQUESTED",
    "RELOAD_SUCCEEDED",
    "ConfigReloader",
    "NodeSettings",
    "ReloadRecord",
    "ReloadableSettings",
    "SwappableServerContext",
    "describe_tls",
]

#: KurrentDB's log lines (reference: kurrentdb-http-api.md); ``{source}`` names what asked for the reload.
RELOAD_REQUESTED = {
    "http": "Reloading the node's configuration since a request has been received on /admin/reloadconfig.",
    "SIGHUP": "Reloading the node's configuration since SIGHUP has been received.",
}
RELOAD_SUCCEEDED = "The node's configuration was successfully reloaded"
RELOAD_FAILED = (
    "An error has occurred while reloading the configuration: %s "
    "The new configuration does not take effect; the node keeps its current configuration."
)


class SwappableServerContext:
    """A listener's ssl context whose certificate and trusted roots can be replaced while it serves.

    ``context`` is given to the listener once. Its ``sni_callback`` runs during every handshake (with or
    without a server name) and moves the connection to the current context, so a connection accepted
    after :meth:`install` presents the new certificate and verifies clients against the new roots;
    connections already open keep theirs.
    """

    def __init__(
        self, tls: NodeTls, *, require_client_cert: bool, alpn_protocols: Sequence[str] | None = None
    ) -> None:
        self.require_client_cert = require_client_cert
        self.alpn_protocols = list(alpn_protocols) if alpn_protocols else None
        self.context = self.build(tls)
        self.context.sni_callback = self._select
        self._current = self.context

    def build(self, tls: NodeTls) -> ssl.SSLContext:
        """A context for ``tls`` set up like this listener's (client certificates, ALPN); not yet used."""
        context = tls.server_context(require_client_cert=self.require_client_cert)
        if self.alpn_protocols:
            # OpenSSL chooses the ALPN protocol with the context the connection ends up on
            context.set_alpn_protocols(self.alpn_protocols)
        return context

    def install(self, context: ssl.SSLContext) -> None:
        """Serve new connections with ``context`` (made by :meth:`build`)."""
        self._current = context

    @property
    def current(self) -> ssl.SSLContext:
        return self._current

    def _select(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        current = self._current
        if current is not context:
            ssl_object.context = current
        return None


@dataclass(frozen=True)
class ReloadRecord:
    """The outcome of one reload, for the log, the HTTP answer and ``GET /admin/certificates``."""

    at: float  # epoch seconds
    trigger: str  # "/admin/reloadconfig" or "SIGHUP"
    succeeded: bool
    error: str | None = None
    changed_options: tuple[str, ...] = ()
    certificate_changed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "time": _iso(self.at),
            "trigger": self.trigger,
            "result": "Success" if self.succeeded else "Failed",
            "error": self.error,
            "changedOptions": list(self.changed_options),
            "certificateChanged": self.certificate_changed,
        }


@dataclass
class _Plan:
    options: Options
    changed: list[str]
    tls: NodeTls | None
    contexts: list[tuple[SwappableServerContext, ssl.SSLContext]] = field(default_factory=list)


class ReloadableSettings(Protocol):
    """The port every consumer of a setting a reload changes is given: it reads the options and the
    certificates here at each use, never a copy taken earlier. Its consumers: the node-to-node listener
    and calls (evdb/cluster/transport.py, evdb/cluster/peers.py), the HTTP and gRPC APIs and the web UI
    (evdb/services.py ApiServices), and the X.509 user certificates (evdb/tls/user_certificates.py)."""

    @property
    def options(self) -> Options: ...

    @property
    def tls(self) -> NodeTls | None: ...


class NodeSettings:
    """The options and certificates a node runs with now: one holder, replaced whole by a reload.

    Whatever depends on a setting a reload changes reads it here at each use, through the
    :class:`ReloadableSettings` port its type names (the peer client takes the certificates and
    ConnectionResetInterval at its next call, the node-to-node listener the common name at the next
    connection, the replication stream its reset interval when it is made): nobody keeps a copy."""

    def __init__(self, options: Options, tls: NodeTls | None = None) -> None:
        self.options = options
        self.tls = tls

    def replace(self, options: Options, tls: NodeTls | None) -> None:
        self.options, self.tls = options, tls


class ConfigReloader:
    """One node's configuration reloads; one at a time (a second request waits for the first).

    Its ports: the node's settings (which it replaces), the clock, the log, and the swappable ssl
    contexts of the node's listeners (the HTTP port, the node-to-node port)."""

    def __init__(
        self,
        settings: NodeSettings,
        *,
        clock: Clock,
        logger: Callable[[], logging.Logger],
        listeners: Callable[[], list[SwappableServerContext]],
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._logger = logger
        self.listeners = listeners
        self.last: ReloadRecord | None = None
        self.certificate_loaded_at: float | None = None
        self._lock = asyncio.Lock()

    @property
    def logger(self) -> logging.Logger:
        return self._logger()

    async def reload(self, trigger: str = "http") -> ReloadRecord:
        """Reload the configuration file, the environment and the certificates; never raises for a bad
        configuration (the record says what went wrong)."""
        label = "/admin/reloadconfig" if trigger == "http" else trigger
        async with self._lock:
            self.logger.info(
                RELOAD_REQUESTED.get(trigger, f"Reloading the node's configuration ({trigger}).")
            )
            try:
                plan = await asyncio.to_thread(self._prepare)
            except (EvdbError, ssl.SSLError, OSError, ValueError) as exc:
                reason = _sentence(str(exc) or type(exc).__name__)
                self.logger.error(RELOAD_FAILED, reason)
                record = ReloadRecord(self.clock.time(), label, False, error=reason)
                self.last = record
                return record
            record = self._apply(plan, label)
            self.last = record
            self.logger.info(RELOAD_SUCCEEDED)
            return record

    # -- building (a worker thread: files are read here) -----------------------------------------
    def _prepare(self) -> _Plan:
        from evdb.options import reload_options

        settings, log = self.settings, self.logger
        current = settings.options
        if current.config:
            log.info("Reloading: reading the configuration file %s and the environment", current.config)
        else:
            log.info("Reloading: no configuration file (Config); reading the environment again")
        options, changed = reload_options(current)
        log.info(
            "Reloading: the options are valid%s",
            f"; changed: {', '.join(changed)}" if changed else "; no option value changed",
        )
        plan = _Plan(options, changed, settings.tls)
        if options.insecure:
            log.info("Reloading: TLS is off (Insecure); there are no certificates to reload")
            return plan
        if options.dev and not options.certificate_file:
            log.info("Reloading: dev mode keeps its generated certificates")
            return plan
        log.info(
            "Reloading: loading the node certificate %s, its private key %s and the trusted root "
            "certificates %s",
            options.certificate_file,
            options.certificate_private_key_file,
            options.trusted_root_certificates_path,
        )
        tls = load_node_tls(
            options.certificate_file,
            options.certificate_private_key_file,
            options.trusted_root_certificates_path,
        )
        log.info(
            "Reloading: the certificate %s (thumbprint %s, issuer %s, expires %s) matches its key and "
            "chains to a trusted root",
            tls.subject,
            tls.info.thumbprint,
            tls.issuer,
            f"{tls.not_after:%Y-%m-%d %H:%M} UTC",
        )
        self._check_common_name(settings.tls, current, tls, options)
        plan.tls = tls
        for holder in self.listeners():
            try:
                plan.contexts.append((holder, holder.build(tls)))
            except ssl.SSLError as exc:
                raise CertificateError(
                    f"{tls.certificate_file}: OpenSSL refuses the node certificate or its key: {exc}"
                ) from None
        return plan

    @staticmethod
    def _check_common_name(old_tls: NodeTls | None, old: Options, tls: NodeTls, new: Options) -> None:
        """A node's own certificate must carry the name it demands of its peers when that name or the
        certificate's common name changes: a new common name is accepted only together with a matching
        CertificateReservedNodeCommonName in the same reload."""
        reserved = new.certificate_reserved_node_common_name
        old_cn = old_tls.common_name if old_tls is not None else None
        cn_changed = old_cn is not None and tls.common_name.lower() != old_cn.lower()
        reserved_changed = reserved != old.certificate_reserved_node_common_name
        if not (cn_changed or reserved_changed) or common_name_matches(tls.common_name, reserved):
            return
        if cn_changed and not reserved_changed:
            raise CertificateError(
                f"{tls.certificate_file}: the new certificate's common name '{tls.common_name}' differs from "
                f"the current one '{old_cn}' and does not match CertificateReservedNodeCommonName "
                f"'{reserved}'. Change CertificateReservedNodeCommonName to match it in the same reload.",
                tls.certificate_file,
            )
        raise CertificateError(
            f"CertificateReservedNodeCommonName '{reserved}' does not match the common name "
            f"'{tls.common_name}' of the node's certificate {tls.certificate_file}; other nodes would refuse it.",
            tls.certificate_file,
        )

    # -- swapping (the event loop: no await between the first and the last change) -----------------
    def _apply(self, plan: _Plan, label: str) -> ReloadRecord:
        from evdb.logs import set_level

        settings, log = self.settings, self.logger
        old_options, old_tls = settings.options, settings.tls
        for holder, context in plan.contexts:
            holder.install(context)
        settings.replace(plan.options, plan.tls)  # its subscribers are told now
        for name in plan.changed:
            log.info("Reloading: option %s changed and is now in effect", name)
        if plan.options.log_level != old_options.log_level:
            set_level(log, plan.options.log_level)
            log.info("Reloading: the log level is now %s", plan.options.log_level)
        certificate_changed = False
        if plan.tls is not None and plan.tls is not old_tls:
            self.certificate_loaded_at = self.clock.time()
            certificate_changed = old_tls is None or _certificate_differs(old_tls, plan.tls)
            log.info(
                "Reloading: new connections are now served with the node certificate %s (thumbprint %s); "
                "node-to-node connections take it at their next reset (ConnectionResetInterval %d s)",
                plan.tls.subject,
                plan.tls.info.thumbprint,
                plan.options.connection_reset_interval,
            )
        return ReloadRecord(
            self.clock.time(),
            label,
            True,
            changed_options=tuple(plan.changed),
            certificate_changed=certificate_changed,
        )

    # -- state ------------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The certificate state of the node (``GET /admin/certificates``)."""
        settings = self.settings
        out: dict[str, Any] = {"secure": settings.tls is not None}
        out.update(describe_tls(settings.tls))
        out["reservedNodeCommonName"] = settings.options.certificate_reserved_node_common_name
        out["connectionResetIntervalSeconds"] = settings.options.connection_reset_interval
        out["loadedAt"] = _iso(self.certificate_loaded_at) if self.certificate_loaded_at else None
        out["lastReload"] = self.last.to_json() if self.last is not None else None
        return out


def describe_tls(tls: NodeTls | None) -> dict[str, Any]:
    """The certificate, the CA it chains to and the trusted roots, JSON-ready (None when insecure)."""
    if tls is None:
        return {"certificate": None, "ca": None, "trustedRoots": []}
    anchor = tls.trust_anchor()
    return {
        "certificate": tls.describe(),
        "ca": None if anchor is None else _root_json(anchor),
        "trustedRoots": [_root_json(root) for root in tls.trusted_roots],
    }


def _root_json(certificate: Any) -> dict[str, Any]:
    from evdb.tls.loading import describe_certificate

    info = describe_certificate(certificate)
    return {
        "subject": info.subject,
        "notAfter": info.not_after.isoformat(),
        "fingerprintSha256": certificate.fingerprint(hashes.SHA256()).hex(),
        "thumbprint": info.thumbprint,
    }


def _certificate_differs(old: NodeTls, new: NodeTls) -> bool:
    return old.fingerprint_sha256 != new.fingerprint_sha256 or old.trusted_roots_pem != new.trusted_roots_pem


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat()


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."
