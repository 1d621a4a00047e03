"""``plugin/api.md`` documents every route the app registers, and nothing else (STYLE §7)."""

from __future__ import annotations

import re

from conftest import PREFIX, ROOT

API_MD = ROOT / "plugin" / "api.md"
HEADING = re.compile(r"^### `([^`]+)`", re.MULTILINE)


def registered_routes(views_module, tmp_path) -> set[str]:
    from stepscope.web.app import app_store, create_app

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


def test_every_registered_view_has_its_frontend_module():
    """The frontend loads ``views/<name in lower case>.js`` for a tab the server lists."""
    from stepscope.views import VIEWS

    names = [v.name for v in VIEWS]
    assert len(set(names)) == len(names)
    for v in VIEWS:
        assert v.frontend == v.name.lower(), v
        assert (ROOT / "frontend" / "views" / f"{v.frontend}.js").is_file(), v


def test_view_parameters_are_validated_once_with_the_allowed_values():
    """A declared choice parameter answers 400 naming the allowed values, for every route."""
    import pytest

    from stepscope.errors import BadParameter
    from stepscope.views import ROUTES

    checked = 0
    for path, (_view, route) in ROUTES.items():
        for p in route.params:
            if p.choices:
                with pytest.raises(BadParameter) as e:
                    route.validated({p.name: "no-such-value"})
                assert all(c in e.value.detail for c in p.choices), path
                assert route.validated({})[p.name] == p.choices[0]
                checked += 1
    assert checked >= 5  # operation, operation/table, operation/stack, kernel/table, kernel
