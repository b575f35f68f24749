"""The deployment files: the Helm chart lints and renders, and what it
renders (with each option on) and the KServe manifests validate against
Kubernetes', KServe's and the Prometheus Operator's schemas (kubeconform,
strict). helm and kubeconform come from the Go module proxy
(scripts/test installs them into .tools); the schemas are made by
k8s_schemas.py from their published sources."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import k8s_schemas

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "wirespeed"
KSERVE = ROOT / "deploy" / "kserve"


def tool(name):
    found = shutil.which(name) or (ROOT / ".tools" / name)
    assert Path(found).exists(), f"{name} is not installed: scripts/test installs it into .tools"
    return str(found)


@pytest.fixture(scope="module")
def schemas(tmp_path_factory):
    out = tmp_path_factory.mktemp("schemas")
    k8s_schemas.main(out)
    return out


def kubeconform(schemas, *files):
    location = f"{schemas}/{{{{.Group}}}}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}.json"
    return subprocess.run([tool("kubeconform"), "-strict", "-summary", "-schema-location", location,
                           *map(str, files)], capture_output=True, text=True)


def template(tmp_path, *sets):
    args = [tool("helm"), "template", "models", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    path = tmp_path / f"rendered-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(out.stdout)
    return path, [d for d in yaml.safe_load_all(out.stdout) if d]


def test_helm_lint_passes():
    out = subprocess.run([tool("helm"), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("sets", [
    [],
    ["serviceMonitor.enabled=true", "autoscaling.enabled=false", "models.controlMode=poll",
     "models.volume.persistentVolumeClaim.claimName=models", "otlp.endpoint=http://otel:4317",
     "extraArgs={--log-format=json,--access-log}"],
    ["models.url=s3://models/triton", "models.credentialsSecret=model-store", "models.controlMode=poll"],
], ids=["defaults", "every-option", "object-storage"])
def test_the_rendered_chart_validates(tmp_path, schemas, sets):
    path, docs = template(tmp_path, *sets)
    out = kubeconform(schemas, path)
    assert out.returncode == 0 and "Invalid: 0, Errors: 0" in out.stdout, out.stdout + out.stderr
    kinds = sorted(d["kind"] for d in docs)
    monitored = any(s.startswith("serviceMonitor") for s in sets)
    want = ["Deployment", "Service"] + (["ServiceMonitor"] if monitored else ["HorizontalPodAutoscaler"])
    assert kinds == sorted(want), kinds


def test_the_pod_drains_within_its_grace_period_and_probes_v2_health(tmp_path):
    _, docs = template(tmp_path, "drainTimeoutSeconds=40", "preStopSeconds=7")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--drain-timeout=40" in container["args"]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 7
    assert pod["terminationGracePeriodSeconds"] == 40 + 7 + 5
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_a_repository_in_a_bucket_is_copied_to_a_writable_cache_with_the_secrets_credentials(tmp_path):
    _, docs = template(tmp_path, "models.url=s3://models/triton", "models.credentialsSecret=model-store")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--models=s3://models/triton" in container["args"]
    assert "--model-cache-dir=/var/cache/wirespeed" in container["args"]
    assert container["envFrom"] == [{"secretRef": {"name": "model-store"}}]
    # The root file system is read-only: the copies go to an emptyDir.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "model-cache", "mountPath": "/var/cache/wirespeed"} in container["volumeMounts"]
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"]


def test_every_flag_the_chart_and_runtime_pass_is_one_wirespeed_takes(tmp_path):
    """A renamed flag would pass the schemas and fail in the pod."""
    _, docs = template(tmp_path, "models.controlMode=poll", "otlp.endpoint=http://otel:4317",
                       "models.url=s3://models/triton")
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    runtime = yaml.safe_load((KSERVE / "cluster-serving-runtime.yaml").read_text())
    args += runtime["spec"]["containers"][0]["args"]
    from conftest import wirespeed_binary
    help_text = subprocess.run([str(wirespeed_binary()), "serve", "--help"], capture_output=True, text=True).stdout
    flags = {re.match(r"--[a-z-]+", a).group(0) for a in args if a.startswith("--")}
    missing = [f for f in sorted(flags) if f"{f} " not in help_text and f"{f}=" not in help_text
               and f"{f}\n" not in help_text]
    assert not missing, missing


def test_the_kserve_runtime_and_inference_services_validate(schemas):
    files = sorted(KSERVE.glob("*.yaml"))
    assert len(files) >= 2
    out = kubeconform(schemas, *files)
    assert out.returncode == 0 and "Invalid: 0, Errors: 0" in out.stdout, out.stdout + out.stderr
    runtime = yaml.safe_load((KSERVE / "cluster-serving-runtime.yaml").read_text())
    assert {f["name"] for f in runtime["spec"]["supportedModelFormats"]} == {"xgboost", "lightgbm", "onnx"}
    assert runtime["spec"]["protocolVersions"] == ["v1", "v2", "grpc-v2"]
    assert "--models=/mnt/models" in runtime["spec"]["containers"][0]["args"]


def test_schemas_catch_a_misspelt_field(tmp_path, schemas):
    """The validation above could fail: a typo in a container is refused."""
    bad = yaml.safe_load((KSERVE / "cluster-serving-runtime.yaml").read_text())
    bad["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = kubeconform(schemas, path)
    assert out.returncode != 0 and "imagePullPolcy" in out.stdout, out.stdout


def test_the_image_health_check_says_ready_live_or_not(tmp_path):
    """`wirespeed health`, the image's HEALTHCHECK: 0 for a ready server,
    1 with the reason for one that is not ready or not there."""
    from conftest import RunningServer, run_wirespeed
    from test_repository import copy_models
    server = RunningServer(copy_models(tmp_path / "repo", "titanic"))
    try:
        assert run_wirespeed("health", "--addr", server.address).returncode == 0
        assert run_wirespeed("health", "--addr", server.address, "--live").returncode == 0
    finally:
        server.stop()
    gone = run_wirespeed("health", "--addr", server.address, "--timeout", "1")
    assert gone.returncode == 1 and "cannot ask" in gone.stderr, gone.stderr
    # A model whose upstream does not answer keeps the server unready.
    (tmp_path / "unready" / "remote").mkdir(parents=True)
    (tmp_path / "unready" / "remote" / "config.toml").write_text(
        'backend = "upstream"\nurl = "grpc://127.0.0.1:1"\n'
        '[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1]\n'
        '[[outputs]]\nname = "y"\ndatatype = "FP32"\nshape = [-1]\n')
    unready = RunningServer(tmp_path / "unready")
    try:
        out = run_wirespeed("health", "--addr", unready.address)
        assert out.returncode == 1 and "answered 503" in out.stderr, out.stderr
        assert run_wirespeed("health", "--addr", unready.address, "--live").returncode == 0
    finally:
        unready.stop()


def test_one_model_folder_is_served_under_the_inference_service_name(tmp_path):
    """KServe's layout: /mnt/models is one model's folder, served as
    --model-name (the runtime passes {{.Name}}); checked against xgboost."""
    import numpy as np
    import tritonclient.http as httpclient
    import xgboost
    from conftest import MODELS, RunningServer, run_wirespeed
    from test_repository import ROW
    mnt = tmp_path / "mnt" / "models"
    shutil.copytree(MODELS / "titanic", mnt)
    server = RunningServer(mnt, extra_args=["--model-name", "titanic-isvc"])
    try:
        client = httpclient.InferenceServerClient(server.address)
        inp = httpclient.InferInput("features", [1, 12], "FP32")
        inp.set_data_from_numpy(np.array([ROW], dtype=np.float32))
        got = client.infer("titanic-isvc", [inp]).as_numpy("probability")
        booster = xgboost.Booster(model_file=str(mnt / "model.json"))
        want = booster.predict(xgboost.DMatrix(np.array([ROW], dtype=np.float32)))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert [m["name"] for m in client.get_model_repository_index()] == ["titanic-isvc"]
    finally:
        server.stop()
    out = run_wirespeed("serve", "--models", tmp_path / "mnt", "--model-name", "x", "--http", "127.0.0.1:0",
                        "--grpc", "off", "--metrics", "off")
    assert out.returncode != 0 and "has no config.toml" in out.stderr, out.stderr
    out = run_wirespeed("serve", "--models", mnt, "--model-name", "../x", "--http", "127.0.0.1:0")
    assert out.returncode != 0 and "cannot be a model name" in out.stderr, out.stderr
