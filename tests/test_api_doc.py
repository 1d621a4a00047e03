"""``plugin/api.md`` documents every route the app registers, and nothing else (STYLE §7)."""

from __future__ import annotations

import re

from conftest import PREFIX, ROOT

API_MD = ROOT / "plugin" / "api.md"
HEADING = re.compile(r"^### `([^`]+)`", re.MULTILINE)


def registered_routes(views_module, tmp_path) -> set[str]:
    from stepscope.app import app_store, create_app

    app = create_app(str(tmp_path), start=False)
    app_store(app).close()
    return {rule.rule[len(PREFIX):] for rule in app.url_map.iter_rules()
            if rule.rule.startswith(PREFIX + "/")}


def test_every_route_is_documented(views_module, tmp_path):
    documented = set(HEADING.findall(API_MD.read_text(encoding="utf-8")))
    routes = registered_routes(views_module, tmp_path)
    assert {"/runs", "/workers", "/spans", "/views", "/notes", "/version"} <= routes
    missing = sorted(routes - documented)
    assert not missing, f"routes missing from plugin/api.md (add a '### `route`' section): {missing}"
    stale = sorted(documented - routes)
    assert not stale, f"plugin/api.md documents routes the app does not register: {stale}"


def test_every_view_route_is_registered(views_module, tmp_path):
    routes = registered_routes(views_module, tmp_path)
    assert {f"/{r}" for r in views_module.ViewSet.ROUTES} <= routes
