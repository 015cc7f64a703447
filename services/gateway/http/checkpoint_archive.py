"""A checkpoint as one .tar.gz, streamed: Determined's `GET /checkpoints/{uuid}`
(`Accept: application/gzip`), which its SDK and `det checkpoint download` use
when they cannot read the checkpoint's storage themselves.

Each of the checkpoint's recorded files is read from its storage as
DownloadCheckpointFile reads it and written as a tar member, compressed as it
goes: nothing is held but a chunk. The recorded names are relative POSIX
paths (checked when the checkpoint was reported); folders (`dir/`) become
folder members. A file the storage refuses (a link out of the checkpoint,
...) or that holds another size than was recorded ends the stream with an
error rather than a tar that lies; the route reads up to the first file before
it answers, so that a refusal there is an error status.
"""

import tarfile
import zlib
from collections.abc import AsyncIterator, Callable

from determined.proto import api_pb2

BLOCK = tarfile.BLOCKSIZE
# zlib's wbits for a gzip wrapper.
GZIP_WBITS = 31
# A file's chunks from the checkpoint's storage (Checkpoints.download_checkpoint_file).
Download = Callable[
    [api_pb2.DownloadCheckpointFileRequest], AsyncIterator[api_pb2.DownloadCheckpointFileResponse]
]


async def tar_gz(checkpoint: api_pb2.Checkpoint, download: Download) -> AsyncIterator[bytes]:
    compressor = zlib.compressobj(wbits=GZIP_WBITS)
    mtime = checkpoint.reported_at_ns // 10**9
    for name, size in sorted(checkpoint.resources.items()):
        if name.endswith("/"):
            yield compressor.compress(member_header(name, size, mtime))
            continue
        request = api_pb2.DownloadCheckpointFileRequest(uuid=checkpoint.uuid, path=name)
        chunks = download(request)
        # A refused file ends the stream before its header.
        first = await anext(chunks, api_pb2.DownloadCheckpointFileResponse())
        yield compressor.compress(member_header(name, size, mtime) + first.data)
        written = len(first.data)
        async for response in chunks:
            written += len(response.data)
            yield compressor.compress(response.data)
        if written != size:
            raise OSError(f"file {name!r} of checkpoint {checkpoint.uuid} holds {written} bytes, not {size}")
        yield compressor.compress(b"\0" * (-size % BLOCK))
    yield compressor.compress(b"\0" * (2 * BLOCK)) + compressor.flush()


def member_header(name: str, size: int, mtime: int) -> bytes:
    """The tar header of a file (or, for a `dir/` name, a folder)."""
    member = tarfile.TarInfo(name.rstrip("/"))
    member.mtime = mtime
    if name.endswith("/"):
        member.type, member.mode = tarfile.DIRTYPE, 0o755
    else:
        member.size, member.mode = size, 0o644
    return member.tobuf(format=tarfile.PAX_FORMAT)
