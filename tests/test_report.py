"""`triage report`: HTML and Markdown reviews of real corpus families, hostile names, size limits.

Reports are rendered from real `diff_runs` results of archived corpus reports. Hostile names are
made by renaming things in such a result, never by writing a diff by hand. The Chromium checks
open the HTML the way a reviewer would, offline, and skip when Chromium is missing unless
TRIAGE_REQUIRE_TOOLS=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from html import escape as html_escape
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from helpers import corpus_file, corpus_manifest
from triage.archive.ingest import archive_files
from triage.archive.store import Store
from triage.compare.diff import diff_runs
from triage.compare.drift import worst_verdict
from triage.compare.nsys_diff import SUMMARY_DIFFS, join_summaries
from triage.compare.result import DiffOptions, DiffResult, DriftItem, total_change
from triage.views.report import GITHUB_COMMENT_LIMIT, cut_markdown, render_html, render_markdown
from triage.views.svgcharts import bar_chart
from triage.views.text import to_json

FAMILIES = {
    "lakshya-gemm": ["LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
                     "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep"],
    "armleth-mlp": [f"armleth__cuda-mlp-inference__mlp_{v}.ncu-rep"
                    for v in ("v1", "v2", "v3_loop_unroll", "v4_8_per_thread")],
    "gpudemo-transpose": ["2388612861__GPU-DEMO__transpose_ncu_report.ncu-rep",
                          "2388612861__GPU-DEMO__transpose_ncu_report_optimized.ncu-rep"],
    "bwd29-nodecalc-driverdrift": ["bwd29__self-join-MiSTIC__nodeCalc_profile.out.ncu-rep",
                                   "bwd29__self-join-MiSTIC__nodeCalc_profile10.out.ncu-rep"],
}
NSYS_PAIR = ["0x822a5b87__test-cuda__report1.sqlite", "0x822a5b87__test-cuda__report2.sqlite"]
HOSTILE_SCRIPT = "<script>document.title='pwned'</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One store with every ncu family archived (archiving is the slow part)."""
    path = tmp_path_factory.mktemp("report") / "store"
    for files in FAMILIES.values():
        archive_files(path, [str(corpus_file(f)) for f in files])
    return path


@pytest.fixture(scope="module")
def nsys_store(tmp_path_factory) -> Path:
    pytest.importorskip("triage.capture.nsys")
    path = tmp_path_factory.mktemp("report-nsys") / "store"
    archive_files(path, [str(corpus_file(f)) for f in NSYS_PAIR])
    return path


def run_ids(store_path: Path, files: list[str]) -> list[str]:
    """Ids of archived reports (archiving again finds the same run)."""
    return [r.id for r in archive_files(store_path, [str(corpus_file(f)) for f in files])]


def family_diff(store_path: Path, family: str, show_all: bool = True) -> DiffResult:
    a, b = run_ids(store_path, FAMILIES[family])[:2]
    return diff_runs(Store.open(store_path), a, b, DiffOptions(show_all=show_all))


def report(triage, store_path, out: Path, *args, expect: int = 0) -> str:
    triage("report", *args, "-o", out, "--store", store_path, expect=expect)
    return out.read_text(encoding="utf-8")


def assert_self_contained(html: str) -> None:
    """Nothing loads from anywhere: no scripts, no URL attributes, no CSS imports or url()."""
    page = TagCounter(html)
    assert "script" not in page.tags
    assert not page.url_attributes, page.url_attributes
    assert "@import" not in page.styles and "url(" not in page.styles
    assert "default-src 'none'" in html


class TagCounter(HTMLParser):
    """Start tags, URL-bearing attributes, CSS and the <title> text of a document, as a
    browser's parser sees them (so escaped text is never mistaken for markup)."""

    URL_ATTRIBUTES = {"src", "href", "xlink:href", "srcset", "action", "poster", "data",
                      "background"}

    def __init__(self, text: str):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.url_attributes: list[tuple] = []
        self.title, self.styles, self._open = "", "", None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.url_attributes += [(tag, k, v) for k, v in attrs if k in self.URL_ATTRIBUTES]
        self.styles += "".join(v or "" for k, v in attrs if k == "style")
        self._open = tag

    def handle_endtag(self, tag):
        self._open = None

    def handle_data(self, data):
        if self._open == "title" and self.tags["title"] == 1:  # the page's, not an SVG's
            self.title += data
        elif self._open == "style":
            self.styles += data


