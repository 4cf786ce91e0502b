"""Fixtures of the Admin UI tests: in-process nodes, and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import os

import pytest
from webui_helpers import CHROMIUM, CHROMIUM_ARGS, node_options

from evdb.node import Node


@pytest.fixture
async def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Debian's chromium is not installed ({CHROMIUM} is missing; .ci/run installs it)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


class PageErrors(list):
    """Uncaught script errors and Content-Security-Policy refusals seen in the page."""


@pytest.fixture
async def page(browser):
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, ignore_https_errors=True)
    page = await context.new_page()
    page.set_default_timeout(20_000)
    errors = PageErrors()
    page.on("pageerror", lambda exc: errors.append(f"script error: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(f"console: {msg.text}") if "Content Security Policy" in msg.text else None,
    )
    page.evdb_errors = errors  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        with contextlib.suppress(Exception):
            await context.close()
    assert not errors, errors


@pytest.fixture
async def node(tmp_path):
    async with Node(node_options(tmp_path), name="webui") as n:
        yield n
