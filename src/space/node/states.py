"""What this node last saw a sandbox doing, as a table (the control plane's lifecycle is
`store/states.py`; these are the observations it reconciles against).

    creating  -> running | paused | suspended | stopped | error
                 (booted; or adopted by a restarted node, or fetched by a move)
    running  <-> paused
    running | paused -> suspended         (a suspend; a sealed snapshot is what counts)
    suspended -> running                  (a restore)
    error     -> suspended                (a failed suspend its previous snapshot keeps)
    any       -> error | stopped          (the VM died; a delete that failed)

A state never goes back to `creating`, and nothing becomes `unreachable` on the node
(the control plane says that of a node it cannot reach). Staying in a state is no
transition. Every change goes through `Sandbox.become`, which checks this table; a
change outside it is a bug of the node's, raised as `NodeStateError`.
"""

from __future__ import annotations

from space.seam.values import ObservedState

ANY_TIME: frozenset[ObservedState] = frozenset({"error", "stopped"})


def _then(*states: ObservedState) -> frozenset[ObservedState]:
    return frozenset(states) | ANY_TIME


TRANSITIONS: dict[ObservedState, frozenset[ObservedState]] = {
    "creating": _then("running", "paused", "suspended"),
    "running": _then("paused", "suspended"),
    "paused": _then("running", "suspended"),
    "suspended": _then("running"),
    "error": _then("suspended"),
    "stopped": ANY_TIME,
    "unreachable": frozenset(),  # the cluster's words for a node's silence or loss:
    "lost": frozenset(),  # no sandbox on a node is ever in them
}


class NodeStateError(RuntimeError):
    """A sandbox's state changed in a way the table does not allow."""


def check(sandbox_id: str, current: ObservedState, target: ObservedState) -> None:
    """Return if `current -> target` is allowed (or no change), else `NodeStateError`."""
    if target != current and target not in TRANSITIONS[current]:
        move = f"{current} -> {target}"
        raise NodeStateError(f"sandbox {sandbox_id}: {move} is not a node transition")
