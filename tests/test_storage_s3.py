"""Model repositories in an S3 bucket, against a real S3 server (SeaweedFS,
tests/object_storage.py) and, where Triton reads the same bucket, against
the real Triton 2.51: the same URL, the same credentials in the
environment, the same requests from tritonclient, compared field by
field."""

import shutil
import subprocess
import textwrap

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import MODELS, RunningServer, load_summary, run_wirespeed, steady_load, wirespeed_binary
from object_storage import SECRET_KEY, SeaweedFS
from test_repository import titanic_input, write_versioned_config, xgboost_probability
from test_triton_peer_python import ADD_SUB, WHOLE_CONFIGS
from triton_peer import TritonServer

# Triton's add_sub, as the Python peer tests serve it.
ADD_SUB_PY = textwrap.dedent(WHOLE_CONFIGS["add_sub"][1])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seaweed = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    yield seaweed
    seaweed.stop()


def triton_repository(root):
    """A Triton repository: a Python model, and the same model again in
    two versions with a sibling module the version's model.py imports."""
    (root / "add_sub" / "1").mkdir(parents=True)
    (root / "add_sub" / "config.pbtxt").write_text(ADD_SUB)
    (root / "add_sub" / "1" / "model.py").write_text(ADD_SUB_PY)
    for version, scale in [("1", 1.0), ("2", 10.0)]:
        folder = root / "scaled" / version
        folder.mkdir(parents=True)
        (folder / "scale.py").write_text(f"SCALE = {scale}\n")
        scaled = ADD_SUB_PY.replace('"OUTPUT0", a + b', '"OUTPUT0", (a + b) * SCALE')
        assert scaled != ADD_SUB_PY
        (folder / "model.py").write_text("from scale import SCALE\n" + scaled)
    (root / "scaled" / "config.pbtxt").write_text(
        ADD_SUB.replace('"add_sub"', '"scaled"') + "version_policy: { all { } }\n")
    return root


def assert_answers_as_xgboost(client):
    """The Titanic model served from a bucket answers as the xgboost
    package predicts with the same model file."""
    p = float(client.infer("titanic", [titanic_input(httpclient)]).as_numpy("probability")[0])
    assert p == pytest.approx(xgboost_probability(MODELS / "titanic" / "model.json"), abs=1e-6)


def add_sub_inputs(module):
    a = module.InferInput("INPUT0", [4], "FP32")
    b = module.InferInput("INPUT1", [4], "FP32")
    a.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
    b.set_data_from_numpy(np.array([0.5, 0.25, 2, -1], dtype=np.float32))
    return [a, b]


def test_a_triton_repository_in_a_bucket_answers_as_triton_reading_it(store, tmp_path):
    """Both servers started with the same `s3://host:port/bucket/path`
    (Triton's form for an S3-compatible store) and the same credentials in
    the environment: the same index, metadata, configuration and answers,
    over REST and gRPC."""
    store.upload(triton_repository(tmp_path / "repo"), store.bucket("triton"), "models")
    url = f"s3://{store.host}/triton/models"
    env = store.env()
    triton = TritonServer(url, tmp_path / "triton.log", env=env)
    try:
        wirespeed = RunningServer(url, env=env, extra_args=["--model-cache-dir", str(tmp_path / "cache")])
        try:
            answers = {}
            for name, server in [("triton", triton), ("wirespeed", wirespeed)]:
                http = httpclient.InferenceServerClient(server.address)
                grpc = grpcclient.InferenceServerClient(server.grpc_address)
                index = sorted((m["name"], m.get("version"), m.get("state")) for m in http.get_model_repository_index())
                got = {"index": index,
                       "metadata": http.get_model_metadata("add_sub"),
                       "versions": http.get_model_metadata("scaled")["versions"]}
                for module, client in [(httpclient, http), (grpcclient, grpc)]:
                    for model, version in [("add_sub", ""), ("scaled", "1"), ("scaled", "2")]:
                        result = client.infer(model, add_sub_inputs(module), model_version=version)
                        got[f"{module.__name__} {model} {version}"] = [
                            result.as_numpy("OUTPUT0").tolist(), result.as_numpy("OUTPUT1").tolist()]
                got["config"] = {k: v for k, v in http.get_model_config("scaled").items()
                                 if k in ("name", "backend", "input", "output", "version_policy")}
                answers[name] = got
            assert answers["wirespeed"] == answers["triton"]
            assert answers["wirespeed"]["tritonclient.http scaled 2"][0] == [15.0, 22.5, 50.0, 30.0]
        finally:
            wirespeed.stop()
    finally:
        triton.stop()
    # The secret is never in the log.
    assert SECRET_KEY not in "".join(wirespeed.log)


