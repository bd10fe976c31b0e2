"""`batch` (generation 2): several one-reply operations in one request, in order.

A restore or a warm claim sets the clock, reseeds, names the guest and installs
the gateway CA; as one message that is one round trip instead of five. Only
operations that answer with a single reply and stream nothing may be batched
(`BATCHABLE`); the first one that fails ends the batch with its error, naming
its place.
"""

from __future__ import annotations

from collections.abc import Mapping

from space.guest.channel import Channel
from space.guest.ops import Body, Handler, OpError
from space.guest.protocol import ErrorCode

BATCHABLE = frozenset({"health", "set_clock", "reseed", "set_identity", "put_file"})
MAX_CALLS = 16


def batch_handler(handlers: Mapping[str, Handler]) -> Handler:
    """The `batch` op over `handlers` (those named in BATCHABLE)."""

    async def batch(channel: Channel, body: Body) -> Body:
        results: list[Body] = []
        for index, call in enumerate(_calls(body)):
            op = call.get("op")
            if op not in BATCHABLE or not isinstance(op, str) or op not in handlers:
                raise OpError(ErrorCode.UNSUPPORTED, f"call {index}: {op!r} cannot be batched")
            try:
                results.append(await handlers[op](channel, call))
            except OpError as exc:
                raise OpError(exc.code, f"call {index} ({op}): {exc.message}", exc.path) from exc
        return {"results": results}

    return batch


def _calls(body: Body) -> list[Body]:
    calls = body.get("calls")
    if (
        not isinstance(calls, list)
        or not 0 < len(calls) <= MAX_CALLS
        or not all(isinstance(call, dict) for call in calls)
    ):
        raise OpError(ErrorCode.INVALID, f"'calls' must be a list of 1..{MAX_CALLS} objects")
    return calls
