//! The claims every verified token is held to, whoever signed it: its times (`exp`, `nbf`,
//! with the leeway allowed) and its audience.

use serde_json::Value;

use super::refusal::AuthError;

/// Checks `claims`' times at `now_secs` (with `leeway_secs`) and that `aud` (a string or one of
/// an array) is one `ours` takes; `exp` when it has one. Without `exp`, refused when `exp_required`.
/// `elsewhere` is what a token for another audience is told.
pub(super) fn times_and_audience(
    claims: &Value,
    now_secs: u64,
    leeway_secs: u64,
    ours: impl Fn(&str) -> bool,
    exp_required: bool,
    elsewhere: &'static str,
) -> Result<Option<u64>, AuthError> {
    let time =
        |name: &str| claims.get(name).map(|v| v.as_u64().ok_or(AuthError::Token("a time claim is not a number")));
    let exp = time("exp").transpose()?;
    if exp.is_none() && exp_required {
        return Err(AuthError::Token("it has no exp claim"));
    }
    if exp.is_some_and(|exp| now_secs > exp.saturating_add(leeway_secs)) {
        return Err(AuthError::Token("it has expired"));
    }
    if let Some(nbf) = time("nbf") {
        if now_secs.saturating_add(leeway_secs) < nbf? {
            return Err(AuthError::Token("it is not valid yet (nbf)"));
        }
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => ours(aud),
        Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).any(ours),
        _ => false,
    };
    if !audience_ok {
        return Err(AuthError::Token(elsewhere));
    }
    Ok(exp)
}
