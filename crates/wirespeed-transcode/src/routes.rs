//! The routes of a set of gRPC services: each method's `google.api.http`
//! rule and its `additional_bindings`, and, for every method, Envoy's auto
//! mapping `POST /package.Service/Method` with the whole body. Templates
//! are compiled into one trie of path segments, searched literal first,
//! then `*`, then `**`: a lookup costs the path's length, not the number
//! of routes.

use std::collections::HashMap;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor, MethodDescriptor};

use crate::rule::{http_rule, HttpRule};
use crate::template::{Segment, Template};

/// Where a request's body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyTarget {
    /// No body (`GET`, `DELETE` rules without `body`).
    None,
    /// The whole request message (`body: "*"`).
    Whole,
    /// One field of it (`body: "field"`).
    Field(Vec<FieldDescriptor>),
}

/// One HTTP route to a method.
#[derive(Debug, Clone)]
pub struct Route {
    /// The gRPC method.
    pub method: MethodDescriptor,
    /// The HTTP method: GET, POST, ... or a custom one.
    pub http_method: String,
    /// The template, as written.
    pub pattern: String,
    template: Template,
    /// Each variable's field path, resolved.
    variables: Vec<Vec<FieldDescriptor>>,
    /// Where the body goes.
    pub body: BodyTarget,
    /// The response field that is the HTTP answer (`response_body`).
    pub response_body: Option<Vec<FieldDescriptor>>,
    /// The gRPC call's path, `/package.Service/Method`.
    pub grpc_path: String,
}

/// A route found for a request, with its path variables' values.
#[derive(Debug)]
pub struct Found<'a> {
    /// The route.
    pub route: &'a Route,
    /// Each path variable's fields and its percent-decoded value (`Err`:
    /// not UTF-8, shown lossily; refused when written).
    pub bindings: Vec<(Vec<FieldDescriptor>, Result<String, String>)>,
}

/// Why no route matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    /// No route has this path.
    Path,
    /// Routes have this path, with other HTTP methods.
    Method(Vec<String>),
}

#[derive(Default, Debug)]
struct Node {
    literal: HashMap<String, usize>,
    single: Option<usize>,
    multi: Option<usize>,
    /// Routes ending here: verb and route index.
    ends: Vec<(Option<String>, usize)>,
}

/// Every route of some services, and the trie they are found in.
#[derive(Debug)]
pub struct Routes {
    routes: Vec<Route>,
    nodes: Vec<Node>,
}

impl Routes {
    /// The routes of the services named (every service of the pool when
    /// `services` is empty).
    pub fn from_pool(pool: &DescriptorPool, services: &[String]) -> Result<Routes, String> {
        let mut routes = Vec::new();
        for service in pool.services() {
            if !services.is_empty() && !services.iter().any(|s| s == service.full_name()) {
                continue;
            }
            for method in service.methods() {
                if let Some(rule) = http_rule(&method) {
                    add_rule(&mut routes, &method, &rule)?;
                    for extra in &rule.additional_bindings {
                        add_rule(&mut routes, &method, extra)?;
                    }
                }
                let pattern = format!("/{}/{}", service.full_name(), method.name());
                routes.push(route(&method, "POST", &pattern, "*", "")?);
            }
        }
        for name in services {
            if pool.get_service_by_name(name).is_none() {
                return Err(format!("service '{name}' is not in the descriptors"));
            }
        }
        let mut table = Routes {
            routes: Vec::new(),
            nodes: vec![Node::default()],
        };
        for r in routes {
            table.insert(r)?;
        }
        Ok(table)
    }

