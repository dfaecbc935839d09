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
