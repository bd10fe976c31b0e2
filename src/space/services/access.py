"""What a key's role lets it do, as every front answers it: `require` refuses
(`Forbidden`, field `role`) what the role may not take (the table is `space.store.roles`)."""

from __future__ import annotations

from space.services.errors import Forbidden
from space.store import roles
from space.store.keys import Principal


def require(principal: Principal, action: roles.Action) -> None:
    """`Forbidden` naming `role` unless the caller's role (and project) may take `action`."""
    if not principal.may(action):
        raise Forbidden(roles.refusal(principal.role, action), "role")
