"""tritonclient.http.aio's API: the same client, awaitable.

Each call runs in Rust on a worker thread with the GIL released, so the
event loop is free while it waits; up to ``conn_limit`` calls are in flight
at once, each on its own kept-open connection.
"""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from wirespeed.client.http import (
    InferenceServerClient as _SyncClient,
    InferInput,
    InferRequestedOutput,
    InferResult,
)
from wirespeed.client.utils import InferenceServerException

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult", "InferenceServerException"]


class InferenceServerClient:
    """An asyncio client of one V2 server over HTTP/1.1."""

    def __init__(self, url, verbose=False, conn_limit=100, conn_timeout=60.0, ssl=False, ssl_context=None):
        self._sync = _SyncClient(
            url,
            verbose=verbose,
            concurrency=conn_limit,
            connection_timeout=conn_timeout,
            network_timeout=conn_timeout,
            ssl=ssl,
        )
        self._executor = ThreadPoolExecutor(max_workers=max(1, conn_limit))

    async def __aenter__(self):
        return self

    async def __aexit__(self, type, value, traceback):
        await self.close()

    async def close(self):
        self._executor.shutdown(wait=False)
        self._sync.close()

    async def _run(self, method, *args, **kwargs):
        loop = asyncio.get_running_loop()
        call = functools.partial(getattr(self._sync, method), *args, **kwargs)
        return await loop.run_in_executor(self._executor, call)

    async def is_server_live(self, headers=None, query_params=None):
        return await self._run("is_server_live", headers, query_params)

    async def is_server_ready(self, headers=None, query_params=None):
        return await self._run("is_server_ready", headers, query_params)

    async def is_model_ready(self, model_name, model_version="", headers=None, query_params=None):
        return await self._run("is_model_ready", model_name, model_version, headers, query_params)

    async def get_server_metadata(self, headers=None, query_params=None):
        return await self._run("get_server_metadata", headers, query_params)

    async def get_model_metadata(self, model_name, model_version="", headers=None, query_params=None):
        return await self._run("get_model_metadata", model_name, model_version, headers, query_params)

    async def get_model_config(self, model_name, model_version="", headers=None, query_params=None):
        return await self._run("get_model_config", model_name, model_version, headers, query_params)

    async def infer(self, model_name, inputs, model_version="", outputs=None, request_id="", **kwargs):
        return await self._run("infer", model_name, inputs, model_version, outputs, request_id, **kwargs)
