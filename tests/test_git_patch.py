"""The dirty tree's patch: taken with the hash, redacted, stored with a capture, rebuilt by
`git apply`. Real repositories made in tmp_path, and real `triage capture -- nsys profile` runs
of the NVTX program inside one."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import strings_in
from nvtx_capture import CAPTURE_OPTIONS
from triage.capture.git_patch import redact_patch
from triage.capture.git_state import git_snapshot
from triage.capture.redact import MARKER

TOKEN = "ghp_" + "Zq8" * 12  # a GitHub token's shape: redacted whatever its name
COMPANY_SECRET = "acme-internal-4417"  # redacted only by the user's pattern ACME_


def git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                          check=True)
    return done.stdout.decode()


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    """A repository with one commit of `files`."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Triage Test")
    git(root, "config", "user.email", "triage@example.invalid")
    git(root, "config", "commit.gpgsign", "false")
    write(root, files)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def applied(repo: Path, patch: bytes, at: Path) -> Path:
    """A fresh clone of `repo` at its HEAD with `patch` applied by `git apply`."""
    subprocess.run(["git", "clone", "-q", str(repo), str(at)], check=True)
    git(at, "apply", "--whitespace=nowarn", "-", stdin=patch)
    return at


CONFIG = "mode = 'fast'\nsteps = 3\nlr = 0.1\n"
EDITED = f"mode = 'slow'\nsteps = 3\nGITHUB_TOKEN={TOKEN}\nACME_ID={COMPANY_SECRET}\nlr = 0.1\n"
KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7s\nq3Zx9kLmN0pQ\n" \
      "-----END RSA PRIVATE KEY-----\n"


# -- capture/: the patch and its redaction ---------------------------------------------------------


def test_the_patch_is_the_bytes_diff_sha256_hashes(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG, "weights.bin": bytes(range(256))})
    write(repo, {"config.py": EDITED, "weights.bin": bytes(range(255, -1, -1))})
    snapshot = git_snapshot(repo)
    plain = subprocess.run(["git", "-C", str(repo), "diff", "HEAD", "--binary"],
                           capture_output=True, check=True).stdout
    assert snapshot.patch == plain and b"GIT binary patch" in plain
    assert snapshot.state["diff_sha256"] == hashlib.sha256(plain).hexdigest()
    assert TOKEN not in json.dumps(snapshot.state)  # the state holds no patch bytes


def test_a_clean_tree_has_an_empty_patch_and_no_commit_none(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG})
    assert git_snapshot(repo).patch == b""
    git(tmp_path, "init", "-q", "fresh")
    assert git_snapshot(tmp_path / "fresh").patch is None
    assert git_snapshot(tmp_path / "fresh").state["diff_sha256"] is None


def test_untracked_files_are_said_to_be_outside_the_patch(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG})
    write(repo, {"notes.txt": "a\n", "data.csv": "1,2\n"})
    state = git_snapshot(repo).state
    assert state["untracked_count"] == 2
    assert any(note.startswith("2 untracked file(s) are not in the diff or its patch")
               for note in state["notes"])


def test_a_patch_without_secrets_is_stored_as_git_wrote_it(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG, "train.py": "print('a')\n"})
    write(repo, {"config.py": CONFIG.replace("0.1", "0.2"), "train.py": "print('b')\n",
                 "new.py": "x = 1\n"})
    git(repo, "add", "new.py")
    patch = git_snapshot(repo).patch
    redacted = redact_patch(patch)
    assert (redacted.data, redacted.redactions, redacted.binary_left_out) == (patch, 0, ())
    rebuilt = applied(repo, redacted.data, tmp_path / "clone")
    for name in ("config.py", "train.py", "new.py"):
        assert (rebuilt / name).read_bytes() == (repo / name).read_bytes()


def test_secrets_are_replaced_line_for_line_and_the_patch_still_applies(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG})
    write(repo, {"config.py": EDITED + KEY})
    redacted = redact_patch(git_snapshot(repo).patch, [re.compile("ACME_", re.IGNORECASE)])
    text = redacted.data.decode()
    for secret in (TOKEN, COMPANY_SECRET, "MIIEowIBAAKCAQEA7s", "q3Zx9kLmN0pQ"):
        assert secret not in text
    assert redacted.redactions == 6  # the token, ACME_ID, the key's four lines
    rebuilt = (applied(repo, redacted.data, tmp_path / "clone") / "config.py").read_text()
    assert rebuilt == (EDITED.replace(TOKEN, MARKER).replace(COMPANY_SECRET, MARKER)
                       + f"{MARKER}\n" * 4)


