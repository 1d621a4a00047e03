"""Shared fixtures: paths to the real traces, Flask test clients over a log dir, waiting.

``client_for(logdir, **create_app_kwargs)`` builds an app (its background store is closed
after the test); ``shared_client`` is one session-wide app over ``../shared/traces``.
``wait_ready(client, run, worker)`` polls a view route until it stops answering 202.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time
import types
from pathlib import Path
from urllib.parse import urlencode

import pytest
from tracebuild import NO_SHARED  # the one reason shared-trace tests skip

from stepscope.views import ViewSet

# Tests never touch the user's analysis cache: every server they start (in-process or as a
# subprocess inheriting the environment) caches under this temporary folder.
os.environ["STEPSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="stepscope-test-cache-")

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PREFIX = "/data/plugin/stepscope"
#: the runs under SHARED (SPEC §1.1: relative paths, sorted)
SHARED_RUNS = [
    "hta_a100_alexnet_nosteps",
    "hta_cpu_only_gloo",
    "hta_mi250_rocm62",
    "hta_v100_profile_memory",
    "hta_v100_resnet_ns_2024",
    "kineto_resnet50/resnet50_num_workers_0",
    "kineto_resnet50/resnet50_num_workers_4",
    "param_v100_dlrm_8rank",
    "tracelens_h100_qwen_chat",  # starts with a large "metadata" object (issue 11)
    "tracelens_mi210_gpu_only",
    "tracelens_mi300x_compile_triton",
    "tracelens_mi300x_vllm_graph_replay",
]
#: the view routes the app registers (one per ViewSet route)
VIEW_ROUTES = ViewSet.ROUTES


#: Fixtures that serve the shared traces.
SHARED_FIXTURES = frozenset({"shared_client", "kineto_server"})
#: Helpers (of conftest, tracebuild, damaged) that read the shared traces.
SHARED_NAMES = frozenset({"SHARED", "TRACES", "SHARED_TRACES", "shared_views", "base_bytes",
                          "base_doc", "SOURCE", "KINETO"})


def pytest_collection_modifyitems(config, items):
    """Without ``../shared``, skip (one reason) every test that reads the real traces: it
    uses a shared-trace fixture, a parameter naming a shared file, or a module-level
    path under SHARED."""
    if SHARED.is_dir():
        return
    skip = pytest.mark.skip(reason=NO_SHARED)
    shared_root = str(SHARED.parent)
    for item in items:
        module = getattr(item, "module", None)
        names = {n for n, v in vars(module).items()
                 if isinstance(v, (str, os.PathLike)) and str(v).startswith(shared_root)
                 or n in SHARED_NAMES} if module else set()
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (SHARED_FIXTURES & set(item.fixturenames)
                or any(str(v).startswith(shared_root) for v in params.values())
                or any(n in _sources(item) for n in names)):
            item.add_marker(skip)


def _sources(item) -> str:
    """Source of a test function and of the fixtures it uses (defined in its module)."""
    funcs = [item.function]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        funcs += [d.func for d in defs if getattr(d.func, "__module__", "") == item.module.__name__]
    out = []
    for f in funcs:
        try:
            out.append(inspect.getsource(f))
        except (OSError, TypeError):
            pass
    return "\n".join(out)


@pytest.fixture(scope="session")
def views_module() -> types.ModuleType:
    """``stepscope.views`` (its ``ViewSet.ROUTES`` are the view routes)."""
    import stepscope.views as views

    return views


@pytest.fixture(scope="session")
def subprocess_env() -> dict[str, str]:
    """Environment for servers started as subprocesses."""
    return dict(os.environ)


def query(route: str, **params) -> str:
    """``/data/plugin/stepscope/<route>?<params>`` (None values left out)."""
    q = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{PREFIX}/{route}" + (f"?{q}" if q else "")


@pytest.fixture
def client_for(views_module):
    """Factory: ``client_for(logdir, **create_app_kwargs) -> FlaskClient``."""
    from stepscope.web.app import app_store, create_app

    apps = []

    def make(logdir, **kwargs):
        kwargs.setdefault("reload_interval", 0.1)
        app = create_app(str(logdir), **kwargs)
        apps.append(app)
        return app.test_client()

    yield make
    for app in apps:
        app_store(app).close(timeout=2)


@pytest.fixture(scope="session")
def shared_client(views_module):
    """One app over the real traces for the whole session (scan once, no polling)."""
    from stepscope.web.app import app_store, create_app

    app = create_app(str(SHARED), reload_interval=0)
    yield app.test_client()
    app_store(app).close(timeout=2)


def wait_ready(client, run: str, worker: str, span: str | None = None,
               route: str = "views", timeout: float = 60.0, early: bool = False):
    """GET ``route`` for the span until it is not 202; returns that response. Unless
    ``early``, first until every view answers (``overview``, ``views`` and ``notes`` answer
    while the others are still built)."""
    deadline = time.monotonic() + timeout
    routes = [route] if early or route == "operation" else ["operation", route]
    while True:
        resp = client.get(query(routes[0], run=run, worker=worker, span=span))
        if resp.status_code != 202 and len(routes) > 1:
            routes.pop(0)
            continue
        if resp.status_code != 202:
            return resp
        if time.monotonic() > deadline:
            raise AssertionError(f"{run}/{worker} still loading after {timeout} s: {resp.json}")
        time.sleep(0.02)


def wait_idle(client, timeout: float = 60.0) -> dict:
    """GET ``runs`` until nothing is loading; returns its body."""
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(query("runs")).json
        if not body["loading"]:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"still loading after {timeout} s: {body}")
        time.sleep(0.02)


def until(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll ``predicate()`` until truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless chromium driven by Playwright (browser tests only)."""
    from browser import launch

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


@pytest.fixture(scope="module")
def kineto_url():
    """A standalone server (subprocess) over the shared kineto_resnet50 traces."""
    from browser import KINETO, stepscope_server

    if not KINETO.is_dir():
        pytest.skip(NO_SHARED)
    with stepscope_server(KINETO) as base:
        yield base
