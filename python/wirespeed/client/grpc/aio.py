"""tritonclient.grpc.aio's API: the gRPC client, awaitable.

Each call runs in Rust on a worker thread with the GIL released, so the
event loop is free while it waits.
"""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from wirespeed.client.grpc import InferenceServerClient as _SyncClient
from wirespeed.client.grpc import InferInput, InferRequestedOutput, InferResult
from wirespeed.client.utils import InferenceServerException

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult", "InferenceServerException"]


class InferenceServerClient:
    """An asyncio client of one V2 server's gRPC API."""

    def __init__(self, url, verbose=False, ssl=False, root_certificates=None, private_key=None,
                 certificate_chain=None, creds=None, keepalive_options=None, channel_args=None):
        self._sync = _SyncClient(url, verbose=verbose, ssl=ssl, creds=creds)
        self._executor = ThreadPoolExecutor(max_workers=8)

    async def __aenter__(self):
        return self

    async def __aexit__(self, type, value, traceback):
        await self.close()

    async def close(self):
        self._executor.shutdown(wait=False)
        self._sync.close()

    async def _run(self, method, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(getattr(self._sync, method), *args, **kwargs))

    async def is_server_live(self, headers=None, client_timeout=None):
        return await self._run("is_server_live", headers, client_timeout)

    async def is_server_ready(self, headers=None, client_timeout=None):
        return await self._run("is_server_ready", headers, client_timeout)

    async def is_model_ready(self, model_name, model_version="", headers=None, client_timeout=None):
        return await self._run("is_model_ready", model_name, model_version, headers, client_timeout)

    async def get_server_metadata(self, headers=None, as_json=False, client_timeout=None):
        return await self._run("get_server_metadata", headers, as_json, client_timeout)

    async def get_model_metadata(self, model_name, model_version="", headers=None, as_json=False, client_timeout=None):
        return await self._run("get_model_metadata", model_name, model_version, headers, as_json, client_timeout)

    async def get_model_config(self, model_name, model_version="", headers=None, as_json=False, client_timeout=None):
        return await self._run("get_model_config", model_name, model_version, headers, as_json, client_timeout)

    async def infer(self, model_name, inputs, model_version="", outputs=None, request_id="", **kwargs):
        return await self._run("infer", model_name, inputs, model_version, outputs, request_id, **kwargs)
