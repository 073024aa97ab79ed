"""A store's labels: labels/<name> -> run id, the only thing a user moves on purpose, and each
label's history under label-history/<name>/, one write-once file per move
(<time>_<writer>.move). The newest move by (time, writer) is where the label points, so that
two writers moving one label at once, on two nodes, lose neither move and agree on the end.

A move's time is a hybrid logical clock: the wall clock, or just after the newest move of the
label this writer has seen where that is later. So a writer whose clock runs behind another's
still moves the label (its move is ordered after what it saw), and a move carried in from another
store may be dated at most MAX_SKEW ahead of this clock: one dated later would pin the label
until that date, and is refused (`verify` names one already here).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from triage.archive import atomic
from triage.archive.canonical import canonical_json
from triage.archive.part import StorePart
from triage.base.errors import LabelMoveLost, LabelNotFound, StoreError, UsageError
from triage.base.hashing import SHA256_RE
from triage.base.timeutil import sortable, utc_now

HEX_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
RESERVED_LABELS = {"latest"}
MOVE_SUFFIX = ".move"
MOVE_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")  # utc_now's
WRITER_RE = re.compile(r"^[A-Za-z0-9.-]{1,128}$")
MAX_SKEW = timedelta(minutes=10)  # how far ahead of this clock another store's move may be dated
TICK = timedelta(microseconds=1)  # the least step of the clock: after a move, by this much


@dataclass(frozen=True)
class LabelMove:
    """One move of a label, as its history keeps it: when, by which writer, to which run
    (None: the label was deleted)."""

    time: str
    writer: str
    run_id: str | None

    @property
    def order(self) -> tuple[str, str]:
        """Where the move stands among the label's moves: its time to the nanosecond (times of
        any precision compare as instants), then its writer."""
        return sortable(self.time), self.writer


@dataclass(frozen=True)
class LabelMerge:
    """Another store's moves of one label, merged here (push, pull): where the label pointed
    before and points now (None: no label), and the moves refused as dated too far ahead."""

    name: str
    was: str | None
    now: str | None
    refused: tuple[LabelMove, ...] = ()


def _parse(time: str) -> datetime:
    """A move time as an aware datetime (to the microsecond: the clock's own precision)."""
    head, _, frac = time.rstrip("Z").partition(".")
    return datetime.strptime(f"{head}.{(frac or '0')[:6]:0<6}", "%Y-%m-%dT%H:%M:%S.%f") \
        .replace(tzinfo=timezone.utc)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def move_time(seen: list[LabelMove]) -> str:
    """The time of a new move (hybrid logical clock): now, or one tick after the newest move
    seen, where that is later, so the new move is ordered after every move its writer saw."""
    now = _parse(utc_now(precise=True))
    if seen:
        try:
            now = max(now, _parse(seen[-1].time) + TICK)
        except OverflowError:  # a move dated the last microsecond of year 9999
            raise StoreError(f"the newest move of a label is dated {seen[-1].time}, after "
                             "which no move can be; `triage verify` names the file: remove "
                             "it") from None
    return _stamp(now)


def too_far_ahead(move: LabelMove, now: str | None = None) -> bool:
    """Whether a move is dated beyond MAX_SKEW ahead of this clock (`now`, utc_now's text)."""
    return _parse(move.time) > _parse(now or utc_now(precise=True)) + MAX_SKEW


def writer_id() -> str:
    """A name for this writer no other writer has (host, process, random), so that two moves
    made in the same microsecond on two nodes are two files, ordered the same by everyone."""
    import secrets
    import socket

    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


def looks_like_run(word: str) -> bool:
    """A RUN that no label can be: a run id, an id prefix (4+ hex digits) or `latest`."""
    return word in RESERVED_LABELS or HEX_RE.match(word) is not None


def is_label_name(name: str) -> bool:
    """Labels name runs without looking like run ids or prefixes, and map to one file path."""
    return LABEL_RE.match(name) is not None and not looks_like_run(name) \
        and not any(p in ("", ".", "..") for p in name.split("/"))


def check_label(name: str) -> None:
    """Refuse a name no label may have, saying what a label may be."""
    if not is_label_name(name):
        raise UsageError(f"invalid label {name!r}: use at most 128 letters, digits, '.', '_', "
                         "'-' and '/' between names, starting with a letter or digit; not "
                         "'latest', and not 4+ hex digits (a run id prefix)")


class Labels(StorePart):
    """A store's labels and their histories."""

    def all(self) -> dict[str, str]:
        """All labels and the run each points at. A damaged label (bytes that are not text, a
        file that cannot be read) points at no run, which `resolve` and `verify` name; a file
        whose name no label can have is not one (`verify` names it): one bad file must not
        hide the other labels."""
        out: dict[str, str] = {}
        for key in self.store.files.files("labels"):
            name = key[len("labels/"):]
            if LABEL_RE.match(name) and not key.rsplit("/", 1)[-1].startswith(atomic.TMP_PREFIX):
                out[name] = self.store.pointer(key) or ""
        return out

    def history(self, name: str) -> list[LabelMove]:
        """Every move of a label, oldest first; [] for a label moved before histories were
        kept, or never. Newest wins: the last is where the label points."""
        folder = f"label-history/{name}"
        names = sorted(n for n in self.store.files.names(folder) if n.endswith(MOVE_SUFFIX))
        moves = [self._move(f"{folder}/{n}") for n in names]
        return sorted((m for m in moves if m is not None), key=lambda m: m.order)

    def ahead(self) -> list[tuple[str, LabelMove, int]]:
        """(label, move, later moves) for the first move of each label dated beyond MAX_SKEW
        ahead of this clock (`verify`): carried in before such moves were refused, or written
        by a clock that ran ahead. The moves after it are dated after it (move_time): they are
        counted, not named, the first being the cause."""
        now = utc_now(precise=True)
        names = {key[len("label-history/"):].rsplit("/", 1)[0]
                 for key in self.store.files.files("label-history")}
        found = []
        for name in sorted(names):
            moves = [m for m in self.history(name) if too_far_ahead(m, now)]
            if moves:
                found.append((name, moves[0], len(moves) - 1))
        return found

    def _move(self, key: str) -> LabelMove | None:
        """One history entry; None for one that cannot be read (`verify` names the store's
        damage; a bad entry must not hide the label's other moves)."""
        try:
            data = self.store.read_file(key)
            if data is None:
                return None
            doc = json.loads(data)
            run_id = doc["run"]
            if run_id is not None and not SHA256_RE.match(run_id):
                return None
            if not MOVE_TIME_RE.match(str(doc["time"])):
                return None
            _parse(doc["time"])  # a date that is none (month 13) is no move either
            return LabelMove(str(doc["time"]), str(doc["writer"]), run_id)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def point(self, name: str, run_id: str, checked: bool = False) -> str | None:
        """Point a label at a run (a move in its history, labels/<name> replaced atomically);
        return what it held before (None: a new label), so that a move is never silent.
        `checked` (`triage label`): LabelMoveLost when the move is not the newest afterwards."""
        self._make_room(name)
        return self._record_move(name, run_id, checked)

    def remove(self, name: str, checked: bool = False) -> str:
        """Delete a label; return what it held. A deletion is a move in the label's history
        (to no run), then one unlink: a reader sees the whole label or none. Only a name
        `all()` lists is removed, so no name can reach outside labels/. Its folder, if
        emptied, stays: `point` removes empty folders where a label goes."""
        held = self.all().get(name)
        if held is None:
            raise LabelNotFound(f"label {name!r} not found; `triage label` lists labels")
        try:
            self._record_move(name, None, checked)
        except OSError as exc:
            raise self.store.error(exc, "write") from None
        return held

    def add_moves(self, name: str, moves: list[LabelMove]) -> LabelMerge:
        """Add another store's moves of a label to its history here, each under its own time
        and writer (push, pull), and point the label at the newest move of the two histories:
        two pushers moving one label lose neither move. Moves already here are skipped, and
        so is one whose time or writer could not be a file name; one dated beyond MAX_SKEW
        ahead of this clock is refused (it would pin the label), and said."""
        self._make_room(name)
        known = set(self.history(name))
        now = utc_now(precise=True)
        refused = tuple(m for m in moves if m not in known and too_far_ahead(m, now))
        for move in moves:
            if move not in known and move not in refused and MOVE_TIME_RE.match(move.time) \
                    and WRITER_RE.match(move.writer):
                self._write_move(name, move)
        before = self.store.pointer(f"labels/{name}")
        self._point_at_newest(name)
        return LabelMerge(name, before, self.store.pointer(f"labels/{name}"), refused)

    def _record_move(self, name: str, run_id: str | None, checked: bool) -> str | None:
        """Append a move to the label's history (a new file, never a rewrite: no conditional
        write, so two nodes moving one label both keep their move) and bring labels/<name> to
        the newest move; return where the label pointed before this move. The move is dated
        after every move of the label seen here (move_time), so it wins unless another writer
        moves the label meanwhile: then, `checked`, LabelMoveLost says so, never a success."""
        before = self.store.pointer(f"labels/{name}")
        move = LabelMove(move_time(self.history(name)), writer_id(), run_id)
        self._write_move(name, move)
        self._point_at_newest(name)
        newest = self.history(name)[-1] if checked else move
        if newest != move:
            target = newest.run_id[:12] if newest.run_id else "no run (deleted)"
            raise LabelMoveLost(f"label {name!r} did not move: writer {newest.writer} moved it "
                                f"to {target} at {newest.time}, after this move; `triage label "
                                f"--history {name}` lists its moves")
        return before

    def _write_move(self, name: str, move: LabelMove) -> None:
        entry = {"label": name, "run": move.run_id, "time": move.time, "writer": move.writer}
        stamp = move.time.replace(":", "").replace("-", "")
        self.store.write_small(f"label-history/{name}/{stamp}_{move.writer}{MOVE_SUFFIX}",
                               canonical_json(entry), readonly=True)

    def _point_at_newest(self, name: str) -> None:
        """Bring labels/<name> to the newest move, and look again after writing it: a writer
        whose move came in meanwhile writes after us, so the last pointer written is the newest
        move's (newest wins on every node; readers read the pointer, one file)."""
        key, written = f"labels/{name}", None
        while True:
            history = self.history(name)
            newest = history[-1] if history else None
            if newest is None or newest == written:
                return
            if newest.run_id is None:
                self.store.files.delete(key)
            else:
                self.store.write_small(key, (newest.run_id + "\n").encode())
            written = newest

    def _make_room(self, name: str) -> None:
        """Refuse a name no label may have, or one that clashes with a label here."""
        check_label(name)
        # An empty folder where the label goes (made by hand, or left when its labels were
        # removed) is in the way of nothing; one holding a label stays, and is named below.
        self.store.files.delete_folder(f"labels/{name}")
        other = self.clash(name)
        if other == name:
            raise UsageError(f"label {name!r} clashes with label {name!r} being written, or with "
                             f"a folder labels/{name} that holds no label; remove the folder or "
                             "choose another name")
        if other is not None:
            raise UsageError(f"label {name!r} clashes with label {other!r} (one would be a "
                             "folder of the other); choose another name")

    def clash(self, name: str) -> str | None:
        """The label that `name` cannot sit beside, one being a folder of the other (a label
        being written there counts: its temp file is in that folder, but is not named)."""
        parts = name.split("/")
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if self.store.files.exists(f"labels/{above}"):
                return above
        if not self.store.files.is_dir(f"labels/{name}"):
            return None
        inner = (e.key for e in self.store.files.tree(f"labels/{name}")
                 if e.is_file and not e.name.startswith(atomic.TMP_PREFIX))
        return next(inner, f"labels/{name}")[len("labels/"):]


def series_label(label: str | None, i: int, count: int) -> str | None:
    """The label of run i (from 1) of a series of `count` runs labelled `label`: LABEL/i, which
    the side `'LABEL/*'` then selects whole; a single run keeps `label` itself."""
    return f"{label}/{i}" if label and count > 1 else label