    /// Every route, in the order they were added.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    fn insert(&mut self, route: Route) -> Result<(), String> {
        let mut node = 0;
        for segment in &route.template.segments {
            let next = self.nodes.len();
            let slot = match segment {
                Segment::Literal(text) => {
                    *self.nodes[node].literal.entry(text.clone()).or_insert(next)
                }
                Segment::Single => *self.nodes[node].single.get_or_insert(next),
                Segment::Multi => *self.nodes[node].multi.get_or_insert(next),
            };
            if slot == next {
                self.nodes.push(Node::default());
            }
            node = slot;
        }
        let verb = route.template.verb.clone();
        if let Some(&(_, other)) = self.nodes[node]
            .ends
            .iter()
            .find(|(v, i)| *v == verb && self.routes[*i].http_method == route.http_method)
        {
            let other = &self.routes[other];
            return Err(format!(
                "{} {} of {} and {} {} of {} are the same route",
                route.http_method,
                route.pattern,
                route.method.full_name(),
                other.http_method,
                other.pattern,
                other.method.full_name()
            ));
        }
        self.nodes[node].ends.push((verb, self.routes.len()));
        self.routes.push(route);
        Ok(())
    }

    /// The route for `http_method` and `path` (without the query).
    pub fn find(&self, http_method: &str, path: &str) -> Result<Found<'_>, NotFound> {
        let Some(rest) = path.strip_prefix('/') else {
            return Err(NotFound::Path);
        };
        let segments: Vec<&str> = rest.split('/').collect();
        let mut methods = Vec::new();
        // With the last segment's ':verb' split off first (at its last
        // colon, then at each earlier one: a verb may hold colons, as
        // `:custom:custom` does), then whole.
        let last = segments.last().copied().unwrap_or("");
        for (at, _) in last.rmatch_indices(':') {
            let (head, verb) = (&last[..at], &last[at + 1..]);
            let mut split = segments.clone();
            *split.last_mut().expect("a segment") = head;
            if let Some(found) = self.search(&split, Some(verb), http_method, &mut methods) {
                return Ok(found);
            }
        }
        if let Some(found) = self.search(&segments, None, http_method, &mut methods) {
            return Ok(found);
        }
        if methods.is_empty() {
            Err(NotFound::Path)
        } else {
            methods.sort();
            methods.dedup();
            Err(NotFound::Method(methods))
        }
    }

    fn search(
        &self,
        segments: &[&str],
        verb: Option<&str>,
        http_method: &str,
        methods: &mut Vec<String>,
    ) -> Option<Found<'_>> {
        let index = self.walk(0, segments, 0, verb, http_method, methods)?;
        let route = &self.routes[index];
        let bindings = route
            .template
            .bind(segments)
            .into_iter()
            .zip(&route.variables)
            .map(|((_, value), fields)| (fields.clone(), value))
            .collect();
        Some(Found { route, bindings })
    }

    fn walk(
        &self,
        node: usize,
        segments: &[&str],
        at: usize,
        verb: Option<&str>,
        http_method: &str,
        methods: &mut Vec<String>,
    ) -> Option<usize> {
        let n = &self.nodes[node];
        if at == segments.len() {
            return self.ending(n, verb, http_method, methods);
        }
        if let Some(&next) = n.literal.get(segments[at]) {
            if let Some(found) = self.walk(next, segments, at + 1, verb, http_method, methods) {
                return Some(found);
            }
        }
        if let Some(next) = n.single {
            if !segments[at].is_empty() {
                if let Some(found) = self.walk(next, segments, at + 1, verb, http_method, methods) {
                    return Some(found);
                }
            }
        }
        if let Some(next) = n.multi {
            return self.ending(&self.nodes[next], verb, http_method, methods);
        }
        None
    }

    fn ending(
        &self,
        n: &Node,
        verb: Option<&str>,
        http_method: &str,
        methods: &mut Vec<String>,
    ) -> Option<usize> {
        let mut found = None;
        for (v, i) in &n.ends {
            if v.as_deref() != verb {
                continue;
            }
            let route = &self.routes[*i];
            if route.http_method == http_method {
                found = Some(*i);
            } else {
                methods.push(route.http_method.clone());
            }
        }
        found
    }
}

fn add_rule(
    routes: &mut Vec<Route>,
    method: &MethodDescriptor,
    rule: &HttpRule,
) -> Result<(), String> {
    let Some((http_method, pattern)) = rule.method_and_path() else {
        return Err(format!(
            "{}: a google.api.http rule without a pattern",
            method.full_name()
        ));
    };
    routes.push(route(
        method,
        http_method,
        pattern,
        &rule.body,
        &rule.response_body,
    )?);
    Ok(())
}

fn route(
    method: &MethodDescriptor,
    http_method: &str,
    pattern: &str,
    body: &str,
    response_body: &str,
) -> Result<Route, String> {
    let name = method.full_name();
    let template = Template::parse(pattern).map_err(|e| format!("{name}: {e}"))?;
    let input = method.input();
    let variables = template
        .variables
        .iter()
        .map(|v| {
            resolve(&input, &v.field_path, false).map_err(|e| format!("{name}: {pattern}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let body = match body {
        "" => BodyTarget::None,
        "*" => BodyTarget::Whole,
        field => BodyTarget::Field(
            resolve(
                &input,
                &field.split('.').map(str::to_owned).collect::<Vec<_>>(),
                true,
            )
            .map_err(|e| format!("{name}: body: {e}"))?,
        ),
    };
    let response_body = match response_body {
        "" => None,
        field => Some(
            resolve(
                &method.output(),
                &field.split('.').map(str::to_owned).collect::<Vec<_>>(),
                true,
            )
            .map_err(|e| format!("{name}: response_body: {e}"))?,
        ),
    };
    Ok(Route {
        grpc_path: format!("/{}/{}", method.parent_service().full_name(), method.name()),
        method: method.clone(),
        http_method: http_method.to_owned(),
        pattern: pattern.to_owned(),
        template,
        variables,
        body,
        response_body,
    })
}

/// Resolves a field path (proto names) from `message`. A path variable
/// must end at a field that text can fill (a repeated scalar's values
/// comma-separated); a body or response field may be any field.
pub(crate) fn resolve(
    message: &MessageDescriptor,
    path: &[String],
    any_leaf: bool,
) -> Result<Vec<FieldDescriptor>, String> {
    let mut fields = Vec::with_capacity(path.len());
    let mut current = message.clone();
    for (i, name) in path.iter().enumerate() {
        let field = current
            .get_field_by_name(name)
            .or_else(|| current.get_field_by_json_name(name))
            .ok_or_else(|| format!("message {} has no field '{name}'", current.full_name()))?;
        let last = i + 1 == path.len();
        if !last {
            match field.kind() {
                Kind::Message(m) if !field.is_list() && !field.is_map() => current = m,
                _ => {
                    return Err(format!(
                        "field '{name}' is not a singular message, so '{}' cannot go inside it",
                        path[i + 1]
                    ))
                }
            }
        } else if !any_leaf
            && (field.is_map() || (field.is_list() && matches!(field.kind(), Kind::Message(_))))
        {
            // A repeated scalar takes comma-separated values, as
            // grpc-gateway reads it (`/things/1,2,3`).
            return Err(format!(
                "path variable '{name}' names a map or a repeated message field"
            ));
        }
        fields.push(field);
    }
    Ok(fields)
}
