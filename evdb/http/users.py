"""User management over HTTP, in the shape of KurrentDB's ``/users`` API."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from aiohttp import web

from evdb.auth import UserAlreadyExists, UserNotFound
from evdb.errors import InvalidInput
from evdb.http.common import get_services, json_response, read_json, require_admin, require_authenticated

#: the keys of the users API's bodies, by their lower-case form (KurrentDB binds them as Json.NET
#: does, ignoring case: its own docs post ``LoginName``, ``FullName``, ``Groups``, ``Password``)
_KEYS = {
    key.lower(): key
    for key in ("loginName", "fullName", "groups", "password", "currentPassword", "newPassword")
}


async def _json_body(request: web.Request) -> dict[str, Any]:
    body = await read_json(request, empty={})
    if not isinstance(body, dict):
        raise InvalidInput("The body must be a JSON object.")
    return {_KEYS.get(str(key).lower(), str(key)): value for key, value in body.items()}


def _done(**fields: Any) -> dict[str, Any]:
    """A successful answer as KurrentDB's user-management responses: ``success`` and ``error``."""
    return {**fields, "success": True, "error": "Success"}


async def _call(fn, *args):
    try:
        return await asyncio.to_thread(fn, *args)
    except UserNotFound as exc:
        raise web.HTTPNotFound(text=str(exc), content_type="text/plain") from None
    except UserAlreadyExists as exc:
        raise web.HTTPConflict(text=str(exc), content_type="text/plain") from None


async def list_users(request: web.Request) -> web.Response:
    require_admin(request)
    users = await _call(get_services(request).database.users.list)
    return json_response(_done(data=[u.to_json() for u in users]))


async def get_user(request: web.Request) -> web.Response:
    principal = require_authenticated(request)
    login = request.match_info["login"]
    if login != principal.name:
        require_admin(request)
    user = await _call(get_services(request).database.users.get, login)
    return json_response(_done(data=user.to_json()))


async def create_user(request: web.Request) -> web.Response:
    require_admin(request)
    body = await _json_body(request)
    user = await _call(
        get_services(request).database.users.create,
        body.get("loginName"),
        body.get("fullName", ""),
        body.get("groups", []),
        body.get("password"),
    )
    return json_response(
        _done(loginName=user.login_name),
        status=201,
        headers={"Location": f"/users/{quote(user.login_name, safe='')}"},
    )


async def update_user(request: web.Request) -> web.Response:
    require_admin(request)
    body = await _json_body(request)
    await _call(
        get_services(request).database.users.update,
        request.match_info["login"],
        body.get("fullName", ""),
        body.get("groups", []),
    )
    return json_response(_done())


async def delete_user(request: web.Request) -> web.Response:
    require_admin(request)
    await _call(get_services(request).database.users.delete, request.match_info["login"])
    return json_response(_done())


async def command(request: web.Request) -> web.Response:
    principal = require_authenticated(request)
    login = request.match_info["login"]
    verb = request.match_info["command"]
    users = get_services(request).database.users
    if verb == "change-password":
        if login != principal.name:
            raise web.HTTPForbidden(
                text="Only the user may change their own password.", content_type="text/plain"
            )
        body = await _json_body(request)
        if not await _call(
            users.change_password, login, str(body.get("currentPassword", "")), body.get("newPassword")
        ):
            raise web.HTTPUnauthorized(text="The current password is wrong.", content_type="text/plain")
        return json_response(_done())
    require_admin(request)
    if verb == "reset-password":
        body = await _json_body(request)
        await _call(users.reset_password, login, body.get("newPassword"))
    elif verb in ("enable", "disable"):
        await _call(users.set_disabled, login, verb == "disable")
    else:
        raise web.HTTPNotFound(text=f"Unknown user command '{verb}'.", content_type="text/plain")
    return json_response(_done())


def setup(app: web.Application) -> None:
    r = app.router
    r.add_get("/users", list_users)
    r.add_get("/users/", list_users)
    r.add_post("/users", create_user)
    r.add_post("/users/", create_user)
    r.add_get("/users/{login}", get_user)
    r.add_put("/users/{login}", update_user)
    r.add_delete("/users/{login}", delete_user)
    r.add_post("/users/{login}/command/{command}", command)
