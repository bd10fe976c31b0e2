"""Credentials through `/v1/credentials`: a value goes in (`create`, `rotate`) and no
answer ever holds it; the audit and a sandbox's view (names and placeholders) read back.

    from space.sdk import Credentials

    with Credentials() as store:                     # SPACE_API_URL, SPACE_API_KEY
        made = store.create("GITHUB_TOKEN", token, hosts=["api.github.com"])
        store.rotate(made.id, new_token, grace=60)

`Credentials` and `AsyncCredentials` send the same `Call`s (built here once) and
differ only in how they wait for the answer.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar

import httpx

from space.sdk._exceptions import converted, raise_for
from space.sdk._models import Connection

T = TypeVar("T")
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


@dataclass(frozen=True)
class CredentialInfo:
    """A credential as the API shows it: everything but its value."""

    id: str
    name: str
    scope: str
    target: str | None
    kind: str
    application: dict[str, Any]
    binding: dict[str, Any] | None  # None: an E2B secret (`rules`), bound per sandbox use
    version: int
    fingerprint: str
    status: str
    expires_at: str | None = None
    revoked_at: str | None = None
    narrowings: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CredentialInfo:
        return cls(
            id=body["id"],
            name=body["name"],
            scope=body["scope"],
            target=body.get("target"),
            kind=body["kind"],
            application=dict(body["application"]),
            binding=dict(body["binding"]) if body.get("binding") is not None else None,
            version=int(body["version"]),
            fingerprint=body["fingerprint"],
            status=body["status"],
            expires_at=body.get("expires_at"),
            revoked_at=body.get("revoked_at"),
            narrowings=list(body.get("narrowings") or []),
        )


@dataclass(frozen=True)
class AuditEntry:
    """One record of the hash-chained credential audit (never a value)."""

    seq: int
    at: str
    who: str
    decision: str
    sandbox_id: str | None
    credential_id: str | None
    host: str | None
    method: str | None
    path: str | None
    latency_ms: float | None
    hash: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> AuditEntry:
        return cls(**{name: body[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None


def _one(body: Any) -> CredentialInfo:
    return CredentialInfo.from_json(body)


def _many(body: Any) -> list[CredentialInfo]:
    return [CredentialInfo.from_json(c) for c in body["credentials"]]


def _records(body: Any) -> list[AuditEntry]:
    return [AuditEntry.from_json(r) for r in body["records"]]


def _as_is(body: Any) -> dict[str, Any]:
    result: dict[str, Any] = body
    return result


def _nothing(_: Any) -> None:
    return None


def _binding(
    hosts: list[str],
    methods: list[str] | None,
    path_prefixes: list[str] | None,
    rate_limit: dict[str, Any] | None,
) -> dict[str, Any]:
    binding: dict[str, Any] = {"hosts": hosts}
    for name, given in (
        ("methods", methods),
        ("path_prefixes", path_prefixes),
        ("rate_limit", rate_limit),
    ):
        if given is not None:
            binding[name] = given
    return binding


class Calls:
    """The requests of every credential operation (the API checks every field)."""

    @staticmethod
    def create(
        name: str,
        value: str,
        *,
        hosts: builtins.list[str],
        application: dict[str, Any] | None = None,
        methods: builtins.list[str] | None = None,
        path_prefixes: builtins.list[str] | None = None,
        rate_limit: dict[str, Any] | None = None,
        scope: str = "org",
        target: str | None = None,
        policy: dict[str, Any] | None = None,
        expires_in: int | None = None,
    ) -> Call[CredentialInfo]:
        """`application` defaults to `Authorization: Bearer {value}`."""
        body: dict[str, Any] = {
            "name": name,
            "scope": scope,
            "target": target,
            "application": application or {"kind": "header"},
            "binding": _binding(hosts, methods, path_prefixes, rate_limit),
            "value": value,
        }
        if policy is not None:
            body["policy"] = policy
        if expires_in is not None:
            body["expires_in"] = expires_in
        return Call("POST", "/v1/credentials", _one, json=body)

    @staticmethod
    def list() -> Call[builtins.list[CredentialInfo]]:
        return Call("GET", "/v1/credentials", _many)

    @staticmethod
    def get(credential_id: str) -> Call[CredentialInfo]:
        return Call("GET", f"/v1/credentials/{credential_id}", _one)

    @staticmethod
    def rotate(credential_id: str, value: str, grace: int = 0) -> Call[CredentialInfo]:
        body = {"value": value, "grace": grace}
        return Call("POST", f"/v1/credentials/{credential_id}/rotate", _one, json=body)

    @staticmethod
    def revoke(credential_id: str) -> Call[CredentialInfo]:
        return Call("POST", f"/v1/credentials/{credential_id}/revoke", _one)

    @staticmethod
    def bind(
        credential_id: str, scope: str, target: str | None, binding: dict[str, Any] | None
    ) -> Call[CredentialInfo]:
        """Narrow the credential at a lower scope (`binding` None removes the narrowing)."""
        body = {"scope": scope, "target": target, "binding": binding}
        return Call("PUT", f"/v1/credentials/{credential_id}/bindings", _one, json=body)

    @staticmethod
    def delete(credential_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/credentials/{credential_id}", _nothing)

    @staticmethod
    def audit(
        *,
        sandbox: str | None = None,
        credential: str | None = None,
        decision: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
    ) -> Call[builtins.list[AuditEntry]]:
        """Newest first; `since`/`until` are ISO 8601."""
        given = {"sandbox": sandbox, "credential": credential, "decision": decision}
        params = {k: v for k, v in (given | {"since": since, "until": until}).items() if v}
        return Call("GET", "/v1/credentials/audit", _records, params=params | {"limit": limit})

    @staticmethod
    def of_sandbox(sandbox_id: str) -> Call[dict[str, Any]]:
        """The sandbox's view: its version, each credential's name and placeholder."""
        return Call("GET", f"/v1/sandboxes/{sandbox_id}/credentials", _as_is)


class Credentials:
    """The synchronous client; `send(Calls.<operation>(...))` performs one."""

    calls = Calls

    def __init__(self, *, api_url: str | None = None, api_key: str | None = None) -> None:
        conn = Connection.resolve(api_url, api_key)
        self._http = httpx.Client(base_url=conn.url, headers=conn.headers, timeout=TIMEOUT)

    def send(self, call: Call[T]) -> T:
        with converted():
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params
            )
        raise_for(response)
        return call.parse(response.json() if response.content else None)

    def create(self, name: str, value: str, **options: Any) -> CredentialInfo:
        return self.send(Calls.create(name, value, **options))

    def list(self) -> builtins.list[CredentialInfo]:
        return self.send(Calls.list())

    def get(self, credential_id: str) -> CredentialInfo:
        return self.send(Calls.get(credential_id))

    def rotate(self, credential_id: str, value: str, grace: int = 0) -> CredentialInfo:
        return self.send(Calls.rotate(credential_id, value, grace))

    def revoke(self, credential_id: str) -> CredentialInfo:
        return self.send(Calls.revoke(credential_id))

    def audit(self, **filters: Any) -> builtins.list[AuditEntry]:
        return self.send(Calls.audit(**filters))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Credentials:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncCredentials:
    """The asyncio client: `await send(Calls.<operation>(...))`, and the same shortcuts."""

    calls = Calls

    def __init__(self, *, api_url: str | None = None, api_key: str | None = None) -> None:
        conn = Connection.resolve(api_url, api_key)
        self._http = httpx.AsyncClient(base_url=conn.url, headers=conn.headers, timeout=TIMEOUT)

    async def send(self, call: Call[T]) -> T:
        with converted():
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params
            )
        raise_for(response)
        return call.parse(response.json() if response.content else None)

    async def create(self, name: str, value: str, **options: Any) -> CredentialInfo:
        return await self.send(Calls.create(name, value, **options))

    async def list(self) -> builtins.list[CredentialInfo]:
        return await self.send(Calls.list())

    async def rotate(self, credential_id: str, value: str, grace: int = 0) -> CredentialInfo:
        return await self.send(Calls.rotate(credential_id, value, grace))

    async def revoke(self, credential_id: str) -> CredentialInfo:
        return await self.send(Calls.revoke(credential_id))

    async def audit(self, **filters: Any) -> builtins.list[AuditEntry]:
        return await self.send(Calls.audit(**filters))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncCredentials:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