def test_a_restart_keeps_the_copies_whose_listing_has_not_changed(store, tmp_path):
    store.upload(triton_repository(tmp_path / "repo"), store.bucket("restart"), "models")
    args = ["--models", f"s3://{store.host}/restart/models", "--model-cache-dir", str(tmp_path / "cache"), "--check"]
    first = run_wirespeed("serve", *args, env=store.env())
    assert first.returncode == 0, first.stderr
    assert "fetched=2 kept=0" in first.stderr, first.stderr
    second = run_wirespeed("serve", *args, env=store.env())
    assert second.returncode == 0, second.stderr
    assert "fetched=0 kept=2" in second.stderr, second.stderr


def test_aws_endpoint_url_and_the_plain_bucket_form(store, tmp_path):
    """`s3://bucket/path` with the store named by `AWS_ENDPOINT_URL`, as
    the AWS CLI and SDKs take it; addressed path-style."""
    shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
    store.upload(tmp_path / "repo", store.bucket("plain"), "repo")
    server = RunningServer("s3://plain/repo", env=store.env(AWS_ENDPOINT_URL=store.endpoint),
                           extra_args=["--model-cache-dir", str(tmp_path / "cache")])
    try:
        assert_answers_as_xgboost(httpclient.InferenceServerClient(server.address))
    finally:
        server.stop()


def test_a_kserve_model_folder_in_a_bucket(store, tmp_path, xgb_model):
    """KServe's `storageUri` to a folder with one model file, as its
    ServingRuntimes read `/mnt/models`: `--models` the URL and
    `--model-name`, answered as the xgboost package predicts."""
    path, _, rows = xgb_model
    folder = tmp_path / "kserve"
    folder.mkdir()
    shutil.copy(path, folder / "model.json")
    store.upload(folder, store.bucket("kserve"), "xgb/v1")
    server = RunningServer(f"s3://{store.host}/kserve/xgb/v1", env=store.env(),
                           extra_args=["--model-name", "xgb", "--model-cache-dir", str(tmp_path / "cache")])
    try:
        answer = requests.post(f"http://{server.address}/v1/models/xgb:predict",
                               json={"instances": rows[:5].tolist()}, timeout=30)
        assert answer.status_code == 200, answer.text
        import xgboost
        booster = xgboost.Booster(model_file=str(path))
        expected = booster.predict(xgboost.DMatrix(rows[:5]))
        assert np.allclose(answer.json()["predictions"], expected, atol=1e-6)
    finally:
        server.stop()


@pytest.mark.parametrize("case", ["wrong secret", "no bucket", "empty prefix", "unknown scheme", "too large"])
def test_a_repository_that_cannot_be_read_stops_the_start_and_says_why(store, tmp_path, case):
    shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
    store.upload(tmp_path / "repo", store.bucket("faults"), "repo")
    url, env, extra, needles = f"s3://{store.host}/faults/repo", store.env(), [], []
    if case == "wrong secret":
        env = store.env(secret="not-the-secret")
        needles = ["credentials were refused", "SignatureDoesNotMatch"]
    elif case == "no bucket":
        url = f"s3://{store.host}/no-such-bucket/repo"
        needles = ["no such bucket"]
    elif case == "empty prefix":
        url = f"s3://{store.host}/faults/nothing-here"
        needles = ["holds no objects under 'nothing-here/'"]
    elif case == "unknown scheme":
        url = "ftp://host/models"
        needles = ["is not a repository this server reads", "s3://bucket/path"]
    elif case == "too large":
        extra = ["--max-model-bytes", "1000"]
        needles = ["model 'titanic': cannot fetch its files from", "more than --max-model-bytes 1000"]
    cache = tmp_path / "cache"
    done = run_wirespeed("serve", "--models", url, "--model-cache-dir", str(cache), "--check", *extra, env=env)
    assert done.returncode != 0, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr
    assert url.split("?")[0] in done.stderr
    assert "not-the-secret" not in done.stderr
    # Nothing was left where a model would be loaded from.
    assert not any(p.name == "titanic" for p in cache.rglob("*") if p.is_dir())


