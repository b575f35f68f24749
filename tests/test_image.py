"""The container image, built from the Dockerfile and run as it says.

No image registry is reachable from the machines that run the tests, and
containers cannot start on them (crun: `setrlimit RLIMIT_NPROC: Operation
not permitted`). So the image's three bases (the Dockerfile's build
arguments) are made here from Debian's packages with mmdebstrap: a build
base with a C linker and Python's pip, into which the build mounts this
machine's Rust toolchain and crate cache (rust-toolchain.toml's version),
and a run base of glibc, libgcc, libstdc++ and libgomp, as distroless's
cc image holds. buildah builds the Dockerfile unchanged (chroot
isolation). The image's root filesystem is then run as a container runs
it: its entrypoint and command, its environment and its user (65532), in
private network, mount and process namespaces with /proc mounted, and
asked from inside that network by tritonclient, with the image's own
health check (`wirespeed health`) as the readiness probe.

Checked: the bundled Titanic model answers all 418 passengers as the
real xgboost package does, over REST and gRPC, on the ports the image
says; ONNX Runtime's library that the image carries serves an ONNX model
(`engine = "onnxruntime"`) as the real onnxruntime package does, from a
repository mounted over /models; the server runs as 65532; the image is
small. The image's size and the server's start to ready are printed (and
docs/deploy.md gives them).
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import MODELS, ROOT, wait_until

CACHE = ROOT / "target" / "image"
IMAGE = "localhost/wirespeed-test"
BUILD_BASE = "localhost/wirespeed-test-build-base"
RUN_BASE = "localhost/wirespeed-test-run-base"
# The build base: a C linker for cargo, pip for ONNX Runtime's wheel.
BUILD_PACKAGES = ["gcc", "libc6-dev", "ca-certificates", "python3-pip"]
# The run base: what distroless's cc-debian12 holds, no shell.
RUN_PACKAGES = ["libc6", "libgcc-s1", "libstdc++6", "libgomp1", "zlib1g", "ca-certificates",
                "tzdata", "netbase"]
# A run base for Python models: Python with numpy, as a derived image of
# python:3.11-slim with numpy would hold.
PYTHON_RUN_BASE = "localhost/wirespeed-test-python-run-base"
PYTHON_IMAGE = "localhost/wirespeed-test-python"
PYTHON_PACKAGES = ["python3-minimal", "python3-numpy"]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(*command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def debian_base(name, variant, packages, env=()):
    """An image of Debian bookworm with `packages` (mmdebstrap), imported
    as `name`; the root filesystem's tarball is kept in target/image/."""
    key = hashlib.sha256(json.dumps([variant, packages]).encode()).hexdigest()[:12]
    tarball = CACHE / f"{name.rsplit('/', 1)[-1]}-{key}.tar"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial")
        run("mmdebstrap", f"--variant={variant}", f"--include={','.join(packages)}", "--mode=root", "--format=tar",
            "bookworm", str(partial))
        partial.rename(tarball)
    changes = [arg for value in env for arg in ("--change", f"ENV {value}")]
    run("podman", "import", "--quiet", *changes, str(tarball), name)


