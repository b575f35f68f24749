//! The upstream's descriptors by gRPC server reflection, when no
//! descriptor set is given: its services (`list_services`), then the file
//! of each (`file_containing_symbol`) and every file those import
//! (`file_by_filename`), as serialized `FileDescriptorProto`s. They are
//! kept as bytes and joined into a `FileDescriptorSet`, so each method's
//! options, the `google.api.http` rule among them, reach prost-reflect
//! whole (prost's own types would drop an extension they do not know).
//!
//! Each question is one call on the bidirectional
//! `ServerReflectionInfo` stream: one request, the client's half-close,
//! one answer. `grpc.reflection.v1` is asked first, `v1alpha` (what
//! older servers have) when the upstream does not implement it.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::HeaderMap;
use prost::Message;
use prost_reflect::DescriptorPool;
use wirespeed_upstream::{CallError, Upstream};

/// How long start-up waits for each answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, PartialEq, Message)]
struct ReflectionRequest {
    #[prost(string, tag = "1")]
    host: String,
    #[prost(oneof = "Question", tags = "3, 4, 7")]
    question: Option<Question>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Question {
    #[prost(string, tag = "3")]
    FileByFilename(String),
    #[prost(string, tag = "4")]
    FileContainingSymbol(String),
    #[prost(string, tag = "7")]
    ListServices(String),
}

#[derive(Clone, PartialEq, Message)]
struct ReflectionResponse {
    #[prost(oneof = "Answer", tags = "4, 6, 7")]
    answer: Option<Answer>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Answer {
    #[prost(message, tag = "4")]
    Files(FileDescriptorResponse),
    #[prost(message, tag = "6")]
    Services(ListServiceResponse),
    #[prost(message, tag = "7")]
    Error(ErrorResponse),
}

#[derive(Clone, PartialEq, Message)]
struct FileDescriptorResponse {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    file_descriptor_proto: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct ListServiceResponse {
    #[prost(message, repeated, tag = "1")]
    service: Vec<ServiceResponse>,
}

#[derive(Clone, PartialEq, Message)]
struct ServiceResponse {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, Message)]
struct ErrorResponse {
    #[prost(int32, tag = "1")]
    error_code: i32,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// A `FileDescriptorProto`'s name and imports, read from its bytes.
#[derive(Clone, PartialEq, Message)]
struct FileHead {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, repeated, tag = "3")]
    dependency: Vec<String>,
}

/// Why a question got no answer.
enum AskError {
    /// The upstream has no such reflection service.
    Unimplemented,
    Other(String),
}

impl From<String> for AskError {
    fn from(e: String) -> AskError {
        AskError::Other(e)
    }
}

impl AskError {
    fn text(self) -> String {
        match self {
            AskError::Unimplemented => "the upstream has no gRPC server reflection (grpc.reflection.v1 or v1alpha): give --descriptor-set".to_owned(),
            AskError::Other(e) => e,
        }
    }
}

struct Reflector<'a> {
    upstream: &'a Upstream,
    path: &'static str,
}

impl Reflector<'_> {
    async fn ask(&self, question: Question) -> Result<Answer, AskError> {
        let request = ReflectionRequest {
            host: String::new(),
            question: Some(question),
        };
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let bytes = self
            .upstream
            .unary(
                self.path,
                Bytes::from(request.encode_to_vec()),
                &HeaderMap::new(),
                Some(deadline),
            )
            .await
            .map_err(|e| match e.error {
                CallError::Status { code: 12, .. } => AskError::Unimplemented,
                _ => AskError::Other(e.to_string()),
            })?;
        let response = ReflectionResponse::decode(bytes)
            .map_err(|e| format!("a reflection answer that does not decode: {e}"))?;
        match response.answer {
            Some(Answer::Error(e)) => Err(AskError::Other(format!(
                "reflection error {}: {}",
                e.error_code, e.error_message
            ))),
            Some(answer) => Ok(answer),
            None => Err(AskError::Other("an empty reflection answer".to_owned())),
        }
    }
}

/// The descriptors of the upstream's services (those named, or all but
/// reflection's and health's own), with every file they import.
pub(crate) async fn descriptors(
    upstream: &Upstream,
    named: &[String],
) -> Result<DescriptorPool, String> {
    let mut reflector = Reflector {
        upstream,
        path: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    };
    let listed = match reflector.ask(Question::ListServices(String::new())).await {
        Err(AskError::Unimplemented) => {
            reflector.path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
            reflector
                .ask(Question::ListServices(String::new()))
                .await
                .map_err(AskError::text)?
        }
        other => other.map_err(AskError::text)?,
    };
    let Answer::Services(listed) = listed else {
        return Err("list_services answered something else".to_owned());
    };
    let services: Vec<String> = if named.is_empty() {
        listed
            .service
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !n.starts_with("grpc.reflection.") && !n.starts_with("grpc.health."))
            .collect()
    } else {
        named.to_vec()
    };
    if services.is_empty() {
        return Err("the upstream lists no services of its own".to_owned());
    }
    // File name to bytes; the files still to fetch.
    let mut files: BTreeMap<String, Bytes> = BTreeMap::new();
    let mut wanted: VecDeque<String> = VecDeque::new();
    let mut asked: HashSet<String> = HashSet::new();
    let take = |found: FileDescriptorResponse,
                files: &mut BTreeMap<String, Bytes>,
                wanted: &mut VecDeque<String>|
     -> Result<(), String> {
        for bytes in found.file_descriptor_proto {
            let head = FileHead::decode(bytes.clone())
                .map_err(|e| format!("a file descriptor that does not decode: {e}"))?;
            wanted.extend(head.dependency.iter().cloned());
            files.insert(head.name, bytes);
        }
        Ok(())
    };
    for service in &services {
        match reflector
            .ask(Question::FileContainingSymbol(service.clone()))
            .await
            .map_err(AskError::text)?
        {
            Answer::Files(found) => take(found, &mut files, &mut wanted)?,
            _ => {
                return Err(format!(
                    "file_containing_symbol {service} answered something else"
                ))
            }
        }
    }
    while let Some(name) = wanted.pop_front() {
        if files.contains_key(&name) || !asked.insert(name.clone()) {
            continue;
        }
        match reflector
            .ask(Question::FileByFilename(name.clone()))
            .await
            .map_err(AskError::text)?
        {
            Answer::Files(found) => take(found, &mut files, &mut wanted)?,
            _ => return Err(format!("file_by_filename {name} answered something else")),
        }
    }
    // A FileDescriptorSet: field 1, each file's bytes as they came.
    let mut set = Vec::new();
    for bytes in files.values() {
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut set);
        prost::encoding::encode_varint(bytes.len() as u64, &mut set);
        set.extend_from_slice(bytes);
    }
    let pool = DescriptorPool::decode(set.as_slice())
        .map_err(|e| format!("the reflected descriptors do not form a set: {e}"))?;
    for service in &services {
        if pool.get_service_by_name(service).is_none() {
            return Err(format!(
                "the upstream's reflection has no service '{service}'"
            ));
        }
    }
    Ok(pool)
}