def test_poll_loads_a_new_version_whole_while_requests_run(store, tmp_path):
    """A new version folder uploaded file by file while 200 requests/s
    run: the first file alone is seen and waited on (its listing has not
    held still), the version is fetched once whole, loaded beside the old
    and switched to; not one request fails, and the half is never loaded."""
    root = tmp_path / "repo"
    folder = root / "versioned"
    (folder / "1").mkdir(parents=True)
    shutil.copy(MODELS / "titanic" / "model.json", folder / "1" / "model.json")
    write_versioned_config(folder, "")
    bucket = store.bucket("poll")
    store.upload(root, bucket, "repo")
    p1 = xgboost_probability(MODELS / "titanic" / "model.json")
    p2 = xgboost_probability(MODELS / "titanic_large" / "model.json")
    server = RunningServer(f"s3://{store.host}/poll/repo", env=store.env(),
                           extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "1",
                                       "--model-cache-dir", str(tmp_path / "cache")])
    try:
        client = httpclient.InferenceServerClient(server.address)

        def probability():
            return float(client.infer("versioned", [titanic_input(httpclient)]).as_numpy("probability")[0])

        assert probability() == pytest.approx(p1, abs=1e-6)
        report = tmp_path / "load.json"
        load = steady_load(server, report, seconds=12, model="versioned")
        s3 = store.client()
        # Version 2's model file first; its folder's listing changed.
        s3.upload_file(str(MODELS / "titanic_large" / "model.json"), bucket, "repo/versioned/2/model.json")
        server.wait_for_log("files changed in the store", count=1)
        # A part of a version is never fetched: version 1 still answers.
        assert probability() == pytest.approx(p1, abs=1e-6)
        assert "versioned" in {m["name"] for m in client.get_model_repository_index()}
        # The rest of the upload: a file beside it (a tokenizer, say).
        s3.put_object(Bucket=bucket, Key="repo/versioned/2/notes.txt", Body=b"version 2")
        server.wait_for_log("serving the new load", count=1)
        assert probability() == pytest.approx(p2, abs=1e-6)
        assert client.get_model_metadata("versioned")["versions"] == ["2"]
        copy = next((tmp_path / "cache").iterdir()) / "versioned" / "2"
        assert sorted(p.name for p in copy.iterdir()) == ["model.json", "notes.txt"], "".join(server.log[-30:])
        summary = load_summary(load, report)
        assert summary["answered"] > 1000 and summary["failed"] == 0, summary
        # The version was fetched once, whole: one fetch of the folder after start.
        fetches = [line for line in server.log if "fetched the model's files" in line and "versioned" in line]
        assert len(fetches) == 2, fetches
        assert not any("cannot load" in line for line in server.log), server.log[-20:]
    finally:
        server.stop()


def test_a_store_that_goes_away_leaves_every_model_serving(tmp_path):
    """The store stopped while serving: every loaded model keeps
    answering, the log says why, `/metrics` counts the failed listings,
    and polls back off; started again, the next poll says it answers."""
    seaweed = SeaweedFS(tmp_path / "seaweedfs")
    try:
        shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
        seaweed.upload(tmp_path / "repo", seaweed.bucket("away"), "repo")
        server = RunningServer(f"s3://{seaweed.host}/away/repo", env=seaweed.env(),
                               extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "0.5",
                                           "--model-cache-dir", str(tmp_path / "cache"), "--metrics", "127.0.0.1:0"])
        try:
            client = httpclient.InferenceServerClient(server.address)
            seaweed.stop()
            server.wait_for_log("cannot list the model repository; every model loaded keeps serving", count=2)
            for _ in range(50):
                assert_answers_as_xgboost(client)
            assert client.is_model_ready("titanic")
            warned = [line for line in server.log if "cannot list the model repository" in line]
            assert f"s3://{seaweed.host}/away/repo" in warned[0] and "retry_in_secs=2" in warned[0], warned
            assert "retry_in_secs=4" in warned[1], warned
            metrics = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
            failures = [line for line in metrics.splitlines()
                        if line.startswith("wirespeed_repository_storage_failures_total{")]
            assert failures and f's3://{seaweed.host}/away/repo' in failures[0], failures
            assert float(failures[0].rsplit(" ", 1)[1]) >= 2
            seaweed.start()
            server.wait_for_log("the model repository answers again", count=1, timeout=120)
            assert client.is_model_ready("titanic")
        finally:
            server.stop()
    finally:
        seaweed.stop()


