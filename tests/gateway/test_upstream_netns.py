"""`SPACE_GATEWAY_UPSTREAM_NETNS` names an existing namespace, or the settings fail
at startup naming it."""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest
from pydantic import ValidationError

from space.config.egress import GatewayConfig


def test_a_namespace_that_does_not_exist_is_refused_by_name() -> None:
    missing = f"space-missing-{secrets.token_hex(4)}"
    with pytest.raises(ValidationError) as caught:
        GatewayConfig(upstream_netns=missing)
    assert "upstream_netns" in str(caught.value) and missing in str(caught.value)


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "-x", "x" * 65])
def test_a_name_that_is_no_namespace_name_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="upstream_netns"):
        GatewayConfig(upstream_netns=bad)


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="making a network namespace needs root")
def test_an_existing_namespace_is_taken() -> None:
    name = f"spacetest-up-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert GatewayConfig(upstream_netns=name).upstream_netns == name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)
