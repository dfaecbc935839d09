"""max_host_memory_mb as a user with a model loaded in a fixture sees it (the plugin end to end, in a subprocess)."""

from __future__ import annotations

import re

import pytest


def test_host_memory_failure_says_the_whole_process_counts_with_a_fixtures_model(pytester: pytest.Pytester) -> None:
    # The 2-core VM, 2026-11-30: torch and a 100 MB model loaded in a fixture, a body adding ~100 MB, failed with
    # "peak host RSS 447.2 MB exceeds limit 200.0 MB": nothing said 344 MB of it were there before the rounds.
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture(scope="module")
        def model():
            weights = bytearray(300 << 20)
            weights[:: 4096] = b"\\1" * len(weights[:: 4096])  # resident
            return weights

        @pytest.mark.inferscope(rounds=3, warmup=1, max_host_memory_mb=250)
        def test_infer(model):
            assert len(model) > 0
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    found = re.search(
        r"the process's peak RSS ([\d.]+) MB exceeds limit 250.0 MB\. The whole process counts, ([\d.]+) MB of it "
        r"resident before the rounds \(imports such as torch, models fixtures loaded\), ([\d.]+) MB above that",
        text,
    )
    assert found, text
    peak, start, above = map(float, found.groups())
    assert start >= 300 and above < 100 and peak == pytest.approx(start + above, abs=0.2)
