//! Path templates of `google.api.http`, as its grammar gives them:
//!
//! ```text
//! Template = "/" Segments [ Verb ] ;
//! Segments = Segment { "/" Segment } ;
//! Segment  = "*" | "**" | LITERAL | Variable ;
//! Variable = "{" FieldPath [ "=" Segments ] "}" ;
//! FieldPath = IDENT { "." IDENT } ;
//! Verb     = ":" LITERAL ;
//! ```
//!
//! `*` matches one segment, `**` the rest of the path (it must come last);
//! `{name}` is `{name=*}`. A variable's value is its segments, percent-
//! decoded; one that spans several keeps `%2F` encoded, so a slash in a
//! value stays apart from the slashes between segments.

/// One segment of a template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Segment {
    Literal(String),
    /// `*`: one segment.
    Single,
    /// `**`: the rest of the path.
    Multi,
}

/// A variable: the field path it binds, and the template segments it
/// spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Variable {
    pub(crate) field_path: Vec<String>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub(crate) segments: Vec<Segment>,
    pub(crate) verb: Option<String>,
    pub(crate) variables: Vec<Variable>,
}

impl Template {
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let bad = |why: &str| format!("path template '{text}': {why}");
        let rest = text
            .strip_prefix('/')
            .ok_or_else(|| bad("it must start with '/'"))?;
        let mut parser = Parser {
            text: rest.as_bytes(),
            pos: 0,
            segments: Vec::new(),
            variables: Vec::new(),
        };
        parser.segments(false).map_err(|e| bad(&e))?;
        let mut verb = None;
        if parser.peek() == Some(b':') {
            // As grpc-gateway reads a verb: after a variable, everything
            // past the first ':' (`{uuid}:custom:custom`); after a literal,
            // past the last, the colons before it being the literal's own.
            let rest = String::from_utf8_lossy(&parser.text[parser.pos + 1..]).into_owned();
            parser.pos = parser.text.len();
            if rest.is_empty() || rest.contains(['/', '{', '}', '*', '=']) {
                return Err(bad("':' must be followed by a verb"));
            }
            let after_variable = parser
                .variables
                .last()
                .is_some_and(|v| v.end == parser.segments.len());
            match (
                after_variable,
                rest.rsplit_once(':'),
                parser.segments.last_mut(),
            ) {
                (false, Some((head, last)), Some(Segment::Literal(literal))) => {
                    literal.push(':');
                    literal.push_str(head);
                    verb = Some(last.to_owned());
                }
                _ => verb = Some(rest),
            }
        }
        if parser.pos != parser.text.len() {
            return Err(bad(&format!("unexpected '{}'", &rest[parser.pos..])));
        }
        if let Some(i) = parser.segments.iter().position(|s| *s == Segment::Multi) {
            if i + 1 != parser.segments.len() {
                return Err(bad("'**' must be the last segment"));
            }
        }
        Ok(Template {
            segments: parser.segments,
            verb,
            variables: parser.variables,
        })
    }

    /// The variables' values for a path whose segments (after the verb
    /// was split off) matched this template.
    pub(crate) fn bind(&self, path: &[&str]) -> Vec<(Vec<String>, Decoded)> {
        self.variables
            .iter()
            .map(|v| {
                let end = if self.segments.get(v.end.wrapping_sub(1)) == Some(&Segment::Multi) {
                    path.len()
                } else {
                    v.end
                };
                let parts = &path[v.start.min(path.len())..end.min(path.len())];
                let value = if v.end - v.start == 1 && self.segments[v.start] != Segment::Multi {
                    percent_decode(parts.first().copied().unwrap_or(""), false)
                } else {
                    let decoded: Vec<Decoded> =
                        parts.iter().map(|p| percent_decode(p, true)).collect();
                    if decoded.iter().all(Result::is_ok) {
                        Ok(decoded.into_iter().flatten().collect::<Vec<_>>().join("/"))
                    } else {
                        Err(decoded
                            .into_iter()
                            .map(|d| d.unwrap_or_else(|lossy| lossy))
                            .collect::<Vec<_>>()
                            .join("/"))
                    }
                };
                (v.field_path.clone(), value)
            })
            .collect()
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    segments: Vec<Segment>,
    variables: Vec<Variable>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Segments up to the end, a ':' verb, or (inside a variable) a '}'.
    fn segments(&mut self, in_variable: bool) -> Result<(), String> {
        loop {
            match self.peek() {
                Some(b'*') if self.text.get(self.pos + 1) == Some(&b'*') => {
                    self.pos += 2;
                    self.segments.push(Segment::Multi);
                }
                Some(b'*') => {
                    self.pos += 1;
                    self.segments.push(Segment::Single);
                }
                Some(b'{') if !in_variable => self.variable()?,
                Some(b'{') => return Err("variables may not nest".into()),
                _ => {
                    let literal = self.literal();
                    if literal.is_empty() {
                        return Err("an empty segment".into());
                    }
                    self.segments.push(Segment::Literal(literal));
                }
            }
            if self.peek() == Some(b'/') {
                self.pos += 1;
            } else {
                return Ok(());
            }
        }
    }

    fn variable(&mut self) -> Result<(), String> {
        self.pos += 1;
        let start = self.pos;
        while let Some(b) = self.peek() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
                self.pos += 1;
            } else {
                break;
            }
        }
        let path = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or("");
        if path.is_empty() || path.split('.').any(str::is_empty) {
            return Err(format!("a variable's field path '{path}' is not valid"));
        }
        let first = self.segments.len();
        if self.peek() == Some(b'=') {
            self.pos += 1;
            self.segments(true)?;
        } else {
            self.segments.push(Segment::Single);
        }
        if self.peek() != Some(b'}') {
            return Err(format!("variable '{path}' is not closed with '}}'"));
        }
        self.pos += 1;
        self.variables.push(Variable {
            field_path: path.split('.').map(str::to_owned).collect(),
            start: first,
            end: self.segments.len(),
        });
        Ok(())
    }

    fn literal(&mut self) -> String {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if matches!(b, b'/' | b'{' | b'}' | b'*' | b':' | b'=') {
                break;
            }
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.text[start..self.pos]).into_owned()
    }
}

