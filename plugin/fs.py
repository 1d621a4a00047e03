"""The filesystem seam: discovery, reading, cache keys, downloads and the static-file guard
reach files through a :class:`FileSystem`, never through ``os`` directly.

:func:`filesystem` picks one for a log-directory location: :class:`LocalFS` (plain ``os``
calls, the default and the fast path) for a local path or ``file://`` URL, and
:class:`FsspecFS` over `fsspec <https://filesystem-spec.readthedocs.io>`_ for any other
URL (``s3://``, ``gs://``, ``memory://`` ...; remote schemes need their fsspec package,
e.g. ``pip install stepscope[remote]``).

Example::

    fs, root = filesystem("s3://bucket/logs")
    for entry in fs.scandir(root):
        print(entry.name, entry.is_dir, fs.stat(entry.path).size)
    with fs.open(fs.join(root, "run1", "worker0.pt.trace.json.gz")) as f:
        head = f.read(8192)
"""

from __future__ import annotations

import os
import re
import stat as stat_mod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from .errors import Forbidden, NotFound, StepscopeError


@dataclass(frozen=True)
class Stat:
    """What a scan sees of a file: ``size`` in bytes, ``mtime_ns`` in ns since the epoch,
    ``identity``: what else must stay equal for the file to count as unchanged (the inode
    locally; the ETag or version id remotely, "" when the store has none)."""

    size: int
    mtime_ns: int
    identity: int | str


@dataclass(frozen=True)
class Entry:
    """One name in a folder listing (symlinks already followed)."""

    name: str
    path: str
    is_dir: bool
    is_file: bool


class FileSystem(Protocol):
    """The file operations Stepscope needs, for one kind of storage."""

    def open(self, path: str) -> BinaryIO: ...
    def stat(self, path: str) -> Stat: ...
    def scandir(self, folder: str) -> Iterator[Entry]: ...
    def realpath(self, path: str) -> str: ...
    def join(self, *parts: str) -> str: ...
    def is_inside(self, root: str, path: str) -> bool: ...
    def is_regular_file(self, path: str) -> bool: ...
    def open_inside(self, root: str, path: str) -> tuple[BinaryIO, Stat]: ...


