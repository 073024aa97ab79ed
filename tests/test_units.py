"""The one byte formatter (`verify`, `gc`, `import`, `top` and reports all print sizes with it)."""

from __future__ import annotations

import pytest

from triage.base.units import fmt_bytes


@pytest.mark.parametrize(("count", "text"), [
    (None, "-"), (0, "0 B"), (5, "5 B"), (999, "999 B"), (1000, "1 kB"), (1234, "1.23 kB"),
    (999_499, "999 kB"), (999_999, "1 MB"), (800_000_000, "800 MB"), (2**30, "1.07 GB"),
    (1.5e12, "1.5 TB"), (-2500, "-2.5 kB"), (999.6, "1 kB"),
])
def test_fmt_bytes_is_decimal_with_three_digits_and_rounds_before_choosing_a_unit(count, text):
    assert fmt_bytes(count) == text