def test_a_key_that_began_before_the_hunk_is_hidden_up_to_its_end(tmp_path):
    """An edit just below a committed key: the hunk's context is the key's tail, without its
    BEGIN line, and still none of it is kept."""
    lines = "".join(f"line {i}\n" for i in range(10))
    repo = make_repo(tmp_path / "work", {"id_rsa.txt": lines + KEY + "after = 1\n"})
    write(repo, {"id_rsa.txt": lines + KEY + "after = 2\n"})
    text = redact_patch(git_snapshot(repo).patch).data.decode()
    assert "MIIEowIBAAKCAQEA7s" not in text and "q3Zx9kLmN0pQ" not in text
    assert "-----END" not in text and "+after = 2" in text


def test_binary_changes_are_left_out_and_named(tmp_path):
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG, "weights.bin": bytes(range(256))})
    write(repo, {"config.py": CONFIG.replace("fast", "slow"),
                 "weights.bin": TOKEN.encode() + bytes(300)})
    redacted = redact_patch(git_snapshot(repo).patch)
    assert redacted.binary_left_out == ("weights.bin",)
    assert b"GIT binary patch" not in redacted.data and b"config.py" in redacted.data
    rebuilt = applied(repo, redacted.data, tmp_path / "clone")
    assert (rebuilt / "config.py").read_text() == CONFIG.replace("fast", "slow")
    assert (rebuilt / "weights.bin").read_bytes() == bytes(range(256))


# -- archive/ and the CLI: a real capture in a dirty repository ----------------------------------


@pytest.fixture
def dirty_repo(tmp_path, monkeypatch) -> Path:
    """A committed workload with a dirty edit that plants a GitHub token and a company id, as
    the capture's working directory (the report nsys writes there is untracked, and left out
    of the git state)."""
    repo = make_repo(tmp_path / "work", {"config.py": CONFIG, "train.py": "print('step')\n"})
    write(repo, {"config.py": EDITED})
    monkeypatch.chdir(repo)
    return repo


def capture(triage, nvtx_program: Path, *options: str) -> dict:
    """`triage capture [options] -- nsys profile ... nvtx_steps 3 50 50`; the run as shown."""
    argv = ["nsys", "profile", *CAPTURE_OPTIONS, "-o", "steps", "--force-overwrite", "true",
            str(nvtx_program), "3", "50", "50"]
    run = json.loads(triage("capture", "--json", *options, "--", *argv).stdout)
    return triage.json("show", run["id"])


def store_texts(store: Path) -> dict[str, str]:
    """Every file of the store as text, Parquet tables decoded."""
    out = {}
    for path in (p for p in sorted(store.rglob("*")) if p.is_file()):
        data = path.read_bytes()
        out[str(path.relative_to(store))] = "\n".join(strings_in(pq.read_table(path).to_pylist())) \
            if data[:4] == b"PAR1" else data.decode(errors="replace")
    return out


