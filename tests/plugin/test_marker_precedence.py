"""Which marker's keys a test gets where markers on its module, class, function and parameters each give some."""

from __future__ import annotations

import json

import pytest


def test_a_parameters_marker_wins_over_its_functions_key_by_key(pytester: pytest.Pytester) -> None:
    """`pytest.param(..., marks=pytest.mark.inferscope(rounds=4))` under a function marked `rounds=2` ran 2 rounds:
    pytest lists the function's own marks before its parameters', so the function's won, and a marker written for one
    parametrisation did nothing. The parameter's marker is the closest now; keys it leaves out come from the others."""
    pytester.makepyfile(
        test_pm="""
        import pytest

        pytestmark = pytest.mark.inferscope(warmup=0, max_latency_ms=60000)

        class TestK:
            @pytest.mark.inferscope(rounds=2)
            @pytest.mark.parametrize(
                "n", [1, pytest.param(2, marks=pytest.mark.inferscope(rounds=4)), pytest.param(3, id="three")]
            )
            @pytest.mark.parametrize("m", [pytest.param(0, marks=pytest.mark.inferscope(warmup=1))])
            def test_pm(self, n, m):
                pass
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    tests = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    got = {t["nodeid"].rsplit("::", 1)[1]: json.loads((pytester.path / "out" / t["files"]["json"]).read_text())
           for t in tests}  # fmt: skip
    # [m-n]: m's parameter gives warmup=1 over the module's warmup=0, n's rounds=4 over the function's rounds=2
    assert {k: (v["rounds"], v["warmup"]) for k, v in got.items()} == {
        "test_pm[0-1]": (2, 1),
        "test_pm[0-2]": (4, 1),
        "test_pm[0-three]": (2, 1),
    }
    assert all(v["checks"][0]["limit"] == 60000 for v in got.values())  # the module's key, left out by the closer ones


def test_a_key_that_does_nothing_without_its_partner_is_an_error_naming_the_test_and_what_to_add(
    pytester: pytest.Pytester,
) -> None:
    """`latency_stat` without `max_latency_ms` and `min_fix_saving` without `expect_fix` were accepted and did nothing.
    Judged on the test's markers merged: a class's max_latency_ms makes its tests' latency_stat mean something."""
    pytester.makepyfile(
        test_lone="""
        import pytest

        @pytest.mark.inferscope(latency_stat="p99", rounds=1, warmup=0)
        def test_stat():
            pass

        @pytest.mark.inferscope(min_fix_saving=0.3, rounds=1, warmup=0)
        def test_saving():
            pass

        @pytest.mark.inferscope(max_latency_ms=60000)
        class TestLimit:
            @pytest.mark.inferscope(latency_stat="p90", rounds=1, warmup=0)
            def test_merged(self):
                pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_lone.py::test_stat: @pytest.mark.inferscope(latency_stat='p99') does nothing without "
            "max_latency_ms, which no inferscope marker of the test (its own, its class's, its module's) sets: add "
            "max_latency_ms=50 (the limit, in ms, the statistic is checked against), or remove latency_stat.",
            "*test_lone.py::test_saving: @pytest.mark.inferscope(min_fix_saving=0.3) does nothing without expect_fix*"
            "add expect_fix='sync_bound'*",
        ]
    )
    assert "test_merged" not in result.stderr.str()


def test_a_class_default_some_of_its_tests_use_is_fine_and_one_none_use_is_a_warning(pytester: pytest.Pytester) -> None:
    """A class's latency_stat is a default for those of its tests that set max_latency_ms: not an error for the others
    (an error would refuse a usual pattern); where none of the class's tests sets it, a warning names the class."""
    pytester.makepyfile(
        test_shared="""
        import pytest

        @pytest.mark.inferscope(latency_stat="p90", rounds=1, warmup=0)
        class TestUsed:
            @pytest.mark.inferscope(max_latency_ms=60000)
            def test_limited(self):
                pass

            def test_plain(self):
                pass

        @pytest.mark.inferscope(latency_stat="p99", rounds=1, warmup=0)
        class TestUnused:
            def test_a(self):
                pass

            def test_b(self):
                pass
        """
    )
    said = (
        "*test_shared.py::TestUnused: @pytest.mark.inferscope(latency_stat='p99') does nothing: none of the tests "
        "collected under it sets max_latency_ms. Add max_latency_ms=50*"
    )
    result = pytester.runpytest("-p", "no:randomly", "-W", "default::pytest_inferscope.warning.InferscopeWarning")
    result.assert_outcomes(passed=4, warnings=1)
    result.stdout.fnmatch_lines([said])
    assert "TestUsed: " not in result.stdout.str()
    # warnings made errors (-W error): the collection's usage error, not an INTERNALERROR
    result = pytester.runpytest("-p", "no:randomly", "-W", "error::pytest_inferscope.warning.InferscopeWarning")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])


def test_under_xdist_invalid_markers_are_said_not_an_internal_error(pytester: pytest.Pytester) -> None:
    """An xdist worker's usage error reached the controller as an INTERNALERROR ("assert not crashitem"), the problems
    nowhere in the output: now a collection error the controller shows, with nothing run."""
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.inferscope(max_latency=5)
        def test_typo():
            pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly")
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out, out[-3000:]
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # as serially (xdist's own code for a collection error is 1)
    result.stdout.fnmatch_lines(
        ["invalid @pytest.mark.inferscope arguments:", "*test_typo*unknown @pytest.mark.inferscope key 'max_latency'*"]
    )
    errors = result.stdout.str().split("short test summary info")[0]  # (the summary repeats it whole where CI is set)
    assert errors.count("unknown @pytest.mark.inferscope key") == 1  # once, though each worker found it
    assert "passed" not in out  # nothing ran


def test_a_class_keys_warning_names_the_class_line_and_shows_once_under_xdist(pytester: pytest.Pytester) -> None:
    """The warning pointed at the plugin's own session.py, and under xdist came once a worker."""
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_shared="""
        import pytest


        @pytest.mark.inferscope(latency_stat="p99", rounds=1, warmup=0)
        class TestUnused:
            def test_a(self):
                pass

            def test_b(self):
                pass
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["test_shared.py:4", "*test_shared.py:4: InferscopeWarning: *TestUnused*does nothing*"])
    assert "session.py" not in result.stdout.str()
