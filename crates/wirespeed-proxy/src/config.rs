//! What the proxy serves: [`TranscodeConfig`], from flags or a TOML file.

use std::path::PathBuf;
use std::time::Duration;

use wirespeed_transcode::PrintOptions;

/// What `wirespeed proxy` (or a server's transcoding section) serves.
#[derive(Debug, Clone)]
pub struct TranscodeConfig {
    /// A `FileDescriptorSet` (`protoc --include_imports
    /// --descriptor_set_out`) with the services and their
    /// `google.api.http` rules; `None` to ask the upstream by gRPC server
    /// reflection when the server starts.
    pub descriptor_set: Option<PathBuf>,
    /// The upstream's URLs: `grpc://host:port`, `grpcs://...`,
    /// `grpc+unix:///path`; several for replicas.
    pub upstream: Vec<String>,
    /// The services to serve; every service of the set when empty.
    pub services: Vec<String>,
    /// Query parameters that name no field are skipped, not refused.
    pub ignore_unknown_query_parameters: bool,
    /// Body fields the message does not have are skipped, not refused.
    pub ignore_unknown_fields: bool,
    /// Request headers passed on as gRPC metadata (lowercase names).
    pub forward_headers: Vec<String>,
    /// How answers are printed: defaults emitted, proto field names,
    /// enums as numbers.
    pub print: PrintOptions,
    /// Without a descriptor set: how often the upstream's reflection is
    /// asked again, the routes rebuilt when its services changed (`None`:
    /// asked once, at start).
    pub reflect_every: Option<Duration>,
}

/// How often an upstream's reflection is asked again, by default.
pub(crate) const DEFAULT_REFLECT_EVERY: Duration = Duration::from_secs(60);

impl TranscodeConfig {
    /// The services of a TOML file: one `[[service]]` table per upstream,
    /// with this struct's fields (and `forward_headers`,
    /// `emit_defaults`, `proto_field_names`, `enums_as_ints`).
    /// `descriptor_set` paths are relative to the file.
    pub fn from_file(path: &std::path::Path) -> Result<Vec<TranscodeConfig>, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            service: Vec<Service>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Service {
            descriptor_set: Option<PathBuf>,
            upstream: Vec<String>,
            #[serde(default)]
            services: Vec<String>,
            #[serde(default)]
            ignore_unknown_query_parameters: bool,
            #[serde(default)]
            ignore_unknown_fields: bool,
            #[serde(default)]
            forward_headers: Vec<String>,
            #[serde(default)]
            emit_defaults: bool,
            #[serde(default)]
            proto_field_names: bool,
            #[serde(default)]
            enums_as_ints: bool,
            reflect_every_s: Option<f64>,
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.service.is_empty() {
            return Err(format!("{} has no [[service]]", path.display()));
        }
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        Ok(file
            .service
            .into_iter()
            .map(|s| TranscodeConfig {
                descriptor_set: s.descriptor_set.map(|p| dir.join(p)),
                upstream: s.upstream,
                services: s.services,
                ignore_unknown_query_parameters: s.ignore_unknown_query_parameters,
                ignore_unknown_fields: s.ignore_unknown_fields,
                forward_headers: s
                    .forward_headers
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                print: PrintOptions {
                    emit_defaults: s.emit_defaults,
                    proto_field_names: s.proto_field_names,
                    enums_as_ints: s.enums_as_ints,
                    ..PrintOptions::default()
                },
                reflect_every: match s.reflect_every_s {
                    Some(secs) if secs > 0.0 && secs.is_finite() => {
                        Some(Duration::from_secs_f64(secs))
                    }
                    Some(_) => None,
                    None => Some(DEFAULT_REFLECT_EVERY),
                },
            })
            .collect())
    }
}
