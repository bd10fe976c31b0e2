"""`E2bFront`: what the E2B-compatible routes share within one API process (the
processes they start live in the registry both fronts share, `AppState.processes`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from space.api import ingress_names
from space.api.deps import StateDep
from space.api.e2b.config import E2bConfig
from space.api.e2b.routing import EnvdTarget, resolve
from space.api.e2b.tokens import AccessTokens
from space.api.e2b.watchers import Watchers
from space.api.token_secrets import TokenSecrets
from space.config import Settings
from space.store.models import Sandbox


class E2bFront:
    def __init__(self, settings: Settings, secrets: TokenSecrets, config: E2bConfig) -> None:
        self.config = config
        self.tokens = AccessTokens(secrets.e2b, ttl=settings.keys.token_ttl)
        self.watchers = Watchers(queue_size=self.config.stream_queue)
        self.domain = self.config.domain or settings.ingress.domain  # what `get_host` uses
        self._ingress_key = secrets.ingress

    def traffic_token(self, row: Sandbox) -> str | None:
        """The token a private sandbox's URLs require (None: its URLs are public)."""
        return ingress_names.private_token(self._ingress_key, row.id, dict(row.meta))

    async def aclose(self) -> None:
        await self.watchers.aclose()


def _front(request: Request) -> E2bFront:
    front: E2bFront = request.app.state.e2b
    return front


FrontDep = Annotated[E2bFront, Depends(_front)]


def _envd(request: Request, front: FrontDep, state: StateDep) -> EnvdTarget:
    return resolve(request, state.db, front.tokens)


EnvdDep = Annotated[EnvdTarget, Depends(_envd)]
