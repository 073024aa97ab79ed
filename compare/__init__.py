"""Comparing runs: kernel matching, section/metric diffs, nsys ranking diffs and drift verdicts."""
