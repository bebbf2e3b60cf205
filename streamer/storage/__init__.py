"""Where results go: a small store interface (`ResultStore`), a local folder and S3-compatible object
storage behind it, chosen by one string (`open_store("s3://bucket/prefix")` or a folder path)."""

from streamer.storage.base import ResultStore, StoreError, StoredObject, split_s3_url
from streamer.storage.stores import fetch_input, open_store, store_output

__all__ = ["ResultStore", "StoreError", "StoredObject", "fetch_input", "open_store", "split_s3_url", "store_output"]
