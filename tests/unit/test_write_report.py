"""A result's report files written after the call (`write_report`), as `report_dir=` writes them, and the folder a
result's files were written to (`result.report_dir`)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from pytest_inferscope import InferscopeWarning, measure, write_report
from pytest_inferscope.reporters import load_report


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")
    monkeypatch.delenv("INFERSCOPE_REPORT", raising=False)


def _mark_and_sum() -> int:
    import pytest_inferscope

    pytest_inferscope.mark_event("step", n=1)  # something besides the rounds: the test gets a trace file
    return sum(range(2000))


def _report(folder: Path) -> dict[str, object]:
    data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_a_result_measured_without_a_folder_writes_the_files_report_dir_writes(tmp_path: Path) -> None:
    # A notebook measures, looks, then wants the report: there was no way but measuring again with report_dir=.
    at_call = measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path / "at-call")
    assert at_call.report_dir == tmp_path / "at-call"
    later = measure(_mark_and_sum, rounds=3, warmup=1, name="f")
    assert later.report_dir is None and later.files == {}
    md = write_report(later, tmp_path / "later")
    assert md == tmp_path / "later" / "f" / "report.md" and md.is_file()
    assert later.report_dir == tmp_path / "later"
    assert sorted(p.name for p in (tmp_path / "later" / "f").iterdir()) == sorted(
        p.name for p in (tmp_path / "at-call" / "f").iterdir()
    )
    assert later.files == {k: v for k, v in at_call.files.items()}
    written = _report(tmp_path / "later" / "f")
    assert written["files"] == later.files and written["nodeid"] == "f"
    # what the plugin added is the measurement's, as measure(report_dir=) writes it: the later write adds nothing
    assert written["added"] == {k: v for k, v in later.added.items() if k != "reports_ms"}
    assert "reports_ms" not in later.added


def test_writing_again_keeps_the_added_figures_of_the_files_and_a_users_files(tmp_path: Path) -> None:
    result = measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path / "a")
    first = _report(tmp_path / "a" / "f")
    (tmp_path / "b" / "f").mkdir(parents=True)
    (tmp_path / "b" / "notes.txt").write_text("mine")
    (tmp_path / "b" / "f" / "notes.txt").write_text("mine too")
    write_report(result, tmp_path / "b")
    write_report(result, tmp_path / "b")  # twice: the same files, replaced
    second = _report(tmp_path / "b" / "f")
    assert second["added"] == first["added"]  # not the first write's reports_ms, said as "before these files"
    assert (tmp_path / "b" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "b" / "f" / "notes.txt").read_text() == "mine too"
    assert result.report_dir == tmp_path / "b"


def test_a_result_read_back_from_report_json_writes_its_raw_trace_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path / "a")
    loaded = load_report(tmp_path / "a" / "f" / "report.json")
    assert loaded.report_dir == tmp_path / "a" and loaded.raw is None
    monkeypatch.chdir(tmp_path / "a" / "f")
    assert load_report("report.json").report_dir == tmp_path / "a"
    monkeypatch.chdir(tmp_path)
    assert load_report("a/f/report.json").report_dir == Path("a")
    (tmp_path / "a" / "f" / "report.json").rename(tmp_path / "elsewhere.json")
    assert load_report(tmp_path / "elsewhere.json").report_dir is None  # moved: its raw.npz is not looked for
    (tmp_path / "elsewhere.json").rename(tmp_path / "a" / "f" / "report.json")
    write_report(loaded, tmp_path / "b")  # (warnings are errors here: none is given)
    assert sorted(p.name for p in (tmp_path / "b" / "f").iterdir()) == sorted(
        p.name for p in (tmp_path / "a" / "f").iterdir()
    )


def test_without_its_raw_trace_only_the_reports_are_written_and_a_warning_says_why(tmp_path: Path) -> None:
    measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path / "a")
    loaded = load_report(tmp_path / "a" / "f" / "report.json")
    (tmp_path / "a" / "f" / "raw.npz").unlink()
    # an older run's trace of the same name in the folder written to would be read as this result's: it goes
    measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path / "b")
    with pytest.warns(InferscopeWarning, match=r"write_report\('f'\): .*raw\.npz.* no trace") as said:
        write_report(loaded, tmp_path / "b")
    assert str(tmp_path / "a" / "f" / "raw.npz") in str(said[0].message)
    assert sorted(p.name for p in (tmp_path / "b" / "f").iterdir()) == ["report.html", "report.json", "report.md"]
    assert _report(tmp_path / "b" / "f")["files"] == loaded.files == {
        "md": "f/report.md", "html": "f/report.html", "json": "f/report.json"
    }  # fmt: skip


def test_a_pickled_result_keeps_its_raw_trace_and_folder(tmp_path: Path) -> None:
    result = measure(_mark_and_sum, rounds=3, warmup=1, name="f")
    back = pickle.loads(pickle.dumps(result))
    assert back == result and back.raw is not None
    write_report(back, tmp_path)
    assert (tmp_path / "f" / "raw.npz").is_file() and back.report_dir == tmp_path


def test_the_folder_and_the_raw_trace_are_not_in_report_json(tmp_path: Path) -> None:
    result = measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path)
    assert result.raw is not None
    assert "report_dir" not in result.to_dict() and "raw" not in result.to_dict()
    assert "report_dir" not in _report(tmp_path / "f") and "raw" not in _report(tmp_path / "f")


def test_what_write_report_refuses_it_says_before_writing(tmp_path: Path) -> None:
    result = measure(sum, range(10), rounds=3, warmup=0, cpu="off")
    with pytest.raises(TypeError, match=r"write_report\(result=.*give the TestResult that measure\(\)"):
        write_report({"nodeid": "x"}, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"write_report\('sum'\): no report folder: give one"):
        write_report(result)
    with pytest.raises(ValueError, match="an empty folder name"):
        write_report(result, "")
    (tmp_path / "file").write_text("x")
    from pytest_inferscope.reporters import ReportDirError

    with pytest.raises(ReportDirError, match=r"^write_report\(report_dir='.*file'\): the report folder"):
        write_report(result, tmp_path / "file")
    assert result.report_dir is None and result.files == {}


def test_the_added_figures_read_back_from_report_json_as_written_a_count_as_an_int(tmp_path: Path) -> None:
    # load_report gave `extra_rounds` back as 0.0: every figure of `added` was read as a float, the count too.
    measure(_mark_and_sum, rounds=3, warmup=1, name="f", report_dir=tmp_path)
    written = _report(tmp_path / "f")["added"]
    assert isinstance(written, dict) and isinstance(written["extra_rounds"], int)
    loaded = load_report(tmp_path / "f" / "report.json").added
    assert {k: (v, type(v)) for k, v in loaded.items() if k != "reanalysis_ms"} == {
        k: (v, type(v)) for k, v in written.items()
    }
