"""Fixtures every component test may ask for by name."""

from tests.component.webhook_client import webhook_client  # noqa: F401 (fixture)
