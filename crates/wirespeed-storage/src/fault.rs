//! What went wrong with a store, in words that say what to fix: no
//! credentials found, credentials refused, no such bucket, the name not
//! resolved, the connection refused, TLS. Triton's `Could not get MetaData
//! for bucket` with no hint of why is what this avoids.

/// An error and every error beneath it, one line.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let line = inner.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = inner.source();
    }
    text
}

/// Why a request to the store failed: the cause first, then the
/// library's own words.
pub(crate) fn cause(error: &object_store::Error) -> String {
    let words = chain(error);
    let lower = words.to_ascii_lowercase();
    let has = |needles: &[&str]| {
        needles
            .iter()
            .any(|n| lower.contains(&n.to_ascii_lowercase()))
    };
    let hint = if has(&[
        "nosuchbucket",
        "containernotfound",
        "the specified bucket does not exist",
        "the specified container does not exist",
    ]) {
        "no such bucket or container"
    } else if has(&[
        "invalidaccesskeyid",
        "signaturedoesnotmatch",
        "authenticationfailed",
        "invalid_grant",
        "expiredtoken",
        "the aws access key id you provided",
        "server failed to authenticate the request",
    ]) {
        "the credentials were refused (a wrong key or secret, or an expired token)"
    } else if has(&[
        "accessdenied",
        "access denied",
        "authorizationfailure",
        "authorizationpermissionmismatch",
        "403 forbidden",
        "status: 403",
    ]) || matches!(error, object_store::Error::PermissionDenied { .. })
    {
        "access denied: the credentials were accepted but may not read this bucket"
    } else if has(&[
        "169.254.169.254",
        "metadata",
        "error fetching token",
        "error getting token",
        "no credentials",
    ]) {
        "no credentials found: none in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
         GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY, \
         a web identity token), and no instance metadata answered; a public bucket is read \
         with AWS_SKIP_SIGNATURE=true"
    } else if has(&[
        "dns error",
        "failed to lookup address",
        "name or service not known",
        "no address associated",
    ]) {
        "the store's host name does not resolve (DNS)"
    } else if has(&["certificate", "tls", "handshake"]) {
        "TLS failed (the store's certificate is not trusted, or it does not speak TLS there)"
    } else if has(&["connection refused"]) {
        "the store refused the connection (nothing listens at that address)"
    } else if has(&["timed out", "timeout", "deadline"]) {
        "the store did not answer in time"
    } else if matches!(error, object_store::Error::NotFound { .. }) {
        "not found"
    } else if matches!(error, object_store::Error::Unauthenticated { .. }) {
        "the credentials were refused"
    } else {
        ""
    };
    if hint.is_empty() {
        words
    } else {
        format!("{hint} ({words})")
    }
}