def test_a_capture_stores_the_redacted_patch_and_show_patch_rebuilds_after(
        triage, store_dir, tmp_path, dirty_repo, nsys_exe, nvtx_program):
    write(dirty_repo, {"notes.txt": "an untracked file\n"})
    shown = capture(triage, nvtx_program, "--redact", "ACME_")
    git_record = shown["capture"]["git"]
    assert git_record["dirty"] is True and git_record["patch_note"] is None
    patch = git_record["patch"]
    assert patch["redactions"] == 2 and patch["binary_left_out"] == []
    leaks = {name for name, text in store_texts(store_dir).items()
             if TOKEN in text or COMPANY_SECRET in text}
    assert leaks == set()

    # notes.txt; steps.nsys-rep, written while the state was read, is left out
    assert git_record["untracked_count"] == 1
    text = triage("show", shown["id"]).stdout
    assert (f"  patch            stored, {patch['bytes']} B; 2 value(s) redacted; "
            f"1 untracked file(s) not in it; `triage show "
            f"{shown['id'][:12]} --patch | git apply` on a checkout of "
            f"{git_record['commit'][:12]}") in text
    stored = triage("show", shown["id"], "--patch").stdout_bytes
    assert hashlib.sha256(stored).hexdigest() == patch["sha256"]
    rebuilt = applied(dirty_repo, stored, tmp_path / "clone")
    assert git(rebuilt, "rev-parse", "HEAD").strip() == git_record["commit"]
    assert (rebuilt / "config.py").read_text() == \
        EDITED.replace(TOKEN, MARKER).replace(COMPANY_SECRET, MARKER)
    triage("show", shown["id"], "--patch", "-o", tmp_path / "edit.patch")
    assert (tmp_path / "edit.patch").read_bytes() == stored

    # gc keeps the blob, verify checks it, a bundle carries it.
    triage("gc", "--grace", "0")
    assert triage("show", shown["id"], "--patch").stdout_bytes == stored
    assert triage.json("verify")["ok"] is True
    triage("export", shown["id"], "-o", tmp_path / "run.tar")
    other = tmp_path / "other-store"
    triage("import", tmp_path / "run.tar", "--store", other)
    assert triage("show", shown["id"], "--patch", "--store", other).stdout_bytes == stored


def test_verify_finds_a_damaged_patch_and_show_patch_refuses_it(
        triage, store_dir, dirty_repo, nsys_exe, nvtx_program):
    shown = capture(triage, nvtx_program)
    blob = store_dir / "objects" / shown["capture"]["git"]["patch"]["sha256"][:2] / \
        shown["capture"]["git"]["patch"]["sha256"][2:]
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes().replace(b"slow", b"SLOW"))
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert [e["detail"].split(":")[0] for e in report["errors"]] == \
        [f"patch of the working tree of run {shown['id'][:12]}"]
    refused = triage("show", shown["id"], "--patch", expect=1)
    assert "does not match its hash" in refused.stderr and refused.stderr.count("\n") == 1


def test_a_patch_over_the_limit_is_not_stored_and_says_why(
        triage, store_dir, dirty_repo, nsys_exe, nvtx_program, monkeypatch):
    from triage.archive import captured

    monkeypatch.setattr(captured, "PATCH_LIMIT", 100)
    shown = capture(triage, nvtx_program)
    git_record = shown["capture"]["git"]
    size = len(git_snapshot(dirty_repo).patch)
    note = f"the patch is {size} B ({size:,} bytes), over the 100 B limit for a stored patch"
    assert (git_record["patch"], git_record["patch_note"]) == (None, note)
    assert f"  patch            not stored: {note}" in triage("show", shown["id"]).stdout
    refused = triage("show", shown["id"], "--patch", expect=1)
    assert refused.stderr == f"triage: error: run {shown['id'][:12]} has no stored patch: " \
                             f"{note}\n" and refused.stdout == ""

    # A run of the report alone (`triage archive`) has no git state at all.
    archived = json.loads(triage("archive", "--json", dirty_repo / "steps.nsys-rep").stdout)
    run_id = archived[0]["id"] if isinstance(archived, list) else archived["id"]
    refused = triage("show", run_id, "--patch", expect=1)
    assert "records no git state: only `triage capture` records" in refused.stderr


def test_a_clean_tree_stores_no_patch_and_says_so(
        triage, store_dir, dirty_repo, nsys_exe, nvtx_program):
    git(dirty_repo, "commit", "-qam", "the edit")
    shown = capture(triage, nvtx_program)
    git_record = shown["capture"]["git"]
    assert (git_record["dirty"], git_record["patch"], git_record["patch_note"]) == \
        (False, None, None)
    assert "  patch  " not in triage("show", shown["id"]).stdout
    refused = triage("show", shown["id"], "--patch", expect=1)
    assert f"has no stored patch: the tree was clean: commit {git_record['commit'][:12]} is " \
           "the whole source" in refused.stderr


def test_patch_options_that_cannot_work_together(triage, store_dir):
    assert "not JSON" in triage("show", "latest", "--patch", "--json", expect=2).stderr
    assert "--patch -o FILE" in triage("show", "latest", "-o", "x.patch", expect=2).stderr
