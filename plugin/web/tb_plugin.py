"""TensorBoard adapter: mounts the Stepscope app as the plugin ``stepscope``.

TensorBoard (2.x) routes ``/data/plugin/<name>/*`` to a plugin's WSGI apps without
stripping that prefix (its ``--path_prefix`` goes to ``SCRIPT_NAME``), and the Stepscope
app already serves every route under ``/data/plugin/stepscope/``: so the plugin hands
TensorBoard the very same app under a wildcard route. The tab itself is a tiny ES module
(:data:`ENTRY_JS`) that fills TensorBoard's plugin iframe with ``index.html``, resolved
relative to the module's own URL so that ``--path_prefix`` keeps working.

Environment: ``STEPSCOPE_CACHE_DIR`` (analysis cache folder) and ``STEPSCOPE_NO_CACHE``
(``1``/``true``: no cache) are passed through to :func:`~.app.create_app`.
"""

from __future__ import annotations

import logging
import os
import threading

from tensorboard.plugins import base_plugin
from werkzeug import Request, Response

from ..store.scheduler import Store
from .app import create_app

log = logging.getLogger(__name__)

PLUGIN_NAME = "stepscope"
TAB_NAME = "PyTorch Profiler"
ENTRY_ROUTE = "/tb_entry.js"
#: Seconds ``is_active`` waits for the first scan of the log directory.
ACTIVE_WAIT_S = 2.0

ENTRY_JS = """\
// TensorBoard calls render() inside the plugin's iframe: show the dashboard page.
export function render() {
  const frame = document.createElement("iframe");
  frame.src = new URL("./index.html", import.meta.url).href;
  frame.title = "Stepscope";
  frame.style.cssText = "position:absolute;inset:0;width:100%;height:100%;border:0";
  document.body.style.margin = "0";
  document.body.appendChild(frame);
}
"""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@Request.application
def _entry_module(_request: Request) -> Response:
    return Response(ENTRY_JS, mimetype="text/javascript",
                    headers={"X-Content-Type-Options": "nosniff",
                             "Cache-Control": "no-cache"})


def _content_type_on_304(app):
    """TensorBoard logs a warning for any response without Content-Type; werkzeug strips
    it from 304 Not Modified answers (to the app's ETag revalidation), so add it back."""
    def wrapped(environ, start_response):
        def start(status, headers, exc_info=None):
            if status.startswith("304") and not any(k.lower() == "content-type"
                                                      for k, _ in headers):
                headers = [*headers, ("Content-Type", "application/octet-stream")]
            return start_response(status, headers, exc_info)
        return app(environ, start)
    return wrapped


class StepscopePlugin(base_plugin.TBPlugin):
    """The ``stepscope`` TensorBoard plugin over ``--logdir``."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._logdir = context.logdir or None
        flags = context.flags
        if self._logdir is None and getattr(flags, "logdir_spec", None):
            log.warning("stepscope: the PyTorch Profiler tab needs --logdir (it does not "
                        "read --logdir_spec); or run `stepscope DIR` beside TensorBoard")
        interval = getattr(flags, "reload_interval", None)
        self._reload_interval = 5.0 if interval is None else float(interval)
        self._lock = threading.Lock()
        self._app = None
        self._active = False

    def _wsgi_app(self):
        with self._lock:
            if self._app is None:
                self._app = create_app(
                    self._logdir, reload_interval=self._reload_interval,
                    cache_dir=os.environ.get("STEPSCOPE_CACHE_DIR") or None,
                    no_cache=_env_flag("STEPSCOPE_NO_CACHE"))
            return self._app

    def _store(self) -> Store:
        return self._wsgi_app().extensions["stepscope"]

    def get_plugin_apps(self) -> dict:
        if self._logdir is None:
            return {}
        return {ENTRY_ROUTE: _entry_module, "/*": _content_type_on_304(self._wsgi_app())}

    def is_active(self) -> bool:
        """True once the log directory holds a trace file.

        Cheap: the answer comes from the app's background scan (never a scan on the
        calling thread); the first call waits up to ``ACTIVE_WAIT_S`` for that scan. Once
        true it stays true.
        """
        if self._active or self._logdir is None:
            return self._active
        store = self._store()
        if store.first_scan_done(ACTIVE_WAIT_S):
            self._active = store.has_runs()
        return self._active

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path=ENTRY_ROUTE, tab_name=TAB_NAME,
                                            disable_reload=True)
