//! The payment callback's signature: header `X-Pay-Signature` = lowercase hex
//! HMAC-SHA256 of the raw request body, keyed with the shared pay secret. Verification is
//! over the exact bytes received (re-serialised JSON would not match) and constant-time.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

pub const HEADER: &str = "X-Pay-Signature";

fn mac(secret: &SecretString, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose_secret().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    mac
}

/// The header value for `body`.
pub fn sign(secret: &SecretString, body: &[u8]) -> String {
    hex::encode(mac(secret, body).finalize().into_bytes())
}

/// Whether `header` is the signature of `body`. Uppercase hex is refused like any other
/// tampering: the contract says lowercase.
pub fn verify(secret: &SecretString, body: &[u8], header: Option<&str>) -> bool {
    let Some(header) = header else {
        return false;
    };
    if header.bytes().any(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let Ok(claimed) = hex::decode(header) else {
        return false;
    };
    // `verify_slice` compares in constant time.
    mac(secret, body).verify_slice(&claimed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> SecretString {
        "pay-secret".into()
    }

    #[test]
    fn matches_the_rfc_4231_test_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            sign(&"Jefe".into(), b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_signed_body_verifies() {
        let body = br#"{"trade_no":"T1","amount_cents":100}"#;
        assert!(verify(&secret(), body, Some(&sign(&secret(), body))));
    }

    #[test]
    fn tampering_forgery_and_malformed_headers_are_refused() {
        let body = br#"{"trade_no":"T1","amount_cents":100}"#;
        let good = sign(&secret(), body);
        let tampered = br#"{"trade_no":"T1","amount_cents":1}"#;
        assert!(!verify(&secret(), tampered, Some(&good)));
        let forged = sign(&"not-the-secret".into(), body);
        assert!(!verify(&secret(), body, Some(&forged)));
        assert!(!verify(&secret(), body, None));
        assert!(!verify(&secret(), body, Some("")));
        assert!(!verify(&secret(), body, Some("zz")));
        assert!(!verify(&secret(), body, Some(&good[..62])));
        assert!(!verify(&secret(), body, Some(&good.to_uppercase())));
    }
}
