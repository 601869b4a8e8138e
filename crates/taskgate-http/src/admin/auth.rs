//! Who may use the operator's view: an operator of `[[admin.key]]`, by Bearer or Basic
//! credentials; a change made from a browser only from the admin page itself.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use base64::Engine;
use serde_json::json;
use taskgate_core::Gateway;

/// A JSON error body with its status.
pub(super) fn error(status: actix_web::http::StatusCode, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(json!({"error": message.into()}))
}

/// The operator making the request (its name), or the answer that refuses it: 404 when no
/// operator is configured (the view does not exist), 401 without valid credentials, 403 for a
/// change another site asked a browser to make.
pub(super) fn operator(req: &HttpRequest, gateway: &Gateway) -> Result<String, HttpResponse> {
    let admin = gateway.admin_config();
    let keys = &admin.keys;
    if keys.is_empty() {
        return Err(error(
            actix_web::http::StatusCode::NOT_FOUND,
            "the admin API is off: no [[admin.key]] is configured",
        ));
    }
    let presented = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(credentials);
    let found = presented.and_then(|(name, token)| {
        let hash = taskgate_core::tenants::hash_key(&token);
        keys.iter()
            .find(|k| openssl::memcmp::eq(k.sha256.as_bytes(), hash.as_bytes()))
            .filter(|k| name.as_deref().is_none_or(|n| n == k.name))
            .map(|k| k.name.clone())
    });
    let Some(name) = found else {
        if let Some(suppressed) = taskgate_core::logs::limiter().allow("admin_refused") {
            tracing::warn!(target: "taskgate::audit", path = %req.path(), suppressed, "admin request refused: no valid operator credentials");
        }
        return Err(HttpResponse::Unauthorized()
            .insert_header((header::WWW_AUTHENTICATE, "Basic realm=\"taskgate admin\", charset=\"UTF-8\""))
            .json(json!({"error": "operator credentials needed: Authorization: Bearer TOKEN, or Basic NAME:TOKEN"})));
    };
    if req.method() != actix_web::http::Method::GET && !same_origin(req) {
        tracing::warn!(target: "taskgate::audit", operator = %name, path = %req.path(), "admin change refused: sent from another site");
        return Err(error(actix_web::http::StatusCode::FORBIDDEN, "a change must come from the admin page itself"));
    }
    Ok(name)
}

/// `(name, token)` from a Bearer or Basic `Authorization` value.
fn credentials(value: &str) -> Option<(Option<String>, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some((None, rest.to_owned()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (name, token) = text.split_once(':')?;
        let name = (!name.is_empty()).then(|| name.to_owned());
        return Some((name, token.to_owned()));
    }
    None
}

/// Whether a browser sent the request from a page of this very origin (or no browser sent it).
fn same_origin(req: &HttpRequest) -> bool {
    let headers = req.headers();
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    origin.split_once("://").is_some_and(|(_, authority)| authority == host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_and_basic_credentials_are_read() {
        assert_eq!(credentials("Bearer abc"), Some((None, "abc".into())));
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:s3cret:x");
        assert_eq!(credentials(&format!("Basic {basic}")), Some((Some("ops".into()), "s3cret:x".into())));
        assert_eq!(credentials("Basic !!!"), None);
        assert_eq!(credentials("Digest x"), None);
        assert_eq!(credentials("Bearer"), None);
    }
}
