"""A view crosses the node seam as JSON and comes back equal."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from space.credentials.model import Narrowing
from space.credentials.scopes import CredentialView
from tests.credentials.test_scopes import NOW, binding, credential, view

pytestmark = pytest.mark.credentials


def test_a_view_survives_json() -> None:
    narrowing = Narrowing("cred_1", "project", "prj_a", binding(hosts=["api.github.com"]))
    expiring = credential(id="cred_2", name="npm", expires_at=NOW + timedelta(hours=1))
    revoked = credential(id="cred_3", name="old", revoked_at=NOW)
    original = view([credential(), expiring, revoked], (narrowing,))
    assert original.entries and original.excluded
    wire = json.loads(json.dumps(original.to_json()))
    assert CredentialView.from_json(wire) == original
