"""Terminal formatting (triage/textview.py): numbers in one style per column, one row per line."""

from __future__ import annotations

import pytest

from triage.views.text import fmt_value, printable, to_csv


@pytest.mark.parametrize("value, shown", [
    (30730, "30,730"), (27203.6, "27,204"), (228700.4, "228,700"), (-5000.25, "-5,000"),
    (12.3456, "12.35"), (0.000123, "0.000123"), (1234567.8, "1.235M"), (None, "-"),
    (float("nan"), "-"), ("text", "text")])
def test_values_read_alike_whatever_their_type(value, shown):
    """Integer counters and averaged counters of the same metric sit in one column."""
    assert fmt_value(value) == shown


def test_control_characters_are_escaped_and_other_text_is_kept():
    assert printable("we\nird\t.ncu-rep\x7f") == "we\\nird\\t.ncu-rep\\x7f"
    assert printable("void f<float>(Ünïcode)") == "void f<float>(Ünïcode)"


def test_csv_lists_and_structs_are_json():
    assert to_csv(["labels", "s"], [(["a", "b"], {"k": float("nan")})]) == \
        'labels,s\n"[""a"", ""b""]","{""k"": null}"\n'
