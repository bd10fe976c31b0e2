"""Roles of API keys, and what each may do: one table, `MINIMUM`.

Three built-in roles, narrowest first, each a tier:

    sandbox     what an agent holds: creates sandboxes and sees only those it
                created; no keys, credentials, templates or volumes routes
    developer   sandboxes (all of its project's, or its org's for an org-wide key),
                templates, volumes; reads credentials; mints keys up to `developer`
    admin       the org: also changes credentials, fences E2B secrets, mints
                `admin` keys

Any other role name (a `Word`, e.g. `ci`) is a custom role at the `sandbox` tier:
it exists so a credential's policy can name it (`Policy.roles`). A key's project
is a second fence on top: a project key sees its project's sandboxes and keys only,
mints keys of its project only, and changes no credential whatever its role (a
credential belongs to the org). The operator's key (`ApiKey.is_admin`) is `admin`
of every org. Keys made before roles existed are `admin` (migration 0015).
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Literal

ADMIN, DEVELOPER, SANDBOX = "admin", "developer", "sandbox"
#: A role's name: a built-in one or a custom one (credential policies name it).
ROLE_PATTERN = r"^[a-z][a-z0-9_.-]{0,62}$"
_ROLE = re.compile(ROLE_PATTERN)


class Tier(IntEnum):
    SANDBOX = 0
    DEVELOPER = 1
    ADMIN = 2


BUILT_IN = {SANDBOX: Tier.SANDBOX, DEVELOPER: Tier.DEVELOPER, ADMIN: Tier.ADMIN}

Action = Literal[
    "sandboxes.all",  # see every sandbox of the org (or project), not only its own
    "templates.write",
    "volumes",
    "keys",
    "keys.custom",  # mint a key of a custom role
    "credentials.read",
    "credentials.write",
]

#: The lowest tier that may do each action.
MINIMUM: dict[Action, Tier] = {
    "sandboxes.all": Tier.DEVELOPER,
    "templates.write": Tier.DEVELOPER,
    "volumes": Tier.DEVELOPER,
    "keys": Tier.DEVELOPER,
    "keys.custom": Tier.DEVELOPER,
    "credentials.read": Tier.DEVELOPER,
    "credentials.write": Tier.ADMIN,
}

#: What each action is, for a refusal's message.
WHAT: dict[Action, str] = {
    "sandboxes.all": "see sandboxes it did not create",
    "templates.write": "build or delete templates",
    "volumes": "use volumes",
    "keys": "use the keys routes",
    "keys.custom": "grant a custom role",
    "credentials.read": "read credentials",
    "credentials.write": "change credentials",
}

#: Actions only an org-wide key may take, whatever its role.
ORG_WIDE: frozenset[Action] = frozenset({"credentials.write"})


def tier(role: str) -> Tier:
    """A built-in role's tier; a custom role's is `sandbox`."""
    return BUILT_IN.get(role, Tier.SANDBOX)


def valid(role: str) -> bool:
    return bool(_ROLE.fullmatch(role))


def may(role: str, project_id: str | None, action: Action) -> bool:
    if action in ORG_WIDE and project_id is not None:
        return False
    return tier(role) >= MINIMUM[action]


def refusal(role: str, action: Action) -> str:
    """Why a key of `role` may not take `action`."""
    need = MINIMUM[action].name.lower()
    if action in ORG_WIDE:
        return f"only an org-wide admin key may {WHAT[action]} (this key is {role!r})"
    return f"a key of role {role!r} may not {WHAT[action]}: it takes {need} or wider"


def grants(holder: str, role: str) -> str | None:
    """Why a key of role `holder` may not mint (or start a sandbox as) `role`; None: it may.
    A built-in role no wider than the holder's, or the holder's own role; a custom role
    only from a `developer` or `admin`."""
    if role == holder:
        return None
    if role in BUILT_IN:
        if BUILT_IN[role] > tier(holder):
            return f"a {holder} key cannot grant the wider role {role}"
        return None
    if tier(holder) < MINIMUM["keys.custom"]:
        return f"a {holder} key cannot grant the custom role {role}"
    return None
