"""Standalone server: ``stepscope [serve] DIR [--host H] [--port P] ...`` (SPEC §3.1), and
the server-less ``stepscope report PATH`` / ``stepscope summary PATH`` (SPEC §4.5,
:mod:`stepscope.share.commands`).

``serve`` is the default sub-command: ``stepscope DIR`` and ``stepscope serve DIR`` are the
same (a log directory literally named ``serve`` is ``stepscope serve serve`` or ``./serve``).

The first line printed is ``Serving on http://HOST:PORT/`` (tools and tests wait for it;
``--port 0`` picks a free port and prints the real one). Exit status: 2 for a missing
log directory or bad arguments, 1 when the port is busy, 0 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from . import __version__
from .fs import filesystem, is_url, listing_error, redact, scrub
from .processes import small_pages, start_forkserver
from .web.hosts import answer_local_hosts_only, is_loopback

#: waitress request threads (requests are cheap: analysis runs on the store's threads)
SERVER_THREADS = 8
#: Open connections waitress keeps (its default, 100, lets 100 idle or half-sent requests
#: starve every other client; idle ones cost a file descriptor and a few KB each).
CONNECTION_LIMIT = 2000
#: Seconds a connection may stay silent (no request in progress) before it is closed, and
#: how often waitress looks for such connections.
CHANNEL_TIMEOUT_S = 30
CLEANUP_INTERVAL_S = 5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stepscope",
        usage="stepscope [serve] DIR [options]",
        description="Serve the Stepscope PyTorch profiler dashboard for the traces under DIR "
                    "(a folder, or a URL such as s3://bucket/logs with stepscope[remote]). "
                    "'stepscope DIR' and 'stepscope serve DIR' are the same.",
        epilog="Without a server: 'stepscope report PATH -o report.html' (one self-contained "
               "HTML file) and 'stepscope summary PATH' (terminal tables); --help on each.")
    p.add_argument("logdir", metavar="DIR", nargs="?",
                   help="log directory: every folder holding *.pt.trace.json[.gz] is a run")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=6007,
                   help="port (default 6007; 0: pick a free one)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests for this host name (a reverse proxy's), "
                        "repeatable; on a loopback --host only localhost, 127.0.0.1 and [::1] "
                        "are answered")
    p.add_argument("--cache-dir", metavar="D", help="folder for the analysis cache")
    p.add_argument("--no-cache", action="store_true", help="do not use the analysis cache")
    p.add_argument("--reload-interval", type=float, default=5.0, metavar="S",
                   help="seconds between scans for new or changed traces (default 5; 0: "
                        "scan once)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="traces analysed in parallel (default: half the cores, 2 to 4)")
    p.add_argument("--scheduler", metavar="ADDR",
                   help="analyse on the Dask cluster of this scheduler (tcp://HOST:8786; "
                        "needs stepscope[dask]) instead of local worker processes")
    p.add_argument("--version", action="version", version=f"stepscope {__version__}")
    return p


def url_host(host: str) -> str:
    """``::1`` -> ``[::1]`` for URLs."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


#: Sub-commands: ``stepscope COMMAND ...``; without one, ``stepscope DIR`` serves.
COMMANDS = ("serve", "report", "summary")


#: The longest pause between scans of the log directory (seconds; a day).
MAX_RELOAD_INTERVAL_S = 86_400


