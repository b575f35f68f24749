//! Routes from `google.api.http` rules (library.proto: every route shape),
//! and the request message a route, its path, its query and its body make,
//! checked against prost-reflect's reading of the same fields.

use prost_reflect::{DescriptorPool, DynamicMessage};
use wirespeed_transcode::{bound_fields, BodyTarget, EncodeOptions, JsonToProto, NotFound, Routes};

/// The descriptor set as `protoc --include_imports --descriptor_set_out`
/// writes it: options (the `google.api.http` extension) kept as bytes.
fn pool() -> DescriptorPool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let mut compiler = protox::Compiler::new([dir]).expect("a compiler");
    compiler.include_imports(true);
    compiler
        .open_file("library.proto")
        .expect("the test protos compile");
    DescriptorPool::decode(compiler.encode_file_descriptor_set().as_slice()).expect("a pool")
}

/// The request message for `method path?query` with `body`, as JSON
/// (prost-reflect's writing of our bytes).
fn request(routes: &Routes, method: &str, target: &str, body: &str) -> (String, serde_json::Value) {
    let (path, query) = target
        .split_once('?')
        .map_or((target, None), |(p, q)| (p, Some(q)));
    let found = routes
        .find(method, path)
        .unwrap_or_else(|e| panic!("{method} {target}: {e:?}"));
    let input = found.route.method.input();
    let mut bytes = match &found.route.body {
        BodyTarget::None => Vec::new(),
        BodyTarget::Whole => {
            JsonToProto::encode(input.clone(), body.as_bytes(), EncodeOptions::default()).unwrap()
        }
        BodyTarget::Field(path) => {
            let mut e = JsonToProto::for_field(input.clone(), path, EncodeOptions::default());
            e.feed(body.as_bytes()).unwrap();
            e.finish().unwrap()
        }
    };
    bytes.extend(bound_fields(&found, query, EncodeOptions::default(), false).unwrap());
    let message = DynamicMessage::decode(input, bytes.as_slice()).unwrap();
    (
        found.route.method.name().to_owned(),
        serde_json::to_value(&message).unwrap(),
    )
}