def build(tag, run_base):
    """The Dockerfile, unchanged, built by buildah on the Debian bases
    with `run_base` as RUN_IMAGE; the image's configuration (as `buildah
    inspect` gives it)."""
    home = Path.home()
    rustup = Path(os.environ.get("RUSTUP_HOME", home / ".rustup"))
    cargo = Path(os.environ.get("CARGO_HOME", home / ".cargo"))
    debian_base(BUILD_BASE, "minbase", BUILD_PACKAGES,
                env=[f"PATH={cargo / 'bin'}:{SYSTEM_PATH}", f"RUSTUP_HOME={rustup}", f"CARGO_HOME={cargo}"])
    target = CACHE / "target"
    target.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run("buildah", "build", "--isolation", "chroot", "--layers=false", "--pull-never",
        "--build-arg", f"BUILD_IMAGE={BUILD_BASE}", "--build-arg", f"ORT_IMAGE={BUILD_BASE}",
        "--build-arg", f"RUN_IMAGE={run_base}",
        # This machine's toolchain and crates, and a target folder kept
        # between the module's builds (the Dockerfile's build is otherwise unchanged).
        "-v", f"{rustup}:{rustup}", "-v", f"{cargo}:{cargo}", "-v", f"{target}:/src/target",
        # This machine's trust store: a build behind a TLS-inspecting proxy
        # (as here) needs its authority to fetch ONNX Runtime's wheel.
        "-v", "/etc/ssl/certs:/etc/ssl/certs:ro",
        # Docker's format, as `docker build` makes it (OCI's has no HEALTHCHECK).
        "--format", "docker", "-t", tag, str(ROOT), timeout=3600)
    print(f"{tag} built in {time.monotonic() - started:.0f} s")
    return json.loads(run("buildah", "inspect", "--type", "image", tag))


@contextlib.contextmanager
def mounted(tag):
    """The image's root filesystem, mounted (a container's writable copy)."""
    container = run("buildah", "from", "--pull-never", tag).strip()
    try:
        yield Path(run("buildah", "mount", container).strip())
    finally:
        subprocess.run(["buildah", "umount", container], capture_output=True)
        subprocess.run(["buildah", "rm", container], capture_output=True)


@pytest.fixture(scope="module", autouse=True)
def build_folder():
    """The builds' target folder, shared by the module's two images and
    removed at its end: two gigabytes that no other test reads (a CI
    machine's disk is shared). The Debian bases' tarballs stay."""
    yield CACHE / "target"
    shutil.rmtree(CACHE / "target", ignore_errors=True)


@pytest.fixture(scope="module")
def image():
    """The image as the Dockerfile makes it, on the distroless-like base."""
    debian_base(RUN_BASE, "extract", RUN_PACKAGES)
    yield build(IMAGE, RUN_BASE)
    run("podman", "rmi", "--force", "--ignore", IMAGE, RUN_BASE, BUILD_BASE)


@pytest.fixture(scope="module")
def rootfs(image):
    with mounted(IMAGE) as root:
        yield root


