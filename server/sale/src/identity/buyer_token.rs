//! Buyer bearer tokens: HS256 JWTs whose `sub` is the buyer's numeric user id.
//! The platform's auth service issues them; `seckill token --user ID` mints one for tests
//! and load generation with the same shared secret.
//!
//! A rehearsal's synthetic buyers get tokens of their own (`mint_rehearsal`): they carry the
//! shadow activity's id, and the buy path sells to such a token only that activity, and that
//! activity only to such a token.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BuyerClaims {
    pub sub: String,
    pub exp: i64,
    /// The shadow activity a rehearsal's synthetic buyer may buy from; absent for buyers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehearsal: Option<i64>,
}

/// The buyer a valid token speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buyer {
    pub id: i64,
    /// Set for a rehearsal's synthetic buyer: the shadow activity it may buy from.
    pub rehearsal: Option<i64>,
}

pub fn mint(
    secret: &SecretString,
    user_id: i64,
    ttl: chrono::Duration,
) -> jsonwebtoken::errors::Result<String> {
    sign(secret, user_id, None, ttl)
}

/// A token for a rehearsal's synthetic buyer `user_id`, good for the shadow activity
/// `shadow_activity_id` only.
pub fn mint_rehearsal(
    secret: &SecretString,
    user_id: i64,
    shadow_activity_id: i64,
    ttl: chrono::Duration,
) -> jsonwebtoken::errors::Result<String> {
    sign(secret, user_id, Some(shadow_activity_id), ttl)
}

fn sign(
    secret: &SecretString,
    user_id: i64,
    rehearsal: Option<i64>,
    ttl: chrono::Duration,
) -> jsonwebtoken::errors::Result<String> {
    let claims = BuyerClaims {
        sub: user_id.to_string(),
        exp: (chrono::Utc::now() + ttl).timestamp(),
        rehearsal,
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

    /// The buyer named by a request's bearer token, or 401: the buyer API's own routes
    /// (an order, a payment) ask this; the buy funnel verifies in its step 3.
    pub fn bearer(&self, headers: &axum::http::HeaderMap) -> base::error::ApiResult<Buyer> {
        let authorization = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.verify(authorization)
            .ok_or(base::error::ApiError::Unauthenticated)
    }

    /// The buyer id of a valid, unexpired token from `Authorization: Bearer ...`.
    pub fn buyer(&self, authorization: Option<&str>) -> Option<i64> {
        self.verify(authorization).map(|buyer| buyer.id)
    }

    /// The buyer of a valid, unexpired token, with its rehearsal if it is a synthetic one.
    pub fn verify(&self, authorization: Option<&str>) -> Option<Buyer> {
        let token = authorization?.strip_prefix("Bearer ")?;
        let claims = decode::<BuyerClaims>(token.trim(), &self.key, &self.validation)
            .ok()?
            .claims;
        let id = claims.sub.parse::<i64>().ok().filter(|id| *id > 0)?;
        Some(Buyer {
            id,
            rehearsal: claims.rehearsal,
        })
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

    #[test]
    fn a_rehearsal_token_names_its_shadow_activity_and_a_buyer_token_none() {
        let secret: SecretString = "s3cret".into();
        let tokens = BuyerTokens::new(&secret);
        let bearer = |token: String| format!("Bearer {token}");
        let synthetic = mint_rehearsal(&secret, 9, 77, chrono::Duration::hours(1)).expect("mint");
        assert_eq!(
            tokens.verify(Some(&bearer(synthetic))),
            Some(Buyer {
                id: 9,
                rehearsal: Some(77)
            })
        );
        let buyer = mint(&secret, 9, chrono::Duration::hours(1)).expect("mint");
        assert_eq!(
            tokens.verify(Some(&bearer(buyer))),
            Some(Buyer {
                id: 9,
                rehearsal: None
            })
        );
    }
}
