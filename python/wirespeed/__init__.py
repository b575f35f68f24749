"""wirespeed for Python: the wirespeed server's V2 codec, tree runtime and client.

- :func:`decode_request` decodes a V2 (Open Inference Protocol) infer request,
  JSON or Triton's binary extension, straight into numpy arrays;
  :func:`encode_response` writes the answer.
- :mod:`wirespeed.trees` predicts XGBoost and LightGBM models in Rust.
- :mod:`wirespeed.client` is a V2 client with tritonclient's API
  (``import wirespeed.client.http as httpclient``).
- The ``wirespeed`` command (the server) is installed with the package.
"""

from wirespeed._wirespeed import (
    DecodeError,
    Request,
    __version__,
    decode_request,
    encode_response,
)

from wirespeed import trees  # noqa: E402


def encode_error(message: str) -> bytes:
    """The V2 error body, ``{"error": message}``, for a 4xx or 5xx answer."""
    import json

    return json.dumps({"error": message}).encode()

__all__ = ["DecodeError", "Request", "decode_request", "encode_response", "encode_error", "trees", "__version__"]
