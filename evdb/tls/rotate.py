"""Rolling certificate update: new certificates made like the old ones, and a local cluster rotated to them.

Steps 1 to 4 of the spec's "Certificate update (rolling)": :func:`renew_ca` and :func:`renew_node` make a
new CA and node certificates the same way the existing ones were made (validity, common name, IP
addresses and DNS names are read from them). :func:`rotate_cluster` drives a cluster made by
``evdb cluster up``. First it checks, before anything is written, that every node would take the
reload (no option waiting for a restart, a readable configuration and certificate files, a common name
that CertificateReservedNodeCommonName accepts) and names what to do for each node that would not.
Then it writes the next generation ``certs/gen-N/``, points the clients' CA (``certs/ca``) at a bundle
of the old and the new CA (``certs/gen-N/clients/ca.crt``: ``evdb cluster status``, the launcher, the
dashboard and curl trust both while nodes differ) and records the rotation in ``certs/rotation.json``;
node by node it repoints the symlinks the node reads (``ca``, ``node.crt``, ``node.key``), reloads it
(``POST /admin/reloadconfig``) and checks that a fresh handshake shows the new certificate. It declares
success only when, after every node's next ConnectionResetInterval, every node talks to every other
and a write sent to the leader (trusting only the new CA) is acknowledged, which the leader does once
a majority holds it; then ``certs/ca`` points to the new CA alone and the record is removed.

While some nodes have the new CA and others the old one they cannot talk (certificate chain errors in
their logs); the followers are updated first and the leader last, so a majority keeps working as long
as possible. If a node refuses its new certificates, its links are pointed back to what it still serves
and the rotation stops, naming the node and the reason.

With ``prepare_only`` the rotation stops after the links: every node's links point to the new
generation but no node is reloaded; the operator reloads each one (the dashboard's ``l`` key,
``POST /admin/reloadconfig`` or SIGHUP) and watches the cluster while doing it, then runs the rotation
again without ``prepare_only``: it reloads the nodes that still serve the old certificate and finishes.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from evdb.clock import SystemClock
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


#: ``certs/rotation.json``: a rotation under way (its generation); gone once it is finished
ROTATION_FILE = "rotation.json"
#: the stream the closing write goes to (a system stream: mirrors and user reads leave it alone)
ROTATION_STREAM = "$evdb-certificate-rotation"


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
    node's links and reloads no node; run again without it to reload the rest and finish.

    Every node's reload precondition is checked before anything is written (RotationError, nothing
    changed). The rotation is declared done only once a write is acknowledged by a majority after every
    node took its new certificate and remade its node-to-node connections.
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
    certs = cluster.data_dir / "certs"
    auth = (info["user"], info["password"])
    client_trust = ssl.create_default_context(cafile=info["ca"])  # both CAs if a rotation is under way
    under_way = _rotation_under_way(certs)

    if under_way is None:
        # 0. every node's reload precondition, before anything is written
        problems = _preconditions(cluster.data_dir, nodes, client_trust, auth, common_name)
        if problems:
            raise RotationError(
                "Nothing was changed:"
                + (
                    " " + problems[0]
                    if len(problems) == 1
                    else "\n".join(["", *(f"- {p}" for p in problems)])
                )
            )
        generation = certs / f"gen-{_next_generation(certs)}"
        old_ca = Path(os.path.realpath(info["ca"]))
        # 1. new CA and node certificates, made like the current ones
        ca_cert, ca_key = renew_ca(old_ca, generation / "ca")
        for node in nodes:
            cert, _key = renew_node(
                os.path.realpath(node.certificate),
                ca_cert,
                ca_key,
                generation / node.name,
                common_name=common_name,
            )
            log(
                f"New certificate for {node.name}: {describe_certificate(read_certificates(cert)[0]).subject}"
            )
        # clients trust the old CA and the new one until the rotation is finished
        bundle = generation / "clients"
        bundle.mkdir(parents=True, exist_ok=True)
        _write_atomically(bundle / "ca.crt", old_ca.read_bytes().rstrip(b"\n") + b"\n" + ca_cert.read_bytes())
        _write_atomically(
            certs / ROTATION_FILE,
            json.dumps({"generation": generation.name, "commonName": common_name}).encode(),
        )
        repoint_link(certs / "ca", os.path.relpath(bundle, certs))
        log("Clients (certs/ca) trust the old and the new CA until the rotation is finished")
    else:
        generation = certs / under_way["generation"]
        if common_name is not None and common_name != under_way.get("commonName"):
            raise RotationError(
                f"A rotation to {generation.name} is under way (prepared with common name "
                f"{under_way.get('commonName') or 'unchanged'}); run `evdb certs rotate --cluster "
                f"{cluster.data_dir}` without --common-name to finish it first. Nothing was changed."
            )
        if prepare_only:
            raise RotationError(
                f"A rotation to {generation.name} is already prepared; reload the nodes (followers "
                f"first), then run `evdb certs rotate --cluster {cluster.data_dir}` to finish it. "
                "Nothing was changed."
            )
        common_name = under_way.get("commonName")
        log(f"Continuing the rotation to {generation.name}")
    client_trust = ssl.create_default_context(cafile=info["ca"])  # the bundle of both CAs now
    ca_cert = generation / "ca" / "ca.crt"
    ca_info = describe_certificate(read_certificates(ca_cert)[0])
    new_files = {n.name: (generation / n.name / "node.crt", generation / n.name / "node.key") for n in nodes}

    # 2-4. node by node, followers first: repoint the links, reload, check what a new connection is shown
    order = _followers_first(nodes, client_trust, auth)
    if prepare_only:
        for node in order:
            cert, key = new_files[node.name]
            _repoint(node, {node.ca: generation / "ca", node.certificate: cert, node.key: key})
            if common_name is not None:
                _set_reserved_common_name(node.config_path, common_name)
        log(
            f"The links of every node point to {generation.name}; no node was reloaded, and every node "
            f"can take the reload. Reload each node in this order (followers first, the leader last) "
            f"within its ConnectionResetInterval: {', '.join(n.name for n in order)}; then run "
            f"`evdb certs rotate --cluster {cluster.data_dir}` to check that the cluster takes writes over "
            "the new certificates and to make clients trust only the new CA."
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
        expected = read_certificates(cert)[0].fingerprint(hashes.SHA256()).hex()
        if _presented_fingerprint(node.url, client_trust) == expected:
            log(f"{node.name}: already serves the {generation.name} certificate")
            reloaded_at[node.name] = time.monotonic()
            continue
        _repoint(node, {node.ca: generation / "ca", node.certificate: cert, node.key: key})
        if common_name is not None:
            _set_reserved_common_name(node.config_path, common_name)
        answer = _reload(node.url, client_trust, auth)
        if answer is not None:
            _restore(node)
            raise RotationError(
                f"{node.name} refused its new certificates and keeps the old ones ({answer}); "
                f"its links point to the old files again. The nodes before it ({', '.join(reloaded_at) or 'none'}) "
                f"already use {generation.name}; clients (certs/ca) trust both CAs meanwhile."
            )
        reloaded_at[node.name] = time.monotonic()
        if _presented_fingerprint(node.url, client_trust) != expected:
            raise RotationError(
                f"{node.name} reloaded but a new connection is still shown another certificate."
            )
        log(f"{node.name}: reloaded; new connections get the {generation.name} certificate")
        if after_reload is not None:
            after_reload(node.name, i)

    # until every node has reset its node-to-node connections, some still use the old certificate:
    # only gossip answered, and a write acknowledged, after that prove the nodes work with the new ones
    last = max(reloaded_at.values())
    since = time.time()
    if len(nodes) > 1:
        reset = max(_reset_interval(n.url, ca_cert, auth) for n in nodes)
        since = time.time() - (time.monotonic() - last) + reset + 1.0
        log(
            f"Waiting for every node to reset its node-to-node connections (ConnectionResetInterval {reset} s)"
        )
    _wait_until_all_talk([n.url for n in nodes], ca_cert, auth, since, timeout)
    leader = _acknowledged_write([n.url for n in nodes], ca_cert, auth, generation.name, timeout)
    talking = time.monotonic() - last
    log(
        f"All {len(nodes)} nodes talk to each other again and the leader {leader} acknowledged a write held "
        f"by a majority ({talking:.1f} s after the last reload)"
    )
    repoint_link(certs / "ca", os.path.relpath(generation / "ca", certs))
    (certs / ROTATION_FILE).unlink(missing_ok=True)
    log(f"certs/ca now points to {generation.name}/ca: clients trust only the new CA")
    return RotationReport(
        generation=generation,
        ca_subject=ca_info.subject,
        ca_fingerprint_sha256=ca_info.fingerprint_sha256,
        order=[n.name for n in order],
        reloaded_at=reloaded_at,
        talking_again_after=talking,
    )


def _rotation_under_way(certs: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((certs / ROTATION_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RotationError(f"{certs / ROTATION_FILE}: cannot read the rotation under way: {exc}") from None
    if not isinstance(record, dict) or not (certs / str(record.get("generation"))).is_dir():
        raise RotationError(f"{certs / ROTATION_FILE}: names no generation folder of {certs}.")
    return record


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _preconditions(
    data_dir: Path,
    nodes: list[_NodeLinks],
    trust: ssl.SSLContext,
    auth: tuple[str, str],
    common_name: str | None,
) -> list[str]:
    """What would make a node refuse its reload, node by node, each with what to do about it: options
    that wait for a restart, a configuration that cannot be read, certificate files that cannot be read,
    a common name its CertificateReservedNodeCommonName would not accept."""
    from evdb.tls.loading import common_name_matches

    problems: list[str] = []
    for node in nodes:
        try:
            with httpx.Client(base_url=node.url, verify=trust, auth=auth, timeout=10) as client:
                response = client.get("/info/options")
                response.raise_for_status()
                rows = {row["name"]: row for row in response.json()}
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{node.name} ({node.url}) did not say which options it runs with: {exc}")
            continue
        error = next(
            (row.get("configurationError") for row in rows.values() if row.get("configurationError")), None
        )
        if error:
            problems.append(
                f"{node.name} would refuse the reload: its configuration cannot be read now: {error}"
            )
            continue
        restart = [row for row in rows.values() if row.get("restartPending")]
        if restart:
            changed = "; ".join(
                f"{row['name']} runs with {_text(row.get('value'))}, configured {_text(row.get('configured'))}"
                for row in restart
            )
            problems.append(
                f"{node.name} would refuse the reload: options in {node.config_path} changed that need a "
                f"restart ({changed}). Restart it first (evdb cluster stop-node {node.name} --data {data_dir}, "
                f"then evdb cluster start-node {node.name} --data {data_dir}), or set them back."
            )
        old = None
        for path, what in ((node.certificate, "node certificate"), (node.ca / "ca.crt", "CA certificate")):
            try:
                certificate = read_certificates(os.path.realpath(path), what)[0]
            except CertificateError as exc:
                problems.append(f"{node.name}: {exc}")
                continue
            if what == "node certificate":
                old = certificate
        if not os.access(os.path.realpath(node.key), os.R_OK):
            problems.append(f"{node.name}: cannot read its private key {os.path.realpath(node.key)}.")
        if old is None:
            continue
        new_name = common_name or describe_certificate(old).common_name
        reserved = rows.get("CertificateReservedNodeCommonName", {})
        if common_name is not None:
            if reserved.get("source") not in ("yaml", "default"):
                problems.append(
                    f"{node.name} takes CertificateReservedNodeCommonName from its {reserved.get('source')}; "
                    f"the rotation writes the new name into {node.config_path}, where it would not take "
                    "effect: set it in that file instead, or rotate without --common-name."
                )
                continue
            if not os.access(node.config_path, os.W_OK) or not os.access(node.config_path.parent, os.W_OK):
                problems.append(
                    f"{node.name}: cannot write {node.config_path} (the new common name goes there)."
                )
            after = common_name
        else:
            after = str(reserved.get("configured") or "")
        if not common_name_matches(new_name, after):
            problems.append(
                f"{node.name}: its new certificate's common name '{new_name}' would not match "
                f"CertificateReservedNodeCommonName '{after}', so the reload would refuse it: give "
                f"--common-name {after} or set CertificateReservedNodeCommonName in {node.config_path}."
            )
    return problems


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "<not set>" if value is None else str(value)


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


def _acknowledged_write(
    urls: list[str], new_ca: Path, auth: tuple[str, str], generation: str, timeout: float
) -> str:
    """Append one event through the leader (``Kurrent-RequireLeader``: a follower sends the client on
    to the leader) over connections that trust only the new CA; the leader answers 201 only once a
    majority holds it. Not-leader answers are tried again, at the leader, for up to ``timeout`` seconds
    (evdb/client_retry.py). Returns the leader's URL."""
    from evdb.client_retry import REQUIRE_LEADER, LeaderRetry, not_leader

    trust = ssl.create_default_context(cafile=str(new_ca))
    retry = LeaderRetry(timeout, clock=SystemClock())  # a command's own real clock
    event_id = str(uuid.uuid4())  # the same id on every try: a repeated append is not written twice
    body = {"generation": generation, "time": datetime.datetime.now(datetime.UTC).isoformat()}
    target = _leader(urls, trust, auth) or urls[0]
    last = "no answer yet"
    with httpx.Client(verify=trust, auth=auth, timeout=10) as client:
        while True:
            try:
                response = client.post(
                    f"{target}/streams/{quote(ROTATION_STREAM, safe='')}",
                    json=body,
                    headers={
                        **REQUIRE_LEADER,
                        "Kurrent-EventType": "CertificateRotation",
                        "Kurrent-EventId": event_id,
                    },
                )
            except httpx.HTTPError as exc:
                last = f"{target}: {type(exc).__name__}: {exc}"
            else:
                if response.status_code == 201:
                    return target
                answer = not_leader(response.status_code, response.headers, response.content, target)
                if answer is None:
                    raise RotationError(
                        f"Every node took its new certificate, but the write to {target} was refused "
                        f"({response.status_code}: {response.text.strip()[:200]})."
                    )
                last = f"{target}: {response.status_code} {response.text.strip()[:120]}"
                if answer.leader and answer.leader != target and retry.follow():
                    target = answer.leader
                    continue
            wait = retry.next_wait()
            if wait is None:
                raise RotationError(
                    f"Every node took its new certificate, but no write was acknowledged by a majority within "
                    f"{timeout:.0f} s ({last}); clients (certs/ca) still trust both CAs. Look for certificate "
                    "or election errors in the nodes' logs."
                )
            time.sleep(wait)
            target = _leader(urls, trust, auth) or target


def _leader(urls: list[str], trust: ssl.SSLContext, auth: tuple[str, str]) -> str | None:
    """The leader's URL as the first node that answers ``GET /gossip`` names it."""
    from evdb.client_retry import leader_from_gossip

    for url in urls:
        try:
            with httpx.Client(verify=trust, auth=auth, timeout=5) as client:
                leader = leader_from_gossip(client.get(f"{url}/gossip").json(), httpx.URL(url).scheme)
        except (httpx.HTTPError, ValueError):
            continue
        if leader is not None:
            return leader
    return None