#[test]
fn every_route_shape_makes_its_request() {
    let routes = Routes::from_pool(&pool(), &[]).unwrap();
    let cases: &[(&str, &str, &str, &str, serde_json::Value)] = &[
        ("GET", "/v1/shelves/s1/books/b%201", "", "GetBook", serde_json::json!({"name": "shelves/s1/books/b 1"})),
        ("GET", "/v1/shelves/s1/books/b1?full=true", "", "GetBook", serde_json::json!({"name": "shelves/s1/books/b1", "full": true})),
        ("POST", "/v1/shelves/s1/books?requestId=r9", r#"{"title": "T", "pages": "12", "genre": "POETRY"}"#, "CreateBook",
            serde_json::json!({"parent": "shelves/s1", "book": {"title": "T", "pages": "12", "genre": "POETRY"}, "requestId": "r9"})),
        ("PATCH", "/v1/shelves/s1/books/b1?updateMask=title,author.name", r#"{"title": "New", "author": {"name": "A"}}"#, "UpdateBook",
            serde_json::json!({"book": {"name": "shelves/s1/books/b1", "title": "New", "author": {"name": "A"}}, "updateMask": "title,author.name"})),
        ("PUT", "/v1/books/b7", r#"{"book": {"title": "Put", "name": "ignored"}}"#, "UpdateBook",
            serde_json::json!({"book": {"name": "b7", "title": "Put"}})),
        ("GET", "/v1/shelves/s2/books?pageSize=10&genres=FICTION&genres=2&filter.author=Woolf&filter.available=true&minPages=100", "", "ListBooks",
            serde_json::json!({"parent": "shelves/s2", "pageSize": 10, "genres": ["FICTION", "POETRY"], "filter": {"author": "Woolf", "available": true}, "minPages": 100})),
        ("DELETE", "/v1/shelves/s1/books/b1", "", "DeleteBook", serde_json::json!({"name": "shelves/s1/books/b1"})),
        ("POST", "/v1/shelves/s1/books/b1:publish", r#"{"full": true}"#, "PublishBook", serde_json::json!({"name": "shelves/s1/books/b1", "full": true})),
        ("HEAD", "/files/a/b%2Fc/d.txt", "", "GetFile", serde_json::json!({"path": "a/b%2Fc/d.txt"})),
        ("GET", "/files/v2/x/y", "", "GetFile", serde_json::json!({"version": "v2", "path": "x/y"})),
        ("POST", "/wirespeed.library.Library/Unannotated", r#"{"name": "n", "full": true}"#, "Unannotated", serde_json::json!({"name": "n", "full": true})),
        ("POST", "/wirespeed.library.Library/GetBook", r#"{"name": "auto"}"#, "GetBook", serde_json::json!({"name": "auto"})),
    ];
    for (method, target, body, want_method, want) in cases {
        let (got_method, got) = request(&routes, method, target, body);
        assert_eq!(&got_method, want_method, "{method} {target}");
        assert_eq!(&got, want, "{method} {target}");
    }
}

#[test]
fn lookups_that_miss_say_why() {
    let routes = Routes::from_pool(&pool(), &[]).unwrap();
    assert_eq!(
        routes.find("GET", "/v2/nothing").unwrap_err(),
        NotFound::Path
    );
    assert_eq!(
        routes.find("GET", "/v1/shelves/s1").unwrap_err(),
        NotFound::Path
    );
    match routes.find("POST", "/v1/shelves/s1/books/b1").unwrap_err() {
        NotFound::Method(methods) => assert_eq!(methods, vec!["DELETE", "GET", "PATCH"]),
        other => panic!("{other:?}"),
    }
    // A ':verb' no route has is part of the segment: here a book named
    // "b1:unpublish", which POST does not take.
    assert!(matches!(
        routes
            .find("POST", "/v1/shelves/s1/books/b1:unpublish")
            .unwrap_err(),
        NotFound::Method(_)
    ));
    let get = routes
        .find("GET", "/v1/shelves/s1/books/b1:unpublish")
        .unwrap();
    assert_eq!(
        get.bindings[0].1.as_deref(),
        Ok("shelves/s1/books/b1:unpublish")
    );
}

#[test]
fn query_mistakes_are_named() {
    let routes = Routes::from_pool(&pool(), &[]).unwrap();
    let found = routes.find("GET", "/v1/shelves/s1/books").unwrap();
    for (query, needle) in [
        ("nope=1", "has no field 'nope'"),
        ("pageSize=ten", "not an integer"),
        ("filter=x", "message or map field"),
        ("parent=x", "the path sets that field"),
        ("genres=JAZZ", "not a value of enum"),
    ] {
        let e = bound_fields(&found, Some(query), EncodeOptions::default(), false).unwrap_err();
        assert!(e.message().contains(needle), "{query}: {e}");
    }
    assert!(bound_fields(
        &found,
        Some("nope=1&pageSize=3"),
        EncodeOptions::default(),
        true
    )
    .is_ok());
    let put = routes.find("PUT", "/v1/books/b1").unwrap();
    let e = bound_fields(
        &put,
        Some("updateMask=title"),
        EncodeOptions::default(),
        false,
    )
    .unwrap_err();
    assert!(e.message().contains("carries every field"), "{e}");
}

#[test]
fn routes_are_checked_when_built() {
    let pool = pool();
    let e = Routes::from_pool(&pool, &["wirespeed.library.Nope".to_owned()]).unwrap_err();
    assert!(e.contains("not in the descriptors"), "{e}");
    let routes = Routes::from_pool(&pool, &["wirespeed.library.Library".to_owned()]).unwrap();
    // 11 methods' auto routes, 10 rules and 2 additional bindings.
    assert_eq!(routes.routes().len(), 23);
    let list = routes.find("GET", "/v1/shelves/s/books").unwrap();
    assert_eq!(
        list.route
            .response_body
            .as_ref()
            .map(|p| p[0].name().to_owned()),
        Some("books".to_owned())
    );
}