class LocalFS:
    """The local disk through ``os`` (symlinks followed; ``realpath`` resolves them)."""

    remote = False

    def open(self, path: str) -> BinaryIO:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it

    def stat(self, path: str) -> Stat:
        st = os.stat(path)
        return Stat(st.st_size, st.st_mtime_ns, st.st_ino)

    def scandir(self, folder: str) -> Iterator[Entry]:
        with os.scandir(folder) as it:
            entries = list(it)
        for e in entries:
            try:
                is_dir = e.is_dir()  # follows symlinks
                is_file = e.is_file()
            except OSError:  # a dangling link, a permission problem: not a file
                is_dir = is_file = False
            yield Entry(e.name, e.path, is_dir, is_file)

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def is_inside(self, root: str, path: str) -> bool:
        """Whether ``path``, with every symlink resolved, lies inside ``root`` (resolved)."""
        try:
            real_root = os.path.realpath(root)
            real = os.path.realpath(path)
        except (OSError, ValueError):  # a NUL byte in the path: nothing is there
            return False
        return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)

    def is_regular_file(self, path: str) -> bool:
        try:
            return stat_mod.S_ISREG(os.stat(path).st_mode)
        except (OSError, ValueError):
            return False

    def open_inside(self, root: str, path: str) -> tuple[BinaryIO, Stat]:
        """Open the regular file ``path`` (links followed) only if it really lies inside
        ``root``: the check is made on the opened file (``/proc/self/fd``), so a link
        swapped in after a check cannot redirect it. Raises NotFound when it is gone or not
        a regular file, Forbidden when it lies outside ``root``."""
        name = os.path.basename(path)
        real_root = os.path.realpath(root)
        try:  # O_NONBLOCK: a FIFO swapped in must not hang the caller
            fd = os.open(os.path.realpath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except PermissionError as e:
            raise _unreadable(name, e) from None
        except OSError:
            raise _gone(name) from None
        f = os.fdopen(fd, "rb")
        try:
            proc = f"/proc/self/fd/{fd}"  # where the opened file really is (Linux)
            where = os.readlink(proc) if os.path.islink(proc) else os.path.realpath(path)
            if os.path.commonpath([real_root, where]) != real_root:
                raise _outside(name)
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise NotFound(f"{name} is not a file", "Reload the run list.", file=name)
        except BaseException:
            f.close()
            raise
        return f, Stat(st.st_size, st.st_mtime_ns, st.st_ino)


class FsspecFS:
    """Any fsspec filesystem (object stores have no symlinks: ``realpath`` is the path)."""

    remote = True

    def __init__(self, fs, protocol: str):
        self.fs = fs
        self.protocol = protocol

    def url(self, path: str) -> str:
        """``path`` as a URL with this filesystem's scheme: every path this class hands out
        is one, so :func:`filesystem_of` finds the filesystem again from the path alone."""
        return path if "://" in path else f"{self.protocol}://{path.lstrip('/')}"

    def open(self, path: str) -> BinaryIO:
        return self.fs.open(path, "rb")

    def refresh(self, folder: str) -> None:
        """Forget cached listings of ``folder`` and of every folder under it: the next scan
        lists the store again (fsspec keeps listings, so without this a re-scan would never
        see a new file). s3fs, gcsfs and adlfs's ``invalidate_cache(folder)`` forget that
        folder and its parents only: a file added to or rewritten in a run's folder was
        never seen until a restart."""
        try:
            self.fs.invalidate_cache(folder)
            cache = getattr(self.fs, "dircache", None)
            if cache:
                under = self.fs._strip_protocol(folder).rstrip("/") + "/"
                for key in [k for k in list(cache) if k.startswith(under)]:
                    cache.pop(key, None)
        except Exception:  # noqa: BLE001 - a store without a listing cache
            pass

    def stat(self, path: str) -> Stat:
        info = self.fs.info(path)
        return _stat_of(info)

    def scandir(self, folder: str) -> Iterator[Entry]:
        infos = self.fs.ls(folder, detail=True)
        if len(infos) == 1 and infos[0].get("type") == "file" and \
                self.url(infos[0]["name"].rstrip("/")) == folder.rstrip("/"):
            # fsspec lists a file as itself: the URL names a file, not a folder
            raise NotADirectoryError(20, "Not a directory", folder)
        for info in infos:
            path = self.url(info["name"].rstrip("/"))
            name = path.rsplit("/", 1)[-1]
            kind = info.get("type")
            yield Entry(name, path, kind == "directory", kind == "file")

    def realpath(self, path: str) -> str:
        return path.rstrip("/") or path

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))

    def is_inside(self, root: str, path: str) -> bool:
        root, path = root.rstrip("/"), path.rstrip("/")
        return path == root or (path.startswith(root + "/") and "/../" not in path + "/")

    def is_regular_file(self, path: str) -> bool:
        try:
            return self.fs.info(path).get("type") == "file"
        except (OSError, ValueError):
            return False

    def open_inside(self, root: str, path: str) -> tuple[BinaryIO, Stat]:
        """Open ``path`` if it lies inside ``root`` (object stores have no links)."""
        name = path.rsplit("/", 1)[-1]
        if not self.is_inside(root, path):
            raise _outside(name)
        try:
            # asked of the store now, not its cached listing, and a first byte read: opening
            # is lazy, so a store down or an object gone or rewritten failed only while the
            # body streamed (200, the old length, no bytes)
            self.fs.invalidate_cache(path)
            st = self.stat(path)
            f = self.open(path)
        except PermissionError as e:
            raise _unreadable(name, e) from None
        except (OSError, ValueError):
            raise _gone(name) from None
        except Exception as e:  # noqa: BLE001 - the store's own errors (botocore, aiohttp)
            raise _unreachable(name, e) from None
        try:
            f.read(1)
            f.seek(0)
        except Exception as e:  # noqa: BLE001
            f.close()
            if isinstance(e, PermissionError):
                raise _unreadable(name, e) from None
            if isinstance(e, (FileNotFoundError, ValueError)):
                raise _gone(name) from None
            raise _unreachable(name, e) from None
        return f, st


def _unreachable(name: str, e: Exception) -> StepscopeError:
    return StepscopeError(f"{name} cannot be read from the store",
                          f"{scrub(str(e)) or type(e).__name__}: is the storage service "
                          "reachable? Try again.", file=name, status=503)


def _gone(name: str) -> NotFound:
    return NotFound(f"{name} is gone", "The file was deleted or moved since it was "
                    "analysed; reload the run list.")


def _unreadable(name: str, e: OSError) -> Forbidden:
    return Forbidden(f"{name} cannot be read", f"{e.strerror or e}: the server's user may not "
                     "read this file now; fix its permissions.", file=name)


def _outside(name: str) -> Forbidden:
    return Forbidden(f"{name} is not served", f"{name} is a link to a file outside the log "
                     "directory; Stepscope shows its views but serves only files inside the "
                     "log directory. Download it from where it lives.", file=name)


def _stat_of(info: dict) -> Stat:
    """A :class:`Stat` from an fsspec ``info`` dict (keys differ between stores)."""
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified") \
        or info.get("created") or 0
    if hasattr(mtime, "timestamp"):  # datetime (s3fs, adlfs)
        mtime = mtime.timestamp()
    try:
        mtime_ns = int(float(mtime) * 1e9)
    except (TypeError, ValueError):  # a string date some stores give: size + ETag decide
        mtime_ns = 0
    identity = info.get("ETag") or info.get("etag") or info.get("VersionId") \
        or info.get("generation") or info.get("md5Hash") or ""
    return Stat(int(info.get("size") or 0), mtime_ns, str(identity).strip('"'))


