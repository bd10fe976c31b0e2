"""`create_app(settings, node)`: the native HTTP API of one process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client.registry import Collector

from space.api import e2b, token_secrets
from space.api.bootstrap import open_database
from space.api.console import routes as console
from space.api.e2b.config import E2bConfig
from space.api.errors import install_error_handlers
from space.api.ingress import Ingress
from space.api.limits import RequestLimits
from space.api.metrics import Metrics, MetricsMiddleware
from space.api.port_forward import PortForward
from space.api.routes import (
    commands,
    credentials,
    egress,
    files,
    keys,
    pty,
    sandboxes,
    system,
    volumes,
)
from space.api.routes import lifecycle as power
from space.api.routes import templates as template_routes
from space.api.state import AppState
from space.config import Settings
from space.control.builds import BuildLimits
from space.control.controller import AfterPass, Controller
from space.control.expiry import Activity
from space.control.waiter import DbWaiter, Lifecycle
from space.recipes.worker import RecipeChecker
from space.seam.protocol import NodeClient
from space.seam.values import SandboxObservation
from space.services.audit_copy import AuditCopy
from space.services.command_sweep import CommandSweep
from space.services.credential_admin import CredentialAdmin
from space.services.credential_push import CredentialPush
from space.services.credentials import CredentialService
from space.services.keys import KeyService
from space.services.processes import ProcessRegistry
from space.services.sandboxes import SandboxService
from space.services.secrets import SecretService
from space.services.snapshots import SnapshotService
from space.services.templates import TemplateService
from space.store.db import Database

API_VERSION = "0.1.0"


def create_app(
    settings: Settings,
    node: NodeClient | None,
    *,
    db: Database | None = None,
    run_controller: bool = True,
    metrics_from: Sequence[Collector] = (),
) -> FastAPI:
    """Build the app. With a node, a `Controller` creates sandboxes in-process and
    (unless `run_controller` is False) reconciles in the background; without one,
    sandbox creation waits for a separate `space controller` and data-plane calls
    answer 503. `metrics_from` adds collectors to `/metrics` (the in-process
    gateway's counters)."""
    db = db or open_database(settings)
    activity = Activity(settings.controller.activity_interval)
    credential_service = CredentialService(settings, db)
    credential_service.check_keys()  # the same key files as the cluster's other processes
    pushes = CredentialPush(credential_service, db, node, settings.timeouts.node_call)
    audit = AuditCopy(db, credential_service.audit_file, node, settings.timeouts.node_call)
    sweep = CommandSweep(db, node, settings.timeouts.node_call, settings.timeouts.node_call)
    controller = _controller(settings, db, node, activity, after_pass(pushes, audit, sweep))
    registry = _registry(settings, db, node, activity, credential_service)
    lifecycle: Lifecycle = controller or DbWaiter(db, timeout=settings.timeouts.create)
    service = SandboxService(
        settings=settings,
        db=db,
        node=node,
        lifecycle=lifecycle,
        processes=registry,
        credentials=pushes,
    )
    metrics = Metrics(db, node, metrics_from)
    e2b_config = E2bConfig()
    tokens = token_secrets.agreed(
        settings, e2b_config.token_secret, db, lambda: credential_service.placeholder_secret
    )
    e2b_front = e2b.E2bFront(settings, tokens, e2b_config)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if controller is not None and run_controller:
            controller.start()
        try:
            yield
        finally:
            await e2b_front.aclose()
            if registry is not None:
                await registry.aclose()
            if controller is not None:
                await controller.aclose()

    app = FastAPI(title="SPACE", version=API_VERSION, lifespan=lifespan)
    templates = TemplateService(
        db=db,
        settings=settings,
        node=node,
        sandboxes=service,
        # checks recipes at submission, in limited child processes (`space.recipes.worker`)
        recipes=RecipeChecker(),
    )
    snapshots = SnapshotService(db=db, quotas=settings.quotas, node=node)
    app.state.space = AppState(
        settings=settings,
        db=db,
        node_client=node,
        lifecycle=lifecycle,
        sandboxes=service,
        registry=registry,
        templates=templates,
        snapshots=snapshots,
        keys=KeyService(db=db),
        credentials=CredentialAdmin(broker=credential_service, push=pushes),
        secrets=SecretService(broker=credential_service, push=pushes),
        tokens=tokens,
        activity=activity,
    )
    app.state.metrics = metrics
    if node is not None:  # started by `space up` next to the HTTP server
        app.state.ingress = Ingress(
            settings=settings,
            db=db,
            node=node,
            lifecycle=lifecycle,
            activity=activity,
            token_key=tokens.ingress,
        )
    install_error_handlers(app)
    for module in (
        sandboxes,
        commands,
        files,
        power,
        egress,
        volumes,
        keys,
        credentials,
        pty,
        system,
        console,
        template_routes,
    ):
        app.include_router(module.router)
    e2b.install(app, e2b_front)
    app.add_middleware(
        RequestLimits,
        db=db,
        tokens=e2b_front.tokens,
        json_limit=settings.limits.json_body_bytes,
        upload_limit=settings.server.max_body_bytes,
    )
    app.add_middleware(
        PortForward, domain=settings.ingress.domain, idle_seconds=settings.ingress.idle_seconds
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


def _controller(
    settings: Settings,
    db: Database,
    node: NodeClient | None,
    activity: Activity,
    after: AfterPass,
) -> Controller | None:
    if node is None:
        return None
    return Controller(
        db=db,
        node=node,
        timeouts=settings.timeouts,
        config=settings.controller,
        builds=BuildLimits.of(settings),
        activity=activity,
        after_pass=after,
    )


def after_pass(pushes: CredentialPush, audit: AuditCopy, commands: CommandSweep) -> AfterPass:
    """After each reconcile pass: views to gateways that are behind, then the gateways'
    credential audit into the database, then how commands ended that no replica saw
    end (each step logs its own failures)."""

    async def run(observed: list[SandboxObservation]) -> None:
        await pushes.resync(observed)
        await audit.pull(observed)
        await commands.run(observed)

    return run


def _registry(
    settings: Settings,
    db: Database,
    node: NodeClient | None,
    activity: Activity,
    credentials: CredentialService,
) -> ProcessRegistry | None:
    """Processes started through this replica (their output lives on their nodes)."""
    if node is None:
        return None
    return ProcessRegistry(
        db=db,
        node=node,
        quotas=settings.quotas,
        activity=activity,
        keepalive=settings.server.sse_keepalive_seconds,
        call_timeout=settings.timeouts.node_call,
        guest_env=credentials.guest_env,
    )
