"""Capture bundles on any filesystem ``tf.io.gfile`` supports (gs://, s3:// and hdfs:// with tensorflow-io,
ram:// in tests, local paths): publishing a finished local bundle there and pulling one back.

A remote bundle has the same layout as a local one. Object stores (GCS) and ram:// cannot rename a directory
atomically, so `publish_bundle` copies every listed file first and manifest.json last: a remote folder is a
complete bundle exactly when its manifest.json exists. `fetch_bundle` trusts nothing remote: it reads the
manifest, copies only the files it lists (each checked for size and sha256 while it streams) into a hidden
temporary directory, renames that into place and verifies the result with the `verify` it is given (the caller
passes ``reader.CaptureBundle.load``: this module depends on ``bundle_format`` only).

TensorFlow is imported inside the functions that touch a filesystem, never when this module is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyadapter.capture import bundle_format as bundle
from pyadapter.capture import integrity

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

# Filesystems TensorFlow itself lacks; tensorflow-io registers them when imported.
_PLUGIN_HINT = "install tensorflow-io (`pip install tensorflow-io`) for s3://, hdfs:// and az:// URLs"

Progress = Callable[[int, int], None]


def is_remote(location: str | os.PathLike[str]) -> bool:
    """True for a URL (``gs://b/x``, ``ram://x``, ``s3://...``); False for local paths, Path objects and file://.

    A one-letter "scheme" is a Windows drive (``C://x``), not a URL.
    """
    if not isinstance(location, str):
        return False
    match = _SCHEME.match(location)
    return match is not None and len(match.group(1)) > 1 and match.group(1).lower() != "file"


# Beside a bundle pulled from elsewhere (`nanlens pull`, "Pull Capture Bundle"): ``<bundle>.pulled``, never inside
# (a bundle's files are hashed). The editor never locates such a bundle by itself.
PULLED_SUFFIX = ".pulled"


def pulled_marker(bundle: str | os.PathLike[str]) -> str:
    return os.fspath(bundle).rstrip(os.sep) + PULLED_SUFFIX


def mark_pulled(bundle: str | os.PathLike[str]) -> None:
    """Remember beside the bundle that it came from elsewhere (best effort: a read-only folder keeps no mark)."""
    try:
        with open(pulled_marker(bundle), "w", encoding="utf-8") as fh:
            fh.write('{"pulled": true}\n')
    except OSError:
        pass


def join(base: str, *parts: str) -> str:
    """`base` with `parts` appended, one slash between each (``join("gs://b/runs/", "x")`` is ``gs://b/runs/x``).

    For a local path (no scheme) it is `os.path.join`.
    """
    match = _SCHEME.match(base)
    if match is None:
        return os.path.join(base, *parts)
    prefix = match.group(0)
    rest = base[len(prefix) :]
    lead = "/" if rest.startswith("/") else ""  # file:///tmp keeps its absolute path
    pieces = [p for p in rest.split("/") if p] + [p for part in parts for p in part.split("/") if p]
    return prefix + lead + "/".join(pieces)


def _strip_trailing_slash(location: str) -> str:
    match = _SCHEME.match(location)
    if match is None:
        stripped = location.rstrip("/" + os.sep)
        return stripped or location[:1]  # "/" stays "/"
    return join(location)


def _basename(location: str) -> str:
    """The last path part of a URL or path: the bundle's name (``gs://b/runs/seq-step3/`` -> ``seq-step3``)."""
    match = _SCHEME.match(location)
    rest = location[len(match.group(0)) :] if match else location.replace(os.sep, "/")
    parts = [p for p in rest.split("/") if p]
    return parts[-1] if parts else ""


def _local_name(location: str) -> str:
    """A safe local directory name for the pulled bundle (a URL's last part can be anything, even ``..``)."""
    name = _basename(location)
    if name in ("", ".", "..") or name.startswith(".") or any(c in name for c in '\\:*?"<>|\x00'):
        return "bundle"
    return name


def _one_line(error: BaseException) -> str:
    text = str(getattr(error, "message", None) or error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _gfile(location: str) -> Any:
    """tf.io.gfile, after making sure TensorFlow can open `location`'s scheme (a one-line BundleError if not)."""
    import tensorflow as tf

    match = _SCHEME.match(location)
    if match is not None:
        scheme = match.group(1).lower()
        if scheme not in tf.io.gfile.get_registered_schemes():
            try:  # registers s3, hdfs, az, http... as a side effect
                import tensorflow_io  # noqa: F401
            except ImportError:
                pass
            if scheme not in tf.io.gfile.get_registered_schemes():
                raise bundle.BundleError(f"TensorFlow cannot open {scheme}:// URLs here: {_PLUGIN_HINT}")
    return tf.io.gfile


def _op_errors() -> tuple[type[BaseException], ...]:
    import tensorflow as tf

    return (tf.errors.OpError, OSError)


@dataclass(frozen=True)
class _Entry:
    """One file the manifest lists."""

    name: str
    size: int
    sha256: str


def _entries(manifest: dict[str, Any]) -> list[_Entry]:
    """The manifest's file list, checked: safe relative names, a size and a sha256 for each (IntegrityError)."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise integrity.IntegrityError("manifest 'files' is not a mapping")
    entries = []
    for name, entry in sorted(files.items()):
        integrity.check_relative_path(name)
        if name == bundle.MANIFEST:
            raise integrity.IntegrityError("manifest lists manifest.json itself")
        if not bundle.is_bundle_file(name):  # refused before a byte of it is copied
            raise bundle.BundleError(
                f"{name} is not a file a bundle may hold (only .npz arrays, model.keras, checkpoint)"
            )
        if not isinstance(entry, dict):
            raise integrity.IntegrityError(f"manifest entry for {name} is not an object")
        size, digest = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise integrity.IntegrityError(f"manifest entry for {name} has no valid size")
        if not isinstance(digest, str) or re.fullmatch(r"[0-9a-f]{64}", digest) is None:
            raise integrity.IntegrityError(f"manifest entry for {name} has no valid sha256")
        entries.append(_Entry(name, size, digest))
    return entries


def _parse_manifest(data: bytes) -> dict[str, Any]:
    """manifest.json bytes -> dict of a supported format (BundleError otherwise)."""
    return bundle.parse_manifest(data)


# --------------------------------------------------------------------------------------------------------------
# Publishing


def publish_bundle(local_bundle: Path, dest: str) -> str:
    """Copies a complete local bundle (as BundleWriter writes it) to the folder URL `dest`; returns the final URL.

    If `dest` already holds a bundle (a manifest.json), ``dest-1``, ``dest-2``, ... is used instead, as
    BundleWriter.commit does. Files are copied first and manifest.json last, so readers never see an incomplete
    bundle. Raises BundleError (one line) on any failure; a failed publish leaves no manifest.json behind.
    """
    local = Path(local_bundle)
    try:
        manifest_bytes = integrity.resolve_inside(local, bundle.MANIFEST).read_bytes()
        entries = _entries(_parse_manifest(manifest_bytes))
    except integrity.IntegrityError as error:
        if not os.path.lexists(local / bundle.MANIFEST):
            raise bundle.BundleError(f"{local}: no manifest.json (not a complete bundle)") from None
        raise bundle.BundleError(f"{local}: {error}") from None
    except bundle.BundleError as error:
        raise bundle.BundleError(f"{local}: {error}") from None
    except OSError as error:
        raise bundle.BundleError(f"{local}: cannot read the bundle: {error.strerror or error}") from None

    base = _strip_trailing_slash(os.fspath(dest))
    gfile = _gfile(base)
    target = base
    try:
        target = _free_target(gfile, base)
        gfile.makedirs(target)
        for entry in entries:
            _upload(gfile, local, entry, join(target, entry.name))
        # Written under another name and renamed: where rename is atomic (local disks, HDFS) no reader ever sees
        # half a manifest; on object stores the object appears whole on close anyway. The name must not start
        # with "manifest.json": ram:// answers exists() by prefix, so it would look like a finished bundle.
        partial = join(target, f".{bundle.MANIFEST}{bundle.PARTIAL_SUFFIX}")
        _remove_if_exists(gfile, partial)
        with gfile.GFile(partial, "wb") as out:
            out.write(manifest_bytes)
        gfile.rename(partial, join(target, bundle.MANIFEST), overwrite=False)
    except _op_errors() as error:
        raise bundle.BundleError(f"cannot publish {local} to {target}: {_one_line(error)}") from None
    return target


def _free_target(gfile: Any, base: str) -> str:
    for attempt in range(1000):
        target = base if attempt == 0 else f"{base}-{attempt}"
        if not gfile.exists(join(target, bundle.MANIFEST)):
            return target
    raise bundle.BundleError(f"no free bundle name for {base}")


def _remove_if_exists(gfile: Any, url: str) -> None:
    """A retried publish may find a file from the failed attempt: ram:// appends on "wb" instead of truncating.
    (No exists() probe first: ram:// answers it by prefix, true for batch.npz when only batch.npz.x exists.)"""
    import tensorflow as tf

    try:
        gfile.remove(url)
    except tf.errors.NotFoundError:
        pass


def _upload(gfile: Any, local: Path, entry: _Entry, url: str) -> None:
    """Copies one bundle file, hashing it on the way: it must still be what the manifest says."""
    try:
        source = integrity.resolve_inside(local, entry.name)
    except integrity.IntegrityError as error:
        raise bundle.BundleError(f"{local}: {error}") from None
    parent = url.rsplit("/", 1)[0]
    if "/" in entry.name:
        gfile.makedirs(parent)
    _remove_if_exists(gfile, url)
    digest = hashlib.sha256()
    size = 0
    with open(source, "rb") as handle, gfile.GFile(url, "wb") as out:
        while chunk := handle.read(integrity.CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size != entry.size or digest.hexdigest() != entry.sha256:
        raise bundle.BundleError(
            f"{local}: {entry.name} changed since the bundle was written (not published)"
        )


# --------------------------------------------------------------------------------------------------------------
# Small files on any filesystem (multi-worker shards staged beside a bundle)


def capture_location(capture_dir: str | os.PathLike[str]) -> Path | str:
    """Where a guard writes bundles: a URL stays as given (bundles go there through tf.io.gfile), a local
    folder becomes an absolute Path."""
    return str(capture_dir) if is_remote(capture_dir) else Path(capture_dir).absolute()


def write_file(location: str, data: bytes) -> None:
    """Writes `data` to `location` (a URL or local path), creating its folder; replaces an existing file."""
    gfile = _gfile(location)
    gfile.makedirs(location.rsplit("/", 1)[0])
    _remove_if_exists(gfile, location)
    with gfile.GFile(location, "wb") as handle:
        handle.write(data)


def read_file(location: str) -> bytes:
    with _gfile(location).GFile(location, "rb") as handle:
        return handle.read()


def remove_tree(location: str) -> None:
    """Removes a folder and everything in it; a folder that is gone already, or cannot be removed, is left be
    (callers use it for leftovers that do no harm)."""
    harmless: tuple[type[BaseException], ...] = (bundle.BundleError, *_op_errors())
    try:
        gfile = _gfile(location)
        if gfile.exists(location):
            gfile.rmtree(location)
    except harmless:
        pass


# --------------------------------------------------------------------------------------------------------------
# Fetching


# The most a pull copies unless told otherwise (`nanlens pull --max-size`): a bundle holds the weights and the
# optimizer's slots once (weights.npz; older bundles twice), so this fits a model of several billion float32
# parameters.
DEFAULT_MAX_PULL_BYTES = 32 << 30
_FREE_SPACE_MARGIN = 64 << 20


def fetch_bundle(
    url: str,
    local_parent: Path,
    progress: Progress | None = None,
    max_bytes: int = DEFAULT_MAX_PULL_BYTES,
    *,
    verify: Callable[[Path], object],
) -> Path:
    """Copies the bundle at `url` (a URL or a local folder) into ``local_parent/<its name>`` and verifies it.

    Before any byte is copied, the manifest's file list is checked: safe names, only files a bundle may hold,
    and a total size of at most `max_bytes` that also fits the free space of `local_parent`. Only the files
    manifest.json lists are copied, each checked for size and sha256 as it streams (a file larger than listed
    stops the pull at once); the copy is made in a hidden temporary directory and renamed into place (``-1``,
    ``-2``... if the name is taken), then checked with `verify(path)` (``CaptureBundle.load``: a BundleError if it
    is not a valid bundle). On any failure nothing is left in `local_parent` and a one-line BundleError is raised.
    `progress(done_bytes, total_bytes)` is called as bytes arrive.
    """
    location = os.fspath(url)
    if _SCHEME.match(location) is None:
        location = os.path.abspath(location)  # gfile's idea of the working directory need not be ours
    source = _strip_trailing_slash(location)
    gfile = _gfile(source)
    manifest_bytes = _read_manifest(gfile, source, url)
    try:
        manifest = _parse_manifest(manifest_bytes)
        entries = _entries(manifest)
    except (bundle.BundleError, integrity.IntegrityError) as error:
        raise bundle.BundleError(f"{url}: {error}") from None

    total = sum(entry.size for entry in entries)
    if total > max_bytes:
        raise bundle.BundleError(
            f"{url}: the bundle is {_size_text(total)}, more than the {_size_text(max_bytes)} a pull copies "
            "(raise it with --max-size)"
        )
    parent = Path(local_parent)
    free = _free_bytes(parent)
    if free is not None and total + _FREE_SPACE_MARGIN > free:
        raise bundle.BundleError(
            f"{url}: the bundle is {_size_text(total)}, {parent} has {_size_text(free)} free"
        )
    done = 0
    if progress is not None:
        progress(0, total)
    try:
        with bundle.BundleWriter(parent, _local_name(source)) as writer:
            for entry in entries:
                done = _download(gfile, source, url, entry, writer.file(entry.name), done, total, progress)
            final = writer.commit(manifest)
    except _op_errors() as error:
        raise bundle.BundleError(f"cannot pull {url} into {parent}: {_one_line(error)}") from None

    try:
        verify(final)
    except bundle.BundleError as error:
        shutil.rmtree(final, ignore_errors=True)
        message = str(error)
        prefix = f"{final}: "
        raise bundle.BundleError(
            f"{url}: {message[len(prefix) :] if message.startswith(prefix) else message}"
        ) from None
    return final


def _size_text(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def parse_size(text: str) -> int:
    """``"20G"``, ``"512M"``, ``"100k"``, ``"1.5GB"`` or plain bytes -> bytes (binary units); ValueError if not."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(value[-1:], 1)
    number = float(value[:-1] if scale > 1 else value)
    if not 0 < number < float(1 << 60) or number != number:
        raise ValueError(f"not a size: {text!r}")
    return int(number * scale)


def _free_bytes(parent: Path) -> int | None:
    """Free bytes on the filesystem `parent` is (or will be) on; None if that cannot be told."""
    probe = parent.absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def _read_manifest(gfile: Any, source: str, url: str) -> bytes:
    import tensorflow as tf

    manifest_url = join(source, bundle.MANIFEST)
    try:
        too_large = gfile.stat(manifest_url).length > bundle.MAX_MANIFEST_BYTES
        if not too_large:
            with gfile.GFile(manifest_url, "rb") as handle:
                data = handle.read(
                    bundle.MAX_MANIFEST_BYTES + 1
                )  # stat may be stale: never read more than this
            too_large = len(data) > bundle.MAX_MANIFEST_BYTES
    except tf.errors.NotFoundError:
        raise bundle.BundleError(f"no bundle at {url} (no manifest.json)") from None
    except _op_errors() as error:
        raise bundle.BundleError(f"{url}: cannot read manifest.json: {_one_line(error)}") from None
    if too_large:
        raise bundle.BundleError(f"{url}: manifest.json is implausibly large")
    return data


def _download(
    gfile: Any,
    source: str,
    url: str,
    entry: _Entry,
    target: Path,
    done: int,
    total: int,
    progress: Progress | None,
) -> int:
    """Streams one listed file to `target`, checking size and sha256 on the way; returns the new byte count."""
    import tensorflow as tf

    digest = hashlib.sha256()
    size = 0
    try:
        with gfile.GFile(join(source, entry.name), "rb") as handle, open(target, "wb") as out:
            while chunk := handle.read(integrity.CHUNK):
                size += len(chunk)
                if size > entry.size:  # stop at once: a file grown remotely may be of any size
                    raise bundle.BundleError(
                        f"{url}: {entry.name} is larger than its manifest says (changed)"
                    )
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
    except tf.errors.NotFoundError:
        raise bundle.BundleError(f"{url}: {entry.name} is listed in the manifest but missing") from None
    except tf.errors.OpError as error:
        raise bundle.BundleError(f"{url}: cannot read {entry.name}: {_one_line(error)}") from None
    if size != entry.size:
        raise bundle.BundleError(
            f"{url}: {entry.name} has {size} bytes, manifest says {entry.size} (changed)"
        )
    if digest.hexdigest() != entry.sha256:
        raise bundle.BundleError(f"{url}: {entry.name} does not match its sha256 in the manifest (changed)")
    return done