def is_url(location: str) -> bool:
    """Whether ``location`` names a filesystem by URL scheme (``s3://...``), not a local path."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.isascii() and scheme.replace("+", "").isalnum() and len(scheme) > 1


LOCAL = LocalFS()


def filesystem(location: str) -> tuple[LocalFS | FsspecFS, str]:
    """``(filesystem, root path in it)`` for a log-directory location (path or URL);
    a remote root stays a URL (``memory://logs``), a local one becomes absolute.

    Raises ``ValueError`` with what to install when the scheme needs a missing package.
    """
    if not is_url(location):
        return LOCAL, os.path.abspath(location)
    scheme, _, rest = location.partition("://")
    if scheme == "file":
        return LOCAL, os.path.abspath(rest)
    if ":" in rest.split("/", 1)[0].rpartition("@")[0]:
        raise ValueError(f"{redact(location)}: credentials in the URL (user:password@) are "
                         "not used; give them through the environment or the storage "
                         "library's configuration (e.g. AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
    fs = _fsspec(location, scheme)
    return fs, fs.url(location)


def filesystem_of(path: str) -> LocalFS | FsspecFS:
    """The filesystem a path handed out by a :class:`FileSystem` lives on."""
    return filesystem(path)[0] if is_url(path) else LOCAL


def redact(location: str) -> str:
    """``location`` fit to show in a page, an error or a log: a URL loses any
    ``user:password@`` and its query string and fragment (SAS tokens, signed-URL
    signatures); a local path is unchanged. Credentials come from the environment and
    each filesystem's own configuration, never from what Stepscope shows."""
    if not is_url(location):
        return location
    scheme, _, rest = location.partition("://")
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    host, slash, path = rest.partition("/")
    user, at, hostname = host.rpartition("@")
    if at and ":" in user:  # user:password@ (abfs's container@account has no password)
        host = hostname
    return f"{scheme}://{host}{slash}{path}"


#: Environment variables whose values are secrets (scrubbed from error texts: :func:`scrub`).
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|CREDENTIAL|ACCESS_KEY|ACCOUNT_KEY|SAS|"
                          r"CONNECTION_STRING", re.I)


#: A query string of key=value pairs right after a path (not a sentence's "?").
_QUERY = re.compile(r"(?<=[\w/.\-])\?[^\s'\"<>?]*=[^\s'\"<>]*")
#: ``user:password@`` before a host.
_USER_PASSWORD = re.compile(r"(?<![\w/])[^\s/@:'\"<>]+:[^\s/@'\"<>]+@(?=[\w.\-\[])")


def scrub(text: str) -> str:
    """``text`` (a storage library's error message, say) with every URL redacted
    (:func:`redact`) and the value of any secret-looking environment variable replaced
    by ``***``."""
    text = re.sub(r"[A-Za-z][A-Za-z0-9+]+://[^\s'\"<>]+", lambda m: redact(m.group(0)), text)
    # the same parts where a library wrote the path or address without its scheme (s3fs's
    # "bucket/key?X-Amz-Signature=...", distributed's "user:password@host:port")
    text = _QUERY.sub("", text)
    text = _USER_PASSWORD.sub("", text)
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    return text


def listing_error(location: str, exc: BaseException) -> StepscopeError:
    """The error to answer when the log directory ``location`` itself cannot be listed:
    404 for a missing bucket or prefix, 403 for denied access, 503 for anything else
    (the store unreachable); each names the (redacted) URL, never a credential."""
    url = redact(location)
    reason = scrub(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
    reason = reason.rstrip(". ")  # ("...in our records.. Check": the sentence ends below)
    if isinstance(exc, NotADirectoryError):
        return NotFound(f"{url} is not a folder", f"{reason}. Give the folder that holds the "
                        "traces (or their run folders), not a file.")
    if isinstance(exc, FileNotFoundError):
        return NotFound(f"{url} not found", f"{reason}. Check the bucket and prefix of the "
                        "log directory URL.")
    if isinstance(exc, PermissionError) or type(exc).__name__ == "NoCredentialsError":
        # (botocore's NoCredentialsError: no credentials found at all)
        return Forbidden(f"access to {url} denied", f"{reason}. Check the credentials the "
                         "storage library reads from the environment (e.g. AWS_ACCESS_KEY_ID "
                         "and AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and the permissions they "
                         "grant.")
    return StepscopeError(f"cannot list {url}", f"{reason}. Is the storage service "
                          "reachable? The list is tried again at the next scan.", status=503)


def _fsspec(location: str, scheme: str) -> FsspecFS:
    try:
        import fsspec
    except ImportError:
        raise ValueError(f"{location}: reading {scheme}:// needs fsspec; "
                         "install it with: pip install 'stepscope[remote]'") from None
    try:
        fs, _path = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as e:
        raise ValueError(f"{scheme}:// needs a filesystem package ({scrub(str(e))}); "
                         "install it with: pip install 'stepscope[remote]'") from None
    return FsspecFS(fs, scheme)
