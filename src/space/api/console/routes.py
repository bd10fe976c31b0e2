"""Everything the console serves, as one router for `create_app` to include."""

from __future__ import annotations

from fastapi import APIRouter

from space.api.console import assets, data, pages

router = APIRouter()
for _module in (pages, assets, data):
    router.include_router(_module.router)
