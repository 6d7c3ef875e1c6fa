//! Signed callbacks: with `ENGAGE_CALLBACK_SECRET` set, every callback carries
//! `X-Engage-Timestamp` (Unix seconds) and `X-Engage-Signature: v1=<hex>`, the HMAC-SHA256
//! of `<timestamp>.<body>` under the secret. The timestamp is signed with the body so that a
//! receiver can refuse an old request replayed (a window of a few minutes), and remember
//! the signatures it saw within that window to refuse a replay inside it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The signature header's value for a body sent at `timestamp` (Unix seconds).
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether a request's signature is the secret's, in constant time, and its timestamp within
/// `tolerance_seconds` of `now` (Unix seconds): what a receiver checks before anything else.
pub fn verify(
    secret: &[u8],
    timestamp: &str,
    signature_header: &str,
    body: &[u8],
    now: i64,
    tolerance_seconds: i64,
) -> bool {
    let Ok(sent_at) = timestamp.parse::<i64>() else {
        return false;
    };
    if (now - sent_at).abs() > tolerance_seconds {
        return false;
    }
    let Some(hex_part) = signature_header.strip_prefix("v1=") else {
        return false;
    };
    let Ok(given) = hex::decode(hex_part) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_with_its_secret_body_and_time() {
        let signed = signature(b"secret", 1_700_000_000, b"{\"a\":1}");
        assert!(verify(
            b"secret",
            "1700000000",
            &signed,
            b"{\"a\":1}",
            1_700_000_100,
            300
        ));
        assert!(!verify(
            b"other",
            "1700000000",
            &signed,
            b"{\"a\":1}",
            1_700_000_100,
            300
        ));
        assert!(!verify(
            b"secret",
            "1700000000",
            &signed,
            b"{\"a\":2}",
            1_700_000_100,
            300
        ));
        assert!(!verify(
            b"secret",
            "1700000001",
            &signed,
            b"{\"a\":1}",
            1_700_000_100,
            300
        ));
        assert!(!verify(
            b"secret",
            "1700000000",
            &signed,
            b"{\"a\":1}",
            1_700_000_400,
            300
        ));
    }

    #[test]
    fn the_mac_is_hmac_sha256() {
        // RFC 4231, test case 2, with the message split where ours is.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
