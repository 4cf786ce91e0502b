"""``POST /admin/reloadconfig`` (KurrentDB's) and ``GET /admin/certificates`` (an evdb extension).

Reload: ``$admins``/``$ops``; as a legacy admin endpoint a missing role is 401. The answer is ``200`` with
an empty body whatever the outcome, as KurrentDB answers: a failed reload is logged (naming the file and
the reason) and the node keeps its current configuration (evdb/tls/reload.py). evdb answers once the
reload is over (KurrentDB at once), so the outcome is then in ``GET /admin/certificates`` ``lastReload``,
which is where the dashboard reads it.

Certificates: the node certificate in use (subject, names, issuer, validity, fingerprints, files), the CA
it chains to, the trusted roots, the time and result of the last reload, and ``peerErrors``: the calls to
other nodes failing now (peer, reason, whether a certificate is the cause, since when), for the dashboard.
"""

from __future__ import annotations

from aiohttp import web

from evdb.http.common import get_services, json_response, require_ops
from evdb.http.openapi import EXTRA_PATHS, json_object, object_schema

__all__ = ["setup"]


async def reload_config(request: web.Request) -> web.Response:
    require_ops(request)
    # the outcome, success or not, is logged and kept for GET /admin/certificates (lastReload)
    await get_services(request).reloader.reload("http")
    return web.Response(status=200)


async def certificates(request: web.Request) -> web.Response:
    require_ops(request)
    services = get_services(request)
    body = services.reloader.describe()
    # the calls to other nodes failing now, each naming the peer and the reason (a certificate, say)
    peers = services.peers
    body["peerErrors"] = [failure.to_json() for failure in peers.failures()] if peers is not None else []
    return json_response(body)


def setup(app: web.Application) -> None:
    app.router.add_post("/admin/reloadconfig", reload_config)
    app.router.add_get("/admin/certificates", certificates)


_NULLABLE_OBJECT = {"type": "object", "nullable": True}

EXTRA_PATHS.append(
    {
        "/admin/reloadconfig": {
            "post": {
                "summary": "Reload the configuration file, the environment and the certificates",
                "responses": {
                    "200": {
                        "description": (
                            "The reload is over, whatever its outcome (as KurrentDB answers); a failure is "
                            "logged and shown in /admin/certificates lastReload, and the current "
                            "configuration stays"
                        )
                    },
                    "401": {"description": "Not authenticated, or not $admins/$ops"},
                },
            }
        },
        "/admin/certificates": {
            "get": {
                "summary": "The certificate state of this node (evdb extension)",
                "responses": {
                    "200": {
                        "description": "Certificate in use, its CA, the trusted roots, the last reload, failing peers",
                        "content": json_object(
                            {
                                "secure": {"type": "boolean"},
                                "certificate": _NULLABLE_OBJECT,
                                "ca": _NULLABLE_OBJECT,
                                "trustedRoots": {"type": "array", "items": {"type": "object"}},
                                "reservedNodeCommonName": {"type": "string"},
                                "connectionResetIntervalSeconds": {"type": "integer"},
                                "loadedAt": {"type": "string", "nullable": True},
                                "lastReload": _NULLABLE_OBJECT,
                                "peerErrors": {
                                    "type": "array",
                                    "items": object_schema(
                                        {
                                            "peer": {"type": "string"},
                                            "reason": {"type": "string"},
                                            "certificate": {"type": "boolean"},
                                            "since": {"type": "string"},
                                            "last": {"type": "string"},
                                            "failures": {"type": "integer"},
                                        }
                                    ),
                                },
                            },
                            ["secure", "certificate", "ca", "trustedRoots", "lastReload", "peerErrors"],
                        ),
                    },
                    "401": {"description": "Not authenticated, or not $admins/$ops"},
                },
            }
        },
    }
)
