"""JSON schemas for kubeconform, made offline from the sources they are
published from, fetched through the Go module proxy: Kubernetes' OpenAPI
definitions (k8s.io/kubernetes, api/openapi-spec/swagger.json), and the
CRDs of KServe (github.com/kserve/kserve, config/crd/full) and of the
Prometheus Operator (its ServiceMonitor). As kubeconform's own
openapi2jsonschema does, int-or-string fields take either, and objects are
strict (`additionalProperties: false`), so a misspelt field is an error.

    python tests/k8s_schemas.py OUT_DIR
writes OUT_DIR/{group}/{kind}_{version}.json (kubeconform's
`-schema-location 'OUT_DIR/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json'`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

KUBERNETES = "k8s.io/kubernetes@v1.31.4"
KSERVE = "github.com/kserve/kserve@v0.14.1"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.77.1"

# The API groups of what the chart and the KServe manifests make.
WANTED_GROUPS = {"", "apps", "autoscaling", "policy", "networking.k8s.io"}

INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


def module_dir(module):
    env = dict(os.environ, GOFLAGS="-mod=mod")
    out = subprocess.run(["go", "mod", "download", "-json", module], capture_output=True, text=True, env=env,
                         check=True)
    return Path(json.loads(out.stdout)["Dir"])


def strict(schema):
    """The schema with objects closed and int-or-string opened, throughout."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("x-kubernetes-int-or-string") or schema.get("format") == "int-or-string":
        return INT_OR_STRING
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def write(out, group, kind, version, schema):
    # kubeconform names the core group's folder by its version (v1).
    path = out / (group or version) / f"{kind.lower()}_{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))


def kubernetes(out):
    swagger = json.loads((module_dir(KUBERNETES) / "api/openapi-spec/swagger.json").read_text())
    definitions = {name: strict(d) for name, d in swagger["definitions"].items()}
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = INT_OR_STRING
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "oneOf": [{"type": "string"}, {"type": "number"}]}
    def closure(name, seen):
        # The definitions `name` refers to, transitively.
        if name in seen:
            return
        seen.add(name)
        for ref in refs(definitions[name]):
            closure(ref, seen)

    for name, definition in swagger["definitions"].items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if gvk["group"] not in WANTED_GROUPS:
                continue
            needed = set()
            closure(name, needed)
            schema = {"definitions": {n: definitions[n] for n in needed}, "$ref": f"#/definitions/{name}"}
            write(out, gvk["group"], gvk["kind"], gvk["version"], schema)


def refs(schema):
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#/definitions/"):
                yield value[len("#/definitions/"):]
            else:
                yield from refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from refs(item)


def crds(out, files):
    for file in files:
        for crd in yaml.safe_load_all(file.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                # apiVersion, kind and metadata are the API server's, checked by kubeconform's own rules.
                schema.get("properties", {}).setdefault("metadata", {"type": "object"})
                write(out, spec["group"], spec["names"]["kind"], version["name"], schema)


def main(out):
    out = Path(out)
    kubernetes(out)
    kserve = module_dir(KSERVE) / "config/crd/full"
    crds(out, [kserve / "serving.kserve.io_clusterservingruntimes.yaml",
               kserve / "serving.kserve.io_servingruntimes.yaml",
               kserve / "serving.kserve.io_inferenceservices.yaml"])
    operator = module_dir(PROMETHEUS_OPERATOR) / "example/prometheus-operator-crd"
    crds(out, [operator / "monitoring.coreos.com_servicemonitors.yaml"])


if __name__ == "__main__":
    main(sys.argv[1])
