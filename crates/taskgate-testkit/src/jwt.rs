//! [`Es256Key`]: an ES256 (ECDSA P-256) signing key, to sign JWTs as an authorization server
//! would: tests forge tokens with a server's own key, and the benchmark plays one.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::bn::{BigNum, BigNumContext};
use openssl::ec::{EcGroup, EcKey, EcPoint};
use openssl::nid::Nid;
use openssl::pkey::Private;
use serde_json::{json, Value};

/// An ES256 key and its key id.
pub struct Es256Key {
    key: EcKey<Private>,
    kid: String,
}

impl Es256Key {
    /// A new key named `kid`.
    pub fn generate(kid: &str) -> Es256Key {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
        Es256Key { key: EcKey::generate(&group).expect("a P-256 key"), kid: kid.to_owned() }
    }

    /// The private key of a JWK (`kty` EC, `crv` P-256, with `d`), named by its `kid`.
    pub fn from_jwk(jwk: &Value) -> Es256Key {
        let part = |k: &str| BigNum::from_slice(&URL_SAFE_NO_PAD.decode(jwk[k].as_str().expect(k)).expect(k)).expect(k);
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
        let mut ctx = BigNumContext::new().expect("a context");
        let mut public = EcPoint::new(&group).expect("a point");
        public.set_affine_coordinates_gfp(&group, &part("x"), &part("y"), &mut ctx).expect("the public point");
        let key = EcKey::from_private_components(&group, &part("d"), &public).expect("the private key");
        Es256Key { key, kid: jwk["kid"].as_str().unwrap_or_default().to_owned() }
    }

    /// The public JWK (RFC 7517), as a JWKS publishes it.
    pub fn public_jwk(&self) -> Value {
        let group = self.key.group();
        let (mut x, mut y) = (BigNum::new().expect("x"), BigNum::new().expect("y"));
        let mut ctx = BigNumContext::new().expect("a context");
        self.key.public_key().affine_coordinates_gfp(group, &mut x, &mut y, &mut ctx).expect("coordinates");
        let fixed = |n: &BigNum| URL_SAFE_NO_PAD.encode(n.to_vec_padded(32).expect("32 bytes"));
        json!({"kty": "EC", "crv": "P-256", "x": fixed(&x), "y": fixed(&y), "kid": self.kid, "alg": "ES256", "use": "sig"})
    }

    /// A JWT of `claims`, its header `header` with this key's `kid` added.
    pub fn sign(&self, header: Value, claims: Value) -> String {
        let mut header = header;
        header["kid"] = json!(self.kid);
        let signing =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let digest = openssl::sha::sha256(signing.as_bytes());
        let sig = openssl::ecdsa::EcdsaSig::sign(&digest, &self.key).expect("a signature");
        let (r, s) = (sig.r().to_vec_padded(32).expect("r"), sig.s().to_vec_padded(32).expect("s"));
        format!("{signing}.{}", URL_SAFE_NO_PAD.encode([r, s].concat()))
    }
}
