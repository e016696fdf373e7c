"""Version discovery: ``GET /`` and ``GET /v1/``, as OpenStack APIs answer them.

``/`` lists the API's versions with ``300 Multiple Choices`` (Murano's and
Heat's answer): ``{"versions": [{"id": "v1.0", "status": "CURRENT",
"links": [{"rel": "self", "href": "<endpoint>/v1/"}]}]}``; ``/v1/`` (and
``/v1``) describes its version alone with ``200``: ``{"version": {...}}``.
keystoneauth's discovery reads both.  A browser asking for a page at ``/``
(its Accept prefers ``text/html`` to JSON) is sent to the dashboard instead.

The links are the endpoint clients reached (the request's scheme and its
Host, which :mod:`fornace.api.hosts` has checked), or ``[api]
public_endpoint`` when set: behind a proxy or a load balancer, the URL
clients use.
"""
from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from webob.acceptparse import create_accept_header

VERSION_ID = "v1.0"
DASHBOARD = "/dashboard/"
# what a GET / may answer, preferred first on a tie (*/*, no Accept)
_OFFERS = ["application/json", "text/html"]

router = APIRouter()


def endpoint(request: Request) -> str:
    """The API's root URL as clients reach it, without a final slash."""
    public = request.app.state.public_endpoint
    if public:
        return public.rstrip("/")
    return str(request.base_url).rstrip("/")


def version(request: Request) -> dict[str, Any]:
    """The one version of the API, its link to ``/v1/``."""
    return {"id": VERSION_ID, "status": "CURRENT",
            "links": [{"rel": "self", "href": f"{endpoint(request)}/v1/"}]}


def wants_html(accept: Optional[str]) -> bool:
    """Whether an Accept header prefers an HTML page to JSON (a browser's does;
    curl's ``*/*``, keystoneauth's ``application/json`` and none do not)."""
    offers = create_accept_header(accept).acceptable_offers(_OFFERS)
    return bool(offers) and offers[0][0] == "text/html"


@router.get("/", status_code=300, summary="The API's versions",
            responses={300: {"description": "The versions of the API (version discovery)"},
                       302: {"description": "A browser: to the dashboard"}})
async def versions(request: Request) -> Response:
    """The API's versions (``300 Multiple Choices``), or the dashboard for a browser."""
    if wants_html(request.headers.get("accept")):
        # below the path a proxy serves the API at, if any (uvicorn's --root-path)
        return RedirectResponse(request.scope.get("root_path", "") + DASHBOARD, status_code=302)
    return JSONResponse({"versions": [version(request)]}, status_code=300)


@router.get("/v1/", summary="Version 1 of the API")
@router.get("/v1", include_in_schema=False)
async def version_one(request: Request) -> dict[str, Any]:
    """Version 1 of the API (its version discovery document)."""
    return {"version": version(request)}
