"""The node's web Admin UI, served under ``/web/`` on the HTTP port (same TLS and Basic credentials).

routes.py serves the page, its static files and the server-rendered parts; views.py reads what they
show (cluster members, the scavenge and its history, streams and their events, redacted ones labelled).
"""

from __future__ import annotations

from evdb.webui.routes import setup

__all__ = ["setup"]
