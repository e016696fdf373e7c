"""The web dashboard: HTML pages over the same Store and Jobs as the JSON API.

Served by the API process under ``/dashboard`` (see :func:`create_dashboard`).
Pages are rendered on the server (Jinja2); one small script polls for live
progress; nothing is loaded from another site, so it works offline.
"""
from fornace.api.dashboard.app import create_dashboard

__all__ = ["create_dashboard"]
