"""E2B REST bodies in, and SPACE sandbox rows out in E2B's JSON shapes.

Bodies are bounded like the native API's (`space.api.schemas`): template names,
timeouts, env and metadata sizes.

SPACE state -> E2B state: running (and creating) -> `running`; paused,
suspending, suspended, restoring -> `paused`; error and deleting are not shown.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from space.api.e2b.config import ENVD_VERSION
from space.api.schemas import (
    MAX_SECONDS,
    MAX_VOLUME_MOUNTS,
    Env,
    Metadata,
    MountPath,
    VolumeName,
)
from space.control.expiry import expires_at
from space.seam.values import SandboxSpec
from space.services.volumes import MountRequest
from space.store.models import Sandbox
from space.store.states import SandboxState

S = SandboxState
E2B_STATE: dict[str, str] = {
    S.CREATING.value: "running",
    S.RUNNING.value: "running",
    S.PAUSED.value: "paused",
    S.SUSPENDING.value: "paused",
    S.SUSPENDED.value: "paused",
    S.RESTORING.value: "paused",
}
CLIENT_ID = "space"
_DEFAULTS = SandboxSpec(sandbox_id="defaults")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class EgressIn(_Body):
    """E2B's egress fields, on create (`network`) and on `PUT /sandboxes/{id}/network`."""

    allow_out: list[str] | None = Field(default=None, alias="allowOut", max_length=256)
    deny_out: list[str] | None = Field(default=None, alias="denyOut", max_length=256)
    dns_servers: list[str] | None = Field(default=None, alias="dnsServers", max_length=16)
    egress_proxy: dict[str, Any] | None = Field(default=None, alias="egressProxy")
    rules: dict[str, Any] | None = None

    def unsupported(self) -> str | None:
        """Why SPACE cannot apply these options, or None (`rules`: see `e2b.rules`)."""
        if self.dns_servers:
            return "network.dnsServers: SPACE resolves names in its egress gateway, not set"
        if self.egress_proxy:
            return "network.egressProxy: egress through a proxy is not supported by SPACE"
        return None


class NetworkIn(EgressIn):
    allow_public_traffic: bool | None = Field(default=None, alias="allowPublicTraffic")
    mask_request_host: str | None = Field(default=None, alias="maskRequestHost")
    https_ports: list[Annotated[int, Field(gt=0, lt=65536)]] | None = Field(
        default=None, alias="httpsPorts", max_length=64
    )


class NetworkUpdateIn(EgressIn):
    """The whole new egress configuration: what it leaves out is cleared."""

    allow_internet_access: bool | None = None

    def network_policy(self) -> dict[str, Any] | None:
        return egress_policy(self.allow_internet_access, self)


class VolumeMountIn(_Body):
    """E2B's `SandboxVolumeMount`: always read-write."""

    name: VolumeName
    path: MountPath


class NewVolumeIn(_Body):
    name: VolumeName


class NewSandboxIn(_Body):
    template_id: str = Field(
        alias="templateID", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
    )
    timeout: int = Field(default=15, ge=0, le=MAX_SECONDS)
    auto_pause: bool = Field(default=False, alias="autoPause")
    env_vars: Env = Field(default_factory=dict, alias="envVars")
    metadata: Metadata = Field(default_factory=dict)
    secure: bool = True
    allow_internet_access: bool | None = None
    network: NetworkIn | None = None
    volume_mounts: list[VolumeMountIn] | None = Field(
        default=None, alias="volumeMounts", max_length=MAX_VOLUME_MOUNTS
    )

    def network_policy(self) -> dict[str, Any] | None:
        return egress_policy(self.allow_internet_access, self.network or NetworkIn())

    def mounts(self) -> tuple[MountRequest, ...]:
        return tuple(
            MountRequest("volumeMounts", mount.name, mount.path)
            for mount in self.volume_mounts or ()
        )

    @property
    def private(self) -> bool:
        """`network.allowPublicTraffic: false`: its URLs need the traffic access token."""
        return self.network is not None and self.network.allow_public_traffic is False

    @property
    def https_ports(self) -> list[int] | None:
        """`network.httpsPorts`: guest ports whose servers speak TLS."""
        return self.network.https_ports if self.network is not None else None


class AutoResumeIn(_Body):
    enabled: bool = False


class NewSandboxV2In(NewSandboxIn):
    """`POST /v2/sandboxes`: `lifecycle` as `autoPause` (+ `autoPauseMemory`) and
    `autoResume`, plus options SPACE refuses (`unsupported`). Its `timeout` default
    is v2's 300 s (v1's is 15 s): 2.63 sends none unless the caller sets one."""

    timeout: int = Field(default=300, ge=0, le=MAX_SECONDS)
    auto_pause_memory: bool | None = Field(default=None, alias="autoPauseMemory")
    auto_resume: AutoResumeIn | None = Field(default=None, alias="autoResume")
    mcp: dict[str, Any] | None = None
    iam: dict[str, Any] | None = None

    def unsupported(self) -> str | None:
        """Why SPACE cannot create this sandbox as asked, or None."""
        if self.auto_pause_memory is False:
            return "lifecycle on_timeout mode 'filesystem': SPACE's pause always keeps memory"
        if self.auto_resume is not None and self.auto_resume.enabled:
            return "lifecycle auto_resume is not supported by SPACE: Sandbox.connect resumes"
        if self.mcp:
            return "mcp (an MCP gateway in the sandbox) is not supported by SPACE"
        if self.iam:
            return "iam (workload identity tokens) is not supported by SPACE"
        return self.network.unsupported() if self.network else None


