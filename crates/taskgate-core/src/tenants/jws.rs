//! JWS signatures (RFC 7515, compact serialization) checked with OpenSSL: the keys a token may
//! be signed with, parsed once (a configured secret or PEM, or an authorization server's JWK,
//! RFC 7517/7518), and the check of one token's signature against one of them. Claims are the
//! callers' to check, but for [`Peek`] (a payload's `iss` and `exp`, read alone) and the
//! SHA-256 tokens and keys are known by.
//!
//! A forged token costs one signature check per candidate key, each one public-key operation
//! on a key parsed once (what that costs against serving a request: BENCHMARKS.md, Refusals).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Signer, Verifier};
use serde_json::Value;

/// A signature algorithm of RFC 7518 section 3 the gateway checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alg {
    HS256,
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    EdDSA,
}

impl Alg {
    /// The algorithm a header's `alg` names (`none` and unknown ones are not).
    pub(crate) fn named(name: &str) -> Option<Alg> {
        Some(match name {
            "HS256" => Alg::HS256,
            "RS256" => Alg::RS256,
            "RS384" => Alg::RS384,
            "RS512" => Alg::RS512,
            "PS256" => Alg::PS256,
            "PS384" => Alg::PS384,
            "PS512" => Alg::PS512,
            "ES256" => Alg::ES256,
            "ES384" => Alg::ES384,
            "EdDSA" => Alg::EdDSA,
            _ => return None,
        })
    }

    fn digest(self) -> MessageDigest {
        match self {
            Alg::HS256 | Alg::RS256 | Alg::PS256 | Alg::ES256 => MessageDigest::sha256(),
            Alg::RS384 | Alg::PS384 | Alg::ES384 => MessageDigest::sha384(),
            Alg::RS512 | Alg::PS512 => MessageDigest::sha512(),
            Alg::EdDSA => MessageDigest::null(),
        }
    }
}

/// A key a token may be signed with: a shared secret (HS256) or a public key.
pub(crate) enum Key {
    Secret(PKey<openssl::pkey::Private>),
    Public(PKey<Public>),
}

impl Key {
    /// An HS256 secret.
    pub(crate) fn secret(secret: &[u8]) -> Option<Key> {
        PKey::hmac(secret).ok().map(Key::Secret)
    }

