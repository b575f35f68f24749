"""`tritonserver`'s command line, run by wirespeed and by the real Triton
2.51 on the same folders with the same flags: the binary linked under the
name `tritonserver` (as the container image has it) and `wirespeed
tritonserver`. A deployment's command line (KServe's own
`kserve-tritonserver` ServingRuntime, flags common in Helm charts) starts
both; then tritonclient asks both the same (server metadata, the
repository index, readiness, an inference) and the answers are compared.
What Triton refuses (an unknown option, a bad boolean) stops both with a
non-zero status naming the option."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import free_port, stop_process, wait_until, wirespeed_binary
from triton_peer import TritonServer

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

DOUBLE = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]) for r in requests]
'''

BROKEN = '''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this model does not load")

    def execute(self, requests):
        return None
'''


def model(repo, name, code):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(f"""\
        name: "{name}"
        backend: "python"
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
        instance_group [ {{ kind: KIND_CPU count: 1 }} ]
        """))
    (repo / name / "1" / "model.py").write_text(code)


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """The binary under the name `tritonserver`."""
    folder = tmp_path_factory.mktemp("bin")
    (folder / "tritonserver").symlink_to(wirespeed_binary())
    return folder / "tritonserver"


class Tritonserver:
    """wirespeed run with Triton's command line `args`, on fresh ports."""

    def __init__(self, command, args, ready=True):
        self.http_port, self.grpc_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [*command, *args, f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
             "--allow-metrics=false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        endpoint = "ready" if ready else "live"

        def up():
            if self.process.poll() is not None:
                raise AssertionError("wirespeed tritonserver exited:\n" + self.process.stderr.read())
            try:
                return requests.get(f"http://{self.address}/v2/health/{endpoint}", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until("wirespeed tritonserver up", up, timeout=60)

    @property
    def address(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self):
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        stop_process(self.process, grace=30)


def side_by_side(tmp_path, repos, args, ours, ready=True):
    """The real Triton and wirespeed (run as the command `ours`) with
    `args` on `repos`."""
    more = [f"--model-repository={r}" for r in repos[1:]]
    until = "ready" if ready else "live"
    triton = TritonServer(repos[0], tmp_path / "triton.log", args=[*more, *args], until=until)
    try:
        wirespeed = Tritonserver(ours, [f"--model-repository={repos[0]}", *more, *args], ready=ready)
    except BaseException:
        triton.stop()
        raise
    return {"triton": triton, "wirespeed": wirespeed}


def stop(servers):
    for server in servers.values():
        server.stop()


def observed(server, models):
    """What tritonclient sees: server metadata's name, readiness, the
    repository index, and each model's answer or error."""
    client = httpclient.InferenceServerClient(server.address)
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        answers = {}
        for name in models:
            x = httpclient.InferInput("IN", [2], "FP32")
            x.set_data_from_numpy(np.array([1.5, -2.0], np.float32))
            try:
                answers[name] = client.infer(name, [x]).as_numpy("OUT").tolist()
            except Exception as e:  # the status and the first words of the error
                answers[name] = ("error", str(e).split(":")[0])
        index = sorted((m["name"], m.get("state", "")) for m in client.get_model_repository_index())
        return {
            "name": client.get_server_metadata()["name"],
            "grpc name": grpc.get_server_metadata().name,
            "live": client.is_server_live(),
            "ready": client.is_server_ready(),
            "index": index,
            "answers": answers,
        }
    finally:
        client.close()
        grpc.close()


def compare(servers, models):
    seen = {name: observed(server, models) for name, server in servers.items()}
    assert seen["wirespeed"] == seen["triton"]
    return seen["triton"]


def test_kserves_serving_runtime_command_line_runs_unchanged(tmp_path, linked):
    repo = tmp_path / "models"
    model(repo, "double", DOUBLE)
    # kserve/config/runtimes/kserve-tritonserver.yaml's args.
    args = ["--model-store=" + str(repo), "--allow-grpc=true", "--allow-http=true"]
    servers = side_by_side(tmp_path, [repo], args[1:], ours=[str(linked)])
    try:
        seen = compare(servers, ["double"])
        assert seen["name"] == "triton" and seen["answers"]["double"] == [3.0, -4.0]
    finally:
        stop(servers)


def test_flags_common_in_deployments(tmp_path):
    repo, more = tmp_path / "models", tmp_path / "more"
    model(repo, "double", DOUBLE)
    model(more, "double_too", DOUBLE)
    args = ["--model-control-mode=POLL", "--repository-poll-secs=30", "--exit-on-error=true", "--log-verbose=1",
            "--allow-gpu-metrics=false", "--strict-model-config=false", "--id=edge-triton",
            "--backend-config=python,shm-default-byte-size=1048576", "--log-info=true"]
    servers = side_by_side(tmp_path, [repo, more], args, ours=[str(wirespeed_binary()), "tritonserver"])
    try:
        seen = compare(servers, ["double", "double_too"])
        assert seen["name"] == "edge-triton"
        assert seen["answers"]["double_too"] == [3.0, -4.0]
    finally:
        stop(servers)


def test_a_model_that_fails_with_exit_on_error_false(tmp_path, linked):
    repo = tmp_path / "models"
    model(repo, "double", DOUBLE)
    model(repo, "broken", BROKEN)
    servers = side_by_side(tmp_path, [repo], ["--exit-on-error=false"], ours=[str(linked)], ready=False)
    try:
        seen = compare(servers, ["double", "broken"])
        assert ("broken", "UNAVAILABLE") in seen["index"]
        assert seen["answers"]["double"] == [3.0, -4.0]
    finally:
        stop(servers)


@pytest.mark.parametrize("args, says", [
    (["--bogus-flag=1"], "--bogus-flag"),
    (["--allow-http=maybe"], "maybe"),
    (["--model-control-mode=sometimes"], "--model-control-mode"),
])
def test_what_triton_refuses_stops_both(tmp_path, linked, args, says):
    from triton_peer import triton_home

    repo = tmp_path / "models"
    model(repo, "double", DOUBLE)
    home = triton_home()
    env = {**os.environ, "LD_LIBRARY_PATH": str(home.parent.parent / "nvidia_pytriton.libs")}
    command = [f"--model-repository={repo}", "--allow-metrics=false", *args]
    triton = subprocess.run([str(home / "bin" / "tritonserver"), *command], capture_output=True, text=True,
                            env=env, timeout=60)
    ours = subprocess.run([str(linked), *command], capture_output=True, text=True, timeout=60)
    assert triton.returncode != 0 and ours.returncode != 0
    assert says in triton.stdout + triton.stderr
    assert says in ours.stderr, ours.stderr