def egress_policy(allow_internet_access: bool | None, network: EgressIn) -> dict[str, Any] | None:
    """SPACE's egress policy (`{"mode", "allow", "deny"}`) for E2B's options.

    `allow_out` given: `allowlist` of it (E2B lets it override `deny_out`);
    internet access off (= E2B's deny 0.0.0.0/0) without one: `none`; only
    `deny_out`: `open` minus it. Plain `allow_internet_access=True`, which the
    SDK sends by default, leaves the org's default policy in force (None).
    Entries are CIDRs, IPs, hosts and `*.suffix` wildcards, as SPACE's policy takes.
    """
    deny = [_cidr(entry) for entry in network.deny_out or [] if entry != CATCH_ALL]
    allow = [_cidr(entry) for entry in network.allow_out or []]
    if allow:
        return {"mode": "allowlist", "allow": allow, "deny": deny}
    if allow_internet_access is False or CATCH_ALL in (network.deny_out or []):
        return {"mode": "none", "allow": [], "deny": deny}
    if deny:
        return {"mode": "open", "allow": [], "deny": deny}
    return None


CATCH_ALL = "0.0.0.0/0"


def _cidr(entry: str) -> str:
    """E2B takes bare IPs where SPACE's policy wants CIDRs."""
    try:
        return str(ipaddress.ip_network(entry, strict=False))
    except ValueError:
        return entry


def network_view(policy: dict[str, Any] | None) -> tuple[bool | None, dict[str, Any]]:
    """E2B's `allowInternetAccess` and `network` read back from SPACE's policy."""
    if policy is None:
        return None, {}
    mode, deny = policy.get("mode", "none"), list(policy.get("deny", []))
    if mode == "open":
        return True, {"denyOut": deny} if deny else {}
    return False, {"allowOut": list(policy.get("allow", [])), "denyOut": [CATCH_ALL, *deny]}


class TimeoutIn(_Body):
    timeout: int = Field(ge=0, le=MAX_SECONDS)


class ConnectIn(_Body):
    timeout: int = Field(default=300, ge=0, le=MAX_SECONDS)


class ConnectV2In(ConnectIn):
    memory: bool | None = None  # False: reboot from the disk alone


class PauseIn(_Body):
    memory: bool | None = None  # False: keep the file system only
    require_healthy_guest: bool | None = Field(default=None, alias="requireHealthyGuest")


class ForkIn(_Body):
    """2.63's `Sandbox.fork`: how many forks (its SDK allows 20, SPACE's bound is 16:
    more is a 422 naming `count`) and the forks' deadline from now, in seconds."""

    count: int = 1
    timeout: int | None = Field(default=None, gt=0, le=MAX_SECONDS)


class RefreshIn(_Body):
    duration: int = Field(default=0, ge=0, le=3600)


def end_at(row: Sandbox) -> datetime:
    """When the sandbox's deadline is: its timeout, else its idle suspend."""
    deadline = expires_at(row)
    if deadline is not None:
        return deadline
    return row.last_activity_at + timedelta(seconds=row.idle_timeout_seconds)


def sandbox_json(
    row: Sandbox, token: str, domain: str | None, traffic_token: str | None
) -> dict[str, Any]:
    """E2B's `Sandbox` (what create, connect and resume answer)."""
    return {
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "sandboxID": row.id,
        "templateID": row.template,
        "alias": row.template,
        "domain": domain,
        "envdAccessToken": token,
        "trafficAccessToken": traffic_token,
    }


def listed_json(row: Sandbox, names: Mapping[str, str]) -> dict[str, Any]:
    """E2B's `ListedSandbox`, its volumes named from `names` (the org's, by id)."""
    return {
        "clientID": CLIENT_ID,
        "cpuCount": _DEFAULTS.vcpus,
        "diskSizeMB": 0,
        "endAt": _iso(end_at(row)),
        "envdVersion": ENVD_VERSION,
        "memoryMB": _DEFAULTS.memory_mib,
        "sandboxID": row.id,
        "startedAt": _iso(row.created_at),
        "state": E2B_STATE[row.state],
        "templateID": row.template,
        "alias": row.template,
        "metadata": dict(row.meta),
        "volumeMounts": [_mount_json(mount, names) for mount in row.volumes or ()],
    }


def _mount_json(mount: dict[str, Any], names: Mapping[str, str]) -> dict[str, str]:
    """A mount as E2B's `SandboxVolumeMount`; a volume deleted since is named by its id."""
    volume_id, path = mount.get("volume_id"), mount.get("path")
    if not isinstance(volume_id, str) or not isinstance(path, str):
        raise ValueError(f"a mount of the sandbox row is malformed: {mount!r}")
    return {"name": names.get(volume_id, volume_id), "path": path}


def detail_json(
    row: Sandbox, token: str, domain: str | None, names: Mapping[str, str]
) -> dict[str, Any]:
    """E2B's `SandboxDetail`."""
    allow_internet_access, network = network_view(row.network)
    return {
        **listed_json(row, names),
        "domain": domain,
        "envdAccessToken": token,
        "allowInternetAccess": allow_internet_access,
        "network": network,
        "lifecycle": {
            "autoResume": False,
            "onTimeout": "pause" if row.on_timeout == "suspend" else "kill",
        },
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
