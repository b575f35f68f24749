"""The command line: start-up failures are clear and non-zero, `--check`
validates without serving."""

import shutil
import socket

from conftest import MODELS, RunningServer, run_wirespeed


def test_check_lists_the_bundled_models():
    result = run_wirespeed("serve", "--check", "--models", MODELS)
    assert result.returncode == 0, result.stderr
    assert "titanic (version 1" in result.stdout
    assert "titanic_large (version 1" in result.stdout


def test_a_broken_model_fails_the_check_and_the_start(tmp_path):
    shutil.copytree(MODELS / "titanic", tmp_path / "broken")
    (tmp_path / "broken" / "model.json").write_text('{"learner": {}}')
    for args in (["--check"], ["--http", "127.0.0.1:0"]):
        result = run_wirespeed("serve", "--models", tmp_path, *args, timeout=30)
        assert result.returncode != 0
        assert "broken" in result.stderr and "not a valid XGBoost JSON model" in result.stderr, result.stderr


def test_a_config_that_does_not_fit_the_model_is_refused(tmp_path):
    shutil.copytree(MODELS / "titanic", tmp_path / "titanic")
    config = tmp_path / "titanic" / "config.toml"
    config.write_text(config.read_text().replace("shape = [-1, 12]", "shape = [-1, 13]"))
    result = run_wirespeed("serve", "--check", "--models", tmp_path)
    assert result.returncode != 0
    assert "FP32 [-1, 12]" in result.stderr and "12 features" in result.stderr, result.stderr


def test_a_taken_port_is_a_clear_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_wirespeed("serve", "--models", MODELS, "--http", f"127.0.0.1:{port}", timeout=30)
    assert result.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "in use" in result.stderr, result.stderr


def test_start_up_logs_each_model_and_the_address():
    server = RunningServer(MODELS)
    try:
        log = "".join(server.log)
        assert "loaded model" in log and "model=titanic " in log and "model=titanic_large " in log
        assert f"listening on http://{server.address}" in log
    finally:
        server.stop()
    assert server.process.returncode == 0
