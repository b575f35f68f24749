"""What the HTTP and gRPC clients share: their life cycle and background
calls, the request parameters tritonclient writes for its keyword
arguments, and the awaitable wrapper of a client."""

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

from wirespeed.client.utils import raise_error

# Request parameters the protocol sets itself (tritonclient's list).
RESERVED = {"sequence_id", "priority", "timeout", "sequence_start", "sequence_end", "binary_data_output"}
RESERVED_PREFIX = "triton_"


def infer_parameters(sequence_id, sequence_start, sequence_end, priority, timeout, parameters):
    """The request's `parameters`, as tritonclient writes them."""
    out = {}
    if sequence_id != 0 and sequence_id != "":
        out["sequence_id"] = sequence_id
        out["sequence_start"] = sequence_start
        out["sequence_end"] = sequence_end
    if priority != 0:
        out["priority"] = priority
    if timeout is not None:
        out["timeout"] = timeout
    if parameters:
        for key, value in parameters.items():
            if key in RESERVED or key.startswith(RESERVED_PREFIX):
                raise_error(f'Parameter "{key}" is a reserved parameter and cannot be specified.')
            out[key] = value
    return out or None


class Lifecycle:
    """A client's connections (the extension's engine), closed by
    ``close()`` or the ``with`` block, and up to ``workers`` threads for
    calls started in the background (``async_infer``), made at first use."""

    def __init__(self, connections, workers):
        self._connections = connections
        self._workers = max(1, workers)
        self._executor = None
        self._lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, type, value, traceback):
        self.close()

    def close(self):
        """Closes the connections (and waits for calls in the background)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._connections.close()

    def _submit(self, call, *args, **kwargs):
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._workers)
        return self._executor.submit(call, *args, **kwargs)


class Awaitable:
    """A blocking client's calls, awaitable: each runs on one of `workers`
    threads (in Rust, with the GIL released), so the event loop is free."""

    def __init__(self, sync, workers):
        self._sync = sync
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers))

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

    async def is_server_live(self, *args, **kwargs):
        return await self._run("is_server_live", *args, **kwargs)

    async def is_server_ready(self, *args, **kwargs):
        return await self._run("is_server_ready", *args, **kwargs)

    async def is_model_ready(self, *args, **kwargs):
        return await self._run("is_model_ready", *args, **kwargs)

    async def get_server_metadata(self, *args, **kwargs):
        return await self._run("get_server_metadata", *args, **kwargs)

    async def get_model_metadata(self, *args, **kwargs):
        return await self._run("get_model_metadata", *args, **kwargs)

    async def get_model_config(self, *args, **kwargs):
        return await self._run("get_model_config", *args, **kwargs)

    async def infer(self, *args, **kwargs):
        return await self._run("infer", *args, **kwargs)