/// A path variable's or query parameter's value, percent-decoded: its
/// text, or (`Err`) its bytes shown lossily when they are not UTF-8, which
/// no field takes: the request is refused rather than sent with U+FFFD.
pub(crate) type Decoded = Result<String, String>;

/// Percent-decodes a path segment; `keep_slash` leaves `%2F` encoded.
pub(crate) fn percent_decode(text: &str, keep_slash: bool) -> Decoded {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                let byte = (h * 16 + l) as u8;
                if !(keep_slash && byte == b'/') {
                    out.push(byte);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_as_the_grammar_says() {
        let t = Template::parse("/v1/{name=projects/*/books/*}:publish").unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Literal("v1".into()),
                Segment::Literal("projects".into()),
                Segment::Single,
                Segment::Literal("books".into()),
                Segment::Single
            ]
        );
        assert_eq!(t.verb.as_deref(), Some("publish"));
        assert_eq!(t.variables[0].field_path, vec!["name"]);
        assert_eq!((t.variables[0].start, t.variables[0].end), (1, 5));
        let t = Template::parse("/v1/{a.b.c}/x/{rest=**}").unwrap();
        assert_eq!(t.variables.len(), 2);
        assert_eq!(t.variables[0].field_path, vec!["a", "b", "c"]);
        for bad in ["v1", "/v1//x", "/{a", "/{a={b}}", "/**/x", "/x:", "/{}"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn verbs_are_read_as_grpc_gateway_reads_them() {
        // After a variable, everything past the first ':'.
        let t = Template::parse("/v1/things/{uuid}:custom:custom").unwrap();
        assert_eq!(t.verb.as_deref(), Some("custom:custom"));
        assert_eq!(t.segments.len(), 3);
        // After a literal, past the last ':'.
        let t = Template::parse("/v1/foo:bar:baz").unwrap();
        assert_eq!(t.verb.as_deref(), Some("baz"));
        assert_eq!(t.segments[1], Segment::Literal("foo:bar".into()));
        for bad in ["/v1/{a}:", "/v1/{a}:x/y"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_percent_decoded() {
        let t = Template::parse("/v1/{id}/{path=**}").unwrap();
        let bound = t.bind(&["v1", "a%20b", "x", "y%2Fz"]);
        assert_eq!(bound[0], (vec!["id".to_owned()], Ok("a b".to_owned())));
        assert_eq!(
            bound[1],
            (vec!["path".to_owned()], Ok("x/y%2Fz".to_owned()))
        );
        // Bytes that are not UTF-8 are never replaced in a value sent on.
        let bound = t.bind(&["v1", "%FF%FE", "ok", "%C3"]);
        assert_eq!(bound[0].1, Err("\u{FFFD}\u{FFFD}".to_owned()));
        assert!(bound[1].1.is_err());
    }
}
