"""The pytest entry point: options, the marker, the fixture, hookspecs, and one registered session object.

No state lives here: `pytest_configure` resolves the settings once and registers an
`InferscopeSession` under the name "inferscope"; `get_session(config)` finds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import config as _config
from . import hooks

if TYPE_CHECKING:
    from .api import InferscopeFixture
    from .session import InferscopeSession

PLUGIN_NAME = "inferscope-session"  # the entry point itself is registered as "inferscope"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    _config.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "inferscope(**thresholds): profile this test's body (CPU, GPU, memory) over warm-up + rounds calls and "
        "fail when a threshold is crossed; keys: max_latency_ms, latency_stat, max_regression, expect_bottleneck, "
        "expect_fix, min_fix_saving, "
        "max_host_memory_mb, max_overhead, max_gpu_idle, max_gpu_memory_mb, max_transfer_fraction, rounds, warmup, "
        "cpu. See docs/markers-and-options.md.",
    )
    settings = _config.settings_from_pytest(config)
    if not settings.enable:
        return
    from .session import InferscopeSession

    session = InferscopeSession(config, settings)
    if session.report_dir is not None:
        from .reporters.files import ReportDirError, check_report_dir

        try:
            check_report_dir(session.report_dir)
        except ReportDirError as exc:
            raise pytest.UsageError(str(exc)) from exc
    config.pluginmanager.register(session, PLUGIN_NAME)
    if config.pluginmanager.hasplugin("xdist"):
        from .xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(session), f"{PLUGIN_NAME}-xdist")


def get_session(config: pytest.Config) -> InferscopeSession | None:
    """The registered session object, or None when the plugin is disabled."""
    session: InferscopeSession | None = config.pluginmanager.get_plugin(PLUGIN_NAME)
    return session


@pytest.fixture
def inferscope(request: pytest.FixtureRequest) -> InferscopeFixture:
    """Scopes and events inside a test body (`scope`, `mark_event`), and the measured `result` after it."""
    session = get_session(request.config)
    if session is None:
        from .api import InferscopeFixture

        return InferscopeFixture(request.node.nodeid, profiled=False)
    return session.fixture(request)
