"""A small .npz archive (a zip of .npy files) built in memory, without numpy's zip writer.

A trivial test's raw.npz holds six arrays of a few hundred bytes; `numpy.savez_compressed` spends
~0.2-0.4 ms on it, nearly all in `zipfile` and `numpy.lib.format` machinery per member (objects,
stream wrappers, headers), not in the compression. Here each member is its .npy bytes (numpy's
header, formatted here, then the array's data), deflated in one call, and the zip's headers are
packed directly. `numpy.load` reads the result as it reads `numpy.savez`'s: same
member names and .npy contents; only the zip's own fields differ (no zip64 extras).

Only for small archives (`MAX_BYTES`): the whole archive is built in memory.
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Any

import numpy as np

#: Larger archives go through `numpy.savez`, which streams (and needs zip64 past 4 GiB).
MAX_BYTES = 1 << 30

_LOCAL = struct.Struct("<4s5H3L2H")  # zip local file header, 30 bytes
_CENTRAL = struct.Struct("<4s4B4H3L5H2L")  # central directory header, 46 bytes
_END = struct.Struct("<4s4H2LH")  # end of central directory, 22 bytes
_VERSION = 20  # "2.0": deflate, as zipfile writes for a small member
_UNIX = 3  # made on Unix, so the external attributes are permission bits (as zipfile writes)
_MODE = 0o600 << 16  # zipfile's permissions for a member written from memory


def npy_bytes(arr: np.ndarray) -> bytes:
    """The .npy file (format 1.0) of an array without Python objects, as `numpy.save` writes it.

    The header is numpy's (`numpy.lib.format`: the dtype's description, the shape, room to grow the
    shape, padded to 64 bytes), formatted here: numpy's own header writer costs ~7 us per array, a
    fifth of a small raw.npz. A test checks it against `numpy.save` for every kind of array saved.
    """
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # (not for every array: it makes a 0-d array 1-d)
    descr = _DESCR.get(arr.dtype)
    if descr is None:
        descr = _DESCR[arr.dtype] = repr(np.lib.format.dtype_to_descr(arr.dtype))
    shape = arr.shape
    header = "{'descr': %s, 'fortran_order': False, 'shape': %r, }" % (descr, shape)  # noqa: UP031 - numpy's text
    if shape:
        header += " " * (_GROWTH_DIGITS - len(repr(shape[0])))
    size = len(header) + 1  # and a newline
    pad = 64 - (len(_MAGIC) + 2 + size) % 64
    return _MAGIC + struct.pack("<H", size + pad) + header.encode("latin1") + b" " * pad + b"\n" + arr.tobytes()


_DESCR: dict[np.dtype[Any], str] = {}
_MAGIC = b"\x93NUMPY\x01\x00"  # format 1.0
_GROWTH_DIGITS = 21  # numpy's GROWTH_AXIS_MAX_DIGITS: a header leaves room for this many digits of the length


def _deflate(data: bytes) -> bytes:
    """Raw deflate (as in a zip) at zlib's default level, with a window and a hash table no larger than
    the data needs: the default 32 kB window and 128 kB of tables cost ~40 us per member to set up
    (allocated, mapped and cleared each time), for members of a few hundred bytes. Any inflater
    reads it (a stream made with a smaller window is a valid stream for the largest one)."""
    bits = max(9, min(15, (len(data) + 262).bit_length()))  # 262: deflate's lookahead
    deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -bits, max(1, min(8, bits - 7)))
    return deflate.compress(data) + deflate.flush()


def npz_bytes(arrays: dict[str, np.ndarray], compress: bool = True) -> bytes:
    """A .npz archive of `arrays` (name -> array; member `<name>.npy`), deflated when `compress`."""
    year, month, day, hour, minute, second = time.localtime()[:6]
    dos_time = hour << 11 | minute << 5 | second // 2
    dos_date = max(year - 1980, 0) << 9 | month << 5 | day
    method = zlib.DEFLATED if compress else 0
    out, central = bytearray(), bytearray()
    for name, arr in arrays.items():
        data = npy_bytes(arr)
        crc = zlib.crc32(data)
        stored = _deflate(data) if compress else data
        raw_name = f"{name}.npy".encode()
        head = (dos_time, dos_date, crc, len(stored), len(data), len(raw_name))
        central += _CENTRAL.pack(b"PK\1\2", _VERSION, _UNIX, _VERSION, 0, 0, method, *head, 0, 0, 0, 0, _MODE, len(out))
        central += raw_name
        out += _LOCAL.pack(b"PK\3\4", _VERSION, 0, method, *head, 0)
        out += raw_name
        out += stored
    if len(out) + len(central) > MAX_BYTES or len(arrays) >= 0xFFFF:
        raise ValueError(f"{len(out) + len(central)} bytes in {len(arrays)} members: too large for npz_bytes")
    end = _END.pack(b"PK\5\6", 0, 0, len(arrays), len(arrays), len(central), len(out), 0)
    return bytes(out + central + end)
