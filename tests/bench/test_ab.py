"""bench/_ab.py: the figures two checkouts print are paired by their path and compared by median."""

from bench._ab import compare, numeric_leaves


def test_numbers_are_paired_by_path_and_compared_by_median():
    assert dict(numeric_leaves({"a": {"ms": 2, "ok": True}, "s": [1.5, "x"]})) == {"a.ms": 2.0, "s.0": 1.5}
    a = [{"t": {"median": 10}}, {"t": {"median": 12}}, {"t": {"median": 30}}]
    b = [{"t": {"median": 5}}, {"t": {"median": 6}}, {"t": {"median": 7}, "only_b": 1}]
    assert compare(a, b) == {"t.median": {"a": 12.0, "b": 6.0, "b_over_a": 0.5}}
