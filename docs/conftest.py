"""The docs' tests share the suite's browser (a headless Chromium; a failure in CI without one)."""

from tests.conftest import browser  # noqa: F401 (a fixture, found by its name)
