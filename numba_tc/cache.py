"""The on-disk cache of compiled kernels (cubins), shared by every process of a user.

An entry is one file, named by the SHA-256 of its *key material* (everything that decides the
cubin: see ``build.key_material``), holding a header line with that material and the payload's
size and SHA-256, then the cubin. Writers write a temporary file in the same folder and rename
it into place (atomic on POSIX and Windows), so concurrent processes never see half an entry;
a reader that finds an entry whose header, material or checksum does not match deletes it and
the caller rebuilds: a corrupt or stale entry is never loaded.

Where: ``NUMBA_TC_CACHE_DIR``, else ``$XDG_CACHE_HOME/numba_tc``, else ``~/.cache/numba_tc``.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from typing import Optional

__all__ = ["cache_dir", "entry_path", "load", "store", "MAGIC"]

MAGIC = b"NUMBA_TC_CUBIN 1\n"


def cache_dir() -> str:
    d = os.environ.get("NUMBA_TC_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "numba_tc")
    return d


def _digest(material: str) -> str:
    return hashlib.sha256(material.encode()).hexdigest()


def entry_path(material: str, arch: str) -> str:
    return os.path.join(cache_dir(), arch, _digest(material)[:40] + ".cubin")


def load(material: str, arch: str) -> Optional[bytes]:
    """The cached cubin for ``material``, or None (missing, or found broken and removed)."""
    path = entry_path(material, arch)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    payload = _parse(blob, material)
    if payload is None:
        warnings.warn(f"numba_tc: removing a corrupt or stale kernel cache entry {path}; rebuilding it",
                      RuntimeWarning, stacklevel=3)
        try:
            os.remove(path)
        except OSError:
            pass
    return payload


def _parse(blob: bytes, material: str) -> Optional[bytes]:
    if not blob.startswith(MAGIC):
        return None
    end = blob.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        head = json.loads(blob[len(MAGIC):end])
    except ValueError:
        return None
    payload = blob[end + 1:]
    if (not isinstance(head, dict) or head.get("material") != material or head.get("size") != len(payload)
            or head.get("sha256") != hashlib.sha256(payload).hexdigest()):
        return None
    return payload


def store(material: str, arch: str, payload: bytes) -> Optional[str]:
    """Write an entry (atomically); the path, or None if the folder cannot be written."""
    path = entry_path(material, arch)
    head = json.dumps({"material": material, "size": len(payload),
                       "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".cubin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + head + b"\n" + payload)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        warnings.warn(f"numba_tc: cannot write the kernel cache in {cache_dir()} ({e}); kernels will be "
                      "compiled again in each process. Set NUMBA_TC_CACHE_DIR to a writable folder.",
                      RuntimeWarning, stacklevel=3)
        return None
    return path