def main(argv: list[str] | None = None) -> int:
    """``stepscope [serve] DIR [options]`` (serve is the default command),
    ``stepscope report PATH -o FILE``, ``stepscope summary PATH [options]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("report", "summary"):
        from .share import commands

        run = commands.report_main if argv[0] == "report" else commands.summary_main
        try:
            return run(argv[1:])
        except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (nothing half-written)
            print(f"stepscope {argv[0]}: interrupted", file=sys.stderr)
            return 130
    if argv and argv[0] == "serve":
        argv = argv[1:]
    return serve(argv)


def serve(argv: list[str]) -> int:
    """The standalone server (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.logdir is None:
        parser.error("the log directory DIR is required")
    if is_url(args.logdir):
        try:
            fs, root = filesystem(args.logdir)
            next(iter(fs.scandir(root)), None)  # a missing bucket, denied access: say so now
        except ValueError as e:
            parser.error(scrub(str(e)))
        except Exception as e:  # noqa: BLE001 - a storage library's own errors too
            error = listing_error(args.logdir, e)
            parser.error(f"{error}: {error.detail}")
    elif not os.path.isdir(args.logdir):
        parser.error(f"log directory {args.logdir!r} does not exist or is not a folder")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if not 0 <= args.reload_interval <= MAX_RELOAD_INTERVAL_S:  # (nan too)
        parser.error(f"--reload-interval must be 0..{MAX_RELOAD_INTERVAL_S:,} seconds, got "
                     f"{args.reload_interval}")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # `kill` shuts down cleanly, workers included, from the very start (issue 12: a SIGTERM
    # while the forkserver starts hung the server)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _serve(args)
    except KeyboardInterrupt:
        return 0
    finally:
        _exit_soon(EXIT_GRACE_S)


def _serve(args: argparse.Namespace) -> int:
    if args.scheduler is None:  # local workers: their forkserver starts while we do
        start_forkserver()
    small_pages()  # for the timelines this process loads (widened from the cache)
    from waitress.server import create_server

    _raise_fd_limit(CONNECTION_LIMIT + 1000)  # room for the connections and the trace files
    from .web.app import app_store, create_app

    try:
        app = create_app(args.logdir, reload_interval=args.reload_interval, jobs=args.jobs,
                         cache_dir=args.cache_dir, no_cache=args.no_cache, start=False,
                         scheduler=args.scheduler)
    except Exception as e:
        if type(e).__name__ != "SchedulerUnavailable":  # (distributed is optional)
            raise
        print(f"stepscope: {e}", file=sys.stderr)
        return 2
    if is_loopback(args.host):
        answer_local_hosts_only(app, also=args.allow_host)
    try:
        # poll(), not select(): select fails once the process holds more than 1024 fds
        server = create_server(app, host=args.host, port=args.port, threads=SERVER_THREADS,
                               ident="stepscope", asyncore_use_poll=True,
                               connection_limit=CONNECTION_LIMIT,
                               channel_timeout=CHANNEL_TIMEOUT_S,
                               cleanup_interval=CLEANUP_INTERVAL_S)
    except OSError as e:
        print(f"stepscope: cannot listen on {args.host}:{args.port}: {e.strerror or e}. "
              "Is another server using that port? Pick another with --port (0: any free "
              "port).", file=sys.stderr)
        return 1
    except ValueError:  # waitress: a host name that does not resolve
        print(f"stepscope: cannot listen on {args.host!r}: not an address or host name of "
              "this machine (--host 127.0.0.1: this machine only; 0.0.0.0: every "
              "interface).", file=sys.stderr)
        return 1
    port = getattr(server, "effective_port", None) or server.effective_listen[0][1]
    if not is_loopback(args.host):
        shown = redact(args.logdir) if is_url(args.logdir) else os.path.abspath(args.logdir)
        print(f"stepscope: warning: listening on {args.host}: anyone who can reach this "
              "machine on that port can read the traces under "
              f"{shown}. Use the default 127.0.0.1 and an SSH tunnel "
              "for private data.", file=sys.stderr, flush=True)
    print(f"Serving on http://{url_host(args.host)}:{port}/", flush=True)
    store = app_store(app)
    try:
        store.start()
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not stop the cleanup
        store.close(timeout=1.0)
        server.close()
    return 0


def _raise_fd_limit(wanted: int) -> None:
    """Raise this process's open-file limit to ``wanted`` (at most the hard limit)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


#: Seconds the interpreter gets to exit after the server stopped; then it ends at once
#: (a thread or child stuck past the cleanup must not keep the process alive).
EXIT_GRACE_S = 5.0


def _interrupt(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup runs undisturbed
    raise KeyboardInterrupt


def _exit_soon(grace_s: float) -> None:
    """End this process ``grace_s`` seconds from now if it is still running then: the
    cleanup (the analyser's ``close``, at exit at the latest) has ended the workers; the
    forkserver and the resource tracker end once this process is gone."""
    def stop() -> None:
        time.sleep(grace_s)
        os._exit(0)
    threading.Thread(target=stop, daemon=True, name="stepscope-exit").start()


if __name__ == "__main__":
    sys.exit(main())
