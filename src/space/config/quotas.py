"""Per-org admission limits: the defaults and per-org overrides (`QuotaConfig`,
`OrgQuota`) and an org's effective limits (`OrgLimits`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, PositiveInt
from pydantic_settings import BaseSettings, SettingsConfigDict


class OrgQuota(BaseModel):
    """One org's limits; a missing field falls back to the default."""

    sandboxes: PositiveInt | None = None
    commands: PositiveInt | None = None
    commands_per_sandbox: PositiveInt | None = None
    volumes: PositiveInt | None = None
    volume_mb: PositiveInt | None = None
    templates: PositiveInt | None = None
    template_versions: PositiveInt | None = None
    template_mb: PositiveInt | None = None
    template_builds_running: PositiveInt | None = None


class OrgLimits(BaseModel):
    sandboxes: int
    commands: int
    commands_per_sandbox: int
    volumes: int
    volume_mb: int
    templates: int
    template_versions: int
    template_mb: int
    #: None: half the build slots of all nodes, at least 1 (`space.control.builds`).
    template_builds_running: int | None


class QuotaConfig(BaseSettings):
    """Per-org admission limits (`SPACE_QUOTA_SANDBOXES`, `SPACE_QUOTA_COMMANDS`,
    `SPACE_QUOTA_COMMANDS_PER_SANDBOX`, `SPACE_QUOTA_VOLUMES`, `SPACE_QUOTA_VOLUME_MB`:
    the MiB of all the org's volumes; `SPACE_QUOTA_TEMPLATE_BUILDS`: queued and
    building template builds; `SPACE_QUOTA_TEMPLATE_BUILDS_RUNNING`: of those, how
    many build at once (unset: half the build slots of all nodes, at least 1);
    `SPACE_QUOTA_TEMPLATES`, `SPACE_QUOTA_TEMPLATE_VERSIONS`
    and `SPACE_QUOTA_TEMPLATE_MB`: the templates an org owns, the versions the nodes
    keep of them and the MiB those hold); `SPACE_QUOTA_ORGS` (JSON keyed by org name,
    e.g. `{"acme": {"sandboxes": 500}}`) overrides them per org. Over a limit the
    API answers 429 `quota_exceeded` naming the quota."""

    model_config = SettingsConfigDict(env_prefix="SPACE_QUOTA_", extra="ignore")

    sandboxes: PositiveInt = 100
    commands: PositiveInt = 1000
    commands_per_sandbox: PositiveInt = 100
    volumes: PositiveInt = 20
    volume_mb: PositiveInt = 10 * 1024
    template_builds: PositiveInt = 4
    templates: PositiveInt = 20
    template_versions: PositiveInt = 40
    template_mb: PositiveInt = 20 * 1024
    template_builds_running: PositiveInt | None = None
    orgs: dict[str, OrgQuota] = Field(default_factory=dict)

    def for_org(self, org_name: str) -> OrgLimits:
        """The org's effective limits."""
        override = self.orgs.get(org_name, OrgQuota())
        return OrgLimits(
            sandboxes=override.sandboxes or self.sandboxes,
            commands=override.commands or self.commands,
            commands_per_sandbox=override.commands_per_sandbox or self.commands_per_sandbox,
            volumes=override.volumes or self.volumes,
            volume_mb=override.volume_mb or self.volume_mb,
            templates=override.templates or self.templates,
            template_versions=override.template_versions or self.template_versions,
            template_mb=override.template_mb or self.template_mb,
            template_builds_running=override.template_builds_running
            or self.template_builds_running,
        )
