"""The number formats and Markdown table lines of mtad.markdown."""

import math

import pytest

from mtad.markdown import (
    MISSING,
    fmt_bounds,
    fmt_count_range,
    fmt_number,
    fmt_percent,
    fmt_ratio,
    fmt_set,
    fmt_signed,
    fmt_value,
    is_absent,
    md_row,
    md_rule,
    md_table,
    minus,
    with_bounds,
)


@pytest.mark.parametrize("value, absent", [(None, True), (math.nan, True), (0.0, False), (0, False), ("", False)])
def test_absent_is_none_or_nan(value, absent):
    assert is_absent(value) is absent


def test_a_number_through_its_pattern_or_the_missing_mark():
    assert fmt_number(1.234) == "1.23"
    assert fmt_number(1.25, "{:.1f} ms") == "1.2 ms"
    assert fmt_number(None) == fmt_number(math.nan) == MISSING
    assert fmt_number(None, missing="") == ""


def test_a_value_as_a_cell():
    assert fmt_value(0.012345) == "0.0123"
    assert fmt_value(3, "g") == "3" and fmt_value(0.5, "g") == "0.5"
    assert fmt_value(True) == "yes" and fmt_value(False) == "no"  # a bool is not the number 1
    assert fmt_value("fast") == "fast"
    assert fmt_value(None, missing="—") == fmt_value(math.nan, missing="—") == "—"


def test_ratios_signed_figures_and_percentages_use_typographic_minus():
    assert minus("-1.0 - 2") == "−1.0 − 2"
    assert fmt_ratio(1.234) == "1.23×" and fmt_ratio(1.5, digits=1) == "1.5×"
    assert fmt_signed(0.1434) == "+0.143" and fmt_signed(-0.018) == "−0.018"
    assert fmt_percent(0.031) == "3.1%" and fmt_percent(-0.031, signed=True) == "−3.1%"
    assert fmt_percent(0.031, digits=0, signed=True) == "+3%"
    assert fmt_ratio(None) == fmt_signed(math.nan) == fmt_percent(None) == MISSING


def test_percent_matches_the_format_specs_rounding():
    for value in (0.0315, 0.00049, 0.1235, 1.0 / 3):
        assert fmt_percent(value) == format(value, ".1%")


def test_an_interval_and_a_figure_beside_its_interval():
    assert fmt_bounds(0.25, 0.5) == "[0.25, 0.50]"
    assert fmt_bounds(-0.5, 0.25, "{:+.4g}".format) == "[-0.5, +0.25]"
    assert fmt_bounds(None, 0.5) == fmt_bounds(0.1, math.nan) == MISSING
    assert with_bounds("1.20×", 1.1, 1.3, fmt_ratio) == "1.20× [1.10×, 1.30×]"
    assert with_bounds("1.20×", math.nan, 1.3, fmt_ratio) == "1.20×"


def test_a_count_or_its_range():
    assert fmt_count_range([10, 10.0, None]) == "10"
    assert fmt_count_range([12, 8.0, math.nan, 10]) == "8–12"
    assert fmt_count_range([math.nan]) == fmt_count_range(None) == "?"
    assert fmt_count_range([], unknown="none") == "none"


def test_a_set_of_values_sorted_without_whole_floats_decimals():
    assert fmt_set(["b", "a", "b", None]) == "a, b"
    assert fmt_set([1.0, 0.0, math.nan]) == "0, 1"
    assert fmt_set([0.5]) == "0.5"
    assert fmt_set([None]) == "unknown" and fmt_set([], default="?") == "?"


def test_table_lines():
    assert md_row(["a", 1, 0.5]) == "| a | 1 | 0.5 |"
    assert md_row(["a", "", "b"]) == "| a |  | b |"
    assert md_rule("lrr") == "|---|---:|---:|"
    assert md_table(["x", "y"], [[1, 2], ("a", "b")]) == ["| x | y |", "|---|---|", "| 1 | 2 |", "| a | b |"]
    assert md_table(["x", "y"], iter([]), "lr") == ["| x | y |", "|---|---:|"]
