//! The W3C trace context a request carries (`traceparent`, `tracestate`),
//! which the server continues in its spans and hands on to the models and
//! servers it calls.

/// A W3C trace context, as a request carries it in its `traceparent`
/// (and `tracestate`) HTTP header or gRPC metadata: the trace, the
/// caller's span in it, and whether it is sampled. Parsed by hand, as the
/// format is fixed-width and this crate carries no tracing library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace: never all zeros.
    pub trace_id: [u8; 16],
    /// The caller's span: never all zeros.
    pub parent_id: [u8; 8],
    /// The trace flags; bit 0 is `sampled`.
    pub flags: u8,
    /// The `tracestate` header, vendors' own entries, as it came.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// Reads a `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`, or a
    /// later version with more fields after these), and `tracestate` with
    /// it. `None` when it is not one: the W3C rule is to ignore it then.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
            let bytes = text.as_bytes();
            if bytes.len() != 2 * N {
                return None;
            }
            let digit = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            let mut out = [0u8; N];
            for (i, pair) in bytes.chunks_exact(2).enumerate() {
                out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
            }
            Some(out)
        }
        let mut fields = traceparent.trim().split('-');
        let version = hex::<1>(fields.next()?)?[0];
        let trace_id = hex::<16>(fields.next()?)?;
        let parent_id = hex::<8>(fields.next()?)?;
        let flags = hex::<1>(fields.next()?)?[0];
        let rest = fields.next();
        if version == 0xff
            || (version == 0 && rest.is_some())
            || trace_id == [0; 16]
            || parent_id == [0; 8]
        {
            return None;
        }
        Some(TraceContext {
            trace_id,
            parent_id,
            flags,
            tracestate: tracestate.filter(|s| !s.is_empty()).map(str::to_owned),
        })
    }

    /// The `traceparent` header for this context, version 00.
    pub fn traceparent(&self) -> String {
        use std::fmt::Write;
        let mut text = String::with_capacity(55);
        text.push_str("00-");
        for b in self.trace_id {
            let _ = write!(text, "{b:02x}");
        }
        text.push('-');
        for b in self.parent_id {
            let _ = write!(text, "{b:02x}");
        }
        let _ = write!(text, "-{:02x}", self.flags);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::TraceContext;

    #[test]
    fn traceparent_round_trips_and_bad_ones_are_ignored() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::parse(header, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.flags, 1);
        assert_eq!(context.trace_id[0], 0x4b);
        assert_eq!(context.traceparent(), header);
        assert_eq!(context.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        // A later version may add fields; version 00 may not.
        assert!(TraceContext::parse(&format!("01{}-extra", &header[2..]), None).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad}");
        }
    }
}
