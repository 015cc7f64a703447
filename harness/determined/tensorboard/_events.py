"""A TensorBoard event file of scalars, written with the standard library alone: tensorboardX
imports torch wherever torch is installed, seconds at a Core API trial's first report.

The format TensorBoard reads: a TFRecord file, each record its length (uint64), the length's
masked CRC-32C (uint32), the bytes and their masked CRC-32C (uint32), little-endian; each
record an `Event` protobuf message: the first says the file's version, each next one holds a
scalar (`Event.summary.value[0].simple_value` at `Event.step`)."""

import itertools
import os
import pathlib
import socket
import struct
import time

FILE_VERSION = b"brain.Event:2"
# Reflected Castagnoli polynomial (CRC-32C), and the rotation and constant of TFRecord's mask.
_POLYNOMIAL = 0x82F63B78
_MASK_DELTA = 0xA282EAD8
# Protobuf wire types.
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
# Two writers of one process started in the same second still get files of their own.
_serial = itertools.count()


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """`data` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return length + _masked_crc(length) + data + _masked_crc(data)


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= 0xFFFFFFFFFFFFFFFF  # a negative int64 as protobuf writes it
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _message(number: int, payload: bytes) -> bytes:
    return _key(number, _BYTES) + _varint(len(payload)) + payload


def event(wall_time: float, step: int = 0, *, tag: str | None = None, value: float = 0.0) -> bytes:
    """An `Event` (wall_time = 1, step = 2, file_version = 3, summary = 5) holding the scalar
    `tag` (Summary.value = 1: Value.tag = 1, Value.simple_value = 2), or the file version."""
    head = _key(1, _FIXED64) + struct.pack("<d", wall_time) + _key(2, _VARINT) + _varint(step)
    if tag is None:
        return head + _message(3, FILE_VERSION)
    scalar = _message(1, tag.encode("utf-8")) + _key(2, _FIXED32) + struct.pack("<f", value)
    return head + _message(5, _message(1, scalar))


class EventFileWriter:
    """Scalars into a new event file of `folder`, named as TensorBoard's writers name theirs
    (`events.out.tfevents.<seconds>.<host>`, here with the process and a serial number)."""

    def __init__(self, folder: pathlib.Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.{next(_serial)}"
        self.path = folder / name
        self._file = self.path.open("xb")
        self._file.write(record(event(now)))
        self._file.flush()

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        self._file.write(record(event(time.time(), global_step, tag=tag, value=scalar_value)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
