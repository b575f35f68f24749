"""tritonclient.grpc.aio's API: the gRPC client, awaitable.

Each call runs in Rust on a worker thread with the GIL released, so the
event loop is free while it waits.
"""

from wirespeed.client._common import Awaitable
from wirespeed.client.grpc import InferenceServerClient as _SyncClient
from wirespeed.client.grpc import InferInput, InferRequestedOutput, InferResult
from wirespeed.client.utils import InferenceServerException

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult", "InferenceServerException"]


class InferenceServerClient(Awaitable):
    """An asyncio client of one V2 server's gRPC API: the health, metadata
    and ``infer`` calls of tritonclient.grpc.aio."""

    def __init__(self, url, verbose=False, ssl=False, root_certificates=None, private_key=None,
                 certificate_chain=None, creds=None, keepalive_options=None, channel_args=None):
        super().__init__(_SyncClient(url, verbose=verbose, ssl=ssl, creds=creds), 8)
