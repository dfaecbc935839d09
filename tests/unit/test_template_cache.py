"""Compiled report templates are kept between sessions (`markdown.compiled_templates`), and change nothing."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
from test_html_report import read_html, result_for

import pytest_inferscope.reporters.html as html
import pytest_inferscope.reporters.markdown as markdown
from pytest_inferscope.reporters.markdown import compiled_templates, render_report


@pytest.fixture
def temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh temp folder for the cache, and fresh environments before and after the test."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    html._env.cache_clear()
    markdown._env.cache_clear()
    yield folder
    html._env.cache_clear()
    markdown._env.cache_clear()


def fresh_reports(tmp_path: Path) -> tuple[str, str]:
    html._env.cache_clear()
    markdown._env.cache_clear()
    result = result_for()
    return render_report(result), read_html(tmp_path, result, None)


def test_a_second_session_loads_the_templates_compiled(
    temp_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = fresh_reports(tmp_path)
    assert len(list(temp_folder.glob("_jinja2-cache-*/*.cache"))) == 2  # report.md.j2, report.html.j2

    def no_compiling(*args: object, **kwargs: object) -> None:
        raise AssertionError("a template was compiled again")

    monkeypatch.setattr(jinja2.Environment, "compile", no_compiling)
    assert fresh_reports(tmp_path) == first  # the same text from the compiled templates


def test_other_options_are_another_key(temp_folder: Path) -> None:
    a = jinja2.Environment(trim_blocks=True)
    b = jinja2.Environment(trim_blocks=False)
    cache_a, cache_b = compiled_templates(a), compiled_templates(b)
    assert cache_a is not None and cache_b is not None
    assert cache_a.get_cache_key("report.md.j2", "/x") != cache_b.get_cache_key("report.md.j2", "/x")
    again = compiled_templates(jinja2.Environment(trim_blocks=True))
    assert again is not None
    assert again.get_cache_key("report.md.j2", "/x") == cache_a.get_cache_key("report.md.j2", "/x")


def test_without_a_usable_temp_folder_the_reports_are_written_all_the_same(
    temp_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = fresh_reports(tmp_path)
    (temp_folder / "file").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(temp_folder / "file"))  # a file: no folder can be made in it
    assert compiled_templates(jinja2.Environment()) is None
    assert fresh_reports(tmp_path) == expected
    monkeypatch.setattr(tempfile, "tempdir", str(temp_folder))
    for f in temp_folder.glob("_jinja2-cache-*/*.cache"):
        f.write_bytes(b"not a compiled template")  # read, found wrong, compiled again
    assert fresh_reports(tmp_path) == expected
