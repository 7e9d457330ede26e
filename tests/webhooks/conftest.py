"""Webhook test helpers: endpoints made through the service with loopback allowed."""

from __future__ import annotations

import pytest


@pytest.fixture
def loopback_allowed(gobrave_config):
    """This test's configuration lets endpoints be http:// on loopback (its receiver)."""
    gobrave_config(webhooks={"allow_http": True, "allow_private": True})
