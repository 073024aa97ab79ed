"""`triage serve`: the console's pages live (the same `Site` as `triage publish`), plus any pair
on demand at /diff/A/B. Read-only by construction: the one route answers GET and HEAD (any
other method: 405, Starlette's own answer) and only ever reads the store.

A page is made in the request (the store is read then, so a run archived a second ago is
listed); the catalog's parsed rows are kept while its segments and the labels are those they
were read from (archive/catalogview.py keeps its own view the same way)."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from triage.archive.store import Store
from triage.base.errors import AmbiguousRun, LabelNotFound, RunNotFound, TriageError
from triage.views.site import Site, render_pair

TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
         "atom": "application/atom+xml; charset=utf-8"}
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-cache"}


class Console:
    """The store's Site, made again when the catalog's segments or the labels changed."""

    def __init__(self, open_store: Callable[[], Store]):
        self.open_store = open_store
        self.made: tuple[tuple, Site] | None = None
        self.lock = threading.Lock()  # pages are made on Starlette's worker threads

    def site(self) -> Site:
        from triage.archive import catalog

        store = read_only(self.open_store())
        state = (tuple(catalog.segments(store)), tuple(sorted(store.labels.all().items())),
                 tuple(store.files.names("leases")))
        with self.lock:
            if self.made is None or self.made[0] != state or state[2]:
                self.made = (state, Site(store))
            return self.made[1]


def read_only(store: Store) -> Store:
    """The store as the server reads it: never writable, so that not even the catalog's own
    repair (indexing a run that has no row: catalog.open_view) writes a file."""
    store.writable = lambda: False  # type: ignore[method-assign]
    return store


def make_app(open_store: Callable[[], Store]) -> Starlette:
    console = Console(open_store)

    def page(request: Request) -> Response:
        """A plain function: Starlette runs it on a worker thread, so a slow page (a diff of
        big runs, a store on S3) does not hold up the others."""
        path = request.path_params["path"] or "index.html"
        try:
            if path.startswith("diff/"):
                return _diff(console.site().store, path)
            body = console.site().render(path)
        except (RunNotFound, LabelNotFound, AmbiguousRun) as exc:
            return _error(404, str(exc))
        except TriageError as exc:  # the store failed (unreachable, damaged): not the page's fault
            return _error(503, str(exc))
        if body is None:
            return _error(404, f"no page {path}")
        return Response(body, media_type=TYPES.get(path.rsplit(".", 1)[-1], "text/plain"),
                        headers=HEADERS)

    return Starlette(routes=[Route("/{path:path}", page, methods=["GET", "HEAD"])])


def _diff(store: Store, path: str) -> Response:
    """/diff/A/B: the review page of any two runs or label globs the store names."""
    parts = path.split("/")
    if len(parts) != 3 or not all(parts[1:]):
        return _error(404, "give two runs: /diff/A/B")
    return Response(render_pair(store, parts[1], parts[2], "../../"),
                    media_type=TYPES["html"], headers=HEADERS)


def _error(status: int, message: str) -> Response:
    title = "not found" if status == 404 else "the store could not be read"
    body = (f"<!DOCTYPE html><meta charset=utf-8><title>triage: {title}</title>"
            f"<p>{html.escape(message)}</p><p><a href=\"/index.html\">runs</a></p>")
    return Response(body, status_code=status, media_type=TYPES["html"], headers=HEADERS)


def serve(open_store: Callable[[], Store], host: str, port: int) -> None:
    """Serve until interrupted (uvicorn's own Ctrl-C handling)."""
    import uvicorn

    uvicorn.run(make_app(open_store), host=host, port=port, log_level="warning")
