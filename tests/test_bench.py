"""`triage bench`: the workload run unprofiled, archived as a run of tool bench, compared and
gated on its own numbers. No GPU and no profiler are needed: the programs are the NVTX test
program (tests/programs/nvtx_steps.c, run directly) and shell commands whose printed metric is
fixed by the test, so that the statistics are checked on known values, not on timing luck."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import assert_valid

STEP = "step_ms:ms=re:step time: (?P<v>[0-9.]+) ms"


def printing(tmp_path: Path, name: str, values: list[float], key: str = "step time") -> str:
    """A shell command that prints `key: VALUE ms`, the next of `values` at each run (cycling):
    a workload whose metric the test knows."""
    counter = tmp_path / f"{name}.count"
    table = " ".join(f"{v:g}" for v in values)
    return (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}; "
            f"set -- {table}; shift $((n % $#)); echo \"{key}: $1 ms\"")


def bench(triage, *args, expect: int | None = 0):
    return triage("bench", *args, expect=expect)


def test_bench_records_runs_metrics_and_what_it_could_not(triage, nvtx_program, store_dir):
    out = json.loads(bench(triage, "--repeat", 3, "--warmup", 1, "--label", "base", "--metric",
                           STEP, "--json", "--", nvtx_program, 5, 50, 100).stdout)
    assert_valid("bench.schema.json", out)
    assert (out["runs"], out["warmup"], out["stopped"]) == (3, 1, "repeat")
    assert out["run"]["tool"] == "bench" and set(out["metrics"]) == {"wall_time", "step_ms"}
    assert out["metrics"]["step_ms"] == {**out["metrics"]["step_ms"], "unit": "ms",
                                         "better": "lower", "n": 3}
    if shutil.which("nvidia-smi") is None:  # this machine: said, never guessed
        assert any("nvidia-smi" in line for line in out["not_recorded"])
        assert out["not_recorded"] == out["run"]["notices"]
    manifest = triage.json("show", "base")
    assert_valid("manifest.schema.json", {k: v for k, v in manifest.items()
                                          if k not in ("id", "archived", "labels", "notes")})
    assert manifest["source"] == "bench" and manifest["capture"]["bench"]["warmup"] == 1
    assert manifest["capture"]["argv"] == [str(nvtx_program), "5", "50", "100"]
    shown = triage("show", "base").output
    assert "runs             3 (+1 warm-up), stopped: repeat" in shown
    assert "metric           step_ms (ms, lower is better): re:step time:" in shown
    rows = triage.json("query", "select repeat, warmup, metric from bench_samples "
                       "order by metric, repeat")
    got = [(r["repeat"], r["warmup"], r["metric"]) for r in rows]
    assert got == [(r, r < 0, m) for m in ("step_ms", "wall_time") for r in (-1, 1, 2, 3)]
    assert [r["id"][:12] for r in triage.json("ls", "--tool", "bench")] == [out["run"]["id"][:12]]


def test_gate_judges_bench_metrics_first_each_in_its_direction(triage, tmp_path, store_dir,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = [100, 101, 102, 100.5, 101.5, 99.5]
    for label, values, tps in (("base", base, base), ("slow", [v * 1.15 for v in base], base),
                               ("fewer", base, [v * 0.8 for v in base])):
        bench(triage, "--repeat", 6, "--label", label, "--shell",
              "--metric", "step_ms:ms=re:step time: (?P<v>[0-9.]+) ms",
              "--metric", "tps:tok/s:higher=re:tps: (?P<v>[0-9.]+) ms", "--",
              printing(tmp_path, label, values) + "; "
              + printing(tmp_path, label + "t", tps, key="tps"))
    slow = json.loads(triage("diff", "base", "slow", "--max-slowdown", 5, "--json",
                             expect=4).stdout)
    assert_valid("diff.schema.json", slow)
    checks = {c["name"]: c for c in slow["gate"]["checked"]}
    assert [c["kind"] for c in slow["gate"]["checked"]] == ["bench"] * 3
    assert list(checks)[1:] == ["step_ms", "tps"]  # wall_time first, then --metric order
    assert checks["step_ms"]["failed"] and checks["step_ms"]["significance"] == "significant"
    assert checks["step_ms"]["change_pct"] == pytest.approx(15, abs=0.5)
    assert not checks["tps"]["failed"] and checks["tps"]["better"] == "higher"
    assert checks["tps"]["min_detectable_pct"] > 0  # within noise: what it could have seen
    # throughput 20% lower fails, in its own direction
    fewer = json.loads(triage("diff", "base", "fewer", "--max-slowdown", 5, "--json",
                              expect=4).stdout)
    checks = {c["name"]: c for c in fewer["gate"]["checked"]}
    assert checks["tps"]["failed"] and checks["tps"]["change_pct"] < -15
    assert not checks["step_ms"]["failed"]
    text = triage("diff", "base", "slow", "--max-slowdown", 5, expect=4).output
    assert "Gate failed: bench step_ms +15.0%" in text
    assert "step_ms (lower is better): A 100.8 ms, B 115.9 ms\n      +15.0% [" in text
    assert "cannot be told from noise" in text  # the tps row within noise
    history = triage.json("history", "base,slow", "--metric", "step_ms")
    assert_valid("history.schema.json", history)
    assert [p["spread"]["median"] for p in history["points"]] == pytest.approx([100.75, 115.8625])
    # a bench run's values are its runs of the workload, never kernel launches
    assert history["method"]["value"] == "median over the run's measured runs of the workload"
    assert history["points"][1]["change"]["samples"] == "runs"
    for fmt in ("text", "md", "html"):
        shown = triage("history", "base,slow", "--metric", "step_ms", "--format", fmt).output
        assert "vs previous (runs of the workload, 99%)" in shown and "launch" not in shown, fmt
    page = triage("report", "base", "slow", "--format", "md").output
    assert "| `step_ms` | lower | 100.8 ms | 115.9 ms | 6 vs 6 | **+15.0% [" in page
    assert page.index("**Benchmark**") < page.index("Kernels by time changed")


def test_repeat_auto_decides_a_change_and_stops_undecided_with_what_it_could_see(
        triage, tmp_path, store_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = [100, 101, 102, 100.5, 101.5, 99.5, 100.2, 101.2]
    bench(triage, "--repeat", 8, "--label", "base", "--shell", "--metric", STEP, "--",
          printing(tmp_path, "base", base))
    decided = json.loads(bench(
        triage, "--repeat", "auto", "--against", "base", "--max-runs", 20, "--metric", STEP,
        "--shell", "--json", "--", printing(tmp_path, "slow", [v * 1.15 for v in base])).stdout)
    assert_valid("bench.schema.json", decided)
    assert decided["stopped"] == "decided" and decided["runs"] < 20
    assert decided["against"]["noise"]["significance"] == "significant"
    same = bench(triage, "--repeat", "auto", "--against", "base", "--max-runs", 8,
                 "--metric", STEP, "--shell", "--", printing(tmp_path, "same", base))
    assert "stopped: --max-runs reached, not decided" in same.output
    assert re.search(r"within noise\n  with 8 vs 8 runs, changes under [0-9.]+% cannot be told "
                     "from noise", same.output)
    spent = json.loads(bench(triage, "--repeat", 20, "--budget", "1s", "--json", "--",
                             "sleep", "0.6").stdout)
    assert spent["stopped"] == "budget" and spent["runs"] in (1, 2)  # 0.6 s a run at least


@pytest.mark.parametrize("args, message", [
    (("--metric", "step=re:no group"), "needs a group named v"),
    (("--metric", "step_ms"), "give NAME[:UNIT][:higher]=re:REGEX"),
    (("--metric", "wall_time=json:t"), "wall_time is measured always"),
    (("--repeat", "0"), "give a number of runs >= 1, or auto"),
    (("--repeat", "auto"), "--repeat auto needs --against"),
])
def test_bad_options_are_refused_before_anything_runs(triage, store_dir, args, message):
    result = bench(triage, *args, "--", "true", expect=2)
    assert message in result.output
    assert not store_dir.exists()


def test_a_failed_run_or_a_metric_never_printed_archives_nothing(triage, store_dir, tmp_path,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    failed = bench(triage, "--repeat", 3, "--shell", "--", "echo broken; exit 3", expect=1)
    assert "run 1 of the bench exited 3 and said 'broken'; nothing was archived" in failed.output
    missing = bench(triage, "--repeat", 2, "--metric", STEP, "--", "echo", "hello", expect=1)
    assert "no line of its output gave --metric step_ms" in missing.output
    assert triage.json("ls") == []


@pytest.fixture(scope="module")
def variants(nvtx_program, nsys_exe, tmp_path_factory):
    """nsys reports of the NVTX program as it is, 15% slower in one range (forward 2000 ->
    2900 us of a 6000 us step), and slower on the host only (900 us a step spun before the
    epoch opens, outside every range): real captures, made here without a GPU."""
    from nvtx_capture import capture

    folder = tmp_path_factory.mktemp("variants")
    args = {"base": [20, 2000, 4000], "slow": [20, 2900, 4000], "host": [20, 2000, 4000, 900]}
    return {name: (capture(nvtx_program, given, folder / name, nsys=nsys_exe), given)
            for name, given in args.items()}


def test_the_profile_accounts_for_a_slower_range_and_not_for_host_time(
        triage, nvtx_program, variants, store_dir):
    for name, (report, args) in variants.items():
        triage("archive", report, "--label", f"prof/{name}")
        bench(triage, "--repeat", 6, "--warmup", 1, "--from", f"prof/{name}", "--label", name,
              "--metric", STEP, "--", nvtx_program, *args)
    # how much slower each side ran is the machine's load as much as the program's (a loaded
    # 2-core CI box): what is checked here is what the gate judged and the accounting's
    # arithmetic; benchmarks/bench_false_positives.py measures the gate's rates
    slow = json.loads(triage("diff", "base", "slow", "--max-slowdown", 5, "--json",
                             expect=None).stdout)
    assert_valid("diff.schema.json", slow)
    assert [(c["kind"], c["name"]) for c in slow["gate"]["checked"]] == [
        ("bench", "wall_time"), ("bench", "step_ms")]
    step = next(m for m in slow["accounts"]["metrics"] if m["metric"] == "step_ms")
    assert step["basis"] == "nvtx" and slow["accounts"]["profiles"]["a"]["basis"] == "nvtx"
    assert {p["name"] for p in step["parts"]} == {"epoch", "step", "forward", "backward"}
    # the explained points, from the runs' own tables: time inside any range (the epoch holds
    # every other) over A's traced span (the epoch too)
    epochs = _epochs(triage)
    direct = (epochs["prof/slow"] - epochs["prof/base"]) / epochs["prof/base"] * 100
    assert step["explained_points"] == pytest.approx(direct, rel=1e-9)
    host = triage.json("diff", "base", "host")
    wall = next(m for m in host["accounts"]["metrics"] if m["metric"] == "wall_time")
    assert wall["unexplained_points"] == pytest.approx(wall["bench_pct"] - wall["explained_points"])
    text = triage("diff", "base", "host").output
    assert "points unexplained (host time outside every NVTX range; inside the traced span" in text
    html = triage("report", "base", "host", "-o", store_dir.parent / "review.html").output
    page = (store_dir.parent / "review.html").read_text()
    assert "wrote" in html and page.index("<h2>Benchmark") < page.index("What the profile accounts")
    assert "points unexplained (host time outside every NVTX range; inside the traced span" in page


def _epochs(triage) -> dict[str, int]:
    """Each profile's epoch range (ns), by label, straight from its nvtx_ranges table."""
    found = {}
    for name in ("base", "slow"):
        run_id = triage.json("show", f"prof/{name}")["id"]
        rows = triage.json("query", "select end_ns - start_ns as ns from nvtx_ranges where "
                           f"text = 'epoch' and run_id = '{run_id}'")
        found[f"prof/{name}"] = rows[0]["ns"]
    return found


