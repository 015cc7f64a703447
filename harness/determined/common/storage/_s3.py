"""`s3` storage through boto3: AWS, or any S3-compatible server at `endpoint_url`
(MinIO, Ceph, moto). With no `access_key`/`secret_key` boto3's standard credential chain
applies (AWS_* variables, ~/.aws, an instance role)."""

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

from determined.common.storage._base import StorageError
from determined.common.storage._object_store import TRANSFER_THREADS, ObjectStore

# S3's DeleteObjects takes at most this many keys.
DELETE_BATCH = 1000
# boto3's default multipart threshold: smaller objects are fetched in one request.
MULTIPART_BYTES = 8 * 1024 * 1024
_MISSING = ("NoSuchKey", "404", "NotFound")


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as error:
            raise ImportError("s3 checkpoint storage needs the boto3 package: pip install boto3") from error
        self.bucket = bucket
        self.url = f"s3://{bucket}"
        # A session of its own: creating clients from boto3's default session is not thread-safe.
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or None,
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            config=Config(max_pool_connections=4 * TRANSFER_THREADS, retries={"mode": "standard"}),
        )

    def list_objects(self, prefix: str) -> dict[str, int]:
        objects: dict[str, int] = {}
        with self._errors("listing", prefix):
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for item in page.get("Contents", []):
                    objects[item["Key"]] = int(item["Size"])
        return objects

    def put(self, key: str, path: pathlib.Path | None) -> None:
        with self._errors("uploading to", key):
            if path is None:
                self._client.put_object(Bucket=self.bucket, Key=key, Body=b"")
            else:
                self._client.upload_file(str(path), self.bucket, key)

    def get(self, key: str, path: pathlib.Path, size: int) -> None:
        with self._errors("downloading", key):
            if size >= MULTIPART_BYTES:  # in parts, several at once
                self._client.download_file(self.bucket, key, str(path))
                return
            # One request (download_file asks for the size first).
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with contextlib.closing(body), path.open("wb") as out:
                for chunk in body.iter_chunks(1 << 20):
                    out.write(chunk)

    def delete(self, keys: list[str]) -> dict[str, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        refused: dict[str, str] = {}
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start : start + DELETE_BATCH]
            try:
                response = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True}
                )
            except (BotoCoreError, ClientError) as error:
                refused.update(dict.fromkeys(batch, str(error)))
                continue
            for failure in response.get("Errors", []):
                refused[failure["Key"]] = f"{failure.get('Code', '')}: {failure.get('Message', '')}"
        return refused

    def read(self, key: str, offset: int, chunk_bytes: int) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        ranged = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            with self._errors("reading", key):
                body = self._client.get_object(Bucket=self.bucket, Key=key, **ranged)["Body"]
        except StorageError as error:
            if isinstance(error.__cause__, ClientError) and _code(error.__cause__) == "InvalidRange":
                return iter(())  # at or past the end
            raise
        return self._chunks(body, key, chunk_bytes)

    def _chunks(self, body: Any, key: str, chunk_bytes: int) -> Iterator[bytes]:
        with contextlib.closing(body), self._errors("reading", key):
            yield from body.iter_chunks(chunk_bytes)

    @contextlib.contextmanager
    def _errors(self, doing: str, key: str) -> Iterator[None]:
        """boto3's and botocore's errors as StorageError (FileNotFoundError for a missing object)."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as error:
            if _code(error) in _MISSING:
                raise FileNotFoundError(f"{self.url}/{key} does not exist") from None
            raise StorageError(f"{doing} {self.url}/{key}: {error}") from error
        except (BotoCoreError, Boto3Error) as error:
            raise StorageError(f"{doing} {self.url}/{key}: {error}") from error


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
