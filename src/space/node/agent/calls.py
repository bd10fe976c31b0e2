"""One-reply agent calls as values, so several can go to the guest as one `batch`.

A restore personalises the guest and installs its gateway CA: five calls that an
agent of generation 2 answers in one round trip (`AgentClient.batch`). Older
agents (a snapshot keeps the agent it was taken with) get them one by one.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

#: The first generation with `batch` and `put_file`.
BATCH_GENERATION = 2


@dataclass(frozen=True)
class AgentCall:
    op: str
    body: dict[str, object] = field(default_factory=dict)

    def request(self) -> dict[str, object]:
        return {"op": self.op, **self.body}


def set_clock(epoch_ns: int) -> AgentCall:
    return AgentCall("set_clock", {"epoch_ns": epoch_ns})


def reseed(entropy: bytes) -> AgentCall:
    """Mix `entropy` into the guest's pool; credited where the agent may do so."""
    return AgentCall("reseed", {"entropy": base64.b64encode(entropy).decode()})


def set_identity(hostname: str, sandbox_id: str, env: dict[str, str] | None = None) -> AgentCall:
    """Name the guest; `env`: the sandbox's env, kept in the guest's identity file."""
    body: dict[str, object] = {"hostname": hostname, "sandbox_id": sandbox_id}
    if env:
        body["env"] = dict(env)
    return AgentCall("set_identity", body)


def put_file(path: str, data: bytes, *, append: bool = False, mode: int = 0o644) -> AgentCall:
    """A small file (at most 256 KiB) replaced, or appended to, in one message."""
    encoded = base64.b64encode(data).decode()
    return AgentCall("put_file", {"path": path, "data": encoded, "append": append, "mode": mode})
