"""`VolumeService`: an org's volumes, for both fronts (`/v1/volumes`, E2B's `/volumes`),
and `resolve_mounts`, which a sandbox create uses to turn volume names into mounts.

A volume is made in three steps: its row (`creating`; quota and name checked under
the org's lock), the node's image, then `ready`; a node that fails removes the row.
Delete is refused while a live sandbox (not deleted, not in error) mounts it; else
the row becomes `deleting` (no new mount takes it), the node removes the image, then
the row goes (a node that fails leaves it `ready`). A clone copies the source's image
as it is at that instant, also while a sandbox writes it: a crash-consistent copy
(what the writer's guest has not flushed yet is not in it).

One writer at a time: a read-write mount needs a volume no live sandbox mounts, a
read-only one a volume no live sandbox mounts read-write. The check and the sandbox
row share a transaction under the org's lock (`store.quotas.lock_org`, taken by the
create's quota admission and by every volume change here), with the volume rows read
`FOR UPDATE` on PostgreSQL.

Refusals are `services.errors` (store.NotFound, control.NodeUnavailable as they come);
each front maps them to its own shape (the statuses below are `/v1`'s):

    422 out_of_bounds          size_mb past SPACE_MAX_VOLUME_MB (field `size_mb`)
    429 quota_exceeded         volumes_per_org / volume_mb_per_org (`services.quotas`)
    409 volume_exists          the org has a volume of that name (field `name`)
    404 not_found              no volume of that name (or id) in the org
    409 volume_not_ready       it is being created or deleted
    409 volume_in_use          delete: a live sandbox mounts it (the message names it)
    502 volume_create_failed   the node could not make it (or the clone)
    503 node_unavailable       no node in this process (an API-only replica)
  mounts (`resolve_mounts`):
    422 unknown_volume         `<where>.<i>.name`: no volume of that name in the org
    422 validation_error       `<where>.<i>.name` / `.path`: listed twice
    409 volume_not_ready       as above
    409 volume_in_use          the one-writer rule (the message names the sandbox)
    409 volumes_apart          the volumes live on different nodes
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from space.config import Settings
from space.control.errors import NodeUnavailable
from space.seam.protocol import NodeClient
from space.services.access import require
from space.services.errors import Conflict, Failed, Invalid, out_of_bounds
from space.services.quotas import admit_volume
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import Principal
from space.store.models import Volume
from space.store.quotas import lock_org
from space.store.volumes import Mounter, VolumeExists, VolumeRepo


@dataclass(frozen=True)
class MountRequest:
    """A front's ask to mount the org's volume `name` at `path`; `where` is the field
    of the front's body it came from (a refusal names `<where>.name` or `.path`)."""

    where: str
    name: str
    path: str
    read_only: bool = False


@dataclass(frozen=True)
class VolumeView:
    """A volume and the live sandboxes that mount it."""

    volume: Volume
    mounted_by: list[Mounter]


class VolumeService:
    def __init__(self, settings: Settings, db: Database, node: NodeClient | None) -> None:
        self._settings = settings
        self._db = db
        self._node = node

    async def create(self, principal: Principal, name: str, size_mb: int) -> VolumeView:
        """A new empty volume, `ready` once the node made it."""
        require(principal, "volumes")
        out_of_bounds("size_mb", size_mb, self._settings.limits.volume_mb, "MiB")
        node = self._node_or_unavailable()
        with self._db.session() as session:
            admit_volume(session, self._settings.quotas, principal, size_mb)
            row = _insert(VolumeRepo(session), principal.org_id, name, size_mb)
        return await self._made(row, lambda: node.create_volume(row.id, size_mb))

    async def clone(
        self, principal: Principal, source: str, name: str, *, by_id: bool = False
    ) -> VolumeView:
        """A new volume holding `source`'s data as it is now (mounted or not)."""
        require(principal, "volumes")
        node = self._node_or_unavailable()
        size_mb = self.get(principal, source, by_id=by_id).volume.size_mb
        with self._db.session() as session:
            admit_volume(session, self._settings.quotas, principal, size_mb)
            repo = VolumeRepo(session)
            original = _ready(_find(repo, principal.org_id, source, by_id))
            row = _insert(repo, principal.org_id, name, size_mb, clone_of=original.id)
        return await self._made(row, lambda: node.clone_volume(original.id, row.id))

    def get(self, principal: Principal, ref: str, *, by_id: bool = False) -> VolumeView:
        """The org's volume named `ref` (its id, `by_id`); another org's is NotFound."""
        require(principal, "volumes")
        with self._db.session() as session:
            repo = VolumeRepo(session)
            row = _find(repo, principal.org_id, ref, by_id)
            return VolumeView(row, repo.mounters(principal.org_id, row.id))

    def list(self, principal: Principal) -> list[VolumeView]:
        """The org's volumes by name."""
        require(principal, "volumes")
        with self._db.session() as session:
            repo = VolumeRepo(session)
            held = repo.mounts_of_org(principal.org_id)
            return [VolumeView(row, held.get(row.id, [])) for row in repo.of_org(principal.org_id)]

    async def delete(self, principal: Principal, ref: str, *, by_id: bool = False) -> None:
        """Remove a volume no live sandbox mounts: its image, then its row."""
        require(principal, "volumes")
        node = self._node_or_unavailable()
        with self._db.session() as session:
            lock_org(session, principal.org_id)
            repo = VolumeRepo(session)
            row = _find(repo, principal.org_id, ref, by_id)
            if row.state == "creating":
                raise Conflict(f"volume {row.name} is being created", code="volume_not_ready")
            _unmounted(row, repo.mounters(principal.org_id, row.id))
            repo.set_state(row.id, "deleting")
        try:
            await node.delete_volume(row.id)
        except BaseException:
            self._set_state(row.id, "ready")
            raise
        with self._db.session() as session:
            VolumeRepo(session).remove(row.id)

    async def _made(self, row: Volume, make: Callable[[], Awaitable[None]]) -> VolumeView:
        """`row` made `ready` once `make` (the node) is done; removed if it fails."""
        try:
            await make()
        except BaseException as exc:
            with self._db.session() as session:
                VolumeRepo(session).remove(row.id)
            if isinstance(exc, NodeUnavailable) or not isinstance(exc, Exception):
                raise
            message = f"volume {row.name}: the node could not make it: {exc}"
            raise Failed(message, code="volume_create_failed") from exc
        self._set_state(row.id, "ready")
        with self._db.session() as session:
            return VolumeView(VolumeRepo(session).get(row.id), [])

    def _set_state(self, volume_id: str, state: str) -> None:
        with self._db.session() as session:
            VolumeRepo(session).set_state(volume_id, state)

    def _node_or_unavailable(self) -> NodeClient:
        if self._node is None:
            raise NodeUnavailable()
        return self._node


