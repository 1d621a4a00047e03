"""The Flask app: one route table for both hosts (standalone CLI and TensorBoard).

Every route lives under :data:`PREFIX` (``/data/plugin/stepscope/``), the path TensorBoard
gives a plugin, so the TensorBoard adapter mounts this very WSGI app unchanged. Routes
only translate: read and validate query parameters, call one :class:`~.loader.Store`
method, answer JSON. The API is documented in ``stepscope/api.md`` (plugin/api.md).

Answers (SPEC §3): JSON via orjson, gzip-compressed above ~1 KB when the client accepts
it; one error body ``{"error", "detail", "file"?, "position"?}`` for every status; view
routes answer 202 with the loading body and ``Retry-After: 1`` while analysing.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import importlib.metadata
import logging
import os
import platform
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from flask import Flask, Response, current_app, redirect, request, send_file
from werkzeug.exceptions import HTTPException
from werkzeug.security import safe_join

from .. import __version__, runlevel
from ..discovery import display_name
from ..errors import BadParameter, Loading, NotFound, NotReady, StepscopeError, echo
from ..fs import LOCAL
from ..runlevel.distributed import DISTRIBUTED
from ..runlevel.distributed import has_data as distributed_has_data
from ..store.child import Progress
from ..store.pool import Analyser, default_jobs
from ..store.scheduler import Ready, Store
from ..views import PAIR_VIEWS
from ..views import ROUTES as VIEW_ROUTES  # the view registry's routes
from .assets import frontend_dir, mime_type, plotly_js

log = logging.getLogger(__name__)

#: Every route is below this path, in TensorBoard and standalone alike.
PREFIX = "/data/plugin/stepscope"
#: Responses smaller than this (bytes) are not compressed.
GZIP_MIN_BYTES = 1024
GZIP_LEVEL = 5
COMPRESSIBLE = frozenset({"application/json", "text/javascript", "text/html", "text/css",
                          "image/svg+xml", "text/plain"})
#: CSP for our HTML pages; TensorBoard requires one with default-src.
CSP = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
       "script-src 'self' 'unsafe-eval'; object-src 'none'")


def create_app(logdir: str, *, reload_interval: float = 5.0, jobs: int | None = None,
               cache_dir: str | None = None, no_cache: bool = False,
               analyse: Callable[[str, Progress], Any] | None = None,
               start: bool = True, scheduler: str | None = None) -> Flask:
    """The Stepscope WSGI app serving ``logdir``.

    ``reload_interval``: seconds between re-scans of ``logdir``; ``jobs``: traces analysed
    in parallel (worker processes); ``cache_dir`` / ``no_cache``: the on-disk analysis cache
    (default ``$XDG_CACHE_HOME/stepscope``); ``analyse``: job function
    ``analyse(path, progress) -> ViewSet``, default :class:`~.worker.Analyser` (worker
    processes + cache), tests may inject the in-process :func:`~.worker.analyse_file`;
    ``start``: start the background store now (else call ``app_store(app).start()``);
    ``scheduler``: a Dask scheduler address (``tcp://HOST:8786``) to analyse on instead of
    local worker processes (:class:`~stepscope.store.dask_pool.DaskExecutor`; raises
    ``SchedulerUnavailable`` when it cannot be reached).
    """
    app = Flask("stepscope", static_folder=None)
    executor = None
    if scheduler and analyse is None:
        from ..store.dask_pool import DaskExecutor

        executor = DaskExecutor(scheduler)
        jobs = jobs or executor.parallelism()  # tasks in flight: the cluster's threads
    jobs = jobs or default_jobs()
    if analyse is None:
        analyse = Analyser(cache_dir=cache_dir, no_cache=no_cache, jobs=jobs,
                           executor=executor)
    store = Store(logdir, reload_interval=reload_interval, jobs=jobs, analyse=analyse)
    app.extensions["stepscope"] = store
    app.config.update(STEPSCOPE_CACHE_DIR=cache_dir, STEPSCOPE_NO_CACHE=no_cache)

    for route, func in (("runs", runs), ("workers", workers), ("spans", spans),
                        ("views", views), ("notes", notes), ("version", version),
                        ("trace/download", trace_download),
                        ("vendor/plotly.min.js", plotly_file)):
        _route(app, f"{PREFIX}/{route}", route, func)
    for route in VIEW_ROUTES:
        _route(app, f"{PREFIX}/{route}", f"view:{route}", view_route(route))
    for analysis in runlevel.RUNLEVEL:
        for r in analysis.routes:
            _route(app, f"{PREFIX}/{r.path}", f"run:{r.path}", run_route(analysis, r))
    for pair in PAIR_VIEWS:
        for r in pair.routes:
            _route(app, f"{PREFIX}/{r.path}", f"pair:{r.path}", pair_route(r))
    _route(app, f"{PREFIX}/", "dashboard", dashboard)
    _route(app, f"{PREFIX}/<path:filename>", "static", static_file)
    _route(app, "/", "root", root)

    app.register_error_handler(StepscopeError, _stepscope_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _bug)
    app.after_request(_finish)
    if start:
        store.start()
    return app


def _route(app: Flask, rule: str, endpoint: str, func: Callable[..., Response]) -> None:
    """A GET (and HEAD) route; OPTIONS is not answered (405 JSON like any other method)."""
    app.add_url_rule(rule, endpoint, func, provide_automatic_options=False)


def app_store(app: Flask) -> Store:
    """The background store behind an app made by :func:`create_app`."""
    return app.extensions["stepscope"]


# -- routes ----------------------------------------------------------------------------
def runs() -> Response:
    return json_response(app_store(current_app).runs_info())


def workers() -> Response:
    (run,) = params("run")
    return json_response(app_store(current_app).workers(run))


def spans() -> Response:
    run, worker = params("run", "worker")
    return json_response(app_store(current_app).spans(run, worker))


def views() -> Response:
    """The span's views; plus ``Distributed`` (a run-level view) when the span's run
    qualifies (:func:`stepscope.runlevel.distributed.has_data`), and the pair views
    (``Diff``) when the server holds two spans or more."""
    ready = lookup()
    if isinstance(ready, Response):
        return ready
    store = app_store(current_app)
    names = ready.names()
    summary = getattr(ready.viewset, "summaries", {}).get(DISTRIBUTED.name)
    if summary is not None and DISTRIBUTED in runlevel.RUNLEVEL:
        (run,) = params("run")
        if distributed_has_data(summary, len(store.workers(run))):
            names.append("Distributed")
    # something to compare: two spans that are (or may become) usable
    if sum(c["ready"] + c["loading"] for c in store.status().values()) >= 2:
        names.extend(p.name for p in PAIR_VIEWS)
    return json_response(names)


def notes() -> Response:
    ready = lookup()
    return ready if isinstance(ready, Response) else json_response(ready.notes())


def version() -> Response:
    out = {"version": __version__, "python": platform.python_version()}
    try:
        out["tensorboard"] = importlib.metadata.version("tensorboard")
    except importlib.metadata.PackageNotFoundError:
        pass
    return json_response(out)


def view_route(route: str) -> Callable[[], Response]:
    """The handler of one view route (see the registry in :mod:`.views`) for the requested span."""
    def handler() -> Response:
        ready = lookup()
        if isinstance(ready, Response):
            return ready
        try:
            answer = ready.get(route, request.args)
            if VIEW_ROUTES[route][1].mimetype == "text/plain":
                resp = Response(answer, mimetype="text/plain")
                resp.headers["Cache-Control"] = "no-cache"
                return resp
            return json_response(answer)
        except NotReady as e:  # this view (or the timeline) is still being built
            return loading_response(e.loading)
    handler.__name__ = f"view_{route.replace('/', '_')}"
    return handler


def run_route(analysis, route) -> Callable[[], Response]:
    """The handler of a run-level route (:mod:`.runlevel`): the run's combined summaries."""
    def handler() -> Response:
        (run,) = params("run")
        result = app_store(current_app).run_result(run, analysis)
        if isinstance(result, Loading):
            return loading_response(result)
        return json_response(route.answer(result, route.validated(request.args)))
    handler.__name__ = f"run_{route.path.replace('/', '_')}"
    return handler


#: The two spans of a pair route (:mod:`.views.diff`): side -> its run, worker, span parameters.
PAIR_SIDES = (("baseline", ("run", "worker", "span")),
              ("experiment", ("diff_run", "diff_worker", "diff_span")))


def pair_route(route) -> Callable[[], Response]:
    """The handler of a route over two spans (baseline, experiment): both looked up in the
    store; 202 while a side is loading, its error while a side failed, naming the side."""
    def handler() -> Response:
        store = app_store(current_app)
        sides, loading = [], []
        for side, keys in PAIR_SIDES:
            run, worker = params(*keys[:2])
            try:
                result = store.lookup(run, worker, request.args.get(keys[2]))
            except StepscopeError as e:  # unknown (404) or failed (422) side: say which
                body = {k: display_name(v) if isinstance(v, str) else v
                        for k, v in e.body().items()}
                return json_response({**body, "error": f"{side}: {body['error']}",
                                      "side": side}, e.status)
            if isinstance(result, Loading):
                loading.append((side, result))
            sides.append(result)
        if loading:  # nothing half-done: wait for both
            body = {**loading[0][1].body(), "side": loading[0][0],
                    "sides": [side for side, _ in loading]}
            return json_response(body, 202, {"Retry-After": "1"})
        return json_response(route.answer(*sides, route.validated(request.args)))
    handler.__name__ = f"pair_{route.path.replace('/', '_')}"
    return handler


def trace_download() -> Response:
    """The original trace file of a span, as an attachment (for Perfetto / chrome://tracing).

    Only a file that lies inside the log directory is served (403 for a link to outside it:
    its views are shown, its bytes are not). The check is made on the opened file, so a
    link swapped in after the check cannot redirect the download.
    """
    ready = lookup()
    if isinstance(ready, Response):
        return ready
    name = os.path.basename(ready.path)
    store = app_store(current_app)
    f, st = store.fs.open_inside(store.logdir, ready.path)
    if ready.signature is not None and (st.size, st.mtime_ns, st.identity) != ready.signature:
        f.close()  # (being rewritten, say: its bytes are not those of the views shown)
        raise StepscopeError("changed since analysed", f"{name} changed since the views shown "
                             "were analysed (it may still be being written): download it once "
                             "its new version is analysed, or reload the page.", status=409)
    tag = hashlib.sha1(f"{st.identity}-{st.size}-{st.mtime_ns}".encode()).hexdigest()[:16]
    resp = send_file(f, mimetype="application/gzip" if name.endswith(".gz") else "application/json",
                     as_attachment=True, download_name=download_name(name), conditional=False,
                     etag=tag, last_modified=st.mtime_ns / 1e9, max_age=0)
    resp.content_length = st.size
    resp = resp.make_conditional(request.environ, accept_ranges=True, complete_length=st.size)
    if resp.status_code == 412 or _modified_since(request.if_unmodified_since, st.mtime_ns):
        resp.close()  # (werkzeug keeps the file as the body of its 412)
        raise StepscopeError("precondition failed", f"{name} is not the version the request's "
                             "If-Match / If-Unmodified-Since names (it changed since): "
                             "download it again without them.", status=412)
    return resp


def _modified_since(when: datetime.datetime | None, mtime_ns: int) -> bool:
    """Was the file (modified at ``mtime_ns``) changed after ``when`` (an
    ``If-Unmodified-Since`` date, to the second; None: no such header)?"""
    return when is not None and mtime_ns // 1_000_000_000 > int(when.timestamp())


def download_name(name: str) -> str:
    """A file name safe in a Content-Disposition header: ``a b/<c>.json`` -> ``a_b__c_.json``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return safe or "trace.json"


def dashboard() -> Response:
    return _redirect("index.html")


def root() -> Response:
    return _redirect(f"{request.script_root}{PREFIX}/index.html")


def static_file(filename: str) -> Response:
    root = str(frontend_dir())
    path = safe_join(root, filename)
    if path is None or not LOCAL.is_inside(root, path) or not LOCAL.is_regular_file(path):
        raise NotFound(f"no endpoint or file {echo(filename)}",
                       "See api.md for the endpoints; the dashboard is index.html.")
    return file_response(Path(path))


def plotly_file() -> Response:
    path = plotly_js()
    if path is None:
        raise NotFound("plotly.min.js is not installed", "Install it: pip install plotly")
    return file_response(path)


# -- helpers ---------------------------------------------------------------------------
def params(*names: str) -> list[str]:
    """Values of required query parameters; BadParameter (400) naming the first missing."""
    out = []
    for name in names:
        value = request.args.get(name)
        if not value:
            raise BadParameter(f"missing parameter {name!r}",
                               f"Add {name}=... to the query; runs, workers?run= and "
                               "spans?run=&worker= list the valid values.")
        out.append(value)
    return out


def lookup() -> Ready | Response:
    """The analysed span named by ``run``, ``worker``, ``span``; a 202 Response if loading.
    While its other views are built, its Overview's are at hand already (the others raise
    NotReady: a 202 too, see :func:`view_route`)."""
    run, worker = params("run", "worker")
    result = app_store(current_app).lookup(run, worker, request.args.get("span"), early=True)
    if isinstance(result, Loading):
        return loading_response(result)
    return result


def loading_response(loading: Loading) -> Response:
    """The 202 answer: how far the analysis is; clients retry after a second."""
    return json_response(loading.body(), 202, {"Retry-After": "1"})


def _orjson_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy scalars and arrays orjson does not take natively
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def json_response(payload: Any, status: int = 200, headers: dict | None = None) -> Response:
    """``payload`` as a JSON response (orjson; numpy values allowed)."""
    body = orjson.dumps(payload, default=_orjson_default,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    resp = Response(body, status, headers, mimetype="application/json")
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def file_response(path: Path) -> Response:
    """A static file, revalidated by ETag (``Cache-Control: no-cache``)."""
    st = path.stat()
    etag = hashlib.sha1(f"{path}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:20]
    if etag in request.if_none_match or f"{etag}-gz" in request.if_none_match:
        resp = Response(status=304, mimetype=mime_type(path))
        resp.set_etag(f"{etag}-gz" if f"{etag}-gz" in request.if_none_match else etag)
    else:
        resp = Response(path.read_bytes(), mimetype=mime_type(path))
        resp.set_etag(etag)
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def _redirect(location: str) -> Response:
    qs = request.query_string.decode("latin-1")
    return redirect(f"{location}?{qs}" if qs else location, 302)


_GZ_CACHE: OrderedDict[str, bytes] = OrderedDict()  # static file ETag -> gzip bytes
_GZ_CACHE_ENTRIES = 32


def _gzip(resp: Response) -> None:
    """Compress ``resp`` in place when the client accepts gzip and it is worth it."""
    if (resp.direct_passthrough or resp.is_streamed or resp.status_code not in (200, 202)
            or "Content-Encoding" in resp.headers or resp.mimetype not in COMPRESSIBLE):
        return
    resp.vary.add("Accept-Encoding")
    if not request.accept_encodings["gzip"] or resp.content_length is None \
            or resp.content_length < GZIP_MIN_BYTES:
        return
    etag, _weak = resp.get_etag()
    data = _GZ_CACHE.get(etag) if etag else None
    if data is None:
        data = gzip.compress(resp.get_data(), GZIP_LEVEL, mtime=0)
        if etag:
            _GZ_CACHE[etag] = data
            while len(_GZ_CACHE) > _GZ_CACHE_ENTRIES:
                _GZ_CACHE.popitem(last=False)
    else:
        _GZ_CACHE.move_to_end(etag)
    resp.set_data(data)
    resp.headers["Content-Encoding"] = "gzip"
    if etag:
        resp.set_etag(f"{etag}-gz")


def _finish(resp: Response) -> Response:
    """Headers every answer gets (TensorBoard checks nosniff and HTML CSP), then gzip."""
    resp.headers["X-Content-Type-Options"] = "nosniff"
    if "Location" in resp.headers:
        resp.headers["Location"] = _relative(resp.headers["Location"])
    if resp.mimetype == "text/html":
        resp.headers["Content-Security-Policy"] = CSP
    _gzip(resp)
    return resp


# -- errors: one JSON body for every status --------------------------------------------
def _stepscope_error(e: StepscopeError) -> Response:
    # file names in errors may hold bytes that are not UTF-8: show them as U+FFFD
    body = {k: display_name(v) if isinstance(v, str) else v for k, v in e.body().items()}
    return json_response(body, e.status)


def _http_error(e: HTTPException) -> Response:
    if e.code == 404:
        body = {"error": f"not found: {request.path}",
                "detail": "See api.md for the endpoints; the dashboard is "
                          f"{PREFIX}/index.html."}
    else:
        body = {"error": f"{e.code} {e.name}", "detail": e.description or ""}
    headers = {k: v for k, v in e.get_headers() if k.lower() not in ("content-type",
                                                                     "content-length")}
    return json_response(body, e.code or 500, headers)


def _relative(url: str) -> str:
    """A redirect target without scheme and host: werkzeug builds the ``a//b`` -> ``a/b``
    redirect from the request's Host header, which the client controls (open redirect).
    ``http://evil/x?q`` -> ``/x?q``, never ``//host``; relative targets stay as they are."""
    parts = urlsplit(url)
    if not (parts.scheme or parts.netloc or url.startswith("//")):
        return url
    return "/" + parts.path.lstrip("/") + (f"?{parts.query}" if parts.query else "")


def _bug(e: Exception) -> Response:
    log.exception("unexpected error answering %s", request.full_path)
    return json_response({"error": "internal error",
                          "detail": "This is a bug in Stepscope; please report it with the "
                                    "server log."}, 500)
