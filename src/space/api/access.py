"""What a key's role lets it do, as both fronts answer it: `require` is a 403 naming
`role` (the table is `space.store.roles`)."""

from __future__ import annotations

from space.api.errors import ApiError
from space.store import roles
from space.store.keys import Principal


def require(principal: Principal, action: roles.Action) -> None:
    """403 naming `role` unless the caller's role (and project) may take `action`."""
    if not principal.may(action):
        raise ApiError(403, "forbidden", roles.refusal(principal.role, action), "role")
