import space.gateway


def test_public_names_are_pinned() -> None:
    assert sorted(space.gateway.__all__) == ["Gateway", "GatewayPorts", "UnknownSandbox"]
