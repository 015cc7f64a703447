"""`gcs` storage through google-cloud-storage (credentials: Google's application default
credentials, e.g. GOOGLE_APPLICATION_CREDENTIALS)."""

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

from determined.common.storage._base import StorageError
from determined.common.storage._object_store import ObjectStore

PACKAGE = "google-cloud-storage"


class GcsStore(ObjectStore):
    def __init__(self, bucket: str) -> None:
        try:
            from google.cloud import storage
        except ImportError as error:
            raise ImportError(
                f"gcs checkpoint storage needs the {PACKAGE} package: pip install {PACKAGE}"
            ) from error
        self.url = f"gs://{bucket}"
        with self._errors("connecting to", ""):
            self._client: Any = storage.Client()
        self._bucket: Any = self._client.bucket(bucket)

    def list_objects(self, prefix: str) -> dict[str, int]:
        with self._errors("listing", prefix, missing_object=False):
            return {
                blob.name: int(blob.size or 0)
                for blob in self._client.list_blobs(self._bucket, prefix=prefix)
            }

    def put(self, key: str, path: pathlib.Path | None) -> None:
        with self._errors("uploading to", key, missing_object=False):
            blob = self._bucket.blob(key)
            if path is None:
                blob.upload_from_string(b"")
            else:
                blob.upload_from_filename(str(path))

    def get(self, key: str, path: pathlib.Path, size: int) -> None:
        with self._errors("downloading", key):
            self._bucket.blob(key).download_to_filename(str(path))

    def delete(self, keys: list[str]) -> dict[str, str]:
        from google.api_core import exceptions

        refused: dict[str, str] = {}
        for key in keys:
            try:
                self._bucket.delete_blob(key)
            except exceptions.NotFound:
                pass
            except exceptions.GoogleAPIError as error:
                refused[key] = str(error)
        return refused

    def read(self, key: str, offset: int, chunk_bytes: int) -> Iterator[bytes]:
        with self._errors("reading", key):
            blob = self._bucket.get_blob(key)
        if blob is None:
            raise FileNotFoundError(f"{self.url}/{key} does not exist")
        return self._chunks(blob, key, offset, int(blob.size or 0), chunk_bytes)

    def _chunks(self, blob: Any, key: str, offset: int, size: int, chunk_bytes: int) -> Iterator[bytes]:
        while offset < size:
            end = min(offset + chunk_bytes, size)
            with self._errors("reading", key):
                yield blob.download_as_bytes(start=offset, end=end - 1)
            offset = end

    @contextlib.contextmanager
    def _errors(self, doing: str, key: str, *, missing_object: bool = True) -> Iterator[None]:
        """google's errors as StorageError (FileNotFoundError for a missing object)."""
        from google.api_core import exceptions
        from google.auth import exceptions as auth_exceptions

        try:
            yield
        except exceptions.NotFound as error:
            if not missing_object:  # the bucket or container itself
                raise StorageError(f"{doing} {self.url}/{key}: {error}") from error
            raise FileNotFoundError(f"{self.url}/{key} does not exist") from None
        except (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as error:
            raise StorageError(f"{doing} {self.url}/{key}: {error}") from error
