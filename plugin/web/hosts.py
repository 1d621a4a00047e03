"""Which host names are this machine: the default bind address and the DNS-rebinding guard."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

#: Names of this machine besides loopback addresses (RFC 6761 adds ``*.localhost``).
LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def is_loopback(host: str) -> bool:
    """Is ``host`` (a name or an address, ``[::1]`` too) this machine only?"""
    host = host.lower().rstrip(".")
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def answer_local_hosts_only(app, also: Iterable[str] = ()) -> None:
    """Refuse (403) requests to ``app`` whose ``Host`` header is not a name of this machine
    (or one of ``also``: a reverse proxy's names, ``--allow-host``).

    A server bound to 127.0.0.1 is otherwise readable by any web page the user visits,
    through DNS rebinding: a name of the attacker's that resolves to 127.0.0.1 once the page
    has loaded makes the browser send it the page's requests (``Host: attacker.example``).
    For servers bound to a loopback address; one bound to every interface (``--host
    0.0.0.0``) is reached by other names on purpose.
    """
    from flask import request

    from ..errors import StepscopeError, echo

    allowed = {name.lower().rstrip(".") for name in also}

    def check() -> None:
        name = (urlsplit(f"//{request.host}").hostname or "").rstrip(".")
        if not (is_loopback(name) or name in allowed):
            raise StepscopeError("not a local host name", "This server answers requests for "
                                 f"localhost only (this one named {echo(request.host)}). Open "
                                 "it as http://127.0.0.1:PORT/; behind a reverse proxy, start "
                                 "it with --allow-host NAME; --host 0.0.0.0 serves every "
                                 "interface and name.", status=403)
    app.before_request(check)
