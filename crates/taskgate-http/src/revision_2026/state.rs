//! `requestState`: what a client echoes on the retry of a request that got `input_required`
//! (basic/patterns/mrtr). Servers MUST treat it as attacker-controlled and, since it decides
//! which held upstream request a retry resumes, MUST protect its integrity and reject state that
//! fails verification. It is an HMAC-SHA256 over the exchange it names, the identity it was
//! issued to, the request it belongs to (method and a digest of the salient params) and an
//! expiry: state presented by another principal, on another request or after it lapsed is
//! refused. Single use is enforced here too: the held exchange is taken out when a retry
//! resumes it. It names the replica holding the exchange (`r`), so that a retry reaching
//! another replica is passed on to it (`taskgate_core::retry_relay`); only that replica's key
//! verifies it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;
use serde_json::{json, Value};
use taskgate_core::Identity;

/// Signs and verifies `requestState` with a key of this process (the exchanges it names are
/// held in this process's memory, so no other process needs to verify it).
pub struct StateKey {
    key: [u8; 32],
    /// This replica's id.
    replica: String,
}

/// What a `requestState` names, once verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// The held exchange.
    pub exchange: String,
}

impl StateKey {
    /// A fresh random key of the replica `replica`.
    pub fn random(replica: &str) -> StateKey {
        let mut key = [0u8; 32];
        openssl::rand::rand_bytes(&mut key).expect("the OS random source works");
        StateKey { key, replica: replica.to_owned() }
    }

    /// The replica a `requestState` says holds its exchange, when it is another than this one
    /// (read before verification: only that replica can verify it).
    pub fn holder_elsewhere(&self, state: &str) -> Option<String> {
        let payload = URL_SAFE_NO_PAD.decode(state.split_once('.')?.0).ok()?;
        #[derive(serde::Deserialize)]
        struct Holder {
            r: String,
        }
        let Holder { r } = serde_json::from_slice(&payload).ok()?;
        (r != self.replica).then_some(r)
    }

    fn mac(&self, payload: &[u8]) -> Vec<u8> {
        let pkey = PKey::hmac(&self.key).expect("an HMAC key of 32 bytes");
        let mut signer = Signer::new(MessageDigest::sha256(), &pkey).expect("HMAC-SHA256 is available");
        signer.update(payload).expect("HMAC update");
        signer.sign_to_vec().expect("HMAC sign")
    }

    /// The state for `exchange`, valid until `expires_ms` for `identity` retrying `method` with
    /// params whose digest is `digest`.
    pub fn issue(&self, exchange: &str, identity: &Identity, method: &str, digest: &str, expires_ms: u64) -> String {
        let payload = json!({
            "x": exchange, "r": &self.replica, "t": &*identity.tenant, "p": &*identity.principal, "m": method, "d": digest, "e": expires_ms,
        })
        .to_string();
        format!("{}.{}", URL_SAFE_NO_PAD.encode(&payload), URL_SAFE_NO_PAD.encode(self.mac(payload.as_bytes())))
    }

    /// Verifies `state` for this identity, method and params digest at `now_ms`; `Err` says
    /// why it is refused (the client gets -32602 with it).
    pub fn verify(
        &self,
        state: &str,
        identity: &Identity,
        method: &str,
        digest: &str,
        now_ms: u64,
    ) -> Result<Claims, &'static str> {
        const FORGED: &str = "requestState was not issued by this gateway or was altered";
        let (payload, mac) = state.split_once('.').ok_or(FORGED)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| FORGED)?;
        let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| FORGED)?;
        let expected = self.mac(&payload);
        if mac.len() != expected.len() || !openssl::memcmp::eq(&mac, &expected) {
            return Err(FORGED);
        }
        let claims: Value = serde_json::from_slice(&payload).map_err(|_| FORGED)?;
        let field = |k: &str| claims.get(k).and_then(Value::as_str).unwrap_or_default();
        if field("t") != &*identity.tenant || field("p") != &*identity.principal {
            return Err("requestState was issued to another principal");
        }
        if field("m") != method || field("d") != digest {
            return Err("requestState belongs to another request (method or params differ from the original)");
        }
        if claims.get("e").and_then(Value::as_u64).unwrap_or(0) <= now_ms {
            return Err("requestState has expired; send the request again without it");
        }
        Ok(Claims { exchange: field("x").to_owned() })
    }
}

/// The digest that binds a `requestState` to its request: the method's salient params (the
/// tool or prompt name and its arguments, the resource URI), hashed.
/// It is computed for every request that may be asked for input, so it borrows what it hashes
/// (the JSON array `[method, name, uri, arguments]`, serialized once).
pub fn digest(method: &str, params: Option<&Value>) -> String {
    const NULL: &Value = &Value::Null;
    let pick = |k: &str| params.and_then(|p| p.get(k)).unwrap_or(NULL);
    let salient = serde_json::to_vec(&(method, pick("name"), pick("uri"), pick("arguments"))).unwrap_or_default();
    // The incremental hasher: OpenSSL 3's one-shot `SHA256` fetches the algorithm each time.
    let mut hasher = openssl::sha::Sha256::new();
    hasher.update(&salient);
    URL_SAFE_NO_PAD.encode(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(p: &str) -> Identity {
        Identity { tenant: "acme".into(), principal: p.into() }
    }

    #[test]
    fn state_is_bound_to_identity_request_and_time_and_cannot_be_forged() {
        let key = StateKey::random("one");
        let params = json!({"name": "ask", "arguments": {"q": 1}});
        let d = digest("tools/call", Some(&params));
        let state = key.issue("x1", &who("alice"), "tools/call", &d, 1_000);
        assert_eq!(key.verify(&state, &who("alice"), "tools/call", &d, 999).unwrap().exchange, "x1");
        assert!(key.verify(&state, &who("bob"), "tools/call", &d, 999).is_err());
        assert!(key.verify(&state, &who("alice"), "prompts/get", &d, 999).is_err());
        let other = digest("tools/call", Some(&json!({"name": "ask", "arguments": {"q": 2}})));
        assert!(key.verify(&state, &who("alice"), "tools/call", &other, 999).is_err());
        assert!(key.verify(&state, &who("alice"), "tools/call", &d, 1_000).is_err());
        // Another process's key, a changed payload, garbage.
        assert!(StateKey::random("one").verify(&state, &who("alice"), "tools/call", &d, 999).is_err());
        let (payload, mac) = state.split_once('.').unwrap();
        let mut tampered = URL_SAFE_NO_PAD.decode(payload).unwrap();
        tampered[3] ^= 1;
        let tampered = format!("{}.{mac}", URL_SAFE_NO_PAD.encode(tampered));
        assert!(key.verify(&tampered, &who("alice"), "tools/call", &d, 999).is_err());
        // Another replica reads which one holds the exchange; the one holding it reads none.
        assert_eq!(StateKey::random("two").holder_elsewhere(&state).as_deref(), Some("one"));
        assert_eq!(key.holder_elsewhere(&state), None);
        for junk in ["", ".", "abc.", "e30.x"] {
            assert_eq!(StateKey::random("two").holder_elsewhere(junk), None, "{junk}");
        }
        for junk in ["", ".", "abc", "a.b.c", "!!.??"] {
            assert!(key.verify(junk, &who("alice"), "tools/call", &d, 999).is_err(), "{junk}");
        }
    }
}
