"""The values that cross the node seam: plain frozen dataclasses, so an HTTP
implementation of `NodeClient` can serialise them unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: `unreachable` and `lost`: reported by `space.control.cluster`, never by a node, for a
#: sandbox whose node does not answer (not lost yet: the reconciler leaves it alone) or
#: is lost (its sandbox fails, and comes back if the node does).
ObservedState = Literal[
    "creating", "running", "paused", "suspended", "stopped", "error", "unreachable", "lost"
]
EventKind = Literal["stdout", "stderr", "exit"]
FileType = Literal["file", "dir", "symlink", "other"]
WatchEventType = Literal["create", "write", "remove", "rename", "chmod", "overflow"]


@dataclass(frozen=True)
class VolumeMount:
    """A volume (made on the same node by `create_volume`) mounted at `path` in the
    guest; `read_only`: attached and mounted read-only."""

    volume_id: str
    path: str
    read_only: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """What the control plane asks a node to run."""

    sandbox_id: str
    template: str = "base"
    memory_mib: int = 256
    vcpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    network: dict[str, Any] | None = None  # egress policy (space.egress.policy); None: mode none
    volumes: tuple[VolumeMount, ...] = ()


@dataclass(frozen=True)
class BuildSpec:
    """A template to build from a recipe (`space.recipes`): its build
    context (path -> content), ARG values, the commands its base snapshot is taken
    with, the build VM's disk and memory, its egress policy (None: no network), and
    how long it may build once the node starts it (`deadline` s; None: no bound)."""

    name: str
    recipe: str
    context: dict[str, bytes] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    start_cmd: str | None = None
    ready_cmd: str | None = None
    disk_mb: int | None = None
    memory_mib: int = 512
    network: dict[str, Any] | None = None
    deadline: float | None = None


@dataclass(frozen=True)
class TemplateUsage:
    """What a set of templates holds on a node: their kept versions, and the bytes
    their disks and base snapshots occupy there (allocated blocks; an extent versions
    share is counted in each, so it never understates the node's cost)."""

    versions: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class BuildStatus:
    """Where a build on a node is: `building`, `ready` (`digest` names the version it
    added), `failed` (`error` says why), `cancelled` (its VM and files are gone,
    nothing was registered) or `unknown` (the node has no such build: it restarted
    since, or never had it). `lines` are its log from the index asked for; `next` is
    the index to ask for next."""

    state: Literal["building", "ready", "failed", "cancelled", "unknown"]
    lines: tuple[str, ...] = ()
    next: int = 0
    digest: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class CredentialGrant:
    """A sandbox's credential view on its way to the node's gateway: the view as
    `space.credentials.scopes.CredentialView.to_json` writes it (no values), and the
    value of each entry, revealed by the control plane, keyed `"<credential id>:<version>"`."""

    org_id: str
    view: dict[str, Any]
    values: dict[str, str] = field(repr=False)

    @staticmethod
    def key(credential_id: str, version: int) -> str:
        """Where `values` keeps the value of `version` of a credential."""
        return f"{credential_id}:{version}"

    def value(self, credential_id: str, version: int) -> str:
        """The revealed value (KeyError for one the view does not hold)."""
        return self.values[self.key(credential_id, version)]

    @property
    def version(self) -> int:
        """The view's version (a gateway applies only a newer one)."""
        return int(self.view["version"])


@dataclass(frozen=True)
class AuditBatch:
    """Records of a node gateway's credential audit chain after a seq, oldest first, as
    `space.credentials.audit.AuditRecord.to_json` writes them; `source` names the chain
    (one per node), `head` is its newest seq (below a reader's cursor: it started over)."""

    source: str
    head: int
    records: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class SandboxObservation:
    """What a node reports about one sandbox it holds; `credentials_version` is the
    credential view version its gateway applies (None: it holds no view)."""

    sandbox_id: str
    state: ObservedState
    template: str
    reason: str | None = None
    credentials_version: int | None = None


@dataclass(frozen=True)
class EgressRecord:
    """One decision of a sandbox's egress gateway (a DNS question, TLS handshake or
    request): never a query string, body or header value."""

    at: float  # Unix time
    kind: str  # "dns", "tls", "http", "policy"
    decision: str  # "allow" or "deny"
    reason: str
    policy_version: int
    host: str | None = None
    sni: str | None = None
    address: str | None = None
    method: str | None = None
    path: str | None = None
    rule: str | None = None
    status: int | None = None


@dataclass(frozen=True)
class WarmPoolStats:
    template: str
    target: int
    ready: int
    hits: int
    misses: int


@dataclass(frozen=True)
class ExecRequest:
    """A command: `cmd` runs under `/bin/sh -c`, `args` is executed directly."""

    cmd: str | None = None
    args: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stdin: bytes | None = None
    timeout: float | None = None
    pty: tuple[int, int] | None = None  # (rows, cols) for an interactive terminal
    output_limit: int | None = None  # exec: bytes kept per stream (None: the node's default)


@dataclass(frozen=True)
class ExecResult:
    """A finished command's output, each stream cut at the node's exec limit;
    `*_dropped` counts the bytes past it."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_dropped: int = 0
    stderr_dropped: int = 0


@dataclass(frozen=True)
class ProcessEvent:
    kind: EventKind
    data: bytes = b""
    exit_code: int | None = None


@dataclass(frozen=True)
class Record:
    """One numbered entry of a replayable stream (a command's output log, a build's
    progress): served as an SSE event with `id`, `event` and JSON `data`."""

    id: int
    event: str
    data: dict[str, Any]


@dataclass(frozen=True)
class CommandEnd:
    """A command its node no longer runs: `exit_code` None means it was lost (its VM
    stopped, its node restarted, or the node never ran a command of that id)."""

    command_id: str
    exit_code: int | None


@dataclass(frozen=True)
class FileInfo:
    path: str
    name: str
    type: FileType
    size: int
    mode: int
    mtime: float
    uid: int
    gid: int
    symlink_target: str | None = None


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    argv: tuple[str, ...]
    cmd: str | None
    pty: bool
    attached: bool
    running: bool
    exit_code: int | None
    started_at: float


@dataclass(frozen=True)
class WatchEvent:
    type: WatchEventType
    path: str
    is_dir: bool = False
