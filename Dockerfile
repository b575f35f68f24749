# wirespeed's container image: built in a Rust image, run from a distroless
# one (glibc and libgcc only: no shell, no package manager), as a non-root
# user, with the bundled models in /models as the default repository.
#
#   docker build -t wirespeed .
#   docker run -p 8000:8000 -p 8001:8001 -p 8002:8002 wirespeed
#   docker run -v $PWD/my-models:/models:ro -p 8000:8000 wirespeed
#
# The three bases are build arguments, for a registry mirror, an offline
# build or another run image (for Python models, one with Python and
# numpy, e.g. python:3.11-slim-bookworm with `pip install numpy`):
#
#   docker build --build-arg RUN_IMAGE=my-registry/python-numpy:3.11 -t wirespeed-python .
#
# docs/deploy.md has the details; deploy/ has KServe and Helm manifests.

# Where the binary is built: Rust (rust-toolchain.toml's version), a C
# linker, cargo on PATH.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
# Where ONNX Runtime's wheel is fetched: Python with pip.
ARG ORT_IMAGE=docker.io/library/python:3.11-slim-bookworm
# What runs: glibc, libgcc, libstdc++ and libgomp (ONNX Runtime's).
ARG RUN_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# The workspace: its manifest names every member, the Python package's
# bindings (python/) among them.
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
COPY crates crates
COPY python python
RUN cargo build --release --locked -p wirespeed \
    && strip target/release/wirespeed \
    && cp target/release/wirespeed /wirespeed \
    && mkdir -p /links/bin /links/opt/tritonserver/bin \
    && ln -s /usr/local/bin/wirespeed /links/bin/tritonserver \
    && ln -s /usr/local/bin/wirespeed /links/opt/tritonserver/bin/tritonserver

# ONNX Runtime's library, which `engine = "auto"` gives what tract cannot
# run (docs/onnx.md): the one the onnxruntime wheel ships, from PyPI (the
# tests' version). It needs libstdc++ and libgomp, which the run image has.
FROM ${ORT_IMAGE} AS onnxruntime
ARG ONNXRUNTIME_VERSION=1.32.0
RUN python3 -m pip download --no-deps --only-binary=:all: "onnxruntime==${ONNXRUNTIME_VERSION}" -d /wheel \
    && python3 -m zipfile -e /wheel/onnxruntime-*.whl /unpacked \
    && mkdir /ort \
    && cp /unpacked/onnxruntime/capi/libonnxruntime.so.* /ort/libonnxruntime.so

FROM ${RUN_IMAGE}
COPY --from=build /wirespeed /usr/local/bin/wirespeed
# `tritonserver` runs Triton's command line (wirespeed tritonserver), on
# PATH and where Triton's image has it: a manifest whose command is
# `tritonserver ...` runs unchanged, as does one that passes
# `tritonserver ...` as arguments to the entrypoint (KServe's runtime).
COPY --from=build /links/bin/ /usr/local/bin/
COPY --from=build /links/opt/ /opt/
COPY --from=onnxruntime /ort/libonnxruntime.so /usr/local/lib/onnxruntime/libonnxruntime.so
COPY --chown=65532:65532 models /models
# Listen on every interface inside the container: REST, gRPC and metrics
# on Triton's ports. Every flag has such a variable (wirespeed serve --help).
ENV ORT_DYLIB_PATH=/usr/local/lib/onnxruntime/libonnxruntime.so \
    WIRESPEED_MODELS=/models \
    WIRESPEED_HTTP=0.0.0.0:8000 \
    WIRESPEED_GRPC=0.0.0.0:8001 \
    WIRESPEED_METRICS=0.0.0.0:8002
EXPOSE 8000 8001 8002
USER 65532:65532
# Ready means serving with every model loaded; `wirespeed health` asks
# GET /v2/health/ready on 127.0.0.1:8000 (WIRESPEED_HEALTH_ADDR moves it).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/wirespeed", "health"]
ENTRYPOINT ["/usr/local/bin/wirespeed"]
CMD ["serve"]
