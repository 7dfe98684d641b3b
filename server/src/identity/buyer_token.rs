//! Buyer bearer tokens: HS256 JWTs whose `sub` is the buyer's numeric user id.
//! The platform's auth service issues them; `seckill token --user ID` mints one for tests
//! and load generation with the same shared secret.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct BuyerClaims {
    pub(crate) sub: String,
    pub(crate) exp: i64,
}

pub fn mint(
    secret: &SecretString,
    user_id: i64,
    ttl: chrono::Duration,
) -> jsonwebtoken::errors::Result<String> {
    let claims = BuyerClaims {
        sub: user_id.to_string(),
        exp: (chrono::Utc::now() + ttl).timestamp(),
    };
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.expose_secret().as_bytes()),
    )
}

/// Verifies buyer tokens; built once, since key and validation rules do not change.
pub struct BuyerTokens {
    key: DecodingKey,
    validation: Validation,
}

impl BuyerTokens {
    pub fn new(secret: &SecretString) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.leeway = 5;
        Self {
            key: DecodingKey::from_secret(secret.expose_secret().as_bytes()),
            validation,
        }
    }

    /// The buyer id of a valid, unexpired token from `Authorization: Bearer ...`.
    pub fn buyer(&self, authorization: Option<&str>) -> Option<i64> {
        let token = authorization?.strip_prefix("Bearer ")?;
        let claims = decode::<BuyerClaims>(token.trim(), &self.key, &self.validation)
            .ok()?
            .claims;
        claims.sub.parse::<i64>().ok().filter(|id| *id > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_carries_the_user_and_verifies_with_the_secret() {
        let secret: SecretString = "s3cret".into();
        let token = mint(&secret, 42, chrono::Duration::hours(1)).expect("mint");
        let claims = decode::<BuyerClaims>(
            &token,
            &DecodingKey::from_secret(b"s3cret"),
            &Validation::default(),
        )
        .expect("valid")
        .claims;
        assert_eq!(claims.sub, "42");
        assert!(decode::<BuyerClaims>(
            &token,
            &DecodingKey::from_secret(b"other"),
            &Validation::default()
        )
        .is_err());
    }
}
