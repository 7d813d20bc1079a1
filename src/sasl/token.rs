//! What an OAUTHBEARER validator concludes about a token, whichever validator it is
//! (KIP-768's signed tokens, `oauthbearer.rs`; Kafka's unsecured development tokens,
//! `unsecured_jwt.rs`): the token accepted with its subject and expiry, or refused with
//! why.
//!
//! Invariant: a refusal quotes a value taken from the token only through [`shown`]
//! (shortened and escaped), and never the token itself.

use jsonwebtoken::Algorithm;
use std::time::SystemTime;

/// Why a token is refused. Values from the token are quoted only through [`shown`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a JWT ({0})")]
    Malformed(&'static str),
    #[error("algorithm {0} refused (served: RS256/384/512, PS256/384/512, ES256, ES384, EdDSA with a key of the JWK set)")]
    Algorithm(String),
    #[error("{}", match .0 { Some(kid) => format!("no key {kid} in the JWK set"), None => "the token names no kid and the JWK set has no single key for its algorithm".to_string() })]
    UnknownKey(Option<String>),
    #[error("the key {0} is not for {1:?}")]
    KeyAlgorithm(String, Algorithm),
    #[error("the signature does not verify")]
    Signature,
    #[error("the {0} claim is missing")]
    Missing(String),
    #[error("the {0} claim is malformed ({1})")]
    Claim(String, &'static str),
    #[error("expired at {exp} (now {now}, {skew} s clock skew allowed)")]
    Expired { exp: i64, now: i64, skew: u64 },
    #[error("not valid before {nbf} (now {now}, {skew} s clock skew allowed)")]
    NotYetValid { nbf: i64, now: i64, skew: u64 },
    #[error("issued at {iat}, in the future (now {now}, {skew} s clock skew allowed)")]
    IssuedInFuture { iat: i64, now: i64, skew: u64 },
    #[error("issuer {0} is not sasl.oauthbearer.expected.issuer")]
    Issuer(String),
    #[error("no audience of the token is in sasl.oauthbearer.expected.audience")]
    Audience,
    #[error("an unsecured token must have alg none and an empty signature ({0})")]
    NotUnsecured(&'static str),
    #[error("expires at {exp} ms, not after it was issued ({iat} ms)")]
    ExpiresBeforeIssued { exp: i64, iat: i64 },
    #[error("the scope lacks {0}")]
    Scope(String),
}

/// A token's value as an error may quote it: at most 64 characters, escaped.
pub fn shown(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(64)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if s.chars().count() > 64 {
        out.push('…');
    }
    format!("\"{out}\"")
}

/// A token that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// The subject claim, trimmed: the principal's name.
    pub subject: String,
    /// Its `exp`.
    pub expires: SystemTime,
}

/// A refused token: why, and its subject when a verified token named one (who tried,
/// for the audit line; never taken from a token whose signature failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub error: TokenError,
    pub subject: Option<String>,
}

impl From<TokenError> for Refused {
    fn from(error: TokenError) -> Refused {
        Refused {
            error,
            subject: None,
        }
    }
}
