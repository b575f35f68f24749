//! Triton's shared-memory extensions over REST: status, register and
//! unregister of system shared-memory regions (`shared_memory.rs` holds
//! them), and CUDA's, which are refused: there is no GPU.

use hyper::{Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use wirespeed_core::Error;
use wirespeed_http::RequestBody;

use crate::protocols::http::response::{self, Body};
use crate::protocols::router::{SharedMemoryAction, SharedMemoryRoute};
use crate::protocols::Front;
use wirespeed_engine::regions::cuda_refused;

/// A register request's body is a few fields: more is a mistake.
const MAX_REGISTER_BODY: u64 = 64 * 1024;

/// The body of `POST /v2/systemsharedmemory/region/{name}/register`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Register {
    key: String,
    #[serde(default)]
    offset: usize,
    byte_size: usize,
}

/// Answers one shared-memory request.
pub(crate) async fn answer(
    front: &Front,
    route: SharedMemoryRoute<'_>,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Error> {
    let shm = &front.engine.shared_memory;
    match (route.cuda, route.action) {
        (false, SharedMemoryAction::Status) => {
            let regions: Vec<Value> = shm
                .status(route.region)?
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name,
                        "key": r.key,
                        "offset": r.offset,
                        "byte_size": r.byte_size,
                    })
                })
                .collect();
            Ok(response::json_value(&Value::Array(regions)))
        }
        (false, SharedMemoryAction::Register) => {
            let body = crate::protocols::http::body::read_small(
                front,
                request.into_body(),
                MAX_REGISTER_BODY as usize,
            )
            .await?;
            let register: Register = serde_json::from_slice(&body).map_err(|e| {
                Error::malformed(format!(
                    "a register request is {{\"key\": \"/name\", \"offset\": 0, \"byte_size\": N}}: {e}"
                ))
            })?;
            shm.register(
                route.region,
                &register.key,
                register.offset,
                register.byte_size,
            )?;
            Ok(response::json(Vec::new()))
        }
        (false, SharedMemoryAction::Unregister) => {
            shm.unregister(route.region);
            Ok(response::json(Vec::new()))
        }
        (true, SharedMemoryAction::Status) if route.region.is_empty() => {
            Ok(response::json_value(&json!([])))
        }
        (true, SharedMemoryAction::Status) => Err(Error::invalid_input(format!(
            "no CUDA shared memory region '{}' is registered: this server has no GPU",
            route.region
        ))),
        (true, SharedMemoryAction::Register) => Err(cuda_refused()),
        // Nothing is ever registered, so nothing is left to unregister.
        (true, SharedMemoryAction::Unregister) => Ok(response::json(Vec::new())),
    }
}
