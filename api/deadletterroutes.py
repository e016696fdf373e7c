"""The HTTP route of dead letters (a Fornace extension, for operators).

``GET /dead-letters`` lists the messages from the conductor that could not
be stored and were set aside (:mod:`fornace.api.stores.deadletters`),
newest first; ``?tenant=ID`` those of one project, ``?limit=N`` at most N.
Only the cloud admin may (policy rule ``dead_letter:list``): they span
every project.
"""
from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query

from fornace.api.context import Context
from fornace.api.errors import ERROR_RESPONSES
from fornace.api.routing import JsonRoute, permitted, run, store_of
from fornace.api.stores.deadletters import MAX_LISTED
from fornace.api.stores.store import Store

router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)


@router.get("/dead-letters")
async def list_dead_letters(limit: int = Query(100, ge=1, le=MAX_LISTED),
                            tenant: Optional[str] = Query(None, max_length=64),
                            ctx: Context = Depends(permitted("dead_letter:list")),
                            store: Store = Depends(store_of)) -> dict:
    return {"dead_letters": await run(store.dead_letters.list, limit, tenant)}
