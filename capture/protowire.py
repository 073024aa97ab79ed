"""A small, defensive decoder for the protobuf wire format.

Nsight Compute reports are protobuf messages framed by length prefixes, and `ncu_report` does not
expose the session details (versions, command line, settings). Rather than depend on generated
protobuf classes, the few messages triage needs are described as data (field number -> name and
kind, transcribed from the `.proto` files Debian's nsight-compute installs) and decoded here.

Every malformed input raises `WireError`; decoding never loops without consuming bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Union

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


Value = Union[int, bytes, memoryview]


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Decode one base-128 varint at `pos`; return (value, next position)."""
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise WireError("varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, Value]]:
    """Yield (field number, wire type, raw value) for each field of one message."""
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = read_varint(view, pos)
        number, wire = key >> 3, key & 7
        value: Value
        if number == 0:
            raise WireError("field number 0")
        if wire == WIRE_VARINT:
            value, pos = read_varint(view, pos)
        elif wire == WIRE_LEN:
            length, pos = read_varint(view, pos)
            if pos + length > end:
                raise WireError("length-delimited field runs past the end of the message")
            value, pos = view[pos:pos + length], pos + length
        elif wire in (WIRE_FIXED64, WIRE_FIXED32):
            size = 8 if wire == WIRE_FIXED64 else 4
            if pos + size > end:
                raise WireError("fixed-size field runs past the end of the message")
            value, pos = view[pos:pos + size], pos + size
        else:
            raise WireError(f"unsupported wire type {wire}")
        yield number, wire, value


def submessage(wire: int, raw: Value) -> bytes | memoryview | None:
    """The bytes of a length-delimited field (a nested message); None for any other wire type."""
    return raw if wire == WIRE_LEN and not isinstance(raw, int) else None


@dataclass(frozen=True)
class Field:
    """One field of a message description: its name, kind and whether it repeats.

    kind is "str", "uint", "bool", "double", "float", or a nested message description (a dict).
    """

    name: str
    kind: object
    repeated: bool = False


def _scalar(kind: object, wire: int, raw: Value):
    """Convert one raw wire value to the declared kind, or None if the wire type does not fit."""
    if isinstance(raw, int):  # a varint: every other wire type carries bytes
        if kind in ("uint", "bool") and wire == WIRE_VARINT:
            return bool(raw) if kind == "bool" else raw
        return None
    if kind == "str" and wire == WIRE_LEN:
        return bytes(raw).decode("utf-8", errors="replace").replace("\x00", "").strip()
    if kind == "double" and wire == WIRE_FIXED64:
        return struct.unpack("<d", raw)[0]
    if kind == "float" and wire == WIRE_FIXED32:
        return struct.unpack("<f", raw)[0]
    if isinstance(kind, dict) and wire == WIRE_LEN:
        return decode(raw, kind)
    return None


def decode(buf: bytes | memoryview, description: dict[int, Field]) -> dict:
    """Decode the described fields of one message into a dict; unknown fields are skipped.

    A described field whose wire type does not match (formats evolve: a string became a string
    table id) is skipped too, so newer reports degrade to "unknown" instead of failing.
    """
    out: dict = {}
    for number, wire, raw in iter_fields(buf):
        field = description.get(number)
        if field is None:
            continue
        value = _scalar(field.kind, wire, raw)
        if value is None:
            continue
        if field.repeated:
            out.setdefault(field.name, []).append(value)
        else:
            out[field.name] = value
    return out


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    """read_varint with a fast path for the one-byte values that dominate keys and lengths."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    return read_varint(memoryview(data), pos)


def last_field(buf: bytes | memoryview, wanted: int) -> tuple[int, Value] | None:
    """(wire type, raw value) of the last occurrence of one field, skipping all others fast.

    Used to pick one small field out of large messages (a ProfileResult's ClockStatus sits after
    hundreds of metric entries) without materialising the rest: only positions are tracked.
    """
    data = bytes(buf)
    view = memoryview(data)
    pos, end, found = 0, len(data), None
    try:
        while pos < end:
            # Short varints are decoded inline (one-byte keys, one- and two-byte lengths): this
            # loop runs once per field of every profile result.
            key = data[pos]
            pos += 1
            if key >= 0x80:
                key, pos = read_varint(view, pos - 1)
            number, wire, start = key >> 3, key & 7, pos
            if wire == WIRE_LEN:
                length = data[pos]
                start = pos + 1
                if length >= 0x80:
                    high = data[start]
                    if high < 0x80:
                        length, start = (length & 0x7F) | (high << 7), start + 1
                    else:
                        length, start = read_varint(view, pos)
                pos = start + length
            elif wire == WIRE_VARINT:
                _value, pos = _varint_at(data, pos)
            elif wire in (WIRE_FIXED64, WIRE_FIXED32):
                pos += 8 if wire == WIRE_FIXED64 else 4
            else:
                raise WireError(f"unsupported wire type {wire}")
            if pos > end or number == 0:
                raise WireError("field runs past the end of the message")
            if number == wanted:
                found = (wire, start, pos)
    except IndexError:
        raise WireError("varint runs past the end of the message") from None
    if found is None:
        return None
    wire, start, stop = found
    return wire, (_varint_at(data, start)[0] if wire == WIRE_VARINT else
                  memoryview(data)[start:stop])
