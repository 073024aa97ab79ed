"""Where a store keeps its remotes (`triage remote add`): remotes/<name>, a file per remote
holding its store location, so that two writers adding two names at once both keep theirs (no
file holds them all, no conditional write); an empty one is a removed remote. The remotes.json
of a store written before, all in one, is read and never written. (Using them: remotes.py.)
"""

from __future__ import annotations

import re

from triage.archive import validate
from triage.archive.part import StorePart
from triage.base.errors import StoreError

# A remote's name is one file name: no '/', no leading '.' (not '.', '..' or a temp file)
REMOTE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REMOTES_DIR = "remotes"
REMOTES_FILE = "remotes.json"  # where remotes were kept, all in one, before remotes/<name>


class RemoteConfig(StorePart):
    """The remotes a store pushes to and pulls from, as its own files record them."""

    def all(self) -> dict[str, str]:
        """Every remote: name -> store location. Over the remotes.json of an older store, a
        name's own file wins, and an empty one hides it (removed)."""
        found = self._legacy()
        for name in self.store.files.names(REMOTES_DIR):
            if not REMOTE_RE.match(name):  # a temp file (.tmp-*) or a stranger: no remote's
                continue
            url = self._url(name)
            if url:
                found[name] = url
            elif url is not None:
                found.pop(name, None)
        return found

    def write(self, name: str, url: str | None) -> None:
        """Point remote `name` at `url`, or mark it removed (None): its own file, replaced
        atomically, so that no other remote is rewritten."""
        self.store.write_small(f"{REMOTES_DIR}/{name}", (url or "").encode("utf-8"))

    def _url(self, name: str) -> str | None:
        """What remotes/<name> holds: a URL, "" for a removed remote, None when it is gone."""
        key = f"{REMOTES_DIR}/{name}"
        data = self.store.read_file(key)
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            raise StoreError(f"{self.store.where}/{key} is not a remote's URL; delete it and add "
                             f"the remote again with `triage remote add {name} URL`") from None

    def _legacy(self) -> dict[str, str]:
        """The remotes a store kept in one remotes.json before they had a file each."""
        where = f"{self.store.where}/{REMOTES_FILE}"
        try:
            data = self.store.read_file(REMOTES_FILE)
            doc = validate.load_json(data) if data is not None else {"remotes": {}}
        except ValueError as exc:
            raise StoreError(f"cannot read {where} ({exc}); fix or delete it and add the "
                             "remotes again with `triage remote add`") from None
        found = doc.get("remotes") if isinstance(doc, dict) else None
        if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
            raise StoreError(f"{where} is not a remotes file; delete it and add the remotes "
                             "again with `triage remote add`")
        return found
