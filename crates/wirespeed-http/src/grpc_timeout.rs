//! gRPC's `grpc-timeout` header, which the server's gRPC face and the
//! transcoding proxy both read.

use std::time::Duration;

/// A `grpc-timeout` value as gRPC defines it: one to eight digits and a
/// unit (H, M, S, m, u, n). At most 10^8 hours, so any deadline it makes
/// is a valid `Instant`.
pub fn grpc_timeout(text: &str) -> Option<std::time::Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_the_limits_of_the_digits() {
        assert_eq!(grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(grpc_timeout("4S"), Some(Duration::from_secs(4)));
        assert_eq!(grpc_timeout("5m"), Some(Duration::from_millis(5)));
        assert_eq!(grpc_timeout("6u"), Some(Duration::from_micros(6)));
        assert_eq!(grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        assert_eq!(
            grpc_timeout("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        for bad in ["", "S", "100000000S", "1x", "-1S", "1.5S", " 1S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
