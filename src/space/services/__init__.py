"""What SPACE does, apart from how it is asked: the services every front (`/v1` in
`api.routes`, E2B in `api.e2b`, the console in `api.console`) calls. Each is handed
what it uses at construction (`api.app.create_app` builds them) and knows nothing of
HTTP: it raises `services.errors` and imports neither fastapi, starlette nor
`space.api` (import-linter contracts in pyproject.toml).

    sandboxes        SandboxService: create, fork, delete, list, power, deadline
    processes        ProcessRegistry: every process either front starts, its log and followers
    eventlog         a process's on-disk log and its readers
    templates        TemplateService: queue, list, follow, cancel and delete template builds
    snapshots        SnapshotService: a running sandbox's disk as a template version
    volumes          VolumeService and the mounts a create asks for
    credentials      CredentialService: the broker's control plane
    credential_admin CredentialAdmin: /v1's credentials (create, rotate, bind, audit, ...)
    secrets          SecretService: E2B's secrets, `rules` credentials of the key's org
    keys             KeyService: API keys minted, listed, revoked within the caller's reach
    credential_push  credential views to the node's gateway
    audit_copy       each gateway's audit chain into the database's
    quotas           the org's admission checks
    access           `require`: what a key's role may do
    errors           what a service refuses: the tree each front maps to its wire shape
"""
