import space.config


def test_public_names_are_pinned() -> None:
    assert space.config.__all__ == ["Settings"]
