"""A working tree's patch as the store keeps it: `git diff HEAD` with its secrets redacted.

`git_state.py` hashes the patch exactly as git wrote it (`diff_sha256`). The copy the store
keeps may be exported to colleagues, so values shaped like secrets (`redact.redact_value`, with
the user's name patterns) are replaced in every line of file content, one line for one line:
hunk line counts still hold, and `git apply` on the recorded commit rebuilds the tree but for
the redacted values. A private key spans lines, so every line of one is replaced. Header lines
(paths, modes, index hashes) are kept as they are: a redacted path would break the patch. The
function name git writes after a hunk's `@@ ... @@` is dropped: `git apply` never reads it, and
it copies some earlier line of the file, which may lie inside a key the hunk does not show. A
hunk whose context or removed lines held a secret no longer applies as is (`git apply --reject`
applies the others).

Binary changes (`GIT binary patch`: deflated, then base85) cannot be redacted line by line, and
kept whole they would carry whatever secret the file holds, so they are left out and named.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from triage.capture import redact

_FILE_START = re.compile(rb"(?m)^(?=diff --git )")  # content lines start with ' ', '+', '-'
_BINARY = re.compile(rb"(?m)^GIT binary patch$")
_CONTENT = (" ", "+", "-")


@dataclass(frozen=True)
class RedactedPatch:
    """The patch to store, how many values it lost, and the files whose binary changes it
    leaves out (as git names them: `a/` dropped, quoted where git quotes)."""

    data: bytes
    redactions: int
    binary_left_out: tuple[str, ...]


def redact_patch(patch: bytes, extra: Sequence[re.Pattern] = ()) -> RedactedPatch:
    """`patch` with secrets replaced by `<redacted>` and binary changes left out.

    Bytes that are not UTF-8 (a Latin-1 source file) pass through unchanged."""
    kept, redactions, binary = [], 0, []
    for section in _file_sections(patch):
        if _BINARY.search(section):
            binary.append(_section_path(section))
            continue
        text, count = _redact_section(section.decode("utf-8", "surrogateescape"), extra)
        kept.append(text.encode("utf-8", "surrogateescape"))
        redactions += count
    return RedactedPatch(b"".join(kept), redactions, tuple(binary))


def _file_sections(patch: bytes) -> Iterator[bytes]:
    """One part per file, each from its `diff --git` line (DIFF_ARGS: no renames, no prefix
    changes, so every file starts that way)."""
    return (part for part in _FILE_START.split(patch) if part)


def _section_path(section: bytes) -> str:
    """The file a section changes. Under --no-renames `diff --git a/P b/P` names one path
    twice, so the second half of the line, less `b/`, is that path whatever it holds."""
    header = section.split(b"\n", 1)[0].decode("utf-8", "replace")[len("diff --git "):]
    second = header[(len(header) + 1) // 2:]
    return second[1:-1].removeprefix("b/") if second.startswith('"') else \
        second.removeprefix("b/")


def _redact_section(text: str, extra: Sequence[re.Pattern]) -> tuple[str, int]:
    """One file's part, line for line: headers kept, content lines redacted, private keys
    whole (see `_PatchLines`)."""
    lines = _PatchLines(text.split("\n"), extra)
    for index, line in enumerate(lines.lines):
        if line.startswith("@@"):
            lines.hunk(index)
        elif lines.hunk_start is not None and line[:1] in _CONTENT:
            lines.content(index)
    return "\n".join(lines.lines), lines.redactions


class _PatchLines:
    """The lines of one file's part while they are redacted, with what spans lines: the hunk
    being read and whether a private key is open.

    A key opened by a BEGIN line closes at an END line, or at the end of the file's part (never
    early: an unclosed key hides everything after it). An END met with no key open means the
    key began before the hunk, so the hunk's content lines before it are key too."""

    def __init__(self, lines: list[str], extra: Sequence[re.Pattern]) -> None:
        self.lines, self.extra = lines, extra
        self.hunk_start: int | None = None
        self.in_key = False
        self.redactions = 0

    def hunk(self, index: int) -> None:
        """`@@ -a,b +c,d @@ context`: kept without the context (see the module's docstring)."""
        line = self.lines[index]
        self.lines[index] = line[:line.find("@@", 2) + 2]
        self.hunk_start = index + 1

    def content(self, index: int) -> None:
        """A context, added or removed line: hidden whole inside a key, else redacted."""
        line = self.lines[index]
        delimiters = redact.KEY_DELIMITER.findall(line[1:])  # ["BEGIN", "END", ...]
        began_before = not self.in_key and delimiters[:1] == ["END"]
        if began_before:
            self._hide_hunk_before(index)
        if self.in_key or began_before:
            self._hide(index)
        else:
            self.lines[index] = line[0] + self._redacted(line[1:])
        if delimiters:
            self.in_key = delimiters[-1] == "BEGIN"

    def _hide_hunk_before(self, index: int) -> None:
        """The hunk's content lines before `index`: inside a key whose BEGIN came earlier."""
        for earlier in range(self.hunk_start or index, index):
            if self.lines[earlier][:1] in _CONTENT:
                self._hide(earlier)

    def _hide(self, index: int) -> None:
        line = self.lines[index]
        if line[1:] != redact.MARKER:
            self.lines[index] = line[0] + redact.MARKER
            self.redactions += 1

    def _redacted(self, body: str) -> str:
        out = redact.redact_value(body, self.extra)
        self.redactions += out.count(redact.MARKER) - body.count(redact.MARKER)
        return out