    /// A public key of a JWK set (RFC 7518 section 6): RSA (`n`, `e`), EC P-256 or P-384 (`x`,
    /// `y`), OKP Ed25519 (`x`). A key for encryption (`use: enc`) or of another type is not.
    pub(crate) fn from_jwk(jwk: &Value) -> Option<Key> {
        // A key for encryption, or whose operations leave out verifying, is not one.
        if jwk.get("use").is_some_and(|u| u.as_str() != Some("sig")) {
            return None;
        }
        if let Some(ops) = jwk.get("key_ops") {
            if !ops.as_array().is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some("verify"))) {
                return None;
            }
        }
        let part = |name: &str| URL_SAFE_NO_PAD.decode(jwk.get(name)?.as_str()?).ok();
        let key = match (jwk.get("kty")?.as_str()?, jwk.get("crv").and_then(Value::as_str)) {
            ("RSA", _) => {
                let (n, e) = (BigNum::from_slice(&part("n")?).ok()?, BigNum::from_slice(&part("e")?).ok()?);
                // 2048 to 8192 bits, and an odd exponent above 1 (e = 1 signs anything).
                let exponent_ok = e.is_bit_set(0) && e.num_bits() > 1;
                if !(2048..=8192).contains(&n.num_bits()) || !exponent_ok {
                    return None;
                }
                PKey::from_rsa(Rsa::from_public_components(n, e).ok()?).ok()?
            }
            ("EC", Some(crv @ ("P-256" | "P-384"))) => {
                let (nid, size) = if crv == "P-256" { (Nid::X9_62_PRIME256V1, 32) } else { (Nid::SECP384R1, 48) };
                let group = EcGroup::from_curve_name(nid).ok()?;
                // RFC 7518 section 6.2.1.2: each coordinate the full size of the curve.
                let (x, y) = (part("x").filter(|x| x.len() == size)?, part("y").filter(|y| y.len() == size)?);
                let (x, y) = (BigNum::from_slice(&x).ok()?, BigNum::from_slice(&y).ok()?);
                PKey::from_ec_key(EcKey::from_public_key_affine_coordinates(&group, &x, &y).ok()?).ok()?
            }
            ("OKP", Some("Ed25519")) => PKey::public_key_from_raw_bytes(&part("x")?, Id::ED25519).ok()?,
            _ => return None,
        };
        Some(Key::Public(key))
    }

    /// Whether this key can sign with `alg` (a key of one family never checks another's
    /// signatures: no HS256 token "signed" with an RSA public key).
    pub(crate) fn fits(&self, alg: Alg) -> bool {
        match (self, alg) {
            (Key::Secret(_), Alg::HS256) => true,
            (Key::Public(key), Alg::RS256 | Alg::RS384 | Alg::RS512 | Alg::PS256 | Alg::PS384 | Alg::PS512) => {
                key.id() == Id::RSA
            }
            (Key::Public(key), Alg::ES256 | Alg::ES384) => {
                let want = if alg == Alg::ES256 { Nid::X9_62_PRIME256V1 } else { Nid::SECP384R1 };
                key.ec_key().ok().and_then(|ec| ec.group().curve_name()) == Some(want)
            }
            (Key::Public(key), Alg::EdDSA) => key.id() == Id::ED25519,
            _ => false,
        }
    }

    /// Whether `token`'s signature (its third part) is `alg`'s over its first two parts with
    /// this key.
    pub(crate) fn verifies(&self, alg: Alg, token: &str) -> bool {
        if !self.fits(alg) {
            return false;
        }
        // The signing input is exactly the header and the payload of a three-part token.
        let Some((input, signature)) = token.rsplit_once('.').filter(|(input, _)| input.matches('.').count() == 1)
        else {
            return false;
        };
        let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else { return false };
        self.check(alg, input.as_bytes(), &signature).unwrap_or(false)
    }

    fn check(&self, alg: Alg, input: &[u8], signature: &[u8]) -> Result<bool, openssl::error::ErrorStack> {
        let key = match self {
            Key::Secret(secret) => {
                let mac = Signer::new(alg.digest(), secret)?.sign_oneshot_to_vec(input)?;
                return Ok(mac.len() == signature.len() && openssl::memcmp::eq(&mac, signature));
            }
            Key::Public(key) => key,
        };
        match alg {
            Alg::EdDSA => Verifier::new_without_digest(key)?.verify_oneshot(signature, input),
            Alg::ES256 | Alg::ES384 => {
                // RFC 7518 section 3.4: R and S, each the curve's size, one after the other.
                let half = if alg == Alg::ES256 { 32 } else { 48 };
                if signature.len() != 2 * half {
                    return Ok(false);
                }
                let (r, s) = signature.split_at(half);
                let der =
                    EcdsaSig::from_private_components(BigNum::from_slice(r)?, BigNum::from_slice(s)?)?.to_der()?;
                Verifier::new(alg.digest(), key)?.verify_oneshot(&der, input)
            }
            Alg::PS256 | Alg::PS384 | Alg::PS512 => {
                // RFC 7518 section 3.5: MGF1 with the same hash, a salt as long as the hash.
                let mut verifier = Verifier::new(alg.digest(), key)?;
                verifier.set_rsa_padding(Padding::PKCS1_PSS)?;
                verifier.set_rsa_mgf1_md(alg.digest())?;
                verifier.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)?;
                verifier.verify_oneshot(signature, input)
            }
            _ => Verifier::new(alg.digest(), key)?.verify_oneshot(signature, input),
        }
    }
}

