"""Triton's system shared-memory extension through tritonclient http and
grpc and tritonclient.utils.shared_memory, unmodified: inputs read from
regions and outputs written to them, checked against the numpy arrays put
in, and the bad cases (unregistered region, offset past the end, region too
small, CUDA) each a clear error naming the region."""

import base64
import os
import shutil
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

from conftest import MODELS, RunningServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    for model in ["identity_fp32", "identity_bytes", "titanic"]:
        shutil.copytree(MODELS / model, root / model)
    running = RunningServer(root)
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request):
    return request.param


@pytest.fixture()
def client(server, protocol):
    if protocol == "http":
        c = httpclient.InferenceServerClient(server.address)
        yield c, httpclient
    else:
        c = grpcclient.InferenceServerClient(server.grpc_address)
        yield c, grpcclient
    c.unregister_system_shared_memory()


@pytest.fixture()
def regions():
    made = []

    def make(byte_size):
        key = f"/wirespeed-test-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(key[1:], key, byte_size)
        made.append(handle)
        return key, handle

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def status_names(client, protocol):
    status = client.get_system_shared_memory_status()
    if protocol == "http":
        return sorted(r["name"] for r in status)
    return sorted(status.regions.keys())


def test_inputs_and_outputs_in_shared_memory(client, protocol, regions):
    c, module = client
    data = (np.arange(4 * 1000, dtype=np.float32).reshape(4, 1000) / 3) - 7
    size = data.nbytes
    in_key, in_handle = regions(size + 64)
    out_key, out_handle = regions(size + 128)
    shm.set_shared_memory_region(in_handle, [data], offset=64)
    c.register_system_shared_memory("in", in_key, size + 64)
    c.register_system_shared_memory("out", out_key, size + 128)
    assert status_names(c, protocol) == ["in", "out"]

    inp = module.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_shared_memory("in", size, offset=64)
    out = module.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("out", size + 64, offset=64)
    result = c.infer("identity_fp32", [inp], outputs=[out])
    answer = result.get_output("OUTPUT0")
    parameters = answer["parameters"] if protocol == "http" else answer.parameters
    region = parameters["shared_memory_region"]
    region = region if protocol == "http" else region.string_param
    assert region == "out"
    got = shm.get_contents_as_numpy(out_handle, np.float32, list(data.shape), offset=64)
    np.testing.assert_array_equal(got, data)

    # A mix: the input from shared memory, the output in the answer.
    plain = c.infer("identity_fp32", [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(plain, data)


def test_bytes_through_shared_memory(client, protocol, regions):
    c, module = client
    words = np.array([[b"wire", b"", b"speed \xe2\x9c\x93"]], dtype=np.object_)
    serialized = serialize_byte_tensor(words)
    size = serialized_byte_size(serialized)
    key, handle = regions(size)
    shm.set_shared_memory_region(handle, [serialized])
    c.register_system_shared_memory("words", key, size)
    inp = module.InferInput("INPUT0", list(words.shape), "BYTES")
    inp.set_shared_memory("words", size)
    got = c.infer("identity_bytes", [inp]).as_numpy("OUTPUT0")
    assert got.tolist() == words.tolist()


def refused(call, *needles):
    with pytest.raises(InferenceServerException) as e:
        call()
    for needle in needles:
        assert needle in str(e.value), str(e.value)


def test_bad_regions_are_named(client, protocol, regions):
    c, module = client
    data = np.ones((1, 16), dtype=np.float32)
    key, handle = regions(data.nbytes)
    shm.set_shared_memory_region(handle, [data])
    c.register_system_shared_memory("small", key, data.nbytes)

    def infer(region, byte_size, offset=0, output=None):
        inp = module.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_shared_memory(region, byte_size, offset=offset)
        outputs = None
        if output:
            out = module.InferRequestedOutput("OUTPUT0")
            out.set_shared_memory(*output)
            outputs = [out]
        return c.infer("identity_fp32", [inp], outputs=outputs)

    refused(lambda: infer("nowhere", data.nbytes), "INPUT0", "no system shared memory region 'nowhere' is registered")
    refused(lambda: infer("small", data.nbytes, offset=16), "small", "offset 16")
    refused(lambda: infer("small", 32), "64 bytes")  # 16 FP32 take 64, not 32
    refused(lambda: infer("small", 0), "64 bytes")
    refused(lambda: infer("small", data.nbytes, output=("small", 32)), "OUTPUT0", "32 bytes")
    refused(lambda: infer("small", data.nbytes, output=("gone", 64)), "gone")
    # Registering: a name taken, a key that does not exist, a size past the
    # object's end, CUDA.
    refused(lambda: c.register_system_shared_memory("small", key, 8), "already registered")
    refused(lambda: c.register_system_shared_memory("x", "/wirespeed-no-such-key", 8), "/wirespeed-no-such-key")
    refused(lambda: c.register_system_shared_memory("x", key, data.nbytes + 1), "goes past the end")
    # A symbolic link in /dev/shm is never followed: regions are written to.
    link = f"/dev/shm/wirespeed-link-{uuid.uuid4().hex[:8]}"
    os.symlink(f"/dev/shm{key}", link)
    try:
        refused(lambda: c.register_system_shared_memory("x", "/" + os.path.basename(link), 8), os.path.basename(link))
    finally:
        os.unlink(link)
    refused(lambda: c.register_cuda_shared_memory("gpu", base64.b64encode(b"a cudaIpcMemHandle_t"), 0, 64), "CUDA", "no GPU")
    # The region still works after all that.
    np.testing.assert_array_equal(infer("small", data.nbytes).as_numpy("OUTPUT0"), data)
    c.unregister_system_shared_memory("small")
    assert status_names(c, protocol) == []
    refused(lambda: infer("small", data.nbytes), "small")
