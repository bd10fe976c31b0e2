"""What a service refuses, as a small tree the fronts map to their wire shapes
(`api.errors` for `/v1` and the console, `api.e2b.errors` for E2B's REST routes),
each in one table. A service knows nothing of HTTP: the statuses below are `/v1`'s.

    ServiceError(message, field, *, code)   code: a stable string every front answers
     ├── Invalid          a value the caller gave cannot be used            422
     ├── Forbidden        the key's role, project or the org's fence refuses 403
     ├── Conflict         the thing is not in a state that allows it        409
     │    └── CommandNotRunning   input or a signal for a command that has
     │                            ended (or never ran here)
     ├── QuotaExceeded    the org is at one of its limits (field: the quota) 429
     └── Failed           the node could not do it (its reason in the message) 502

A missing row stays `store.NotFound` (404) and a missing node `control.NodeUnavailable`
(503): both fronts map those already, services only let them through.
"""

from __future__ import annotations


class ServiceError(Exception):
    #: The code a front answers when the raise names none.
    code = "error"

    def __init__(self, message: str, field: str | None = None, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class Invalid(ServiceError):
    code = "validation_error"


class Forbidden(ServiceError):
    code = "forbidden"


class Conflict(ServiceError):
    code = "conflict"


class QuotaExceeded(ServiceError):
    code = "quota_exceeded"


class Failed(ServiceError):
    code = "failed"


class CommandNotRunning(Conflict):
    code = "command_not_running"

    def __init__(self, command_id: str) -> None:
        super().__init__(f"command {command_id} is not running")


def out_of_bounds(field: str, value: float, limit: float, unit: str = "seconds") -> None:
    """`Invalid` (`out_of_bounds`) naming `field` if `value` exceeds the operator's `limit`."""
    if value > limit:
        raise Invalid(f"{field}: at most {limit:g} {unit}", field, code="out_of_bounds")
