"""The one comment the kit keeps on a pull request (GitHub) or merge request (GitLab): found by
a marker in its body and updated in place, never posted twice. Only the REST calls differ
between the two; the API's base URL comes from the CI's own variables, so tests point it at a
local server."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triage.base.errors import TriageError

MARKER = "<!-- triage-ci -->"
TIMEOUT_S = 30


class CommentFailed(TriageError):
    """The forge's API refused or could not be reached: the comment was not posted."""


@dataclass(frozen=True)
class Posted:
    """What became of the comment: `created`, `updated`, or `skipped` (mode, or no PR/MR)."""

    action: str
    url: str | None = None


class Forge(ABC):
    """A place that holds one review thread: list its comments, create one, update one."""

    name = "none"

    def __init__(self, api: str, token: str, thread: str | None):
        self.api, self.token, self.thread = api.rstrip("/"), token, thread

    def existing(self) -> dict[str, Any] | None:
        """The kit's comment already there (the first that holds the marker), if any."""
        if self.thread is None:
            return None
        page = 1
        while True:
            found = self._call("GET", f"{self.thread}?per_page=100&page={page}")
            if not isinstance(found, list):
                raise CommentFailed(f"{self.name} API at {self.api} answered the comment list "
                                    "with something else than a list; check the API URL")
            mine = [c for c in found if MARKER in str(c.get("body", ""))]
            if mine or len(found) < 100:
                return mine[0] if mine else None
            page += 1

    def post(self, body: str, update_only: bool = False) -> Posted:
        """Update the kit's comment, or create it (unless `update_only`)."""
        if self.thread is None:
            return Posted("skipped")
        body = f"{MARKER}\n{body}"
        current = self.existing()
        if current is not None:
            done = self._call(self.update_method, self._comment_path(current["id"]),
                              {"body": body})
            return Posted("updated", done.get("html_url") or done.get("url"))
        if update_only:
            return Posted("skipped")
        done = self._call("POST", self.thread, {"body": body})
        return Posted("created", done.get("html_url") or done.get("url"))

    update_method = "PATCH"

    @abstractmethod
    def _comment_path(self, comment_id: object) -> str:
        """The API path of one of the kit's comments."""

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """The forge's authentication headers."""

    def _call(self, method: str, path: str, doc: Mapping[str, Any] | None = None) -> Any:
        data = json.dumps(doc).encode() if doc is not None else None
        request = urllib.request.Request(f"{self.api}/{path}", data=data, method=method,
                                         headers={**self._headers(),
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise CommentFailed(f"{self.name} API refused {method} {path}: HTTP {exc.code}; "
                                f"{self.permission_hint}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise CommentFailed(f"{self.name} API at {self.api} unreachable: {exc}") from None

    permission_hint = ""


class GitHub(Forge):
    """Issue comments of a pull request (a PR is an issue to this API)."""

    name = "GitHub"
    permission_hint = "give the job `permissions: pull-requests: write` and GITHUB_TOKEN"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GitHub:
        number = pr_number(env.get("GITHUB_EVENT_PATH"))
        repo = env.get("GITHUB_REPOSITORY", "")
        thread = f"repos/{repo}/issues/{number}/comments" if number and repo else None
        return cls(env.get("GITHUB_API_URL", "https://api.github.com"),
                   env.get("GITHUB_TOKEN", ""), thread)

    def _comment_path(self, comment_id: object) -> str:
        repo = self.thread.split("/issues/")[0] if self.thread else ""
        return f"{repo}/issues/comments/{comment_id}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28"}


class GitLab(Forge):
    """Notes of a merge request."""

    name = "GitLab"
    update_method = "PUT"
    permission_hint = "set TRIAGE_GITLAB_TOKEN to a token with the `api` scope"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GitLab:
        project, iid = env.get("CI_PROJECT_ID"), env.get("CI_MERGE_REQUEST_IID")
        thread = f"projects/{project}/merge_requests/{iid}/notes" if project and iid else None
        return cls(env.get("CI_API_V4_URL", "https://gitlab.com/api/v4"),
                   env.get("TRIAGE_GITLAB_TOKEN", ""), thread)

    def _comment_path(self, comment_id: object) -> str:
        return f"{self.thread}/{comment_id}"

    def _headers(self) -> dict[str, str]:
        return {"PRIVATE-TOKEN": self.token}


def pr_number(event_path: str | None) -> int | None:
    """The pull request the workflow runs for, from the event GitHub wrote (None: a push)."""
    if not event_path:
        return None
    try:
        with open(event_path, encoding="utf-8") as event:
            doc = json.load(event)
    except (OSError, ValueError):
        return None
    number = (doc.get("pull_request") or {}).get("number")
    return number if isinstance(number, int) else None


def forge_of(kind: str, env: Mapping[str, str] | None = None) -> Forge | None:
    """The forge `--forge` names (`auto`: the one whose CI this runs in; None outside one)."""
    env = os.environ if env is None else env
    if kind == "auto":
        kind = "github" if env.get("GITHUB_ACTIONS") else "gitlab" if env.get("GITLAB_CI") \
            else "none"
    return {"github": GitHub.from_env, "gitlab": GitLab.from_env}.get(
        kind, lambda _env: None)(env)