def test_investigation_is_recorded_and_inherited_through_from(triage, tmp_path, store_dir,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    bench(triage, "--repeat", 1, "--investigation", "fuse-gemm", "--label", "first", "--",
          "true")
    bench(triage, "--repeat", 1, "--from", "first", "--label", "second", "--", "true")
    bench(triage, "--repeat", 1, "--label", "third", "--", "true")
    assert [triage.json("show", name)["capture"]["investigation"]
            for name in ("first", "second", "third")] == ["fuse-gemm", "fuse-gemm", None]
    listed = triage.json("ls")  # newest first
    assert_valid("ls.schema.json", listed)
    assert [r["investigation"] for r in listed] == [None, "fuse-gemm", "fuse-gemm"]
    rows = list(csv.DictReader(io.StringIO(triage("ls", "--csv").stdout)))
    assert [r["investigation"] for r in rows] == ["", "fuse-gemm", "fuse-gemm"]


def test_rerun_of_a_bench_run_runs_its_series_again_and_judges_its_metrics(
        triage, tmp_path, store_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = [100, 101, 102, 100.5, 101.5, 99.5]
    bench(triage, "--repeat", 6, "--warmup", 1, "--label", "base", "--shell", "--metric", STEP,
          "--", printing(tmp_path, "same", values))
    out = triage.json("rerun", "base", "--label", "again")
    again = triage.json("show", "again")
    assert again["tool"] == "bench" and again["capture"]["rerun_of"] == out["rerun_of"]
    assert again["capture"]["bench"]["repeat"] == 6 and again["capture"]["bench"]["warmup"] == 1
    assert out["reproduced"]["judged"] == 2  # wall_time and step_ms, not kernels
    # the counter went on from 7: the same six values in another order, so step_ms is within
    # noise (wall_time is this machine's load: nothing the test can know)
    diff = triage.json("diff", "base", "again")
    assert [m["name"] for m in diff["bench"]["metrics"]] == ["wall_time", "step_ms"]
    assert diff["bench"]["metrics"][1]["noise"]["significance"] == "within_noise"


def test_a_bench_run_travels_like_any_run(triage, tmp_path, store_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = json.loads(bench(triage, "--repeat", 2, "--json", "--", "true").stdout)["run"]["id"]
    team = tmp_path / "team"
    team.mkdir()
    triage("remote", "add", "origin", team)
    triage("push", "origin")
    triage("export", run, "-o", tmp_path / "bench.tar")
    for other, how in (("pulled", ("pull", "origin")),
                       ("imported", ("import", tmp_path / "bench.tar"))):
        monkeypatch.setenv("TRIAGE_STORE", str(tmp_path / other))
        if how[0] == "pull":
            triage("remote", "add", "origin", team)
        triage(*how)
        rows = triage.json("query", "select metric, count(*) as n from bench_samples group by all "
                           "order by metric")
        assert rows == [{"metric": "wall_time", "n": 2}], other
        triage("verify")


def test_a_profile_with_kernels_accounts_by_gpu_busy_time(triage, archived, tmp_path,
                                                          monkeypatch):
    """Two real nsys profiles with kernels (corpus exports, read without nsys) as what two
    bench runs follow up: the explained points are their kernel totals' change over A's traced
    span, as computed here straight from the tables."""
    ids = archived(("0x822a5b87__test-cuda__report1.sqlite",),
                   ("0x822a5b87__test-cuda__report2.sqlite",))
    monkeypatch.chdir(tmp_path)
    for name, run in zip(("a", "b"), ids, strict=True):
        bench(triage, "--repeat", 5, "--from", run, "--label", name, "--shell", "--metric", STEP,
              "--", printing(tmp_path, name, [100, 101, 102, 103, 104]))
    refused = triage("diff", "a", ids[1], expect=2).output
    assert "A is bench and B is nsys: a bench run compares with bench runs" in refused
    found = triage.json("diff", "a", "b")["accounts"]
    assert [p["id"] for p in found["profiles"].values()] == ids
    step = next(m for m in found["metrics"] if m["metric"] == "step_ms")
    totals = {row["run_id"]: row for row in triage.json(
        "query", "select k.run_id, sum(total_ns) as busy, "
        "(select max(end_ns) - min(start_ns) from kernels x where x.run_id = k.run_id) as span "
        "from kernel_summary k group by k.run_id")}
    a, b = totals[ids[0]], totals[ids[1]]
    assert step["basis"] == "gpu_busy"
    assert step["explained_points"] == pytest.approx((b["busy"] - a["busy"]) / a["span"] * 100)
    # the benchmark flat (the same printed values) while the kernels grew beyond its interval
    assert step["bench_pct"] == 0 and step["explained_points"] > step["bench_ci_pct"][1]
    assert step["disagrees"] == "flat_explained_changed" and not step["within_noise"]
    assert step["parts"][0]["points"] == pytest.approx(step["explained_points"])
    text = triage("diff", "a", "b").output
    assert "!! DISAGREE: the benchmark is flat while the profile changed beyond its noise" in text
    assert "GPU busy time explains +6.2 of those +0.0 points" in text
    # piped, a kernel name is whole (`| grep` finds it)
    name = "add_parallel(const float *, const float *, float *, int)"
    assert len(name) > 40 and f"    {name} +802.0% explains +6.2" in text
    # on a terminal's width, the columns beyond 100 go to the name, as in diff's kernel list
    assert f"    {name} +802.0% explains +6.2" in triage("diff", "a", "b", "--width", 120).output
    cut = triage("diff", "a", "b", "--width", 90).output
    assert name not in cut and f"    {name[:29]}… +802.0% explains +6.2" in cut


def test_a_side_named_by_investigation_is_its_bench_runs_beside_its_nsys_profile(
        triage, nvtx_program, nsys_exe, tmp_path, store_dir, monkeypatch):
    """`diff inv:A inv:B`: each side's bench runs compared, its nsys capture the profile,
    found through the catalog's investigation column. The bench runs name no --from, so the
    same runs diffed by label have no accounts; by investigation, the numbers the --from test
    checks: the epoch's change over A's epoch."""
    from nvtx_capture import CAPTURE_OPTIONS

    monkeypatch.chdir(tmp_path)
    for name, args in (("base", [20, 2000, 4000]), ("slow", [20, 2900, 4000])):
        triage("capture", "--investigation", f"fuse-{name}", "--label", f"prof/{name}", "--",
               nsys_exe, "profile", *CAPTURE_OPTIONS, "-o", name, nvtx_program, *args)
        bench(triage, "--repeat", 3, "--investigation", f"fuse-{name}", "--label", name,
              "--metric", STEP, "--", nvtx_program, *args)
    rows = triage.json("query", "select tool, investigation from runs order by archived")
    assert [(r["tool"], r["investigation"]) for r in rows] == [
        (tool, f"fuse-{name}") for name in ("base", "slow") for tool in ("nsys", "bench")]
    by_label = triage.json("diff", "base", "slow")
    assert "accounts" not in by_label
    found = triage.json("diff", "inv:fuse-base", "inv:fuse-slow")
    assert_valid("diff.schema.json", found)
    assert found["bench"] == by_label["bench"]  # the same runs compared
    assert [p["id"] for p in found["accounts"]["profiles"].values()] == [
        triage.json("show", f"prof/{name}")["id"] for name in ("base", "slow")]
    step = next(m for m in found["accounts"]["metrics"] if m["metric"] == "step_ms")
    epochs = _epochs(triage)
    direct = (epochs["prof/slow"] - epochs["prof/base"]) / epochs["prof/base"] * 100
    assert step["explained_points"] == pytest.approx(direct, rel=1e-9)
    assert "what the profile accounts for (nsys" in triage("diff", "inv:fuse-base",
                                                           "inv:fuse-slow").output
    page = store_dir.parent / "review.html"
    triage("report", "inv:fuse-base", "inv:fuse-slow", "-o", page)
    assert "What the profile accounts" in page.read_text()


def test_an_investigation_without_bench_runs_is_refused_with_how_to_add_one(
        triage, tmp_path, store_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bench(triage, "--repeat", 1, "--investigation", "fuse-b", "--", "true")
    (tmp_path / "inv:fuse-b").write_text("not a report")  # the investigation wins over a file
    refused = triage("diff", "inv:fuse-a", "inv:fuse-b", expect=None)
    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert refused.output.strip().splitlines()[-1].endswith(
        "investigation 'fuse-a' has no bench run; `triage bench --investigation fuse-a -- CMD` "
        "adds one")
    assert "has no bench run" in triage("report", "inv:fuse-a", "inv:fuse-b", expect=None).output


@pytest.mark.parametrize("last", ["exit 0", "exit 3"])
def test_each_repeat_is_timed_around_its_process_and_agents_are_ended_once_after(
        tmp_path, monkeypatch, last):
    """A repeat's wall time is its process's (at least the sleep, within the span the run's
    outcome covers), and the nsys agents its processes may have left are looked for once,
    after the series, even one a failed run ends: no scan of /proc between repeats."""
    from triage.base.errors import CaptureFailed
    from triage.capture import bench as measure, process_tree
    from triage.capture.bench import BenchRequest
    from triage.capture.session import CaptureRequest

    scans: list[list[int]] = []
    monkeypatch.setattr(process_tree, "end_agents", lambda pids: scans.append(list(pids)))
    counter = tmp_path / "count"
    script = (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}; "
              f"sleep 0.05; [ $n -lt 2 ] || {last}")
    request = BenchRequest(CaptureRequest([script], shell=True, cwd=tmp_path), repeat=3)
    seen: list = []
    try:
        measured, = measure.run_sides((request,),
                                      lambda _side, _n, samples: seen.append(samples[0]))
    except CaptureFailed:
        assert last == "exit 3" and len(seen) == 2
    else:
        assert last == "exit 0" and len(measured.outcomes) == 3
        for sample, outcome in zip(seen, measured.outcomes, strict=True):
            assert 0.05 <= sample.value <= outcome.seconds + 0.0005
    assert len(scans) == 1 and len(set(scans[0])) == 3


def test_interleave_measures_the_baseline_again_run_for_run_and_decides_pair_by_pair(
        triage, tmp_path, store_dir, monkeypatch):
    """`--interleave`: the --against run's recorded command runs again alternately with the
    new one (A B, B A, A B ...: the order file the two commands append to), both are archived
    (the baseline side a rerun of the original, the candidate naming it), and the decision is
    the paired test of the values the two printed, recomputed here from the stored samples."""
    from triage.compare.paired import compare_paired

    monkeypatch.chdir(tmp_path)
    order = tmp_path / "order"
    base = [100, 101, 102, 100.5, 101.5, 99.5, 100.2, 101.2]
    bench(triage, "--repeat", 8, "--label", "base", "--shell", "--metric", STEP, "--",
          f"echo A >> {order}; " + printing(tmp_path, "base", base))
    order.write_text("")
    out = json.loads(bench(
        triage, "--repeat", "auto", "--against", "base", "--interleave", "--warmup", 1,
        "--max-runs", 20, "--label", "slow", "--metric", STEP, "--shell", "--json", "--",
        f"echo B >> {order}; " + printing(tmp_path, "slow", [v * 1.15 for v in base])).stdout)
    assert_valid("bench.schema.json", out)
    pairs = out["runs"]
    assert out["stopped"] == "decided" and pairs < 20
    # the warm-up pair, then one pair per run: A B, B A, A B, ...
    assert order.read_text().split() == [
        side for i in range(pairs + 1) for side in (("A", "B") if i % 2 == 0 else ("B", "A"))]
    baseline = triage.json("show", out["against"]["baseline_run"]["id"])
    candidate = triage.json("show", "slow")
    assert baseline["capture"]["rerun_of"] == triage.json("show", "base")["id"]
    assert baseline["capture"]["bench"]["repeat"] == pairs \
        == candidate["capture"]["bench"]["repeat"]
    assert candidate["capture"]["bench"]["interleaved_with"] == baseline["id"]
    assert f"interleaved      run for run with {baseline['id']}" in triage("show", "slow").output
    printed = {run["id"]: [r["value"] for r in triage.json(
        "query", "select value from bench_samples where metric = 'step_ms' and not warmup and "
        f"run_id = '{run['id']}' order by repeat")] for run in (baseline, candidate)}
    against = out["against"]
    assert against["interleaved"] and against["noise"]["samples"] == "pairs"
    recomputed = compare_paired(printed[baseline["id"]], printed[candidate["id"]],
                                against["confidence"])
    assert against["noise"] == recomputed.to_json()
    assert recomputed.change_pct == pytest.approx(15)
    diff = json.loads(triage("diff", baseline["id"], "slow", "--max-slowdown", 5, "--json",
                             expect=4).stdout)
    assert_valid("diff.schema.json", diff)
    step = next(m for m in diff["bench"]["metrics"] if m["name"] == "step_ms")
    assert step["noise"] == compare_paired(printed[baseline["id"]],
                                           printed[candidate["id"]]).to_json()
    assert "tested pair by pair" in triage("diff", baseline["id"], "slow").output
    # the same two sides, not measured together (the original against the candidate): as ever
    assert triage.json("diff", "base", "slow")["bench"]["metrics"][1]["noise"]["samples"] == \
        "runs"


def test_interleave_undecided_says_what_its_pairs_could_see(triage, tmp_path, store_dir,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = [100, 101, 102, 100.5, 101.5, 99.5, 100.2, 101.2]
    bench(triage, "--repeat", 4, "--label", "base", "--shell", "--metric", STEP, "--",
          printing(tmp_path, "base", base))
    same = bench(triage, "--repeat", "auto", "--against", "base", "--interleave",
                 "--max-runs", 14, "--metric", STEP, "--shell", "--",
                 printing(tmp_path, "same", base[3:] + base[:3]))
    assert "stopped: --max-runs reached, not decided" in same.output
    assert "step_ms against base (interleaved, pair by pair): " in same.output
    assert re.search(r"within noise\n  with 14 interleaved pairs, changes under [0-9.]+% "
                     "cannot be told from noise", same.output)
    # the deciding metric must be one the baseline measured; one run is measured again
    # a series too short ever to decide is refused before anything runs, naming the least
    few = bench(triage, "--repeat", 5, "--against", "base", "--interleave", "--", "true",
                expect=2)
    assert "needs at least 8 pairs to decide; use --repeat 8 or more" in few.output
    few = bench(triage, "--repeat", "auto", "--max-runs", 5, "--against", "base",
                "--interleave", "--", "true", expect=2)
    assert "cannot decide within 5 pairs; use --max-runs 12 or more" in few.output
    assert len(triage.json("ls")) == 3  # base and the interleaved pair above: nothing ran
    assert "--yes answers --interleave's question" in bench(
        triage, "--yes", "--repeat", 8, "--", "true", expect=2).output
    refused = bench(triage, "--repeat", 8, "--against", "base", "--interleave", "--metric",
                    "other_ms:ms=re:other: (?P<v>[0-9.]+)", "--", "true", expect=2)
    assert "its bench run did not measure other_ms" in refused.output
    bench(triage, "--repeat", 1, "--label", "base2", "--", "true")
    two = bench(triage, "--repeat", 8, "--against", "base*", "--interleave", "--", "true",
                expect=2)
    assert "names 2 runs" in two.output


def test_a_failed_run_of_either_interleaved_side_archives_neither(triage, tmp_path, store_dir,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken"
    bench(triage, "--repeat", 1, "--label", "base", "--shell", "--", f"[ ! -e {broken} ]")
    broken.write_text("")  # the baseline's command fails from now on
    failed = bench(triage, "--repeat", 8, "--against", "base", "--interleave", "--", "true",
                   expect=1)
    assert "run 1 of the bench exited 1; nothing was archived" in failed.output
    assert [r["id"] for r in triage.json("ls")] == [triage.json("show", "base")["id"]]


def test_two_series_alike_to_the_second_are_two_runs(tmp_path):
    """A bench run has no report to tell it apart: two series of a workload that prints the
    same numbers, begun and ended within one second, are two runs (before, their records were
    alike to the second and the second series was the first run, `already archived`)."""
    from triage.archive import bench as archive_bench
    from triage.archive.store import Store
    from triage.capture.bench import BenchMeasured, BenchRequest
    from triage.capture.git_state import git_snapshot
    from triage.capture.session import CaptureRequest, Outcome

    store = Store.open(tmp_path / "store", create=True)
    outcome = Outcome(0, "2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z", 0.18,
                      ["step time: 1 ms"])
    request = BenchRequest(CaptureRequest(["work"], cwd=tmp_path, environ={}))
    runs = [archive_bench._archive(store, BenchMeasured(request, outcomes=[outcome]), {},
                                   git_snapshot(tmp_path), "work", ()) for _ in range(2)]
    assert runs[0].id != runs[1].id and all(run.new for run in runs)
