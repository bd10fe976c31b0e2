"""Route classes that turn any exception from a handler or its dependencies into a
response of the protocol's own error shape (E2B REST, or Connect-RPC)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def catching_route(respond: Callable[[Exception], Response]) -> type[APIRoute]:
    class CatchingRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                try:
                    return await handler(request)
                except Exception as exc:
                    return respond(exc)

            return route

    return CatchingRoute
