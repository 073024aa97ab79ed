"""Remotes: the other stores a store pushes to and pulls from (`triage remote add NAME URL`).

They are kept in the store's own config (`store.remotes`, remote_config.py: one small file per
remote), so every command on the store, from any directory, finds the same names, and two
writers adding two remotes at once keep both. A URL is a store location as `--store` takes it:
a local directory, one on a shared filesystem, or a store URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from triage.archive.s3place import (URL_RE, S3Place, check_profile, refuse_userinfo,
                                    shown_url)
from triage.archive.remote_config import REMOTE_RE
from triage.archive.store import STORE_VERSION, Store
from triage.base.errors import StoreError, UnknownRemote, UsageError



@dataclass(frozen=True)
class Remote:
    """A remote as `triage remote list` shows it: its name and where its store is (an s3://
    URL with its settings: endpoint, region, where credentials come from)."""

    name: str
    url: str

    @property
    def shown(self) -> str:
        """The URL as it may be printed: a secret an older store kept in it masked."""
        return shown_url(self.url)

    def settings(self) -> dict[str, str]:
        """The settings its URL carries (none for a directory); {} where they cannot be read
        (the remote's use names what is wrong)."""
        if not self.url.lower().startswith("s3://"):
            return {}
        try:
            return S3Place.parse(self.url).settings()
        except StoreError:
            return {}

    def to_json(self) -> dict[str, object]:
        """One item of `triage remote list --json` (schemas/remotes.schema.json)."""
        settings = self.settings()
        return {"name": self.name, "url": self.shown} | ({"settings": settings} if settings
                                                          else {})


def location(url: str) -> str:
    """A URL as it is kept: a store URL as given; a path made absolute, so that a push from
    another directory reaches the same store."""
    if URL_RE.match(url):
        return url
    return os.path.abspath(os.path.expanduser(url))


def add_remote(store: Store, name: str, url: str,
               settings: dict[str, str] | None = None) -> Remote:
    """Record a remote; one that exists is not replaced silently. `settings` (endpoint, region,
    profile, credentials: `remote add --endpoint ...`) join those of an s3:// URL; each is
    checked here, the profile against the credentials file, so that a typo is refused now
    rather than ignored or found at the first push."""
    if not REMOTE_RE.match(name):
        raise UsageError(f"invalid remote name {name!r}: use at most 64 letters, digits, '.', "
                         "'_' and '-', starting with a letter or digit")
    if not url.strip():
        raise UsageError(f"remote {name}: an empty URL; give a store directory or URL")
    url = with_settings(name, url, {k: str(v) for k, v in (settings or {}).items()
                                    if v is not None})
    remotes = store.remotes.all()
    if name in remotes:
        raise UsageError(f"remote {name} exists ({shown_url(remotes[name])}); `triage remote "
                         f"remove {name}` first to point it elsewhere")
    remote = Remote(name, location(url))
    store.remotes.write(name, remote.url)
    return remote


def with_settings(name: str, url: str, settings: dict[str, str]) -> str:
    """The URL with `settings` added to its query, each setting of an s3:// URL checked."""
    from urllib.parse import urlencode

    try:
        refuse_userinfo(url)
    except StoreError as exc:
        raise UsageError(f"remote {name}: {exc}") from None
    is_s3 = url.lower().startswith("s3://")
    if settings and not is_s3:
        raise UsageError(f"remote {name}: --{', --'.join(settings)} set(s) an s3:// remote's "
                         "server; a directory takes none")
    if not is_s3:
        return url
    if settings:
        url += ("&" if "?" in url else "?") + urlencode(settings, safe=":/")
    try:
        place = S3Place.parse(url)
        if place.profile:
            check_profile(place.profile)
    except StoreError as exc:
        raise UsageError(f"remote {name}: {exc}") from None
    return url


def remove_remote(store: Store, name: str) -> Remote:
    """Forget a remote: its file is left empty rather than deleted, so that it also hides the
    name in an older store's remotes.json (never rewritten)."""
    remote = get_remote(store, name)
    store.remotes.write(name, None)
    return remote


def list_remotes(store: Store) -> list[Remote]:
    return [Remote(name, url) for name, url in sorted(store.remotes.all().items())]


def get_remote(store: Store, name: str) -> Remote:
    remotes = store.remotes.all()
    if name not in remotes:
        raise _unknown(name, remotes)
    return Remote(name, remotes[name])


def _unknown(name: str, remotes: dict[str, str]) -> UnknownRemote:
    known = ", ".join(sorted(remotes)) or "none yet"
    return UnknownRemote(f"unknown remote {name!r} (remotes: {known}); `triage remote add "
                         f"{name} URL` adds it, or give the store's path or URL")


def named_remote(remotes: dict[str, str], word: str) -> Remote:
    """The remote a NAME stands for: one of `remotes` (a store's, `triage remote add`), else a
    store's place given as is (a path, or a URL), so that a store can pull from another it has
    no remote for (an empty one included)."""
    if word in remotes:
        return Remote(word, remotes[word])
    if is_location(word):
        refuse_userinfo(word)  # its name is printed in every message about it
        return Remote(word, location(word))
    raise _unknown(word, remotes)


def remotes_of(store_path: str | os.PathLike[str] | None) -> dict[str, str]:
    """The remotes of the store at `store_path`; none where there is no store yet (pulling
    into it makes one)."""
    try:
        return Store.open(store_path).remotes.all()
    except StoreError:
        return {}


def is_location(word: str) -> bool:
    """A word that names a store's place rather than a remote (no remote name holds a '/')."""
    return URL_RE.match(word) is not None or os.sep in word or word.startswith("~")


def push_target(store: Store, words: list[str]) -> tuple[Remote, list[str]]:
    """`triage push [NAME] [RUN...]`: the remote and the RUNs. The first word is the remote
    when it is one of the store's remotes or a store's place (not a file: a RUN may be a
    report path); otherwise every word is a RUN and the remote is the default one."""
    remotes = store.remotes.all()
    if words and (words[0] in remotes
                  or (is_location(words[0]) and not os.path.isfile(words[0]))):
        return named_remote(remotes, words[0]), words[1:]
    return default_remote(store), words


def default_remote(store: Store) -> Remote:
    """The remote `triage push` uses when given none: the only one, else `origin`."""
    remotes = store.remotes.all()
    if len(remotes) == 1:
        return Remote(*next(iter(remotes.items())))
    if "origin" in remotes:
        return Remote("origin", remotes["origin"])
    if not remotes:
        raise UnknownRemote("no remote to push to; `triage remote add NAME URL` adds one")
    raise UsageError(f"{len(remotes)} remotes and none is named origin; name one: "
                     f"triage push NAME (remotes: {', '.join(sorted(remotes))})")


def open_remote(remote: Remote, create: bool = False) -> Store:
    """The remote's store, at this triage's format; `create` makes a new one where nothing is
    yet (a push to an empty location). Every refusal names the remote."""
    try:
        store = Store.open(remote.url, create=create, upgrade=True)
    except StoreError as exc:
        raise type(exc)(f"remote {remote.name}: {exc}") from None
    if store.migrating():
        raise StoreError(f"remote {remote.name} ({remote.shown}) is being migrated; run `triage "
                         f"migrate --store {remote.shown}` to finish")
    if store.format_version() < STORE_VERSION:
        raise StoreError(f"remote {remote.name} ({remote.shown}) has store format version "
                         f"{store.format_version()}; run `triage migrate --store {remote.shown}` "
                         f"once to upgrade it to {STORE_VERSION}")
    return store