/// What a JWT's payload says of its issuer and expiry, read without building its claims (the
/// other members are skipped): enough to refuse an expired token or one no key is for.
#[derive(serde::Deserialize)]
pub(crate) struct Peek {
    #[serde(default)]
    iss: Option<Value>,
    #[serde(default)]
    exp: Option<Value>,
}

impl Peek {
    pub(crate) fn of(token: &str) -> Option<Peek> {
        let payload = token.split('.').nth(1)?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
    }

    pub(crate) fn issuer(&self) -> Option<&str> {
        self.iss.as_ref().and_then(Value::as_str)
    }

    /// Whether `exp` has passed for every leeway that could take the token (one without a
    /// numeric `exp` is left to the full check).
    pub(crate) fn expired(&self, now_secs: u64, leeways: impl Iterator<Item = u64>) -> bool {
        let leeway = leeways.max().unwrap_or(0);
        self.exp.as_ref().and_then(Value::as_u64).is_some_and(|exp| now_secs > exp.saturating_add(leeway))
    }
}

/// SHA-256 with OpenSSL's low-level interface (its one-shot `SHA256()` fetches an algorithm
/// implementation at each call, several times the cost of hashing a token).
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut hasher = openssl::sha::Sha256::new();
    hasher.update(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::pkey::Private;
    use serde_json::json;

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A token signed by OpenSSL's signer, the way an authorization server would.
    fn sign(alg: &str, key: &PKey<Private>) -> String {
        let input = format!("{}.{}", b64(json!({"alg": alg}).to_string().as_bytes()), b64(br#"{"sub":"alice"}"#));
        let digest = Alg::named(alg).unwrap().digest();
        let signature = match alg {
            "EdDSA" => Signer::new_without_digest(key).unwrap().sign_oneshot_to_vec(input.as_bytes()).unwrap(),
            "ES256" | "ES384" => {
                let der = Signer::new(digest, key).unwrap().sign_oneshot_to_vec(input.as_bytes()).unwrap();
                let sig = EcdsaSig::from_der(&der).unwrap();
                let half = if alg == "ES256" { 32 } else { 48 };
                let mut raw = sig.r().to_vec_padded(half).unwrap();
                raw.extend(sig.s().to_vec_padded(half).unwrap());
                raw
            }
            _ => {
                let mut signer = Signer::new(digest, key).unwrap();
                if alg.starts_with("PS") {
                    signer.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
                    signer.set_rsa_mgf1_md(digest).unwrap();
                    signer.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH).unwrap();
                }
                signer.sign_oneshot_to_vec(input.as_bytes()).unwrap()
            }
        };
        format!("{input}.{}", b64(&signature))
    }

    fn jwk(key: &PKey<Private>) -> Value {
        if let Ok(rsa) = key.rsa() {
            return json!({"kty": "RSA", "n": b64(&rsa.n().to_vec()), "e": b64(&rsa.e().to_vec())});
        }
        if let Ok(ec) = key.ec_key() {
            let (mut x, mut y) = (BigNum::new().unwrap(), BigNum::new().unwrap());
            let mut ctx = openssl::bn::BigNumContext::new().unwrap();
            ec.public_key().affine_coordinates(ec.group(), &mut x, &mut y, &mut ctx).unwrap();
            let (crv, size) = match ec.group().curve_name() {
                Some(Nid::X9_62_PRIME256V1) => ("P-256", 32),
                _ => ("P-384", 48),
            };
            let (x, y) = (x.to_vec_padded(size).unwrap(), y.to_vec_padded(size).unwrap());
            return json!({"kty": "EC", "crv": crv, "x": b64(&x), "y": b64(&y)});
        }
        json!({"kty": "OKP", "crv": "Ed25519", "x": b64(&key.raw_public_key().unwrap())})
    }

    fn tamper(token: &str) -> String {
        let (input, signature) = token.rsplit_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
        bytes[3] ^= 1;
        format!("{input}.{}", b64(&bytes))
    }

    #[test]
    fn each_algorithm_verifies_its_own_signatures_and_nothing_else() {
        let rsa = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let p256 =
            PKey::from_ec_key(EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap())
                .unwrap();
        let p384 =
            PKey::from_ec_key(EcKey::generate(&EcGroup::from_curve_name(Nid::SECP384R1).unwrap()).unwrap()).unwrap();
        let ed = PKey::generate_ed25519().unwrap();
        let cases = [
            ("RS256", &rsa),
            ("RS384", &rsa),
            ("RS512", &rsa),
            ("PS256", &rsa),
            ("PS384", &rsa),
            ("PS512", &rsa),
            ("ES256", &p256),
            ("ES384", &p384),
            ("EdDSA", &ed),
        ];
        for (alg, private) in cases {
            let key = Key::from_jwk(&jwk(private)).unwrap_or_else(|| panic!("{alg}: the JWK reads"));
            let token = sign(alg, private);
            let named = Alg::named(alg).unwrap();
            assert!(key.verifies(named, &token), "{alg}: its own signature");
            assert!(!key.verifies(named, &tamper(&token)), "{alg}: a changed signature");
            let other = token.replacen(".ey", ".eyA", 1);
            assert!(!key.verifies(named, &other), "{alg}: a changed payload");
            // Another algorithm's name on the same signature never verifies.
            for (wrong, _) in cases.iter().filter(|(a, _)| *a != alg) {
                assert!(!key.verifies(Alg::named(wrong).unwrap(), &token), "{alg} checked as {wrong}");
            }
        }
        // A key published for encryption, or not for verifying, is not one to check signatures
        // with; nor is a small RSA key or one whose exponent signs anything.
        let mut enc = jwk(&rsa);
        enc["use"] = json!("enc");
        assert!(Key::from_jwk(&enc).is_none());
        let mut signing_only = jwk(&rsa);
        signing_only["key_ops"] = json!(["sign"]);
        assert!(Key::from_jwk(&signing_only).is_none());
        let small = PKey::from_rsa(Rsa::generate(1024).unwrap()).unwrap();
        assert!(Key::from_jwk(&jwk(&small)).is_none());
        let mut one = jwk(&rsa);
        one["e"] = json!(b64(&[1]));
        assert!(Key::from_jwk(&one).is_none());
        // A token of more than three parts never verifies.
        let key = Key::from_jwk(&jwk(&rsa)).unwrap();
        let token = sign("RS256", &rsa);
        let (input, signature) = token.rsplit_once('.').unwrap();
        assert!(!key.verifies(Alg::RS256, &format!("{input}.extra.{signature}")));
    }

    #[test]
    fn hs256_checks_the_mac_in_constant_time_and_refuses_a_public_key() {
        let secret = b"a-secret-of-thirty-two-bytes-or-more!";
        let key = Key::secret(secret).unwrap();
        let input = format!("{}.{}", b64(br#"{"alg":"HS256"}"#), b64(br#"{"sub":"a"}"#));
        let mac = Signer::new(MessageDigest::sha256(), &PKey::hmac(secret).unwrap())
            .unwrap()
            .sign_oneshot_to_vec(input.as_bytes())
            .unwrap();
        let token = format!("{input}.{}", b64(&mac));
        assert!(key.verifies(Alg::HS256, &token));
        assert!(!key.verifies(Alg::HS256, &tamper(&token)));
        assert!(!key.verifies(Alg::HS256, &format!("{input}.{}", b64(&mac[..16]))), "a short MAC");
        // An RSA public key's PEM used as an HS256 secret never verifies.
        let rsa = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let public = Key::Public(PKey::public_key_from_pem(&rsa.public_key_to_pem().unwrap()).unwrap());
        assert!(!public.verifies(Alg::HS256, &token));
    }
}
