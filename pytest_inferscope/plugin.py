"""The pytest entry point: options, the marker, the fixture, hookspecs, and one registered session object.

No state lives here: `pytest_configure` resolves the settings once and registers an
`InferscopeSession` under the name "inferscope"; `get_session(config)` finds it.
"""

from __future__ import annotations

import argparse
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
    # Hidden: `inferscope config show` runs pytest with it, so that pytest itself finds the configuration.
    parser.getgroup("inferscope").addoption(
        "--inferscope-show-config", action="store_true", default=False, help=argparse.SUPPRESS
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """In an A/B twin: its arguments, the ref's ini `addopts` among them, less what only the other side does."""
    from .ab import filter_twin_args

    filter_twin_args(args, early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--inferscope-show-config`: print the resolved settings and their sources, then end the run. An A/B run's
    address-space layout fixed before anything runs: this process may execute itself again (ab/layout.py)."""
    if config.getoption("inferscope_show_config"):
        from .cli.config import print_settings

        return print_settings(config)
    try:
        settings = _config.settings_from_pytest(config)
    except pytest.UsageError:
        return None  # said where pytest_configure resolves them again
    from .ab import fix_ab_layout

    fix_ab_layout(config, settings)
    return None


def pytest_configure(config: pytest.Config) -> None:
    from .marker import marker_help

    config.addinivalue_line("markers", marker_help())
    settings = _config.settings_from_pytest(config)
    if not settings.enable:
        from .reporters.terminal import SwitchedOff, switched_off_line

        if (line := switched_off_line(settings)) is not None:  # what it asked for did nothing: said, not silent
            config.pluginmanager.register(SwitchedOff(line), f"{PLUGIN_NAME}-off")
        return
    from .session import InferscopeSession

    session = InferscopeSession(config, settings)
    if session.report_dir is not None and not config.getoption("collectonly"):  # --collect-only writes no report
        from .reporters.files import ReportDirError, check_report_dir

        try:
            source = settings.sources.get("report", "")
            check_report_dir(session.report_dir, source="" if source.startswith("cli ") else source)
        except ReportDirError as exc:
            raise pytest.UsageError(str(exc)) from exc
    config.pluginmanager.register(session, PLUGIN_NAME)
    if config.pluginmanager.hasplugin("xdist"):
        from .xdist import register

        register(config, session)


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
