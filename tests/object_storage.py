"""Real object stores for the storage tests, started by the tests: SeaweedFS
(`weed server -s3`, an S3-compatible store built from its Go module's
source by scripts/test) and Azurite (Azure's own emulator, from npm), each
on loopback with a data folder of its own. Objects are written with each
cloud's own SDK (boto3, azure-storage-blob), never through wirespeed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import requests

from conftest import free_port, stop_process, wait_until

# The models' Python (numpy) for wirespeed's workers, as the Triton peer tests set it.
os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

TOOLS = Path(os.environ.get("WIRESPEED_TOOLS", Path.home() / ".cache" / "wirespeed" / "tools"))

# The S3 store's one identity; a test that means wrong credentials sends
# another secret.
ACCESS_KEY = "wirespeed-tests"
SECRET_KEY = "wirespeed-tests-secret"


def tool(name):
    """A store's program: from WIRESPEED_TOOLS (scripts/test builds them
    there), else from PATH."""
    path = TOOLS / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    assert found, f"{name} is not built: run scripts/test, which builds it into {TOOLS}"
    return found


class SeaweedFS:
    """`weed server` with its S3 gateway on a free loopback port, its
    identities from an S3 config file (so that a wrong secret is
    refused), its data in `root`. Stopped and started again on the same
    data for the tests of a store that goes away."""

    def __init__(self, root: Path):
        self.root = root
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "s3.json").write_text(json.dumps({"identities": [{
            "name": "tests",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        self.ports = {k: free_port() for k in ("master", "volume", "filer", "s3")}
        self.process = None
        self.start()

    def start(self):
        p = self.ports
        log = open(self.root / "weed.log", "a")
        self.process = subprocess.Popen(
            [tool("weed"), "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-master.port={p['master']}", f"-master.port.grpc={free_port()}",
             f"-volume.port={p['volume']}", f"-volume.port.grpc={free_port()}",
             f"-filer.port={p['filer']}", f"-filer.port.grpc={free_port()}",
             "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={free_port()}",
             # Its table catalogs, which the tests do not use, would
             # take fixed ports.
             "-s3.port.iceberg=0", "-s3.port.lance=0",
             # Each bucket is a collection with volumes of its own: small
             # volumes, and room for many.
             "-master.volumeSizeLimitMB=256", "-volume.max=200",
             f"-s3.config={self.root / 's3.json'}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

        def answers():
            assert self.process.poll() is None, (self.root / "weed.log").read_text()[-3000:]
            try:
                # Unsigned, the gateway refuses: it is up and checks identities.
                return requests.get(self.endpoint, timeout=2).status_code == 403
            except requests.RequestException:
                return False

        wait_until("SeaweedFS's S3 gateway", answers, timeout=90)

    def stop(self):
        stop_process(self.process, grace=15)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def host(self):
        return f"127.0.0.1:{self.ports['s3']}"

    def client(self, secret=SECRET_KEY):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=secret, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}))

    def bucket(self, name):
        s3 = self.client()
        try:
            s3.create_bucket(Bucket=name)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name

    def upload(self, folder: Path, bucket: str, prefix: str):
        """Every file of `folder` under `prefix` in `bucket`, in path order."""
        s3 = self.client()
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")

    def env(self, secret=SECRET_KEY, **more):
        """wirespeed's (or Triton's) environment with this store's
        credentials, as a user's deployment gives them."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=secret, **more)
        return env


# Azurite's well-known account and key (the emulator's own, in its docs).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Azurite:
    """Azurite's Blob service on a free loopback port, data in `root`."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = subprocess.Popen(
            [tool("azurite/node_modules/.bin/azurite-blob"), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--location", str(root), "--disableTelemetry", "--skipApiVersionCheck"],
            stdout=open(root / "azurite.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
        )

        def listens():
            assert self.process.poll() is None, (root / "azurite.log").read_text()[-3000:]
            return "successfully listens" in (root / "azurite.log").read_text()

        wait_until("Azurite", listens, timeout=60)

    def connection_string(self, key=AZURITE_KEY):
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
                f"BlobEndpoint=http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT};")

    def upload(self, folder: Path, container: str, prefix: str):
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.connection_string())
        try:
            service.create_container(container)
        except Exception as e:  # noqa: BLE001 - ResourceExistsError when it is there
            assert type(e).__name__ == "ResourceExistsError", e
        client = service.get_container_client(container)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            with open(path, "rb") as data:
                client.upload_blob(f"{prefix}/{path.relative_to(folder).as_posix()}", data, overwrite=True)

    def env(self, key=AZURITE_KEY):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_")}
        env["AZURE_STORAGE_CONNECTION_STRING"] = self.connection_string(key)
        return env

    def stop(self):
        stop_process(self.process, grace=10)
