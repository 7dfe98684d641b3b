//! argon2id password hashes (PHC strings). Hashing is deliberately slow, so it runs on the
//! blocking pool, never on a request's async worker.

use argon2::{
    password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};

pub async fn hash(password: String) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|e| anyhow::anyhow!("hashing failed: {e}"))
    })
    .await?
}

/// True when `password` matches `phc`; a malformed stored hash never matches.
pub async fn verify(password: String, phc: String) -> anyhow::Result<bool> {
    Ok(tokio::task::spawn_blocking(move || {
        PasswordHash::new(&phc)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    })
    .await?)
}

/// A PHC hash of a random password: verified against when the username is unknown, so a
/// login takes as long for a missing user as for a wrong password.
pub async fn decoy_hash() -> anyhow::Result<String> {
    static DECOY: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    DECOY
        .get_or_try_init(|| hash(super::secret_token::generate()))
        .await
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_only_its_password() {
        let phc = hash("correct horse".into()).await.expect("hash");
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify("correct horse".into(), phc.clone())
            .await
            .expect("verify"));
        assert!(!verify("wrong".into(), phc).await.expect("verify"));
        assert!(!verify("x".into(), "not a phc string".into())
            .await
            .expect("verify"));
    }
}
