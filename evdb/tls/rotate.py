"""Rolling certificate update: new certificates made like the old ones, and a local cluster rotated to them.

Steps 1 to 4 of the spec's "Certificate update (rolling)": :func:`renew_ca` and :func:`renew_node` make a
new CA and node certificates the same way the existing ones were made (validity, common name, IP
addresses and DNS names are read from them). :func:`rotate_cluster` drives a cluster made by
``evdb cluster up``: it writes the next generation ``certs/gen-N/``, then node by node repoints the
symlinks the node reads (``ca``, ``node.crt``, ``node.key``), reloads it (``POST /admin/reloadconfig``),
checks that a fresh handshake shows the new certificate, and finally waits until every node talks to
every other again (after their next ConnectionResetInterval).

While some nodes have the new CA and others the old one they cannot talk (certificate chain errors in
their logs); the followers are updated first and the leader last, so a majority keeps working as long
as possible. If a node refuses its new certificates, its links are pointed back to what it still serves
and the rotation stops, naming the node and the reason.

With ``prepare_only`` the rotation stops after the links: every node's links (and ``certs/ca``) point
to the new generation but no node is reloaded; the operator reloads each one (the dashboard's ``l``
key, ``POST /admin/reloadconfig`` or SIGHUP) and watches the cluster while doing it.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from evdb.errors import EvdbError
from evdb.tls.certs import create_ca, create_node_certificate, repoint_link
from evdb.tls.loading import CertificateError, describe_certificate, read_certificates

__all__ = ["RotationError", "RotationReport", "renew_ca", "renew_node", "rotate_cluster"]

_GENERATION = re.compile(r"^gen-(\d+)$")


class RotationError(EvdbError):
    """The rotation stopped; the message names the node and the reason."""


# -- certificates made like the existing ones ------------------------------------------------------
def _validity_days(certificate: x509.Certificate) -> int:
    seconds = (certificate.not_valid_after_utc - certificate.not_valid_before_utc).total_seconds()
    return max(1, round(seconds / 86400))


def renew_ca(
    like: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    common_name: str | None = None,
    days: int | None = None,
    force: bool = False,
) -> tuple[Path, Path]:
    """A new root CA in ``out`` with the validity of the CA certificate ``like`` (a fresh key and name,
    ``evdb CA <serial>``, unless ``common_name`` is given)."""
    existing = read_certificates(like, "CA certificate")[0]
    if not describe_certificate(existing).is_ca:
        raise CertificateError(f"{os.fspath(like)}: not a CA certificate.", like)
    if existing.subject != existing.issuer:
        raise CertificateError(
            f"{os.fspath(like)}: an intermediate CA; make its successor with "
            "`evdb certs create-ca --ca-certificate ... --ca-key ...` from its issuing CA.",
            like,
        )
    return create_ca(out, common_name=common_name, days=days or _validity_days(existing), force=force)


def renew_node(
    like: str | os.PathLike[str],
    ca_certificate: str | os.PathLike[str],
    ca_key: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    common_name: str | None = None,
    days: int | None = None,
    force: bool = False,
) -> tuple[Path, Path]:
    """A node certificate signed by the given CA with the names of ``like``: the same common name
    (unless ``common_name`` is given), IP addresses, DNS names and validity."""
    existing = read_certificates(like, "node certificate")[0]
    info = describe_certificate(existing)
    return create_node_certificate(
        ca_certificate,
        ca_key,
        out,
        ip_addresses=info.san_ip_addresses,
        dns_names=info.san_dns_names,
        common_name=common_name or info.common_name,
        days=days or _validity_days(existing),
        force=force,
    )


# -- rotating a local cluster ------------------------------------------------------------------------
@dataclass
class _NodeLinks:
    name: str
    url: str
    config_path: Path
    certificate: Path
    key: Path
    ca: Path
    old_targets: dict[Path, str] = field(default_factory=dict)


@dataclass
class RotationReport:
    generation: Path
    ca_subject: str
    ca_fingerprint_sha256: str
    order: list[str]  # the reload order (followers first); with prepare_only the order to follow
    reloaded_at: dict[str, float]  # node name -> monotonic seconds; empty with prepare_only
    talking_again_after: float | None  # seconds from the last reload until every node talks to every other


def rotate_cluster(
    data_dir: str | os.PathLike[str],
    *,
    common_name: str | None = None,
    timeout: float = 120.0,
    prepare_only: bool = False,
    after_reload: Callable[[str, int], None] | None = None,
    log: Callable[[str], None] = print,
) -> RotationReport:
    """Rotate the cluster in ``data_dir`` to a new CA and new node certificates (see the module text).

    ``common_name`` gives the new certificates another common name; the nodes' YAML files then get the
    matching CertificateReservedNodeCommonName, applied in the same reload. ``after_reload(name, i)`` is
    called after the i-th node (0-based) took its new certificate. ``prepare_only`` repoints every
    node's links and ``certs/ca`` and reloads no node.
    """
    from evdb.cluster.launcher import ClusterLaunchError, LocalCluster

    cluster = LocalCluster(data_dir)
    try:
        info = cluster.info()
    except ClusterLaunchError as exc:
        raise RotationError(str(exc)) from None
    if not info.get("ca"):
        raise RotationError(
            f"The cluster in {cluster.data_dir} runs without TLS (Insecure): nothing to rotate."
        )
    nodes = [_links_of(node) for node in info["nodes"]]
    running = {n["name"] for n in cluster.running_nodes()}
    down = [n["name"] for n in info["nodes"] if n["name"] not in running]
    if down:
        raise RotationError(f"Start every node first (evdb cluster up): {', '.join(down)} not running.")
    old_ca = Path(os.path.realpath(info["ca"]))
    certs = cluster.data_dir / "certs"
    generation = certs / f"gen-{_next_generation(certs)}"

    # 1. new CA and node certificates, made like the current ones
    ca_cert, ca_key = renew_ca(old_ca, generation / "ca")
    new_ca = read_certificates(ca_cert)[0]
    ca_info = describe_certificate(new_ca)
    log(f"New CA {ca_info.subject} in {generation / 'ca'}")
    new_files: dict[str, tuple[Path, Path]] = {}
    for node in nodes:
        cert, key = renew_node(
            os.path.realpath(node.certificate),
            ca_cert,
            ca_key,
            generation / node.name,
            common_name=common_name,
        )
        new_files[node.name] = (cert, key)
        log(f"New certificate for {node.name}: {describe_certificate(read_certificates(cert)[0]).subject}")

    trust = _trust_both(old_ca, ca_cert)
    auth = (info["user"], info["password"])
    # 2-4. node by node: repoint the links, reload, check what a new connection is shown
    order = _followers_first(nodes, trust, auth)
    if prepare_only:
        for node in order:
            cert, key = new_files[node.name]
            _repoint(node, {node.ca: generation / "ca", node.certificate: cert, node.key: key})
            if common_name is not None:
                _set_reserved_common_name(node.config_path, common_name)
        repoint_link(certs / "ca", os.path.relpath(generation / "ca", certs))
        log(
            f"The links of every node and certs/ca point to {generation.name}; no node was reloaded. "
            f"Reload each node in this order (followers first, the leader last) within its "
            f"ConnectionResetInterval: {', '.join(n.name for n in order)}"
        )
        return RotationReport(
            generation=generation,
            ca_subject=ca_info.subject,
            ca_fingerprint_sha256=ca_info.fingerprint_sha256,
            order=[n.name for n in order],
            reloaded_at={},
            talking_again_after=None,
        )
    reloaded_at: dict[str, float] = {}
    for i, node in enumerate(order):
        cert, key = new_files[node.name]
        _repoint(node, {node.ca: generation / "ca", node.certificate: cert, node.key: key})
        if common_name is not None:
            _set_reserved_common_name(node.config_path, common_name)
        answer = _reload(node.url, trust, auth)
        if answer is not None:
            _restore(node)
            raise RotationError(
                f"{node.name} refused its new certificates and keeps the old ones ({answer}); "
                f"its links point to the old files again. The nodes before it ({', '.join(reloaded_at) or 'none'}) "
                f"already use {generation.name}."
            )
        reloaded_at[node.name] = time.monotonic()
        shown = _presented_fingerprint(node.url, trust)
        expected = read_certificates(cert)[0].fingerprint(hashes.SHA256()).hex()
        if shown != expected:
            raise RotationError(
                f"{node.name} reloaded but a new connection is still shown another certificate."
            )
        log(f"{node.name}: reloaded; new connections get the {generation.name} certificate")
        if after_reload is not None:
            after_reload(node.name, i)

    repoint_link(certs / "ca", os.path.relpath(generation / "ca", certs))
    log(f"certs/ca now points to {generation.name}/ca (cluster.json's CA for clients)")

    # until every node has reset its node-to-node connections, some still use the old certificate:
    # only gossip answered after that proves the nodes talk with their new certificates
    last = max(reloaded_at.values())
    since = time.time()
    if len(nodes) > 1:
        reset = max(_reset_interval(n.url, ca_cert, auth) for n in nodes)
        since = time.time() - (time.monotonic() - last) + reset + 1.0
        log(
            f"Waiting for every node to reset its node-to-node connections (ConnectionResetInterval {reset} s)"
        )
    _wait_until_all_talk([n.url for n in nodes], ca_cert, auth, since, timeout)
    talking = time.monotonic() - last
    log(f"All {len(nodes)} nodes talk to each other again ({talking:.1f} s after the last reload)")
    return RotationReport(
        generation=generation,
        ca_subject=ca_info.subject,
        ca_fingerprint_sha256=ca_info.fingerprint_sha256,
        order=[n.name for n in order],
        reloaded_at=reloaded_at,
        talking_again_after=talking,
    )


def _links_of(node: dict[str, Any]) -> _NodeLinks:
    config_path = Path(node["config"])
    try:
        config = yaml.safe_load(config_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RotationError(f"{node['name']}: cannot read {config_path}: {exc}") from None
    paths = {}
    for option in ("CertificateFile", "CertificatePrivateKeyFile", "TrustedRootCertificatesPath"):
        value = config.get(option)
        if not value:
            raise RotationError(f"{node['name']}: {config_path} sets no {option}.")
        path = Path(value)
        if not path.is_symlink():
            raise RotationError(
                f"{node['name']}: {option} {path} is not a symlink; a rolling update repoints symlinks "
                "(clusters made by this version of `evdb cluster up` use them)."
            )
        paths[option] = path
    return _NodeLinks(
        node["name"],
        node["url"],
        config_path,
        paths["CertificateFile"],
        paths["CertificatePrivateKeyFile"],
        paths["TrustedRootCertificatesPath"],
    )


def _next_generation(certs: Path) -> int:
    numbers = (
        [int(m.group(1)) for p in certs.iterdir() if (m := _GENERATION.match(p.name))]
        if certs.is_dir()
        else []
    )
    return max(numbers, default=0) + 1


def _repoint(node: _NodeLinks, targets: dict[Path, Path]) -> None:
    node.old_targets = {link: os.readlink(link) for link in targets}
    for link, target in targets.items():
        repoint_link(link, os.path.relpath(target, link.parent))


def _restore(node: _NodeLinks) -> None:
    for link, target in node.old_targets.items():
        repoint_link(link, target)


def _set_reserved_common_name(config_path: Path, common_name: str) -> None:
    config = yaml.safe_load(config_path.read_text()) or {}
    config["CertificateReservedNodeCommonName"] = common_name
    temporary = config_path.with_suffix(".yaml.tmp")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(temporary, config_path)


def _trust_both(old_ca: Path, new_ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(old_ca))
    context.load_verify_locations(cafile=str(new_ca))
    return context


def _state(url: str, trust: ssl.SSLContext, auth: tuple[str, str]) -> str | None:
    try:
        with httpx.Client(base_url=url, verify=trust, auth=auth, timeout=5) as client:
            return client.get("/gossip").json()["members"][0]["state"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return None


def _followers_first(
    nodes: list[_NodeLinks], trust: ssl.SSLContext, auth: tuple[str, str]
) -> list[_NodeLinks]:
    """Followers (and replicas) first, the leader last: a majority keeps a leader as long as possible."""
    return sorted(nodes, key=lambda n: _state(n.url, trust, auth) == "Leader")


def _reload(url: str, trust: ssl.SSLContext, auth: tuple[str, str]) -> str | None:
    """None when the node reloaded, else why not. The POST answers 200 whatever the outcome (as
    KurrentDB's); the node's ``lastReload`` in ``GET /admin/certificates`` says how it went."""
    try:
        with httpx.Client(base_url=url, verify=trust, auth=auth, timeout=30) as client:
            response = client.post("/admin/reloadconfig")
            if response.status_code != 200:
                return f"{response.status_code}: {response.text.strip() or 'no reason given'}"
            last = client.get("/admin/certificates").json().get("lastReload") or {}
    except httpx.HTTPError as exc:
        return f"POST /admin/reloadconfig failed: {exc}"
    except ValueError:
        return "GET /admin/certificates did not answer JSON: the outcome of the reload is unknown"
    if last.get("result") == "Success":
        return None
    return str(last.get("error") or "the node did not record the reload")


def _presented_fingerprint(url: str, trust: ssl.SSLContext) -> str:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        trust.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if der is None:  # only without verification (CERT_NONE) may a server present none
        raise RotationError(f"{url}: the node presented no certificate.")
    return x509.load_der_x509_certificate(der).fingerprint(hashes.SHA256()).hex()


def _reset_interval(url: str, new_ca: Path, auth: tuple[str, str]) -> int:
    trust = ssl.create_default_context(cafile=str(new_ca))
    try:
        with httpx.Client(verify=trust, auth=auth, timeout=10) as client:
            return int(client.get(f"{url}/admin/certificates").json()["connectionResetIntervalSeconds"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise RotationError(f"{url}: cannot read its certificate state: {exc}") from None


def _wait_until_all_talk(
    urls: list[str], new_ca: Path, auth: tuple[str, str], since: float, timeout: float
) -> None:
    """Every node has a gossip answer from every other given after ``since`` (epoch seconds: once every
    node-to-node connection was made again), there is one leader, and every other node follows it."""
    trust = ssl.create_default_context(cafile=str(new_ca))
    deadline = time.monotonic() + max(0.0, since - time.time()) + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        views = []
        try:
            with httpx.Client(verify=trust, auth=auth, timeout=5) as client:
                for url in urls:
                    views.append(client.get(f"{url}/gossip").json()["members"])
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
            continue
        own_states = [members[0]["state"] for members in views]
        all_alive = all(
            len(m) == len(urls) and all(x.get("isAlive") and x.get("timeStamp", 0) > since for x in m)
            for m in views
        )
        settled = own_states.count("Leader") == 1 and all(
            s in ("Leader", "Follower", "ReadOnlyReplica") for s in own_states
        )
        if all_alive and settled:
            return
        last = ", ".join(own_states) + ("" if all_alive else " (some members not alive yet)")
        time.sleep(0.2)
    raise RotationError(
        f"Every node took its new certificate, but they do not all talk to each other within {timeout:.0f} s "
        f"({last}); look for certificate errors in the nodes' logs."
    )
