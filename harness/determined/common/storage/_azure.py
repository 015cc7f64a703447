"""`azure` storage through azure-storage-blob: a container reached by a connection string,
or by its account URL with a credential (an account key or SAS token; none: anonymous)."""

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

from determined.common.storage._base import StorageError
from determined.common.storage._object_store import ObjectStore

PACKAGE = "azure-storage-blob"


class AzureStore(ObjectStore):
    def __init__(
        self,
        container: str,
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: str | None = None,
    ) -> None:
        try:
            from azure.storage.blob import BlobServiceClient
        except ImportError as error:
            raise ImportError(
                f"azure checkpoint storage needs the {PACKAGE} package: pip install {PACKAGE}"
            ) from error
        self.url = f"azure://{container}"
        with self._errors("connecting to", ""):
            service = (
                BlobServiceClient.from_connection_string(connection_string)
                if connection_string
                else BlobServiceClient(account_url=str(account_url), credential=credential)
            )
        self._container: Any = service.get_container_client(container)

    def list_objects(self, prefix: str) -> dict[str, int]:
        with self._errors("listing", prefix, missing_object=False):
            return {
                blob.name: int(blob.size or 0) for blob in self._container.list_blobs(name_starts_with=prefix)
            }

    def put(self, key: str, path: pathlib.Path | None) -> None:
        with self._errors("uploading to", key, missing_object=False):
            if path is None:
                self._container.upload_blob(key, b"", overwrite=True)
            else:
                with path.open("rb") as data:
                    self._container.upload_blob(key, data, overwrite=True)

    def get(self, key: str, path: pathlib.Path, size: int) -> None:
        with self._errors("downloading", key), path.open("wb") as out:
            self._container.download_blob(key).readinto(out)

    def delete(self, keys: list[str]) -> dict[str, str]:
        from azure.core import exceptions

        refused: dict[str, str] = {}
        for key in keys:
            try:
                self._container.delete_blob(key)
            except exceptions.ResourceNotFoundError:
                pass
            except exceptions.AzureError as error:
                refused[key] = str(error)
        return refused

    def read(self, key: str, offset: int, chunk_bytes: int) -> Iterator[bytes]:
        with self._errors("reading", key):
            size = int(self._container.get_blob_client(key).get_blob_properties().size)
        if offset >= size:
            return iter(())
        with self._errors("reading", key):
            downloader = self._container.download_blob(key, offset=offset)
        return self._chunks(downloader, key, chunk_bytes)

    def _chunks(self, downloader: Any, key: str, chunk_bytes: int) -> Iterator[bytes]:
        with self._errors("reading", key):
            for chunk in downloader.chunks():
                for start in range(0, len(chunk), chunk_bytes):
                    yield chunk[start : start + chunk_bytes]

    @contextlib.contextmanager
    def _errors(self, doing: str, key: str, *, missing_object: bool = True) -> Iterator[None]:
        """azure's errors as StorageError (FileNotFoundError for a missing blob)."""
        from azure.core import exceptions

        try:
            yield
        except exceptions.ResourceNotFoundError as error:
            if not missing_object:  # the bucket or container itself
                raise StorageError(f"{doing} {self.url}/{key}: {error}") from error
            raise FileNotFoundError(f"{self.url}/{key} does not exist") from None
        except exceptions.AzureError as error:
            raise StorageError(f"{doing} {self.url}/{key}: {error}") from error
