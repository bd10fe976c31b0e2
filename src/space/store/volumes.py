"""Volume rows: named per org, placed on one node, mounted by sandboxes.

A volume is `creating` until its node made the image, `ready` after, `deleting` until
its node removed it (the row goes then). Which sandboxes mount it is read from the
live sandboxes' `volumes` column: the one place that says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from space.store.errors import NotFound, StoreError
from space.store.keys import new_id
from space.store.models import Sandbox, Volume
from space.store.states import SandboxState

#: Sandbox states that hold no volume any more.
RELEASED = (SandboxState.DELETED.value, SandboxState.ERROR.value)


class VolumeExists(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"volume {name!r} already exists")
        self.name = name


@dataclass(frozen=True)
class Mounter:
    """A live sandbox that mounts a volume."""

    sandbox_id: str
    read_only: bool


class VolumeRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def create(
        self,
        org_id: str,
        name: str,
        size_mb: int,
        *,
        node: str | None = None,
        clone_of: str | None = None,
    ) -> Volume:
        """A `creating` row (VolumeExists if the org has one of that name)."""
        row = Volume(
            id=new_id("vol"),
            org_id=org_id,
            name=name,
            size_mb=size_mb,
            state="creating",
            node=node,
            clone_of=clone_of,
        )
        self.session.add(row)
        try:
            self.session.flush()
        except IntegrityError:
            self.session.rollback()
            raise VolumeExists(name) from None
        return row

    def named(self, org_id: str, name: str, *, for_update: bool = False) -> Volume:
        """The org's volume `name`; `for_update`: its row locked to the end of the
        transaction (PostgreSQL; SQLite's write lock serialises writers anyway)."""
        query = select(Volume).where(Volume.org_id == org_id, Volume.name == name)
        row = self.session.scalar(query.with_for_update() if for_update else query)
        if row is None:
            raise NotFound("volume", name)
        return row

    def get(self, volume_id: str) -> Volume:
        row = self.session.get(Volume, volume_id)
        if row is None:
            raise NotFound("volume", volume_id)
        return row

    def of_org(self, org_id: str) -> list[Volume]:
        query = select(Volume).where(Volume.org_id == org_id).order_by(Volume.name)
        return list(self.session.scalars(query))

    def names(self, org_id: str) -> dict[str, str]:
        """The org's volume names by id."""
        query = select(Volume.id, Volume.name).where(Volume.org_id == org_id)
        return {volume_id: name for volume_id, name in self.session.execute(query)}

    def usage(self, org_id: str) -> tuple[int, int]:
        """How many volumes the org has, and their MiB in all."""
        query = select(func.count(), func.coalesce(func.sum(Volume.size_mb), 0)).where(
            Volume.org_id == org_id
        )
        count, total = self.session.execute(query).one()
        return int(count), int(total)

    def set_state(self, volume_id: str, state: str) -> None:
        self.get(volume_id).state = state
        self.session.flush()

    def place(self, volume_id: str, node: str) -> None:
        self.get(volume_id).node = node
        self.session.flush()

    def node_of(self, volume_id: str) -> str | None:
        node: str | None = self.session.scalar(select(Volume.node).where(Volume.id == volume_id))
        return node

    def remove(self, volume_id: str) -> None:
        row = self.session.get(Volume, volume_id)
        if row is not None:
            self.session.delete(row)
            self.session.flush()

    def mounters(self, org_id: str, volume_id: str) -> list[Mounter]:
        """The org's live sandboxes that mount `volume_id`."""
        return self.mounts_of_org(org_id).get(volume_id, [])

    def mounts_of_org(self, org_id: str) -> dict[str, list[Mounter]]:
        """The org's live sandboxes that mount each volume, by volume id."""
        found: dict[str, list[Mounter]] = {}
        for volume_id, mounter in self._live_mounts(org_id):
            found.setdefault(volume_id, []).append(mounter)
        return found

    def _live_mounts(self, org_id: str) -> Iterator[tuple[str, Mounter]]:
        """(volume id, mounter) of each mount of the org's live sandboxes (a row whose
        `volumes` is not a list of mounts is skipped, never the rest)."""
        query = select(Sandbox.id, Sandbox.volumes).where(
            Sandbox.org_id == org_id,
            Sandbox.volumes.is_not(None),
            Sandbox.state.not_in(RELEASED),
        )
        for sandbox_id, mounts in self.session.execute(query):
            for mount in mounts if isinstance(mounts, list) else ():
                if isinstance(mount, dict) and isinstance(mount.get("volume_id"), str):
                    read_only = bool(mount.get("read_only", False))
                    yield mount["volume_id"], Mounter(sandbox_id, read_only)
