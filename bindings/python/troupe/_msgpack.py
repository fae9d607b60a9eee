"""A small msgpack codec (the subset troupe's documents use): None,
bool, int, float, str, bytes, list/tuple and dict. Pure Python, so the
binding needs nothing beyond the standard library."""

import struct

__all__ = ["packb", "unpackb"]


def _pack(o, out):
    if o is None:
        out.append(b"\xc0")
    elif o is True:
        out.append(b"\xc3")
    elif o is False:
        out.append(b"\xc2")
    elif isinstance(o, int):
        if 0 <= o < 0x80:
            out.append(struct.pack("B", o))
        elif -32 <= o < 0:
            out.append(struct.pack("b", o))
        elif 0 <= o <= 0xFFFFFFFFFFFFFFFF:
            out.append(b"\xcf" + struct.pack(">Q", o))
        elif -(1 << 63) <= o < 0:
            out.append(b"\xd3" + struct.pack(">q", o))
        else:
            raise OverflowError("int out of msgpack's range: %d" % o)
    elif isinstance(o, float):
        out.append(b"\xcb" + struct.pack(">d", o))
    elif isinstance(o, str):
        b = o.encode("utf-8")
        n = len(b)
        if n < 32:
            out.append(struct.pack("B", 0xA0 | n))
        elif n < 0x100:
            out.append(b"\xd9" + struct.pack("B", n))
        elif n < 0x10000:
            out.append(b"\xda" + struct.pack(">H", n))
        else:
            out.append(b"\xdb" + struct.pack(">I", n))
        out.append(b)
    elif isinstance(o, (bytes, bytearray, memoryview)):
        b = bytes(o)
        n = len(b)
        if n < 0x100:
            out.append(b"\xc4" + struct.pack("B", n))
        elif n < 0x10000:
            out.append(b"\xc5" + struct.pack(">H", n))
        else:
            out.append(b"\xc6" + struct.pack(">I", n))
        out.append(b)
    elif isinstance(o, (list, tuple)):
        n = len(o)
        if n < 16:
            out.append(struct.pack("B", 0x90 | n))
        elif n < 0x10000:
            out.append(b"\xdc" + struct.pack(">H", n))
        else:
            out.append(b"\xdd" + struct.pack(">I", n))
        for x in o:
            _pack(x, out)
    elif isinstance(o, dict):
        n = len(o)
        if n < 16:
            out.append(struct.pack("B", 0x80 | n))
        elif n < 0x10000:
            out.append(b"\xde" + struct.pack(">H", n))
        else:
            out.append(b"\xdf" + struct.pack(">I", n))
        for k, v in o.items():
            _pack(k, out)
            _pack(v, out)
    else:
        raise TypeError("cannot encode %s as msgpack" % type(o).__name__)


def packb(o):
    """o as msgpack bytes."""
    out = []
    _pack(o, out)
    return b"".join(out)


_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_INTS = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
         0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}


def _unpack(b, i):
    t = b[i]
    i += 1
    if t < 0x80:
        return t, i
    if t >= 0xE0:
        return t - 0x100, i
    if 0x80 <= t <= 0x8F:
        return _map(b, i, t & 15)
    if 0x90 <= t <= 0x9F:
        return _array(b, i, t & 15)
    if 0xA0 <= t <= 0xBF:
        n = t & 31
        return bytes(b[i:i + n]).decode("utf-8"), i + n
    if t in _FIXED:
        return _FIXED[t], i
    if t in _INTS:
        f = _INTS[t]
        return struct.unpack_from(f, b, i)[0], i + struct.calcsize(f)
    if t == 0xCA:
        return struct.unpack_from(">f", b, i)[0], i + 4
    if t == 0xCB:
        return struct.unpack_from(">d", b, i)[0], i + 8
    if t in (0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB):
        f = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I",
             0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[t]
        n = struct.unpack_from(f, b, i)[0]
        i += struct.calcsize(f)
        if i + n > len(b):
            raise ValueError("msgpack: truncated")
        v = bytes(b[i:i + n])
        return (v if t <= 0xC6 else v.decode("utf-8")), i + n
    if t in (0xDC, 0xDD):
        f = ">H" if t == 0xDC else ">I"
        n = struct.unpack_from(f, b, i)[0]
        return _array(b, i + struct.calcsize(f), n)
    if t in (0xDE, 0xDF):
        f = ">H" if t == 0xDE else ">I"
        n = struct.unpack_from(f, b, i)[0]
        return _map(b, i + struct.calcsize(f), n)
    raise ValueError("msgpack: type byte 0x%02x is not supported" % t)


def _array(b, i, n):
    out = []
    for _ in range(n):
        v, i = _unpack(b, i)
        out.append(v)
    return out, i


def _map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = _unpack(b, i)
        v, i = _unpack(b, i)
        out[k] = v
    return out, i


def unpackb(b):
    """The one msgpack object in b."""
    b = memoryview(b).cast("B") if not isinstance(b, bytes) else b
    try:
        v, i = _unpack(b, 0)
    except (IndexError, struct.error):
        raise ValueError("msgpack: truncated") from None
    if i != len(b):
        raise ValueError("msgpack: %d bytes after the object" % (len(b) - i))
    return v
