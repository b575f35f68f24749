"""A V2 (Open Inference Protocol) client written in Rust, with tritonclient's API.

Switch by changing the import::

    import tritonclient.http as httpclient        # before
    import wirespeed.client.http as httpclient    # after

    from tritonclient.utils import *              # before
    from wirespeed.client.utils import *          # after

It speaks HTTP/1.1 (JSON and Triton's binary tensor data) over TCP or a Unix
socket (``unix:///path``) to any V2 server: wirespeed, Triton, KServe,
MLServer. See docs/python.md for exactly what of tritonclient is covered.
"""

from wirespeed.client.utils import InferenceServerException

__all__ = ["InferenceServerException"]
