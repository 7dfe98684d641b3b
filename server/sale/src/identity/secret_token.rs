//! Random bearer secrets (session cookies, API tokens) and the digest stored in their place.
//! They carry 256 random bits, so a fast SHA-256 is enough to make a leaked table useless.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// 32 random bytes, hex-encoded.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// What the database keeps instead of the token.
pub fn digest(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_digests_stable() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(digest(&a), digest(&a));
        assert_ne!(digest(&a), digest(&b));
    }
}
