"""Fixtures of the provider adapter tests: a scripted provider on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from provider_server import FakeProvider


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
