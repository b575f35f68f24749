"""tritonclient.http.aio's API: the same client, awaitable.

Each call runs in Rust on a worker thread with the GIL released, so the
event loop is free while it waits; up to ``conn_limit`` calls are in flight
at once, each on its own kept-open connection.
"""

from wirespeed.client._common import Awaitable
from wirespeed.client.http import InferenceServerClient as _SyncClient
from wirespeed.client.http import InferInput, InferRequestedOutput, InferResult
from wirespeed.client.utils import InferenceServerException

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult", "InferenceServerException"]


class InferenceServerClient(Awaitable):
    """An asyncio client of one V2 server over HTTP/1.1: the health,
    metadata and ``infer`` calls of tritonclient.http.aio."""

    def __init__(self, url, verbose=False, conn_limit=100, conn_timeout=60.0, ssl=False, ssl_context=None):
        sync = _SyncClient(url, verbose=verbose, concurrency=conn_limit, connection_timeout=conn_timeout,
                           network_timeout=conn_timeout, ssl=ssl)
        super().__init__(sync, conn_limit)