def volume_names(db: Database, org_id: str) -> dict[str, str]:
    """The org's volume names by id (what a sandbox's mounts are shown with)."""
    with db.session() as session:
        return VolumeRepo(session).names(org_id)


def resolve_mounts(
    session: Session, org_id: str, mounts: tuple[MountRequest, ...]
) -> list[dict[str, Any]] | None:
    """The `Sandbox.volumes` of a new sandbox (None: no mounts), each volume's row
    locked; call it under the org's lock, in the transaction that inserts the sandbox."""
    if not mounts:
        return None
    repo = VolumeRepo(session)
    for i in range(len(mounts)):
        _once(mounts, i)
    rows = [_mountable(repo, org_id, mount, i) for i, mount in enumerate(mounts)]
    held = repo.mounts_of_org(org_id)  # read after the locks: no mount lands meanwhile
    for row, mount in zip(rows, mounts, strict=True):
        _one_writer(row, mount, held.get(row.id, []))
    if len({row.node for row in rows}) > 1:
        names = ", ".join(row.name for row in rows)
        raise Conflict(f"volumes {names} live on different nodes", code="volumes_apart")
    return [
        {"volume_id": row.id, "path": mount.path, "read_only": mount.read_only}
        for row, mount in zip(rows, mounts, strict=True)
    ]


def _once(mounts: tuple[MountRequest, ...], i: int) -> None:
    """422 if mount `i` repeats an earlier one's volume or path."""
    mount, earlier = mounts[i], mounts[:i]
    for key, seen in (("name", {m.name for m in earlier}), ("path", {m.path for m in earlier})):
        if getattr(mount, key) in seen:
            field = f"{mount.where}.{i}.{key}"
            raise Invalid(f"{field}: is listed twice", field)


def _mountable(repo: VolumeRepo, org_id: str, mount: MountRequest, i: int) -> Volume:
    try:
        row = repo.named(org_id, mount.name, for_update=True)
    except NotFound:
        field = f"{mount.where}.{i}.name"
        message = f"{field}: no volume named {mount.name!r} in this org"
        raise Invalid(message, field, code="unknown_volume") from None
    return _ready(row)


def _one_writer(row: Volume, mount: MountRequest, holders: list[Mounter]) -> None:
    """409 unless `mount` may join `holders`: a writer needs none, a reader no writer."""
    blocking = [h for h in holders if not (mount.read_only and h.read_only)]
    if blocking:
        how = "read-only" if blocking[0].read_only else "read-write"
        message = (
            f"volume {row.name} is mounted {how} by sandbox {blocking[0].sandbox_id}: "
            "one writer at a time, or any number of read-only mounts"
        )
        raise Conflict(message, code="volume_in_use")


def _unmounted(row: Volume, holders: list[Mounter]) -> None:
    if holders:
        ids = ", ".join(h.sandbox_id for h in holders)
        raise Conflict(f"volume {row.name} is mounted by sandbox {ids}", code="volume_in_use")


def _ready(row: Volume) -> Volume:
    if row.state != "ready":
        raise Conflict(f"volume {row.name} is {row.state}", code="volume_not_ready")
    return row


def _find(repo: VolumeRepo, org_id: str, ref: str, by_id: bool) -> Volume:
    if not by_id:
        return repo.named(org_id, ref)
    row = repo.get(ref)
    if row.org_id != org_id:
        raise NotFound("volume", ref)
    return row


def _insert(
    repo: VolumeRepo, org_id: str, name: str, size_mb: int, clone_of: str | None = None
) -> Volume:
    try:
        return repo.create(org_id, name, size_mb, clone_of=clone_of)
    except VolumeExists as exc:
        raise Conflict(str(exc), "name", code="volume_exists") from exc