def test_tritons_command_line_takes_the_bucket(store, tmp_path):
    """A deployment's `tritonserver --model-repository=s3://...` (KServe's
    Triton runtime, a Helm chart's args) through the image's
    `tritonserver`: the same URL, the same environment."""
    from conftest import free_port, http_ok, stop_process, wait_until

    shutil.copytree(MODELS / "titanic", tmp_path / "repo" / "titanic")
    store.upload(tmp_path / "repo", store.bucket("tritoncli"), "repo")
    http, grpc, metrics = free_port(), free_port(), free_port()
    env = store.env(WIRESPEED_MODEL_CACHE_DIR=str(tmp_path / "cache"))
    process = subprocess.Popen([str(wirespeed_binary()), "tritonserver", f"--model-repository=s3://{store.host}/tritoncli/repo",
                                "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
                                f"--grpc-port={grpc}", "--metrics-address=127.0.0.1",
                                f"--metrics-port={metrics}", "--model-control-mode=poll"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("ready", lambda: process.poll() is None and http_ok(f"http://127.0.0.1:{http}/v2/health/ready"))
        assert_answers_as_xgboost(httpclient.InferenceServerClient(f"127.0.0.1:{http}"))
    finally:
        stop_process(process, grace=15)


def test_a_model_deleted_from_the_bucket_is_unloaded_once_it_stays_gone(store, tmp_path):
    """Poll mode: a model folder deleted from the bucket is removed from
    the copy and unloaded once a second poll finds it gone too; the
    other model keeps serving."""
    for name in ("titanic", "identity_fp32"):
        shutil.copytree(MODELS / name, tmp_path / "repo" / name)
    bucket = store.bucket("deleted")
    store.upload(tmp_path / "repo", bucket, "repo")
    server = RunningServer(f"s3://{store.host}/deleted/repo", env=store.env(),
                           extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "0.5",
                                       "--model-cache-dir", str(tmp_path / "cache")])
    try:
        client = httpclient.InferenceServerClient(server.address)
        assert client.is_model_ready("identity_fp32")
        s3 = store.client()
        for item in s3.list_objects_v2(Bucket=bucket, Prefix="repo/identity_fp32/")["Contents"]:
            s3.delete_object(Bucket=bucket, Key=item["Key"])
        server.wait_for_log("files changed in the store", count=1)
        server.wait_for_log("its copy removed", count=1)
        server.wait_for_log("model folder removed; unloaded", count=1)
        assert not client.is_model_ready("identity_fp32")
        assert not (next((tmp_path / "cache").iterdir()) / "identity_fp32").exists()
        assert_answers_as_xgboost(client)
    finally:
        server.stop()


def files_under(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("uri", ["kserve-diff/model", "kserve-diff/model/model.json"],
                         ids=["a folder", "one object"])
def test_a_storage_uri_lands_as_kserves_storage_initializer_lands_it(store, tmp_path, monkeypatch, xgb_model, uri):
    """KServe's own storage initializer (kserve_storage.Storage, what its
    init container runs) and wirespeed copy the same `storageUri` from the
    same bucket: the same files, at the same paths, with the same bytes.
    (Empty objects are left out: KServe skips them, wirespeed keeps them,
    as Triton does, for a Python package's empty `__init__.py`.)"""
    from kserve_storage import Storage

    path, _, _ = xgb_model
    folder = tmp_path / "model"
    (folder / "assets").mkdir(parents=True)
    shutil.copy(path, folder / "model.json")
    (folder / "assets" / "labels.txt").write_text("died\nsurvived\n")
    (folder / "README.md").write_text("an XGBoost model\n")
    store.upload(folder, store.bucket("kserve-diff"), "model")
    env = store.env(AWS_ENDPOINT_URL=store.endpoint)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.setenv(key, env[key])
    kserve_dir = tmp_path / "kserve"
    kserve_dir.mkdir()
    Storage.download_files([f"s3://{uri}"], [str(kserve_dir)])
    cache = tmp_path / "cache"
    done = run_wirespeed("serve", "--models", f"s3://{uri}", "--model-name", "m", "--model-cache-dir", cache,
                         "--check", env=env)
    assert done.returncode == 0, done.stderr
    copy = next(cache.iterdir())
    ours = {k: v for k, v in files_under(copy).items() if not k.startswith(".")}
    assert ours == files_under(kserve_dir)
    assert "model.json" in ours
