"""`diff --max-slowdown PCT --junit FILE`: the gate as a JUnit XML report, the format CI test
widgets read (GitLab's merge-request test report, Jenkins' junit step, GitHub test reporters).

One testcase per judged item, whatever its kind, straight from the gate's typed checks (kernels,
NVTX ranges, the total GPU time, and any kind the gate judges later): a failed one carries a
<failure> with its change, interval and the threshold. A gate that judged nothing is one
testcase in <error> (never an empty, green suite); kernels paired by a guess are <skipped>.
The accepted step the gate judged against (`triage accept`) is a property of the suite.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from triage.compare.result import DiffResult, Gate
from triage.views.text import accepted_line, check_words, gate_lines

SUITE = "triage gate"


def render_junit(result: DiffResult) -> bytes:
    """The JUnit document of a diff's gate (the CLI refuses --junit without --max-slowdown)."""
    gate = result.gate
    assert gate is not None, "--junit needs --max-slowdown"
    suite = ET.Element("testsuite", name=SUITE)
    _properties(suite, result, gate)
    cases = _judged(suite, gate) if gate.judged else _not_judged(suite, gate)
    skipped = _guesses(suite, gate)
    suite.set("tests", str(cases + skipped))
    suite.set("failures", str(len(gate.failed)))
    suite.set("errors", "0" if gate.judged else "1")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="triage")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _properties(suite: ET.Element, result: DiffResult, gate: Gate) -> None:
    props = ET.SubElement(suite, "properties")
    values = {"run_a": result.run_a.id, "run_b": result.run_b.id, "verdict": result.verdict,
              "max_slowdown_pct": f"{gate.max_slowdown_pct:g}"}
    if gate.accepted:
        values |= {"accepted.run": gate.accepted.run_id, "accepted.who": gate.accepted.who,
                   "accepted.time": gate.accepted.time, "accepted.reason": gate.accepted.reason}
    for name, value in values.items():
        ET.SubElement(props, "property", name=name, value=value)
    if gate.accepted:
        ET.SubElement(suite, "system-out").text = accepted_line(gate.accepted)


def _judged(suite: ET.Element, gate: Gate) -> int:
    limit = f"{gate.max_slowdown_pct:g}%"
    for check in gate.checks:
        case = ET.SubElement(suite, "testcase", name=check.name, classname=f"gate.{check.kind}")
        words = check_words(check, limit)
        if check.failed:
            failure = ET.SubElement(case, "failure", type="slowdown", message=words)
            failure.text = (f"change: {_pct(check.change_pct)}\n"
                            f"interval: {_interval(check.ci_pct)}\n"
                            f"threshold: {limit}\nsignificance: {check.significance}\n")
        else:
            ET.SubElement(case, "system-out").text = words
    return len(gate.checks)


def _not_judged(suite: ET.Element, gate: Gate) -> int:
    case = ET.SubElement(suite, "testcase", name="gate", classname="gate")
    ET.SubElement(case, "error", type=str(gate.reason),
                  message=" ".join(gate_lines(gate)[:2]))
    return 1


def _guesses(suite: ET.Element, gate: Gate) -> int:
    for a, b in gate.guesses:
        case = ET.SubElement(suite, "testcase", name=a, classname="gate.kernel")
        ET.SubElement(case, "skipped", type="pairing.guess",
                      message=f"paired with {b} by launch order, a guess: not judged until "
                      "--pair A=B confirms it")
    return len(gate.guesses)


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:+.2f}%"


def _interval(ci: tuple[float, float] | None) -> str:
    return "unknown (too few samples)" if ci is None else f"[{ci[0]:+.2f}%, {ci[1]:+.2f}%]"