class Container:
    """The image's entrypoint and command on `rootfs`, as a container runs
    them: its environment, its user, private namespaces; `models` (a host
    folder) mounted over /models when given."""

    def __init__(self, rootfs: Path, config, log: Path, models: Path = None, entrypoint=None, cmd=None):
        oci = config["OCIv1"]["config"]
        self.rootfs = rootfs
        self.env = oci["Env"]
        user = oci["User"]
        # A manifest's `command` replaces the entrypoint, its `args` the
        # command.
        command = (oci["Entrypoint"] if entrypoint is None else entrypoint) + (oci["Cmd"] if cmd is None else cmd)
        (rootfs / "proc").mkdir(exist_ok=True)
        mounts = ""
        if models is not None:
            (rootfs / "models").mkdir(exist_ok=True)
            mounts = f"mount --bind {models} {rootfs / 'models'} && "
        # The image has no shell and no `env`: this machine's set the
        # environment and change root, then the image's entrypoint runs.
        script = (f"ip link set lo up && {mounts}exec /usr/bin/env -i {' '.join(self.env)} "
                  f"/usr/sbin/chroot --userspec={user} {rootfs} {' '.join(command)}")
        self.started = time.monotonic()
        self.log = log
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                ["unshare", "--net", "--mount", "--pid", "--fork", f"--mount-proc={rootfs / 'proc'}",
                 "sh", "-c", script],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until("the server's process", lambda: self.server_pid() is not None or self.process.poll() is not None)
        assert self.process.poll() is None, log.read_text()
        self.pid = self.server_pid()

    def server_pid(self):
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def inside(self, *command, **kwargs):
        """`command` run in the container's network."""
        return subprocess.run(["nsenter", f"--net=/proc/{self.pid}/ns/net", *command],
                              capture_output=True, text=True, **kwargs)

    def healthy(self):
        """The image's own health check, as the engine runs it: in the
        container, as its user."""
        return self.inside("/usr/bin/env", "-i", *self.env, "/usr/sbin/chroot", "--userspec=65532:65532",
                           str(self.rootfs), "/usr/local/bin/wirespeed", "health").returncode == 0

    def stop(self):
        """SIGTERM to the server, as an engine stops a container; its exit
        status is `unshare`'s."""
        if self.process.poll() is None:
            os.kill(self.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


CLIENT = '''
import json, sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

x = np.load(sys.argv[1])
answers = {}
http = httpclient.InferenceServerClient("127.0.0.1:8000")
answers["server"] = http.get_server_metadata()["name"]
data = httpclient.InferInput("features", list(x.shape), "FP32")
data.set_data_from_numpy(x)
answers["rest"] = http.infer("titanic", [data]).as_numpy("probability").tolist()
grpc = grpcclient.InferenceServerClient("127.0.0.1:8001")
data = grpcclient.InferInput("features", list(x.shape), "FP32")
data.set_data_from_numpy(x)
answers["grpc"] = grpc.infer("titanic", [data]).as_numpy("probability").tolist()
import urllib.request
answers["metrics"] = "nv_inference_request_success" in urllib.request.urlopen(
    "http://127.0.0.1:8002/metrics").read().decode()
print(json.dumps(answers))
'''


# The image on a Python base is built, run and removed first, before the
# module's image (the fixture below): the two are never held together
# (a CI machine's disk is shared).
PYTHON_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)]) for r in requests]
'''


def test_an_image_on_a_python_base_serves_a_triton_python_model(tmp_path):
    """RUN_IMAGE with Python and numpy: a Triton Python model's folder,
    mounted over /models, is served by the image's user."""
    debian_base(PYTHON_RUN_BASE, "minbase", PYTHON_PACKAGES, env=[f"PATH={SYSTEM_PATH}"])
    config = build(PYTHON_IMAGE, PYTHON_RUN_BASE)
    repo = tmp_path / "models"
    (repo / "doubler" / "1").mkdir(parents=True)
    (repo / "doubler" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    (repo / "doubler" / "1" / "model.py").write_text(PYTHON_MODEL)
    try:
        with mounted(PYTHON_IMAGE) as root:
            container = Container(root, config, tmp_path / "serve.log", models=repo)
            try:
                wait_until("the image's health check passes", container.healthy, timeout=60)
                body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "FP32",
                                               "data": [1.0, 2.5, -4.0]}]})
                asked = container.inside("curl", "-sS", "--fail-with-body",
                                         "http://127.0.0.1:8000/v2/models/doubler/infer", "-d", body)
            finally:
                container.stop()
    finally:
        run("podman", "rmi", "--force", "--ignore", PYTHON_IMAGE, PYTHON_RUN_BASE, BUILD_BASE)
    assert asked.returncode == 0, asked.stdout + asked.stderr + (tmp_path / "serve.log").read_text()
    assert json.loads(asked.stdout)["outputs"][0]["data"] == [2.0, 5.0, -8.0]


def test_the_image_serves_the_bundled_models_as_xgboost_answers(image, rootfs, tmp_path):
    import xgboost as xgb

    from titanic import features, load_params, passenger_rows

    oci = image["OCIv1"]["config"]
    assert oci["User"] == "65532:65532"
    assert "WIRESPEED_MODELS=/models" in oci["Env"]
    size = int(run("podman", "image", "inspect", "--format", "{{.Size}}", IMAGE))
    print(f"image size: {size / 1e6:.1f} MB")
    # The binary, ONNX Runtime's library and the run base (27 MB).
    assert size < 150e6, size

    params = load_params()
    x = np.array([features(r, params) for r in passenger_rows()], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    want = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json")).predict(xgb.DMatrix(x))

    container = Container(rootfs, image, tmp_path / "serve.log")
    try:
        wait_until("the image's health check passes", container.healthy, timeout=60)
        print(f"start to ready: {time.monotonic() - container.started:.2f} s")
        # It runs as the image's user.
        status = Path(f"/proc/{container.pid}/status").read_text()
        assert "\nUid:\t65532\t" in status, status
        (tmp_path / "client.py").write_text(CLIENT)
        asked = container.inside(sys.executable, str(tmp_path / "client.py"), str(tmp_path / "x.npy"))
        assert asked.returncode == 0, asked.stderr + (tmp_path / "serve.log").read_text()
        answers = json.loads(asked.stdout)
    finally:
        container.stop()
    assert answers["server"] == "wirespeed"
    np.testing.assert_allclose(answers["rest"], want, rtol=1e-6, atol=0)
    np.testing.assert_allclose(answers["grpc"], want, rtol=1e-6, atol=0)
    assert answers["metrics"]
    assert container.process.returncode == 0, (tmp_path / "serve.log").read_text()


def test_the_images_onnx_runtime_serves_a_mounted_repository_as_onnxruntime_answers(image, rootfs, tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = rng.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Softmax", ["y"], ["p"], axis=1)],
        "image_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    repo = tmp_path / "models"
    (repo / "scores").mkdir(parents=True)
    onnx.save(model, str(repo / "scores" / "model.onnx"))
    (repo / "scores" / "config.toml").write_text('backend = "onnx"\nengine = "onnxruntime"\n')
    os.chmod(repo, 0o755)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    want = ort.InferenceSession(str(repo / "scores" / "model.onnx")).run(None, {"x": x})[0]

    container = Container(rootfs, image, tmp_path / "serve.log", models=repo)
    try:
        wait_until("the image's health check passes", container.healthy, timeout=60)
        body = json.dumps({"inputs": [{"name": "x", "shape": [5, 4], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]})
        asked = container.inside("curl", "-sS", "--fail-with-body", "http://127.0.0.1:8000/v2/models/scores/infer",
                                 "-d", body)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        answer = json.loads(asked.stdout)
    finally:
        container.stop()
    got = np.array(answer["outputs"][0]["data"], dtype=np.float32).reshape(5, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    log = (tmp_path / "serve.log").read_text()
    assert "ONNX Runtime found" in log and "/usr/local/lib/onnxruntime/libonnxruntime.so" in log, log


# kserve/config/runtimes/kserve-tritonserver.yaml's arguments to the image.
KSERVE_TRITON_ARGS = ["tritonserver", "--model-store=/models", "--grpc-port=9000", "--http-port=8080",
                      "--allow-grpc=true", "--allow-http=true"]


@pytest.mark.parametrize("entrypoint, cmd", [
    (None, KSERVE_TRITON_ARGS),
    (["tritonserver"], KSERVE_TRITON_ARGS[1:]),
    (["/opt/tritonserver/bin/tritonserver"], KSERVE_TRITON_ARGS[1:]),
])
def test_the_image_runs_tritons_command_line(image, rootfs, tmp_path, entrypoint, cmd):
    """As KServe's Triton runtime runs its image (arguments to the
    entrypoint), and as a manifest whose command is `tritonserver` (on
    PATH, or where Triton's image has it) does."""
    container = Container(rootfs, image, tmp_path / "serve.log", entrypoint=entrypoint, cmd=cmd)
    try:
        def ready():
            return container.inside("curl", "-sf", "http://127.0.0.1:8080/v2/health/ready").returncode == 0

        wait_until("ready on Triton's port 8080", ready, timeout=60)
        asked = container.inside("curl", "-sS", "--fail-with-body", "http://127.0.0.1:8080/v2")
        assert asked.returncode == 0, asked.stdout + asked.stderr
        model = container.inside("curl", "-sS", "--fail-with-body", "http://127.0.0.1:8080/v2/models/titanic")
        assert model.returncode == 0, model.stdout + model.stderr
    finally:
        container.stop()
    assert json.loads(asked.stdout)["name"] == "triton"
    log = (tmp_path / "serve.log").read_text()
    assert "serving Triton's command line" in log and "0.0.0.0:9000" in log, log
