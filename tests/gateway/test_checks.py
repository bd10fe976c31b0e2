"""HTTP request checks shared by HTTP/1.1 and HTTP/2 (smuggling and fronting shapes)."""

from __future__ import annotations

import pytest

from space.gateway.checks import Checked, Refused, check_request


def check(method: bytes = b"GET", target: bytes = b"/", headers=None, authority=None, **kw):  # type: ignore[no-untyped-def]
    options = {"tls": True, "sni": "a.test", "port": 443, **kw}
    return check_request(
        method,
        target,
        headers if headers is not None else [(b"host", b"a.test")],
        authority=authority,
        **options,
    )


def test_plain_request_passes_and_drops_hop_by_hop() -> None:
    result = check(
        headers=[
            (b"host", b"a.test"),
            (b"connection", b"keep-alive, x-secret"),
            (b"proxy-authorization", b"x"),
            (b"accept", b"*/*"),
        ]
    )
    assert isinstance(result, Checked)
    assert result.headers == [(b"accept", b"*/*")]
    assert result.request.host == "a.test" and result.request.sni == "a.test"


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"method": b"CONNECT", "target": b"a.test:443"}, 405),
        ({"target": b"http://evil.test/"}, 400),
        ({"target": b"https://a.test/"}, 400),
        ({"target": b"*"}, 400),
        ({"headers": [(b"host", b"a.test"), (b"host", b"evil.test")]}, 400),
        ({"headers": []}, 400),
        (
            {
                "headers": [
                    (b"host", b"a.test"),
                    (b"content-length", b"5"),
                    (b"transfer-encoding", b"chunked"),
                ]
            },
            400,
        ),
        (
            {
                "headers": [
                    (b"host", b"a.test"),
                    (b"content-length", b"5"),
                    (b"content-length", b"6"),
                ]
            },
            400,
        ),
        ({"headers": [(b"host", b"a.test"), (b"transfer-encoding", b"gzip, chunked")]}, 400),
        (
            {
                "headers": [
                    (b"host", b"a.test"),
                    (b"upgrade", b"h2c"),
                    (b"http2-settings", b"AAMAAABkAAQAAP__"),
                ]
            },
            400,
        ),
        ({"headers": [(b"host", b"a.test"), (b"upgrade", b"h2c")]}, 400),
        ({"headers": [(b"host", b"a.test:8443")]}, 421),
        ({"headers": [(b"host", b"a.test:")]}, 400),
        ({"authority": "a.test", "headers": [(b"host", b"evil.test")]}, 400),
    ],
)
def test_refusals(kwargs: dict[str, object], status: int) -> None:
    result = check(**kwargs)  # type: ignore[arg-type]
    assert isinstance(result, Refused) and result.status == status, result


def test_options_star_and_websocket_and_authority() -> None:
    assert isinstance(check(method=b"OPTIONS", target=b"*"), Checked)
    ws = check(
        headers=[(b"host", b"a.test"), (b"upgrade", b"websocket"), (b"connection", b"Upgrade")]
    )
    assert isinstance(ws, Checked) and ws.websocket and ws.request.websocket
    assert (b"upgrade", b"websocket") in ws.headers
    h2 = check(headers=[], authority="evil.test")
    assert isinstance(h2, Checked) and h2.request.host == "evil.test"