CELL_SPLIT = re.compile(r"(?<!\\)\|")
CODE_SPAN = re.compile(r"(?<![\\`])(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def table_rows(markdown: str) -> list[list[str]]:
    """Each table block's rows, split into cells on unescaped pipes (as GFM does)."""
    return [CELL_SPLIT.split(line.strip())[1:-1] for line in markdown.splitlines()
            if line.startswith("|")]


def assert_tables_intact(markdown: str) -> None:
    """Every row of a table has as many cells as the header above it."""
    width = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(CELL_SPLIT.split(line.strip())) - 2
        width = width or cells
        assert cells == width, line[:200]


def raw_html_outside_code(markdown: str) -> str:
    """The Markdown with code spans removed: what GitHub could read as raw HTML."""
    return CODE_SPAN.sub("", markdown)


# -- HTML on the corpus families ---------------------------------------------------------------


def test_gemm_html_report(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    html = report(triage, store, tmp_path / "review.html", a, b)
    assert_self_contained(html)
    parsed = TagCounter(html)
    assert parsed.title == ("triage review: LakshyaSingh354__CudaCode__gemm_naive.ncu-rep vs "
                            "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
    assert parsed.tags["svg"] == 4  # durations, SOL plot, SOL/occupancy bars, warp stalls
    # build/naive.out then build/global_coal.out: another program, so with care
    order = [html.index(s) for s in ("⚠ Comparable with care", "Capture drift",
                                     "Kernels by time changed",
                                     "Kernel details", "Provenance", "Attribution, not acceptance")]
    assert order == sorted(order)
    assert 'class="sev-info"' in html and "different profiler options" in html
    assert "naive_gemm(const float *, const float *, float *, int, int, int, float, float)" in html
    assert "sgemm_global_mem_coalesce(const float *" in html
    assert "4.79 ms" in html and "4.65 ms" in html and "-3.0%" in html
    # Sections in the report's order, with rules and their messages.
    sections = [html.index(f"<strong>{n}</strong>") for n in
                ("GPU Speed Of Light Throughput", "Compute Workload Analysis",
                 "Warp State Statistics", "Launch Statistics")]
    assert sections == sorted(sections)
    assert "Issue Slot Utilization" in html and "Lg Throttle Stalls" in html
    assert "@section:" not in html  # rule links shown as section names
    for chart in ("Speed of light and occupancy", "Warp stalls", "Compute vs memory throughput"):
        assert chart in html


def test_gemm_provenance_is_complete(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    html = report(triage, store, tmp_path / "review.html", a, b)
    shown = triage.json("show", a, "--store", store)
    section = html[html.index("<h2>Provenance</h2>"):]
    for text in (shown["id"], shown["command"], shown["archived"], shown["created"],
                 "ncu 2024.1.1.0", "570.133.20", "12.8", "NVIDIA GeForce GTX 1660 SUPER",
                 "base (report)", "all (default)", "kernel (default)",
                 "2 of 2 results ran with locked clocks", b):
        assert text in section, text
    git_row = re.search(r"<th>git</th>(.*?)</tr>", section, re.S).group(1)
    assert git_row.count("unknown") == 2  # no git state recorded for archived reports


def test_html_is_the_diff_json_rendered(triage, store, tmp_path):
    """The report adds no data: it renders the result whose to_json() `diff --json` prints."""
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    html = report(triage, store, tmp_path / "review.html", a, b)
    document = json.loads(triage("diff", a, b, "--json", "--all", "--store", store).stdout)
    result = diff_runs(Store.open(store), a, b, DiffOptions(show_all=True))
    assert json.loads(to_json(result.to_json())) == document
    assert render_html([result], show_unchanged=False) == html


def test_all_lists_unchanged_metrics_and_charts_need_no_all(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    brief = report(triage, store, tmp_path / "brief.html", a, b)
    full = report(triage, store, tmp_path / "full.html", a, b, "--all")
    # Occupancy is unchanged: listed only with --all, yet drawn in both.
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" not in brief
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" in full
    assert "Achieved occupancy" in brief and "No change above the threshold in: Occupancy" in brief


def test_series_report(triage, store, tmp_path):
    ids = run_ids(store, FAMILIES["armleth-mlp"])
    html = report(triage, store, tmp_path / "series.html", *ids)
    assert_self_contained(html)
    assert "Series overview" in html
    for step, letter in enumerate("BCD", 1):
        assert f"Step {step}: A &rarr; {letter}" in html
    for name in FAMILIES["armleth-mlp"]:
        assert name in html
    assert "Mean duration per launch across the series" in html
    assert "Compute vs memory throughput through the series" in html
    row = re.search(r'<td><span class="muted">1</span>.*?</tr>', html, re.S).group(0)
    assert row.count("us") >= 4 and "+187.8%" in row  # v4 is slower than v1 on this kernel
    markdown = report(triage, store, tmp_path / "series.md", *ids)
    assert markdown.index("**Series**") < markdown.index("### Step 1") < markdown.index(
        "### Step 3")


def test_transpose_report_names_what_is_not_comparable(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["gpudemo-transpose"])
    html = report(triage, store, tmp_path / "review.html", a, b)
    assert "Comparable with care" in html
    for field in ("settings.sections", "kernels.set", "section:SpeedOfLight", "section:section0"):
        assert f'<td class="mono">{field}</td>' in html
    assert html.count('<span class="pill gone">only in A</span>') == 1
    assert html.count('<span class="pill new">only in B</span>') == 3
    assert "not comparable: collected only in A" in html
    assert "n/a" in html  # SOL exists only in B: A's bars say so instead of drawing zero


def test_drift_pair_shows_every_drift_item(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["bwd29-nodecalc-driverdrift"])
    html = report(triage, store, tmp_path / "review.html", a, b)
    diff = json.loads(triage("diff", a, b, "--json", "--store", store).stdout)
    assert diff["verdict"] == "caution" and diff["drift"]
    unrecorded: dict[str, list[str]] = {}
    for item in diff["drift"]:
        assert f'<tr class="sev-{item["severity"]}"><td class="sev">' in html
        if item["state"] != "unrecorded":
            assert f'<td class="mono">{item["field"]}</td>' in html
        else:
            assumed = item.get("assumed")
            unrecorded.setdefault(item["severity"], []).append(item["field"] + (
                f" ({assumed['default_of']}&#39;s default would be {assumed['a']})"
                if assumed else ""))
    assert set(unrecorded) == {"caution", "unknown"}  # cache control and replay never recorded
    for fields in unrecorded.values():  # one row for each severity
        assert f'<td class="mono">{", ".join(fields)}</td>' in html
    assert "<td class=\"val\">470</td>" in html and "<td class=\"val\">515</td>" in html
    assert "⚠ Comparable with care" in html
    assert "-83.1%" in html  # the nodeCalc kernel is much faster in B


def test_invalid_pair_cannot_be_missed(triage, store, tmp_path):
    """Different GPUs (GTX 1660 SUPER vs T4): the verdict leads, in red, before any number."""
    a = run_ids(store, FAMILIES["lakshya-gemm"])[0]
    b = run_ids(store, FAMILIES["armleth-mlp"])[0]
    out = tmp_path / "invalid.html"
    html = report(triage, store, out, a, b, "--strict", expect=3)
    banner = html.index("NOT COMPARABLE")
    assert banner < html.index("Capture drift") < html.index("Kernels by time changed")
    assert '<tr class="sev-invalidates"><td class="sev">INVALIDATES</td>' in html
    assert html.index('<tr class="sev-invalidates">') < html.index('<tr class="sev-caution">')
    markdown = report(triage, store, tmp_path / "invalid.md", a, b)
    assert markdown.index("> [!CAUTION]") < markdown.index("| severity |") < markdown.index(
        "**Kernels by time changed**")
    assert "🛑 **INVALIDATES** | `gpu.name`" in markdown


def test_series_gate_is_the_worst_step(triage, store, tmp_path):
    """The multi-diff gate uses drift's one verdict order: one invalid step fails the series."""
    gemm = run_ids(store, FAMILIES["lakshya-gemm"])
    mlp = run_ids(store, FAMILIES["armleth-mlp"])
    report(triage, store, tmp_path / "mlp.md", *mlp, "--strict=caution")
    markdown = report(triage, store, tmp_path / "mixed.md", *gemm, mlp[0], "--strict", expect=3)
    assert markdown.startswith("## 🛑 Performance review")
    assert worst_verdict([]) == "comparable"
    assert worst_verdict(["caution", "comparable"]) == "caution"
    assert worst_verdict(iter(["comparable", "invalid", "caution"])) == "invalid"


def test_nsys_pair_report(triage, nsys_store, tmp_path):
    a, b = run_ids(nsys_store, NSYS_PAIR)
    html = report(triage, nsys_store, tmp_path / "nsys.html", a, b)
    assert_self_contained(html)
    for text in ("Performance review <span class=\"muted\">nsys", "add_parallel(const float *",
                 "<h2>GPU time</h2>", "idle between kernels", "NVTX ranges",
                 "None recorded in either run.", "Memory operations", "HtoD", "800 MB",
                 "CUDA API calls", "cudaHostAlloc", "cuda,nvtx,osrt,opengl (report)"):
        assert text in html, text
    assert "clock control (source)" not in html  # nsys does not lock clocks: no row of unknowns
    markdown = report(triage, nsys_store, tmp_path / "nsys.md", a, b)
    assert "<summary>GPU idle time, NVTX ranges, memory operations, CUDA API</summary>" in markdown
    assert "| memcpy HtoD (800 MB → 800 MB) | 8 → 8 |" in markdown
    for page in (html, markdown):  # no Nsight Compute caveat on a page of nsys runs
        assert "Live timings, with tracing overhead." in page and "replayed" not in page


# -- Markdown ----------------------------------------------------------------------------------


def test_markdown_for_a_pr_comment(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    markdown = report(triage, store, tmp_path / "review.md", a, b)
    assert len(markdown) < GITHUB_COMMENT_LIMIT
    first_fold = markdown.index("<details>")
    headline = "| 1 | `naive_gemm` → `sgemm_global_mem_coalesce` | 2 → 2 | 4.79 ms | 4.65 ms |"
    for text in ("**Comparable with care.**", "| info | `command` |",
                 "**Kernels by time changed**",
                 headline):
        assert markdown.index(text) < first_fold, text
    assert markdown.count("<details>") == markdown.count("</details>") == 2
    assert_tables_intact(markdown)
    assert "naive\\_gemm" in markdown  # outside code spans, emphasis characters are escaped


def test_diff_format_md_uses_the_report(triage, store):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    out = triage("diff", a, b, "--format", "md", "--store", store).stdout
    assert out.startswith("## Performance review") and "**Kernels by time changed**" in out


def test_format_from_suffix_and_flag(triage, store, tmp_path):
    a, b = run_ids(store, FAMILIES["lakshya-gemm"])
    assert report(triage, store, tmp_path / "r.html", a, b, "--format", "md").startswith("## ")
    triage("report", a, b, "-o", tmp_path / "r.txt", "--store", store, expect=2)
    triage("report", a, "--store", store, expect=2)
    stdout = triage("report", a, b, "--format", "html", "--store", store).stdout
    assert stdout.startswith("<!DOCTYPE html>")


def big_diff(diff: DiffResult, kernels: int) -> DiffResult:
    """A real diff with its kernel repeated under many long, distinct names."""
    template = diff.kernels[0]
    return replace(diff, kernels=tuple(
        replace(template, name=f"void cutlass::Kernel<cutlass::gemm::GemmShape<{i}, 128, 32>>"
                "(Params)", name_b=None, matched_by="name") for i in range(kernels)))


def test_markdown_fits_a_comment_when_the_diff_is_huge(store):
    huge = big_diff(family_diff(store, "lakshya-gemm", show_all=False), 400)
    assert len(render_html([huge])) > 2 * GITHUB_COMMENT_LIMIT
    markdown = render_markdown([huge])
    assert len(markdown) <= GITHUB_COMMENT_LIMIT
    assert "more kernels left out to fit a PR comment" in markdown
    assert markdown.index("**Comparable with care.**") < markdown.index(
        "**Kernels by time changed**")
    assert markdown.count("<details>") == markdown.count("</details>")
    assert_tables_intact(markdown)


def test_markdown_last_resort_cut_keeps_it_well_formed(store):
    diff = family_diff(store, "lakshya-gemm", show_all=False)
    markdown = render_markdown([diff], max_chars=2500)
    assert len(markdown) <= 2500
    assert markdown.rstrip().endswith("has everything.")
    assert markdown.count("<details>") == markdown.count("</details>")
    assert cut_markdown("a\n" * 10, 1000).count("</details>") == 0


def test_unknown_duration_is_never_zero(store):
    """A side whose duration is unknown makes the time changed unknown in both formats."""
    diff = family_diff(store, "lakshya-gemm", show_all=False)
    kernel = diff.kernels[0]
    assert kernel.a and kernel.b
    kernel = replace(kernel, b=replace(kernel.b, duration_ns=None, total_ns=None))
    diff = replace(diff, kernels=(kernel,) + diff.kernels[1:])
    assert kernel.delta_total_ns is None and total_change(None, kernel.a) > 0
    row = next(r for r in table_rows(render_markdown([diff]))
               if len(r) == 8 and r[0].strip() == "1")
    assert row[6].strip() == "unknown"
    html = render_html([diff])
    assert re.search(r'<td class="num ">unknown</td>', html), "no unknown time change"


# -- hostile names -----------------------------------------------------------------------------


LONG_TEMPLATE = ("void cutlass::Kernel<" + ", ".join(
    f"cutlass::gemm::GemmShape<{i}, 128, 32>" for i in range(120)) + ">(Params)")


def hostile(diff: DiffResult) -> DiffResult:
    """A real diff whose user data (names, messages, commands, labels) is made hostile."""
    kernel = diff.kernels[0]
    section = kernel.sections[0]
    metric = replace(section.metrics[0], name="<b>bold</b>|metric`x`*emph*")
    section = replace(section, name="</summary><script>alert(1)</script>",
                      metrics=(metric,) + section.metrics[1:])
    rule = replace(kernel.rules.both[0],
                   message="<script>alert(1)</script> see @section:X:Warp <State>@ | `rm -rf`")
    kernel = replace(
        kernel, name=f"{HOSTILE_SCRIPT}void gemm<float, 128>(const float*, float*)",
        name_b="</td></tr></table><img src=x onerror=\"document.title='img'\">|a|b`tick`",
        sections=(section,) + kernel.sections[1:],
        rules=replace(kernel.rules, both=(rule,) + kernel.rules.both[1:]))
    long_kernel = replace(kernel, name=LONG_TEMPLATE, name_b=LONG_TEMPLATE + "|`x`")
    command = DriftItem("command", "command", "ncu '<script>' | tee `id`", "x|y", "different",
                        "invalidates", f"why {HOSTILE_SCRIPT} | pipe")
    hostile_command = "ncu --kernel-name 'regex:<img src=x onerror=alert(1)>' ./app | tee `whoami`"
    run_a = replace(diff.run_a, labels=(HOSTILE_SCRIPT,), command=hostile_command)
    return replace(diff, kernels=(kernel,) + diff.kernels[1:] + (long_kernel,),
                   drift=diff.drift + (command,), verdict="invalid", run_a=run_a)


def hostile_nsys(diff: DiffResult) -> DiffResult:
    """A real nsys diff with NVTX ranges (joined by the diff's own code) with hostile texts."""
    assert diff.nsys
    _table, keys, values = SUMMARY_DIFFS["nvtx"]
    row = {"domain": "<i>dom</i>", "kind": "push/pop", "instances": 3, "total_ns": 900,
           "avg_ns": 300, "median_ns": 300, "share": 1.0}
    rows_a = [{**row, "text": f"{HOSTILE_SCRIPT}|step`1`"}]
    rows_b = [{**row, "text": f"{HOSTILE_SCRIPT}|step`1`", "total_ns": 600},
              {**row, "text": "</td><img src=x onerror=alert(1)>"}]
    nsys = replace(diff.nsys, nvtx=tuple(join_summaries(rows_a, rows_b, keys, values)))
    run_b = replace(diff.run_b, labels=("</title><script>document.title='pwned'</script>",))
    return replace(diff, nsys=nsys, run_b=run_b)


def test_hostile_names_are_escaped_in_html(store):
    html = render_html([hostile(family_diff(store, "lakshya-gemm"))])
    assert_self_contained(html)
    tags = TagCounter(html).tags
    assert "script" not in tags and "img" not in tags and "b" not in tags
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert "&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;img src=x" in html
    assert tags["table"] == html.count("</table>")  # no table closed early by a name


def test_hostile_names_are_escaped_in_markdown(store):
    markdown = render_markdown([hostile(family_diff(store, "lakshya-gemm"))])
    outside = raw_html_outside_code(markdown)
    for raw in ("<script", "<img", "</td", "<b>", "</summary><"):
        assert raw not in outside, raw
    assert "&lt;script&gt;" in outside and "\\|" in markdown
    assert_tables_intact(markdown)
    assert "`` </td></tr></table><img src=x onerror=\"document.title='img'\">\\|a\\|b`tick` ``" \
        in markdown  # a code span longer than the backticks inside
    assert markdown.count("<details>") == markdown.count("</details>")


def test_hostile_nvtx_texts(nsys_store):
    a, b = run_ids(nsys_store, NSYS_PAIR)
    diff = hostile_nsys(diff_runs(Store.open(nsys_store), a, b))
    html = render_html([diff])
    tags = TagCounter(html).tags
    assert "script" not in tags and "img" not in tags and "i" not in tags
    assert TagCounter(html).title.endswith(" vs </title><script>document.title='pwned'</script>")
    markdown = render_markdown([diff])
    assert "<script" not in raw_html_outside_code(markdown)
    assert_tables_intact(markdown)


def test_svg_labels_are_escaped_and_well_formed():
    import xml.etree.ElementTree as ET

    svg = bar_chart(f"t {HOSTILE_SCRIPT}", [f"A: {HOSTILE_SCRIPT}", "B: &amp;"],
                    [(LONG_TEMPLATE, (1.0, None)), ("x\"><script>", (2.0, 3.0))], str)
    root = ET.fromstring(svg)
    assert root.tag == "svg" and not root.findall(".//script")
    assert "<script" not in svg and "&amp;amp;" in svg


# -- in a browser ------------------------------------------------------------------------------


def need_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("TRIAGE_REQUIRE_TOOLS") == "1":
        pytest.fail("chromium is required (TRIAGE_REQUIRE_TOOLS=1): apt-get install -y chromium")
    pytest.skip("chromium not installed (apt-get install -y chromium)")


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on a local file, offline and with a fresh profile."""
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    command = [need_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile}", *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)


def png_rows(path: Path, limit: int) -> tuple[int, int, list[bytes], int]:
    """Width, height, the first `limit` unfiltered rows and bytes per pixel of an 8-bit RGB(A)
    PNG, read with zlib alone (no imaging library in the test dependencies)."""
    data, pos, idat = path.read_bytes(), 8, b""
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytes(stride)
    for y in range(min(limit, height)):
        start = y * (stride + 1)
        prev = unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), prev, bpp)
        rows.append(prev)
    return width, height, rows, bpp


def unfilter(kind: int, line: bytearray, prev: bytes, bpp: int) -> bytes:
    """Undo one PNG scanline filter (None, Sub, Up, Average, Paeth)."""
    for x in range(len(line)):
        left = line[x - bpp] if x >= bpp else 0
        up, corner = prev[x], prev[x - bpp] if x >= bpp else 0
        if kind == 1:
            line[x] = (line[x] + left) & 255
        elif kind == 2:
            line[x] = (line[x] + up) & 255
        elif kind == 3:
            line[x] = (line[x] + (left + up) // 2) & 255
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                  else corner)) & 255
    return bytes(line)


def test_report_renders_in_chromium(store, tmp_path):
    """The invalid pair: a non-blank page whose top shows the red verdict banner."""
    need_chromium()
    a = run_ids(store, FAMILIES["lakshya-gemm"])[0]
    b = run_ids(store, FAMILIES["armleth-mlp"])[0]
    page = tmp_path / "invalid.html"
    page.write_text(render_html([diff_runs(Store.open(store), a, b,
                                           DiffOptions(show_all=True))]), encoding="utf-8")
    shot = tmp_path / "shot.png"
    chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2000")
    width, height, rows, bpp = png_rows(shot, 400)
    assert (width, height) == (1280, 2000)
    pixels = {row[i:i + 3] for row in rows for i in range(0, len(row), bpp)}
    assert len(pixels) > 50  # text, tables and colours, not a blank page
    assert bytes((0xff, 0xeb, 0xe9)) in pixels  # the NOT COMPARABLE banner's background


def test_hostile_page_runs_nothing_in_chromium(store, nsys_store, tmp_path):
    need_chromium()
    a, b = run_ids(nsys_store, NSYS_PAIR)
    diffs = {"ncu": hostile(family_diff(store, "lakshya-gemm")),
             "nsys": hostile_nsys(diff_runs(Store.open(nsys_store), a, b))}
    for name, diff in diffs.items():
        page = tmp_path / f"{name}.html"
        page.write_text(render_html([diff]), encoding="utf-8")
        expected = TagCounter(page.read_text(encoding="utf-8")).title
        dom = TagCounter(chromium(page, tmp_path, "--dump-dom").stdout)
        assert dom.title == expected and "pwned" not in dom.title.replace(HOSTILE_SCRIPT, "")
        assert "script" not in dom.tags and "img" not in dom.tags


def test_corpus_families_are_the_manifest_pairs():
    """The files used above are the before/after families MANIFEST.csv names."""
    groups: dict[str, set[str]] = {}
    for row in corpus_manifest():
        groups.setdefault(row["pair_group"], set()).add(row["file"].split("/")[-1])
    for family, files in FAMILIES.items():
        assert set(files) <= groups[family]
    assert set(NSYS_PAIR) <= groups["0x822-async"]


# -- every corpus family: what the drift cells say, and nothing overflows -----------------------


LAYOUT_WIDTHS = (1400, 800)
# Runs in a page beside the reports (theirs forbid scripts): opens every section, then lists
# the page and each table cell whose content is wider than its box.
MEASURE_LAYOUT = """
addEventListener("load", () => {
  const found = [];
  for (const frame of document.querySelectorAll("iframe")) {
    const doc = frame.contentDocument, page = doc.documentElement;
    doc.querySelectorAll("details").forEach(d => { d.open = true; });
    const cells = Array.from(doc.querySelectorAll("td, th"));
    const boxes = [[page, "the page"], ...cells.map(c => [c, c.textContent.trim().slice(0, 80)])];
    found.push({frame: frame.name, width: page.clientWidth, cells: cells.length,
                over: boxes.filter(([box]) => box.scrollWidth > box.clientWidth)
                           .map(([box, what]) => [what, box.scrollWidth, box.clientWidth])});
  }
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify(found);
  document.body.append(out);
});
"""


@pytest.fixture(scope="module")
def every_family(store) -> dict[str, tuple[str, str]]:
    """One comparison per before/after family of MANIFEST.csv (its first two reports this
    machine's tools read; a family with one such report compared with itself), and the invalid
    pair of two families, whose INVALIDATES rows are the widest severity."""
    from triage.base.errors import ToolMissing, ToolTooOld, UnsupportedReport

    # a report from an nsys newer than this one, or `ncu --csv` text: refused, with a reason
    refused: tuple[type[Exception], ...] = (ToolTooOld, UnsupportedReport)
    if os.environ.get("TRIAGE_REQUIRE_TOOLS") != "1":
        refused += (ToolMissing,)
    families: dict[str, list[str]] = {}
    for row in corpus_manifest():
        if row["pair_group"]:
            families.setdefault(row["pair_group"], [])
            try:
                families[row["pair_group"]] += run_ids(store, [row["file"]])
            except refused:
                pass
    readable = {r["pair_group"] for r in corpus_manifest()
                if r["pair_group"] and r["kind"] in ("ncu", "nsys-sqlite")}
    pairs = {family: (ids[0], ids[1 % len(ids)]) for family, ids in families.items() if ids}
    assert readable <= set(pairs), readable - set(pairs)
    return {**pairs, **cross_pairs(store, pairs),
            "invalid pair": (pairs["lakshya-gemm"][0], pairs["armleth-mlp"][0])}


def cross_pairs(store, pairs: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Each ncu family's first run against the next one's: other GPUs and other ncu versions,
    whose sections and metrics differ most (the widest drift rows and not-comparable notes)."""
    ncu = [family for family, (a, _b) in pairs.items()
           if typed_record(store, a).tool == "ncu"]
    return {f"{one} x {other}": (pairs[one][0], pairs[other][0])
            for one, other in zip(ncu, ncu[1:] + ncu[:1], strict=True)}


def typed_record(store, run: str):
    from triage.archive.runs import load_record
    from triage.archive.store import Store

    return load_record(Store.open(store), run)


def drift_cells(markdown: str) -> dict[str, tuple[str, str]]:
    """The A and B cells of the Markdown drift table, by field."""
    rows = table_rows(markdown)
    start = next(i for i, row in enumerate(rows) if row[0].strip() == "severity")
    cells = {}
    for row in rows[start + 2:]:
        if len(row) != 5:
            break
        cells[row[1].strip().strip("`")] = (row[2].strip(), row[3].strip())
    return cells


def test_drift_cells_say_what_each_run_has(triage, store, every_family, tmp_path):
    """No `?` in A or B: a section is collected (with its metric count) or not, a renamed
    kernel shows each side's name, differing launch counts their counts, a field neither run
    recorded says so."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for family, (a, b) in every_family.items():
        html = report(triage, store, tmp_path / f"{family}.html", a, b)
        markdown = report(triage, store, tmp_path / f"{family}.md", a, b)
        assert '<td class="val">?</td>' not in html, family
        found[family] = cells = drift_cells(markdown)
        assert all("`?`" not in side for pair in cells.values() for side in pair), (family, cells)
    assert found["gpudemo-transpose"]["section:LaunchStats"] == ("`not collected`",
                                                                 "`collected, 18 metrics`")
    assert found["gpudemo-transpose"]["section:section0"] == ("`collected, 3 metrics`",
                                                              "`not collected`")
    assert found["lakshya-gemm"]["kernels.renamed"] == ("`naive_gemm`",
                                                        "`sgemm_global_mem_coalesce`")
    launches = found["yandong-de"]["kernels.launches"]
    assert launches[0].startswith("`124 × gemv2T_kernel_val<") and launches[1].startswith("`70 × ")
    unrecorded = found["lakshya-gemm"]["environment.working_directory, git.commit, git.dirty"]
    assert unrecorded == ("`not recorded`", "`not recorded`")


def test_no_family_report_overflows_at_1400_or_800_px(triage, store, every_family, tmp_path):
    """Each family's report at 1400 and 800 px, all sections open: neither the page nor any
    table cell is wider than its box (no badge spilling into the next column, no id into A, no
    horizontal scroll). One Chromium start for all of them: each report is an iframe."""
    need_chromium()
    frames = []
    for family, (a, b) in every_family.items():
        text = report(triage, store, tmp_path / "review.html", a, b)
        frames += [f'<iframe name="{family} @ {width} px" width="{width}" height="900" '
                   f'srcdoc="{html_escape(text)}"></iframe>' for width in LAYOUT_WIDTHS]
    assert "INVALIDATES" in text  # the invalid pair, last: the widest badge is measured too
    page = tmp_path / "layout.html"
    page.write_text(f"<!DOCTYPE html><html><body>{''.join(frames)}"
                    f"<script>{MEASURE_LAYOUT}</script></body></html>", encoding="utf-8")
    dom = chromium(page, tmp_path, "--disable-quic", "--window-size=1400,900", "--dump-dom")
    measured = json.loads(html_unescape(re.search(r'<pre id="layout">(.*?)</pre>', dom.stdout,
                                                  re.S).group(1)))
    assert len(measured) == len(frames)
    for frame in measured:
        width = int(frame["frame"].split(" @ ")[1].split()[0])
        assert width - 20 <= frame["width"] <= width and frame["cells"] > 10, frame
    assert [(f["frame"], f["over"]) for f in measured if f["over"]] == []


def test_a_section_with_metrics_on_one_side_counts_each_sides_metrics(store):
    """A section both runs collected, one of whose metrics only A has (derived from the gemm
    pair's first section: no corpus pair has one): A and B give each side's metric count."""
    from triage.views.report import drift_rows

    diff = family_diff(store, "lakshya-gemm")
    kernel = diff.kernels[0]
    section = kernel.sections[0]
    metrics = (replace(section.metrics[0], status="only_a"),) + section.metrics[1:]
    section = replace(section, reason="section.metrics", why="1 metric(s) on one side only",
                      metrics=metrics)
    item = DriftItem(f"section:{section.section}", "section.metrics", None, None, "different",
                     "not_comparable", f"not comparable: {section.why}")
    diff = replace(diff, kernels=(replace(kernel, sections=(section,) + kernel.sections[1:]),)
                   + diff.kernels[1:], drift=diff.drift + (item,))
    row = next(r for r in drift_rows(diff) if r["field"] == item.field)
    count = section.metric_count
    assert (row["a"], row["b"]) == (f"{count} metrics", f"{count - 1} metrics")
