"""An s3:// store URL and the settings it carries (`S3Place`), and the rules that keep secrets
out of every URL: keys never go in one (`refuse_userinfo`), and a URL is printed with any an
older store kept masked (`shown_url`). Credentials come from the environment or a profile of
~/.aws/credentials (`_credentials`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from triage.archive.network import NETWORK_LIMITS, network_value
from triage.base.errors import StoreError, UsageError

URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


# What an s3:// URL may set after its `?` (a remote's settings): name -> the setting it is.
S3_SETTINGS = {"endpoint": "endpoint", "endpoint_override": "endpoint",
               "endpoint_url": "endpoint", "region": "region", "profile": "profile",
               "credentials": "credentials", "attempts": "attempts", "timeout": "timeout",
               "retry_time": "retry_time"}
CREDENTIAL_SOURCES = ("environment", "anonymous")  # besides profile=NAME
# Query names that would carry a secret: refused (a remote's URL is kept in the store, pushed
# and printed), and masked where an older store kept one.
SECRET_RE = re.compile(r"secret|password|passwd|token|access.?key|credential_", re.I)
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+-\d+$|^[a-z0-9-]{1,40}$")


@dataclass(frozen=True)
class S3Place:
    """An s3://bucket/prefix URL and the settings it carries after `?`: the server's endpoint
    (an S3-compatible one), its region, and where credentials come from: a named profile of
    ~/.aws/credentials, none (`credentials=anonymous`), or the environment (the default: the
    AWS_* variables, AWS_PROFILE). Secrets never: they stay in the profile or environment."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    profile: str | None = None
    credentials: str = "environment"
    network: tuple[tuple[str, str], ...] = ()  # attempts, timeout, retry_time (`Network`)
    url: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Place:
        """The place and its settings, each checked; every refusal names the URL with any
        secret in it masked (`shown_url`)."""
        from urllib.parse import parse_qsl

        shown = shown_url(url)
        parsed = urlparse(url)
        refuse_userinfo(url)
        if not parsed.netloc:
            raise StoreError(f"store {shown}: no bucket; give s3://bucket/prefix")
        settings: dict[str, str] = {}
        for key, value in parse_qsl(parsed.query, keep_blank_values=True):
            settings.update(_setting(shown, key, value, settings))
        network = tuple((k, settings.pop(k)) for k in NETWORK_LIMITS if k in settings)
        place = cls(parsed.netloc, parsed.path.strip("/"), **settings, network=network,
                    url=url)
        if place.profile and "credentials" in settings:
            raise StoreError(f"store {shown}: profile= and credentials= both say where "
                             "credentials come from; give one")
        return place

    def settings(self) -> dict[str, str]:
        """What the URL sets, as `triage remote list` shows it (never a secret: none is kept)."""
        found = {"endpoint": self.endpoint, "region": self.region, "profile": self.profile,
                 "credentials": None if self.credentials == "environment" else self.credentials}
        return {key: value for key, value in found.items() if value} | dict(self.network)


def _setting(shown: str, key: str, value: str, settings: dict[str, str]) -> dict[str, str]:
    """One `key=value` of an s3:// URL as the setting it names, or why it is refused."""
    if SECRET_RE.search(key):
        raise StoreError(f"store {shown}: a secret ({key}) does not belong in a store URL; put "
                         "the keys in a profile (~/.aws/credentials) and add ?profile=NAME")
    name = S3_SETTINGS.get(key.lower())
    if name is None:
        raise StoreError(f"store {shown}: unknown setting {key!r}; an s3:// URL takes "
                         "endpoint, region, profile, credentials (environment or anonymous), "
                         "attempts, timeout and retry_time")
    if name in settings:
        raise StoreError(f"store {shown}: {name} given twice; give it once")
    if name == "endpoint":
        return {name: endpoint_address(f"store {shown}: endpoint", value)}
    if name in NETWORK_LIMITS:
        try:
            network_value(f"store {shown}", name, value)
        except UsageError as exc:
            raise StoreError(str(exc)) from None
    if name == "region" and not REGION_RE.match(value):
        raise StoreError(f"store {shown}: region {value!r} is not a region name (us-east-1)")
    if name == "profile" and not re.match(r"^[\w.+@-]{1,64}$", value):
        raise StoreError(f"store {shown}: profile {value!r} is not a profile name")
    if name == "credentials" and value not in CREDENTIAL_SOURCES:
        raise StoreError(f"store {shown}: credentials={value!r}; give one of "
                         f"{', '.join(CREDENTIAL_SOURCES)}, or profile=NAME")
    return {name: value}


