"""The console's pages and assets: security headers, no data without a key, assets
only by name, and a terminal page that says how to install a missing xterm.js."""

from __future__ import annotations

import httpx

from space.config import Settings

PAGES = ["/console/login", "/console/sandboxes", "/console/templates", "/console/keys"]


async def test_pages_carry_a_strict_csp_and_no_store(client: httpx.AsyncClient) -> None:
    for path in [
        *PAGES,
        "/console/audit",
        "/console/sandboxes/sb1",
        "/console/sandboxes/sb1/files",
    ]:
        page = await client.get(path, headers={"Authorization": ""})
        assert page.status_code == 200, path
        csp = page.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "style-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store"
        assert "<script>" not in page.text  # every script is a file: nothing inline


async def test_only_the_terminal_page_allows_inline_styles(client: httpx.AsyncClient) -> None:
    page = await client.get("/console/sandboxes/sb1/terminal")
    csp = page.headers["content-security-policy"]
    assert "style-src 'self' 'unsafe-inline'" in csp
    assert "script-src 'self';" in csp


async def test_a_sandbox_id_in_the_path_is_checked(client: httpx.AsyncClient) -> None:
    page = await client.get("/console/sandboxes/%3Cscript%3E")
    assert page.status_code == 422
    assert "<script>" not in page.text


async def test_the_console_api_needs_a_key(client: httpx.AsyncClient) -> None:
    for path in [
        "/console/api/whoami",
        "/console/api/templates",
        "/console/api/sandboxes/x/dir?path=/",
    ]:
        answer = await client.get(path, headers={"Authorization": ""})
        assert answer.status_code == 401, path
        assert answer.json()["error"]["code"] == "unauthorized"


async def test_whoami_names_the_keys_org_and_role(client: httpx.AsyncClient) -> None:
    me = await client.get("/console/api/whoami")
    assert me.json() == {
        "org": "acme",
        "project_id": None,
        "admin": False,
        "role": "admin",
        "vcpus": 1,
        "memory_mib": 256,
    }


async def test_static_assets_are_served_by_name_only(client: httpx.AsyncClient) -> None:
    script = await client.get("/console/static/common.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    for name in ["..%2Fpages.py", "pages.py", "missing.js", "..%2F..%2Fconfig.py"]:
        assert (await client.get(f"/console/static/{name}")).status_code == 404, name
    assert (await client.get("/console/vendor/..%2Fxterm%2Fpackage.json")).status_code == 404


async def test_directory_listing_and_commands_for_the_console(client: httpx.AsyncClient) -> None:
    sandbox = (await client.post("/v1/sandboxes", json={})).json()["id"]
    await client.put(f"/v1/sandboxes/{sandbox}/files?path=/work/a.txt", content=b"abc")
    listing = await client.get(f"/console/api/sandboxes/{sandbox}/dir?path=/work")
    assert listing.status_code == 200, listing.text
    assert [(e["name"], e["type"], e["size"]) for e in listing.json()["entries"]] == [
        ("a.txt", "file", 3)
    ]
    started = await client.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": "echo hi"})
    listed = await client.get(f"/console/api/sandboxes/{sandbox}/commands")
    (command,) = listed.json()["commands"]
    assert command["id"] == started.json()["id"]
    assert command["argv"] == {"cmd": "echo hi"} and command["has_log"] is True


async def test_without_xterm_the_terminal_page_says_how_to_fix_it(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    assert settings.console.assets_dir is None  # so `<cache_dir>/console`: empty here
    page = await client.get("/console/sandboxes/sb1/terminal")
    assert 'id="terminal-missing"' in page.text
    assert "scripts/bootstrap" in page.text and "SPACE_CONSOLE_ASSETS_DIR" in page.text
    assert str(settings.cache_dir / "console" / "xterm/lib/xterm.js") in page.text
    assert "/console/vendor/xterm.js" not in page.text
    vendor = await client.get("/console/vendor/xterm.js")
    assert vendor.status_code == 404
    assert "scripts/bootstrap" in vendor.json()["error"]["message"]
