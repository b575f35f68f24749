"""Triton's auto-complete for a Python model: runs the model's
`TritonPythonModel.auto_complete_config` on its configuration and writes
the completed configuration. Reads one JSON message on stdin (`utils`, the
source of triton_python_backend_utils; `file`, the model.py; `config`,
Triton's JSON of the configuration so far) and writes the completed JSON
on stdout, or the traceback on stderr with a non-zero exit."""

import json
import os
import sys
import types

message = json.load(sys.stdin)
utils = types.ModuleType("triton_python_backend_utils")
utils.__file__ = "<wirespeed:triton_python_backend_utils.py>"
exec(compile(message["utils"], utils.__file__, "exec"), utils.__dict__)
sys.modules["triton_python_backend_utils"] = utils
path = message["file"]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
model = types.ModuleType("model")
model.__file__ = path
sys.modules["model"] = model
with open(path, "rb") as f:
    exec(compile(f.read(), path, "exec"), model.__dict__)
config = utils.ModelConfig(message["config"])
complete = getattr(getattr(model, "TritonPythonModel", None), "auto_complete_config", None)
if complete is not None:
    returned = complete(config)
    if returned is not None:
        config = returned
json.dump(config.as_dict(), sys.stdout)
