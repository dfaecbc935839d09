"""docs/reports.md names every field report.json is written with, and no field it is not.

The section "report.json, field by field" is the reference a tool reading the file goes by. Its table's first
column names keys by their path (`analysis.findings[].rule`); `.name` after a full path is a sibling of it
(`latency.median`, `.mean`). Every field of the result's dataclasses must be there, so a field added without its
doc fails here; a name there that is no field (renamed, removed) fails too. Free-form objects (`environment`,
`analysis.gpu`, a finding's `evidence`, ...) are described in prose and their keys are not checked.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

from pytest_inferscope import results

DOC = Path(__file__).resolve().parents[2] / "docs" / "reports.md"
HEADING = "## `report.json`, field by field"
#: Written beside the fields (reporters/jsonreport.to_json): derived, not read back.
DERIVED = {"measured_rounds"}


def _dataclass_in(tp: typing.Any) -> tuple[type | None, bool]:
    """The dataclass a field's type holds (directly, in a list, or optional), and whether it is a list of them."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _dataclass_in(arg)
            if found[0] is not None:
                return found
        return None, False
    if origin is list:
        (arg,) = typing.get_args(tp)
        inner, _ = _dataclass_in(arg)
        return inner, True
    return (tp, False) if dataclasses.is_dataclass(tp) and isinstance(tp, type) else (None, False)


def field_paths(cls: type = results.TestResult, prefix: str = "") -> tuple[set[str], set[str]]:
    """Every field's path (`analysis.findings[].rule`), and the paths that are objects of fields (dataclasses)."""
    paths: set[str] = set()
    objects = {prefix.rstrip(".")} if prefix else {""}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("local"):  # held in the process only, never written (serial.LOCAL: result.report_dir)
            continue
        path = prefix + f.name
        paths.add(path)
        inner, is_list = _dataclass_in(hints[f.name])
        if inner is not None:
            sub, subobjects = field_paths(inner, path + ("[]." if is_list else "."))
            paths |= sub
            objects |= subobjects
    return paths, objects


def documented_paths() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"docs/reports.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        last = ""
        for token in re.findall(r"`([^`]+)`", first):
            if token.startswith("."):
                token = last.rsplit(".", 1)[0] + token if "." in last else token[1:]
            names.add(token)
            last = token
    return names


def test_every_field_of_report_json_is_documented() -> None:
    paths, _ = field_paths()
    documented = documented_paths()
    # an object's row is its fields' rows (`latency.median` documents `latency`)
    documented |= {p for p in paths if any(d.startswith((p + ".", p + "[].")) for d in documented)}
    missing = sorted((paths | DERIVED) - documented)
    assert not missing, f"report.json fields docs/reports.md does not describe ({HEADING}): {missing}"


def test_docs_name_no_field_that_report_json_lacks() -> None:
    paths, objects = field_paths()
    unknown = []
    for name in sorted(documented_paths() - DERIVED):
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        # a key inside a field's object must be one of its fields; inside a free-form object, anything goes
        in_a_field_object = parent in objects or parent == ""
        known = name in paths if in_a_field_object else any(name.startswith(p + ".") for p in paths)
        if not known:
            unknown.append(name)
    assert not unknown, f"docs/reports.md ({HEADING}) names keys report.json does not have: {unknown}"


def test_the_section_gives_the_schema_version_written() -> None:
    section = DOC.read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    assert f"`schema_version` {results.SCHEMA_VERSION}" in section