def endpoint_address(what: str, value: str) -> str:
    """An S3 server's address as http(s)://HOST[:PORT], or why it is not one; a user name or
    password in it is refused and never repeated (S3 takes keys, not a URL's userinfo)."""
    address = urlparse(value if "://" in value else f"https://{value}")
    if "@" in address.netloc:
        raise StoreError(f"{what} {shown_url(value)!r} carries a user name or password; S3 "
                         f"takes keys from {CREDENTIALS_HOW}: remove it from the address")
    if address.scheme not in ("http", "https") or not address.hostname \
            or address.path.strip("/") or address.query:
        raise StoreError(f"{what} {shown_url(value)!r} is not a server's address; give "
                         "http(s)://HOST[:PORT]")
    return f"{address.scheme}://{address.netloc}"


CREDENTIALS_HOW = ("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile of ~/.aws/credentials "
                   "(AWS_PROFILE, or ?profile=NAME on the URL: `triage remote add NAME URL "
                   "--profile NAME`)")


def refuse_userinfo(url: str) -> None:
    """Any store URL with `user:password@` before its host is refused, the secret masked."""
    if URL_RE.match(url) and "@" in urlparse(url).netloc:
        raise StoreError(f"store {shown_url(url)}: keys do not belong in a store URL; pass "
                         f"them as {CREDENTIALS_HOW}")


def shown_url(url: str) -> str:
    """A store URL as it may be printed: keys before the host and secret-named settings (an
    older store may have kept one) masked."""
    from urllib.parse import parse_qsl, urlencode

    parsed = urlparse(url)
    if not URL_RE.match(url) or (not parsed.query and "@" not in parsed.netloc):
        return url
    netloc = parsed.netloc.rpartition("@")[2]
    if "@" in parsed.netloc:
        netloc = "***@" + netloc
    query = urlencode([(k, "***" if SECRET_RE.search(k) else shown_url(v))
                       for k, v in parse_qsl(parsed.query, keep_blank_values=True)],
                      safe=":/*@")
    return parsed._replace(netloc=netloc, query=query).geturl()


def credentials_options(place: S3Place, where: str) -> dict:
    """The S3 client's credentials options: the URL's source (profile, anonymous), else the
    environment's (AWS_PROFILE where no keys are set; pyarrow reads the keys itself)."""
    if place.credentials == "anonymous":
        return {"anonymous": True}
    if place.profile:
        keys = _profile_keys(place.profile)
        if not keys:
            raise StoreError(f"store {where}: no profile {place.profile!r} with keys in "
                             f"{credentials_file()}; add it there, or point "
                             "AWS_SHARED_CREDENTIALS_FILE at the file that has it")
        return keys
    if os.environ.get("AWS_PROFILE") and not os.environ.get("AWS_ACCESS_KEY_ID"):
        return _profile_keys(os.environ["AWS_PROFILE"])
    return {}


def check_profile(profile: str) -> None:
    """Refuse a profile ~/.aws/credentials (or $AWS_SHARED_CREDENTIALS_FILE) has no keys for."""
    if not _profile_keys(profile):
        raise StoreError(f"no profile {profile!r} with keys in {credentials_file()}; add it "
                         "there (aws configure --profile NAME), or point "
                         "AWS_SHARED_CREDENTIALS_FILE at the file that has it")


def credentials_file() -> Path:
    return Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")).expanduser()


def _profile_keys(profile: str) -> dict[str, str]:
    """Keys of a named profile in ~/.aws/credentials (pyarrow's client reads the default profile
    and AWS_PROFILE itself; passed explicitly so that AWS_SHARED_CREDENTIALS_FILE is honoured the
    same way everywhere)."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(credentials_file())
    if not parser.has_section(profile):
        return {}
    section = parser[profile]
    keys = {"access_key": section.get("aws_access_key_id"),
            "secret_key": section.get("aws_secret_access_key"),
            "session_token": section.get("aws_session_token")}
    return {k: v for k, v in keys.items() if v}
