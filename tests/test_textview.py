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



def test_to_json_writes_the_standard_librarys_bytes(triage, archived):
    """`to_json`'s own indenting writer (the C encoder per container of scalars) against
    `json.dumps(indent=2)`: on an ncu diff document, and on the values the
    writer treats apart: NaN and infinities, decimals, non-string keys, non-JSON objects,
    empty and nested containers, text with quotes, braces and line breaks, lists of rows."""
    import json
    from decimal import Decimal
    from pathlib import Path

    from triage.views.text import finite, to_json

    def standard(data) -> str:
        return json.dumps(finite(data), indent=2, default=str, ensure_ascii=False,
                          allow_nan=False)

    a, b = archived(("spymaster2h__spyinfer__report.ncu-rep",),
                    ("iamcoleman__monte-carlo-pi__profile.ncu-rep",))
    text = triage("diff", a, b, "--json").stdout
    assert text == standard(json.loads(text)) + "\n"
    odd = {"nan": float("nan"), "inf": [float("-inf"), 1.5], "dec": [Decimal("3"),
           Decimal("2.5"), Decimal("NaN")], 1: {2.5: None, True: "x\"\n\u00e9"}, "path":
           Path("/a b"), "empty": [[], {}, ()], "deep": [[[1, {"a": ()}]]], "big": 10 ** 30}
    rows = [{"a": "},\n      {", "b": 1.5}, {"c": None, 2: True, "d": "}"}, {"e": "{"}]
    for data in (odd, [odd, 1], {"rows": [odd] * 3, "t": (odd,)}, "x", 1.0, [], {},
                 {"rows": rows}, [rows, rows[:1]], rows + [{"nan": float("nan")}],
                 rows + [{}], rows + [{"dec": Decimal("1.5")}], tuple(rows)):
        assert to_json(data) == standard(data)
