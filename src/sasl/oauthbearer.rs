//! The server side of SASL/OAUTHBEARER (RFC 7628) as Kafka's broker serves it with
//! KIP-768's secured validator: the client's first message carries a JWT
//! (`auth=Bearer <token>`), accepted only when a key of the configured JWK set signed it
//! and its claims hold; the principal is `User:<subject claim>`.
//!
//! Invariants:
//! - A token is accepted only if its JWS signature verifies with an asymmetric key (RS*,
//!   PS*, ES256, ES384, EdDSA) of the JWK set, the one its `kid` names (without a `kid`:
//!   the set's only key fit for its algorithm). `alg: none` and HMAC are refused before
//!   any key is looked at, and symmetric (`oct`) JWKs are never loaded: with a public
//!   JWK set, an HMAC "key" would be a secret anyone can read.
//! - Claims are checked here, strictly typed (a string where a number belongs refuses
//!   the token; it is never taken for an absent claim): `exp` and `iat` are required, as
//!   Kafka's validator requires them; `exp`, `nbf` and `iat` are held to the clock with
//!   `sasl.oauthbearer.clock.skew.seconds` of slack; issuer and audience when
//!   configured; the subject claim must be a non-blank string.
//! - A refused token is answered as Kafka answers it: the JSON error
//!   `{"status":"invalid_token"}` as a challenge, and whatever the client sends next
//!   (RFC 7628: a lone `^A`) ends the exchange as failed.
//! - The JWK set comes from a `file:` URL. It is re-read when the file changes (looked at
//!   at most once a second), every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and for a
//!   token whose `kid` it lacks (at most once a second, so unknown kids cannot make the
//!   broker read the file per connection); a file that cannot be read or holds no usable
//!   key keeps the previous set in use, logged. An `http(s):` URL is refused at start-up:
//!   the broker has no HTTP client.
//! - The token appears in no error, log line or `Debug` output; errors name the check
//!   that failed, and quote a claim or header value only shortened and escaped.

use crate::sasl::token::shown;
pub use crate::sasl::token::{Refused, TokenError, ValidToken};
use crate::sasl::unsecured_jwt::UnsecuredValidator;
use crate::security_config::SecurityConfig;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const MECHANISM: &str = "OAUTHBEARER";

/// Kafka's `{"status":"invalid_token"}`: the challenge refusing a token, and the
/// message of the failure that follows.
pub const INVALID_TOKEN: &str = r#"{"status":"invalid_token"}"#;

/// Kafka's answer to a client message that does not parse (its SaslException's).
const INVALID_MESSAGE: &str =
    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER";

/// How often the JWK set file's modification time is looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// At most one re-read of the JWK set per this for tokens with an unknown `kid`.
const UNKNOWN_KID_INTERVAL: Duration = Duration::from_secs(1);
/// Kafka's default `sasl.oauthbearer.jwks.endpoint.refresh.ms`.
const REFRESH_MS_DEFAULT: u64 = 3_600_000;
/// Kafka's default `sasl.oauthbearer.clock.skew.seconds`.
const CLOCK_SKEW_S_DEFAULT: u64 = 30;
/// The latest `exp` taken as it is (about 34,800 years from 1970); a later one is
/// taken as this.
const LATEST_DATE_S: i64 = 1 << 40;
/// RSA keys shorter than this are not loaded (as jose4j, Kafka's JWT library, refuses them).
const RSA_MIN_BITS: usize = 2048;

// ---------------------------------------------------------------------------------------
// The client's first message
// ---------------------------------------------------------------------------------------

/// The client's first message (RFC 7628 §3.1):
/// `n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A`.
#[derive(PartialEq, Eq)]
pub struct ClientFirst<'a> {
    /// The authorization id of the GS2 header, decoded (`=2C` `=3D`).
    pub authzid: Option<String>,
    pub token: &'a str,
    /// SASL extensions (KIP-342): accepted and not used, as Kafka's validator does.
    pub extensions: BTreeMap<&'a str, &'a str>,
}

impl std::fmt::Debug for ClientFirst<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientFirst")
            .field("authzid", &self.authzid)
            .field("token", &"[redacted]")
            .field("extensions", &self.extensions.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a client's first message does not parse (nothing of the message is quoted but
/// an extension's name, which is letters only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedMessage {
    #[error("it is not UTF-8")]
    NotUtf8,
    #[error("it does not start with the GS2 header n,[a=<authzid>],^A")]
    Gs2Header,
    #[error("its authorization id is malformed")]
    Authzid,
    #[error("a key=value pair is malformed")]
    Pair,
    #[error("the key {0} is given twice")]
    Duplicate(String),
    #[error("it has no auth=Bearer <token>")]
    NoAuth,
    #[error("its auth scheme is not Bearer")]
    Scheme,
    #[error("its token has characters a JWT cannot have")]
    TokenChars,
    #[error("it does not end with ^A^A")]
    Unterminated,
}

pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst<'_>, MalformedMessage> {
    use MalformedMessage::*;
    let text = std::str::from_utf8(message).map_err(|_| NotUtf8)?;
    // Only `n`: no channel binding, as Kafka's client and server.
    let rest = text.strip_prefix("n,").ok_or(Gs2Header)?;
    let (authzid, rest) = rest.split_once(',').ok_or(Gs2Header)?;
    let authzid = match authzid {
        "" => None,
        a => Some(saslname(a.strip_prefix("a=").ok_or(Gs2Header)?)?),
    };
    let rest = rest.strip_prefix('\x01').ok_or(Gs2Header)?;
    let pairs = rest.strip_suffix('\x01').ok_or(Unterminated)?;
    let mut auth = None;
    let mut extensions = BTreeMap::new();
    if !pairs.is_empty() {
        // Each pair ends with ^A (a value cannot hold one), then the final ^A.
        let pairs = pairs.strip_suffix('\x01').ok_or(Unterminated)?;
        for pair in pairs.split('\x01') {
            let (key, value) = pair.split_once('=').ok_or(Pair)?;
            let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
            let value_ok = !value.is_empty()
                && value
                    .bytes()
                    .all(|b| matches!(b, 0x21..=0x7e | b' ' | b'\t' | b'\r' | b'\n'));
            if !key_ok || !value_ok {
                return Err(Pair);
            }
            let slot = if key == "auth" {
                auth.replace(value).is_some()
            } else {
                extensions.insert(key, value).is_some()
            };
            if slot {
                return Err(Duplicate(key.to_string()));
            }
        }
    }
    let auth = auth.ok_or(NoAuth)?;
    // `<scheme> SP+ <token>`, the scheme a word, compared without case (RFC 6750).
    let (scheme, token) = auth.split_once(' ').ok_or(NoAuth)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Scheme);
    }
    let token = token.trim_start_matches(' ');
    let token_ok = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !token_ok {
        return Err(TokenChars);
    }
    Ok(ClientFirst {
        authzid,
        token,
        extensions,
    })
}

/// A GS2 `saslname`: ASCII without `=` and `,`, which are written `=3D` and `=2C`.
fn saslname(s: &str) -> Result<String, MalformedMessage> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if c == '=' {
            match rest.get(..3) {
                Some("=2C") => out.push(','),
                Some("=3D") => out.push('='),
                _ => return Err(MalformedMessage::Authzid),
            }
            rest = &rest[3..];
            continue;
        }
        if !matches!(c, '\x01'..='\x7f') {
            return Err(MalformedMessage::Authzid);
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    if out.is_empty() {
        return Err(MalformedMessage::Authzid);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The JWK set
// ---------------------------------------------------------------------------------------

/// One verification key of the set.
struct VerificationKey {
    kid: Option<String>,
    /// What it may verify: the JWK's `alg` if it names one, else every algorithm of its
    /// type (and curve).
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// The usable keys of a JWK set.
struct KeySet {
    keys: Vec<VerificationKey>,
}

/// Why a JWK set file cannot be used.
#[derive(Debug, thiserror::Error)]
enum JwksError {
    #[error("cannot read it ({0})")]
    Read(std::io::Error),
    #[error("it is not a JSON JWK set ({{\"keys\": [...]}})")]
    NotAJwkSet,
    #[error("it holds no usable signature key ({skipped} skipped: not RSA of 2048 bits or more, EC P-256/P-384 or Ed25519, or not for signatures)")]
    NoUsableKey { skipped: usize },
}

const RSA_ALGORITHMS: [Algorithm; 6] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

impl KeySet {
    fn parse(json: &[u8]) -> Result<KeySet, JwksError> {
        let set: Value = serde_json::from_slice(json).map_err(|_| JwksError::NotAJwkSet)?;
        let entries = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(JwksError::NotAJwkSet)?;
        let mut keys = Vec::new();
        for entry in entries {
            // A key this broker cannot use is left out, not an error: identity providers
            // publish encryption keys and other types beside the signing keys.
            if let Some(k) = serde_json::from_value::<Jwk>(entry.clone())
                .ok()
                .and_then(|jwk| verification_key(&jwk))
            {
                keys.push(k);
            }
        }
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey {
                skipped: entries.len(),
            });
        }
        Ok(KeySet { keys })
    }

    /// The key for a token's `kid` and algorithm.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Result<&VerificationKey, TokenError> {
        let fits = |k: &&VerificationKey| k.algorithms.contains(&alg);
        match kid {
            Some(kid) => {
                let mut named = self
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid))
                    .peekable();
                if named.peek().is_none() {
                    return Err(TokenError::UnknownKey(Some(shown(kid))));
                }
                named
                    .find(fits)
                    .ok_or_else(|| TokenError::KeyAlgorithm(shown(kid), alg))
            }
            None => {
                let mut fit = self.keys.iter().filter(fits);
                match (fit.next(), fit.next()) {
                    (Some(k), None) => Ok(k),
                    _ => Err(TokenError::UnknownKey(None)),
                }
            }
        }
    }
}

/// The JWK as a verification key, if it is one this broker uses.
fn verification_key(jwk: &Jwk) -> Option<VerificationKey> {
    if !matches!(
        jwk.common.public_key_use,
        None | Some(PublicKeyUse::Signature)
    ) {
        return None;
    }
    let by_type: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(p) => {
            let n = B64URL.decode(p.n.trim_end_matches('=')).ok()?;
            let leading_zeros = n.iter().take_while(|b| **b == 0).count();
            let bits = (n.len() - leading_zeros) * 8;
            if bits < RSA_MIN_BITS {
                return None;
            }
            RSA_ALGORITHMS.to_vec()
        }
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        // Symmetric keys (`oct`) and anything else: never.
        _ => return None,
    };
    let algorithms = match jwk.common.key_algorithm {
        None => by_type,
        Some(named) => {
            let alg = by_type
                .into_iter()
                .find(|a| key_algorithm_of(*a) == Some(named))?;
            vec![alg]
        }
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerificationKey {
        kid: jwk.common.key_id.clone(),
        algorithms,
        key,
    })
}

fn key_algorithm_of(alg: Algorithm) -> Option<KeyAlgorithm> {
    Some(match alg {
        Algorithm::RS256 => KeyAlgorithm::RS256,
        Algorithm::RS384 => KeyAlgorithm::RS384,
        Algorithm::RS512 => KeyAlgorithm::RS512,
        Algorithm::PS256 => KeyAlgorithm::PS256,
        Algorithm::PS384 => KeyAlgorithm::PS384,
        Algorithm::PS512 => KeyAlgorithm::PS512,
        Algorithm::ES256 => KeyAlgorithm::ES256,
        Algorithm::ES384 => KeyAlgorithm::ES384,
        Algorithm::EdDSA => KeyAlgorithm::EdDSA,
        _ => return None,
    })
}

/// The file's modification time and length: what changes when it is rewritten.
type FileStamp = (SystemTime, u64);

fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

struct JwksState {
    keys: Arc<KeySet>,
    stamp: Option<FileStamp>,
    /// When the file's stamp was last looked at.
    checked: Instant,
    /// When the file was last read (whether or not it was usable).
    read: Instant,
    /// The last re-read for an unknown `kid`.
    forced: Option<Instant>,
    /// The stamp of the last unusable read (logged once per change of the file).
    failed: Option<Option<FileStamp>>,
    /// Reads after the first (for the tests).
    rereads: u64,
}

/// A JWK set kept in a file, re-read when it changes.
struct JwksFile {
    path: PathBuf,
    refresh: Duration,
    listener: String,
    state: Mutex<JwksState>,
}

impl JwksFile {
    /// Reads the set now; an unusable one is an error (the broker does not start).
    fn open(path: PathBuf, refresh: Duration, listener: &str) -> anyhow::Result<JwksFile> {
        // Refreshes read the same file whatever the working directory is by then.
        let path = crate::paths::absolute(path)?;
        let stamp = stamp(&path);
        let keys = std::fs::read(&path)
            .map_err(JwksError::Read)
            .and_then(|json| KeySet::parse(&json))
            .map_err(|e| {
                anyhow::anyhow!(
                    "listener {listener}: the JWK set {} (sasl.oauthbearer.jwks.endpoint.url): {e}",
                    path.display()
                )
            })?;
        let now = Instant::now();
        Ok(JwksFile {
            path,
            refresh,
            listener: listener.to_string(),
            state: Mutex::new(JwksState {
                keys: Arc::new(keys),
                stamp,
                checked: now,
                read: now,
                forced: None,
                failed: None,
                rereads: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JwksState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The set to use now, after re-reading the file if it changed or is due.
    fn current(&self) -> Arc<KeySet> {
        let mut state = self.lock();
        if state.checked.elapsed() >= CHECK_INTERVAL {
            state.checked = Instant::now();
            let now = stamp(&self.path);
            if (now.is_some() && now != state.stamp) || state.read.elapsed() >= self.refresh {
                self.reread(&mut state, now);
            }
        }
        state.keys.clone()
    }

    /// For a token whose `kid` the set lacks: the set re-read, or `None` if one was
    /// re-read for that reason less than a second ago.
    fn reread_for_unknown_kid(&self) -> Option<Arc<KeySet>> {
        let mut state = self.lock();
        if state
            .forced
            .is_some_and(|t| t.elapsed() < UNKNOWN_KID_INTERVAL)
        {
            return None;
        }
        state.forced = Some(Instant::now());
        let now = stamp(&self.path);
        self.reread(&mut state, now);
        Some(state.keys.clone())
    }

    fn reread(&self, state: &mut JwksState, now: Option<FileStamp>) {
        state.read = Instant::now();
        state.rereads += 1;
        let fresh = std::fs::read(&self.path)
            .map_err(JwksError::Read)
            .and_then(|json| KeySet::parse(&json));
        match fresh {
            Ok(keys) => {
                if now != state.stamp {
                    tracing::info!(listener = %self.listener, path = %self.path.display(), keys = keys.keys.len(), "OAUTHBEARER JWK set reloaded");
                }
                state.keys = Arc::new(keys);
                state.stamp = now;
                state.failed = None;
            }
            Err(e) => {
                if state.failed != Some(now) {
                    state.failed = Some(now);
                    tracing::warn!(listener = %self.listener, path = %self.path.display(), error = %e, "OAUTHBEARER JWK set unusable; the previous keys stay in use");
                }
                // Not looked at again until it changes or the refresh is due.
                state.stamp = now;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Validating a token
// ---------------------------------------------------------------------------------------

/// How one listener checks OAUTHBEARER tokens: KIP-768's signed JWTs (the default), or
/// Kafka's unsecured development tokens where the operator names that handler.
#[derive(Debug)]
pub enum Validator {
    Signed(Box<SignedValidator>),
    Unsecured(UnsecuredValidator),
}

/// The broker-side handler classes of Kafka that name KIP-768's validator.
const SIGNED_HANDLER_CLASSES: &[&str] = &[
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
];

impl Validator {
    /// From the listener's `oauthbearer.sasl.server.callback.handler.class`: unset or
    /// KIP-768's class, the signed validator (its keys: `SignedValidator::from_config`);
    /// Kafka's unsecured validator's class, that one, with the options of the listener's
    /// `oauthbearer.sasl.jaas.config` — logged as a warning at start, since anyone may
    /// then log in as anyone.
    pub fn from_config(sec: &SecurityConfig, listener: &str) -> anyhow::Result<Validator> {
        let handler = sec
            .get(listener, "oauthbearer.sasl.server.callback.handler.class")
            .map(str::trim)
            .filter(|c| !c.is_empty());
        match handler {
            None => SignedValidator::from_config(sec, listener).map(|v| Validator::Signed(Box::new(v))),
            Some(c) if SIGNED_HANDLER_CLASSES.contains(&c) => {
                SignedValidator::from_config(sec, listener).map(|v| Validator::Signed(Box::new(v)))
            }
            Some(c) if c == crate::sasl::unsecured_jwt::HANDLER_CLASS => {
                let options = match sec.get(listener, "oauthbearer.sasl.jaas.config") {
                    None => BTreeMap::new(),
                    Some(jaas) => crate::sasl::jaas::options(jaas).map_err(|e| {
                        anyhow::anyhow!("listener {listener}: oauthbearer.sasl.jaas.config: {e}")
                    })?,
                };
                let v = UnsecuredValidator::from_options(&options).map_err(|e| {
                    anyhow::anyhow!("listener {listener}: oauthbearer.sasl.jaas.config: {e}")
                })?;
                tracing::warn!(
                    listener,
                    "OAUTHBEARER takes UNSIGNED tokens on this listener (OAuthBearerUnsecuredValidatorCallbackHandler): any client can log in as any user. For development only; production listeners set sasl.oauthbearer.jwks.endpoint.url"
                );
                Ok(Validator::Unsecured(v))
            }
            Some(c) => anyhow::bail!(
                "listener {listener}: oauthbearer.sasl.server.callback.handler.class {c} is not served (served: org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler, and for development {})",
                crate::sasl::unsecured_jwt::HANDLER_CLASS
            ),
        }
    }

    /// Checks `token` at time `now`.
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<ValidToken, Refused> {
        match self {
            Validator::Signed(v) => v.validate(token, now),
            Validator::Unsecured(v) => v.validate(token, now),
        }
    }
}

/// KIP-768's validator for one listener: its JWK set and expected claims.
pub struct SignedValidator {
    jwks: JwksFile,
    audience: Vec<String>,
    issuer: Option<String>,
    sub_claim: String,
    scope_claim: String,
    clock_skew: u64,
}

impl std::fmt::Debug for SignedValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedValidator")
            .field("jwks", &self.jwks.path)
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .field("sub_claim", &self.sub_claim)
            .field("clock_skew", &self.clock_skew)
            .finish()
    }
}

impl SignedValidator {
    /// From the listener's KIP-768 keys (each may be given broker-wide or per listener).
    pub fn from_config(sec: &SecurityConfig, listener: &str) -> anyhow::Result<SignedValidator> {
        let url = sec
            .get(listener, "sasl.oauthbearer.jwks.endpoint.url")
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "listener {listener} enables OAUTHBEARER: set sasl.oauthbearer.jwks.endpoint.url to the file: URL of the identity provider's JWK set (Kafka's unsecured validator, which accepts unsigned tokens, is for development: a listener takes it only where listener.name.<name>.oauthbearer.sasl.server.callback.handler.class names it)"
                )
            })?;
        let path = jwks_path(url).map_err(|e| {
            anyhow::anyhow!("listener {listener}: sasl.oauthbearer.jwks.endpoint.url: {e}")
        })?;
        let number = |key: &str, default: u64| -> anyhow::Result<u64> {
            match sec.get(listener, key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| anyhow::anyhow!("listener {listener}: {key} must be a number")),
            }
        };
        let refresh = number(
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            REFRESH_MS_DEFAULT,
        )?;
        if refresh == 0 {
            anyhow::bail!(
                "listener {listener}: sasl.oauthbearer.jwks.endpoint.refresh.ms must be above 0"
            );
        }
        let clock_skew = number("sasl.oauthbearer.clock.skew.seconds", CLOCK_SKEW_S_DEFAULT)?;
        let name = |key: &str, default: &str| -> anyhow::Result<String> {
            match sec.get(listener, key).map(str::trim) {
                None => Ok(default.to_string()),
                Some("") => anyhow::bail!("listener {listener}: {key} must name a claim"),
                Some(v) => Ok(v.to_string()),
            }
        };
        let sub_claim = name("sasl.oauthbearer.sub.claim.name", "sub")?;
        let scope_claim = name("sasl.oauthbearer.scope.claim.name", "scope")?;
        let issuer = match sec
            .get(listener, "sasl.oauthbearer.expected.issuer")
            .map(str::trim)
        {
            None => None,
            Some("") => anyhow::bail!(
                "listener {listener}: sasl.oauthbearer.expected.issuer is blank (name the issuer, or leave the key out)"
            ),
            Some(v) => Some(v.to_string()),
        };
        // Kafka's list: comma-separated, blanks left out.
        let audience = sec
            .get(listener, "sasl.oauthbearer.expected.audience")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        let jwks = JwksFile::open(path, Duration::from_millis(refresh), listener)?;
        Ok(SignedValidator {
            jwks,
            audience,
            issuer,
            sub_claim,
            scope_claim,
            clock_skew,
        })
    }

    /// Checks `token` at time `now`.
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<ValidToken, Refused> {
        let (alg, kid) = header(token)?;
        let mut keys = self.jwks.current();
        let found = match keys.find(kid.as_deref(), alg) {
            Err(TokenError::UnknownKey(_)) => {
                // Maybe a key the identity provider has just added: read the set again.
                if let Some(fresh) = self.jwks.reread_for_unknown_kid() {
                    keys = fresh;
                }
                keys.find(kid.as_deref(), alg)
            }
            other => other,
        };
        let key = found?;
        let mut validation = Validation::new(alg);
        // Every claim is checked below, typed strictly; the library checks the signature.
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => TokenError::Signature,
                jsonwebtoken::errors::ErrorKind::Json(_)
                | jsonwebtoken::errors::ErrorKind::Utf8(_)
                | jsonwebtoken::errors::ErrorKind::Base64(_) => {
                    TokenError::Malformed("its payload is not base64url JSON")
                }
                // Also a signature of the wrong shape, or a key the crypto refuses.
                _ => TokenError::Signature,
            })?
            .claims;
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let subject = match claims.get(&self.sub_claim) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            _ => None,
        };
        self.check_claims(&claims, now).map_err(|error| Refused {
            error,
            subject: subject.clone(),
        })?;
        let Some(subject) = subject else {
            return Err(match claims.get(&self.sub_claim) {
                None | Some(Value::String(_)) => TokenError::Missing(self.sub_claim.clone()),
                Some(_) => TokenError::Claim(self.sub_claim.clone(), "not a string"),
            }
            .into());
        };
        // Bounded, so that no time computed from it overflows (a signed token may
        // still say "never").
        let exp = numeric_date(&claims, "exp")
            .ok()
            .flatten()
            .unwrap_or_default()
            .clamp(0, LATEST_DATE_S);
        Ok(ValidToken {
            subject,
            expires: UNIX_EPOCH + Duration::from_secs(exp as u64),
        })
    }

    fn check_claims(&self, claims: &Map<String, Value>, now: i64) -> Result<(), TokenError> {
        let skew = self.clock_skew;
        let slack = i64::try_from(skew).unwrap_or(i64::MAX);
        let exp = numeric_date(claims, "exp")?.ok_or(TokenError::Missing("exp".into()))?;
        if exp < 0 {
            return Err(TokenError::Claim("exp".into(), "negative"));
        }
        if now.saturating_sub(slack) >= exp {
            return Err(TokenError::Expired { exp, now, skew });
        }
        let iat = numeric_date(claims, "iat")?.ok_or(TokenError::Missing("iat".into()))?;
        if iat > now.saturating_add(slack) {
            return Err(TokenError::IssuedInFuture { iat, now, skew });
        }
        if let Some(nbf) = numeric_date(claims, "nbf")? {
            if nbf > now.saturating_add(slack) {
                return Err(TokenError::NotYetValid { nbf, now, skew });
            }
        }
        if let Some(expected) = &self.issuer {
            match claims.get("iss") {
                None => return Err(TokenError::Missing("iss".into())),
                Some(Value::String(iss)) if iss == expected => {}
                Some(Value::String(iss)) => return Err(TokenError::Issuer(shown(iss))),
                Some(_) => return Err(TokenError::Claim("iss".into(), "not a string")),
            }
        }
        if !self.audience.is_empty() {
            let matches = |a: &str| self.audience.iter().any(|e| e == a);
            let ok = match claims.get("aud") {
                None => return Err(TokenError::Missing("aud".into())),
                Some(Value::String(a)) => matches(a),
                Some(Value::Array(all)) => {
                    let mut any = false;
                    for a in all {
                        match a {
                            Value::String(a) => any |= matches(a),
                            _ => {
                                return Err(TokenError::Claim(
                                    "aud".into(),
                                    "not a string or a list of strings",
                                ))
                            }
                        }
                    }
                    any
                }
                Some(_) => {
                    return Err(TokenError::Claim(
                        "aud".into(),
                        "not a string or a list of strings",
                    ))
                }
            };
            if !ok {
                return Err(TokenError::Audience);
            }
        }
        // Kafka's: a scope string is one scope, a list is several; each must be non-blank.
        let blank = || TokenError::Claim(self.scope_claim.clone(), "a blank scope");
        match claims.get(&self.scope_claim) {
            Some(Value::String(s)) if s.trim().is_empty() => return Err(blank()),
            Some(Value::Array(all)) => {
                for s in all {
                    match s {
                        Value::String(s) if !s.trim().is_empty() => {}
                        Value::String(_) => return Err(blank()),
                        _ => {
                            return Err(TokenError::Claim(
                                self.scope_claim.clone(),
                                "not a list of strings",
                            ))
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The token's algorithm (refusing `none` and HMAC) and `kid`, from its header.
fn header(token: &str) -> Result<(Algorithm, Option<String>), TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "not three dot-separated parts (a JWS)",
        ));
    };
    let header: Value = B64URL
        .decode(header)
        .ok()
        .and_then(|h| serde_json::from_slice(&h).ok())
        .filter(Value::is_object)
        .ok_or(TokenError::Malformed("its header is not base64url JSON"))?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(TokenError::Malformed("its header names no alg"))?;
    let alg = match alg {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        other => return Err(TokenError::Algorithm(shown(other))),
    };
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(TokenError::Malformed("its kid is not a string")),
    };
    Ok((alg, kid))
}

/// A NumericDate claim in whole seconds (RFC 7519 allows fractions; they are dropped).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(i))
            } else if n.as_u64().is_some() {
                Ok(Some(i64::MAX))
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => Ok(Some(f.floor() as i64)),
                    _ => Err(TokenError::Claim(name.into(), "not a number")),
                }
            }
        }
        Some(_) => Err(TokenError::Claim(name.into(), "not a number")),
    }
}

/// The path of a `file:` URL (`file:///abs/path`, `file:/abs/path`,
/// `file://localhost/abs/path`, percent-escapes decoded).
fn jwks_path(url: &str) -> Result<PathBuf, String> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https:") || lower.starts_with("http:") {
        // The URL is not quoted: it could carry credentials.
        return Err(
            "only a file: URL is served for now (the broker has no HTTP client): keep the identity provider's JWK set in a file (fetched by a job of your own) and give file:///path/to/jwks.json"
                .into(),
        );
    }
    let Some(rest) = lower.starts_with("file:").then(|| &url[5..]) else {
        return Err(format!(
            "{url} is not a file: URL (file:///path/to/jwks.json)"
        ));
    };
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let slash = authority_and_path
                .find('/')
                .unwrap_or(authority_and_path.len());
            let host = &authority_and_path[..slash];
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(format!("{url}: a file: URL names no other host"));
            }
            &authority_and_path[slash..]
        }
        None => rest,
    };
    if !path.starts_with('/') {
        return Err(format!(
            "{url}: the path must be absolute (file:///path/to/jwks.json)"
        ));
    }
    let mut bytes = Vec::with_capacity(path.len());
    let mut rest = path.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail
                .get(..2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{url}: a malformed %-escape"))?;
            bytes.push(hex);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

// ---------------------------------------------------------------------------------------
// One exchange
// ---------------------------------------------------------------------------------------

/// One OAUTHBEARER exchange on a connection.
pub struct Exchange {
    validator: Arc<Validator>,
    /// After a refused token: the audit detail, for the failure the client's next
    /// message brings.
    refused: Option<String>,
}

/// What a client message leads to.
pub enum Outcome {
    /// Authenticated as `user`, whose token expires in `remaining`.
    Authenticated { user: String, remaining: Duration },
    /// The token was refused: send `error` as a challenge; the exchange fails with the
    /// client's next message. `subject`: who the (verified) token named, if anyone.
    Challenge {
        error: Vec<u8>,
        subject: Option<String>,
    },
}

/// A failed exchange: Kafka's message for the client, and the detail for the audit log.
pub struct Failure {
    pub to_client: String,
    pub detail: String,
}

impl Exchange {
    pub fn new(validator: Arc<Validator>) -> Exchange {
        Exchange {
            validator,
            refused: None,
        }
    }

    pub fn step(&mut self, message: &[u8], now: SystemTime) -> Result<Outcome, Failure> {
        if let Some(detail) = self.refused.take() {
            // RFC 7628 §3.2.3: the client acknowledges the error (a lone ^A) and the
            // server fails the exchange; anything else fails it too.
            return Err(Failure {
                to_client: INVALID_TOKEN.to_string(),
                detail,
            });
        }
        let first = parse_client_first(message).map_err(|e| Failure {
            to_client: INVALID_MESSAGE.to_string(),
            detail: format!("invalid OAUTHBEARER client first message: {e}"),
        })?;
        match self.validator.validate(first.token, now) {
            Ok(token) => {
                if let Some(authzid) = first.authzid.filter(|a| *a != token.subject) {
                    let m = format!(
                        "Authentication failed: Client requested an authorization id ({}) that is different from the token's principal name ({})",
                        shown(&authzid),
                        shown(&token.subject)
                    );
                    return Err(Failure {
                        to_client: m.clone(),
                        detail: m,
                    });
                }
                let remaining = token.expires.duration_since(now).unwrap_or(Duration::ZERO);
                Ok(Outcome::Authenticated {
                    user: token.subject,
                    remaining,
                })
            }
            Err(refused) => {
                self.refused = Some(format!("OAUTHBEARER token refused: {}", refused.error));
                Ok(Outcome::Challenge {
                    error: INVALID_TOKEN.as_bytes().to_vec(),
                    subject: refused.subject,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl::{Authentication, SaslListener, Step};
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    // Fixed test keys, made once with `openssl genpkey` for these tests only.
    const EC_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjKIJaHuPgTrzD+g+
aXiL4RoBAphM913bjRWwRLYTv5qhRANCAAQeUNoz2fxDlVTfcBUH6sCemxhZUF64
9uZzPf/NXe588ItVetNSZIYKigXeKISq62BWxYOHQ4FGt15S1eYMvVL0
-----END PRIVATE KEY-----
";
    /// Not in the JWK set: what a forger signs with.
    const OTHER_EC_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgqTcwkjyaMYNc08Mw
zGKRc7Mx/DiH15br4Vb5g9mvormhRANCAATYFlBKt1Kt78/nFU/oZ7Ssmv8p3JKi
txyoDbYYLRRl0AFretJl8tlNtzXjgipJAPEeszvE9aU74J2IaZJpUKVC
-----END PRIVATE KEY-----
";
    const RSA_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEApwDr805B7bz+JXR+N2rfNwuKjTqxG9dWJEm4Tnl+ymMPds3Z
bVleMOQncPqonOz4Gs/ZpzGfFAIAjdArfJdcGlnhbq82iTob9fc6Ccm6syalCQt4
7hsMC5zRxUjmO5jfKm3qwKkA+VeDVMzl/XL9IxuWrxtzr5a/gXzMvvCC2mdPqU8M
McvfLt3akTuifrWmFWDXlkl1hRQLEMpe8Xt22WhKA1wtiinHFn3ESHzn7a3zdLbG
fgDQSjpw73AlG5dNv9n429bBb9BTUtLSoahZmVl0lek9l2CpswZnEBeuNz/qzlDd
RLWqGrE2prBA4+dqAov0mfn7XtLOIZWf2JpnHQIDAQABAoIBAAgo+x55Fy8Y4jkt
y0IFcpEzuuoiMUe5OqAMyxjohlm4w+dr8QEPEhNk/olechEy4f+bYtjwy4NUgrbr
MkjE847lD+cS4CEN6hJXaWpThVAeJge+XAMUZr8Fg1l2sas9UcA2vTb7Ow0z6bqh
xWYgMX6+6Rq2xm0QulxHHxEAWwB1Ygr9joC+JOWGSyXrYhjf8V9+RRp18XpUgfIK
MieFcecAAdZ57cfo43IMJoNROub/2KqYRQsc4DTmAWWHD7W4emtqGgKAF079Udsh
VLAMJHgFPQJj2aVuAQYWvYez63fSeGhKzogJnJs5ul7oclNrWlnsV0MdsEiKOFDB
qazw62kCgYEA4za6UR91c3zYDDCaLbTE9yaE+wghzKZ7mZvPVAaQqGe6zDgvqEG9
7buUBZgBaFbdMSYnlcsatnxl4f5TMNK41VRromDmiy1LSfqWT0omg2ep9h52g1nr
QNlQbbjrqECjEFShoK0VB2WvBa5Ri+oF7oLqhFA9z6vRvvrdT78zFrUCgYEAvCli
bTjwTSS08v6jF/5R9IJdGlp3sDPWMp4KWzlLTf+vYg3yFMZhEXX3Y/SszmAYE1rG
nsVVE8QuHJ6dThQ2BIJ+O5IshltpcsEq64SwYfZ4eGaNIEQU+yj+dBlHjN5+ncbp
v+mUEqlPXowZxtWSb7RrCsNLI2MFJdtvRQnoJ8kCgYEArM9yE8MefHDGjTbl/L9R
UzybxaXgtxskRKdpn9nCaiNCwpI1RP6Dau3Q3hRHdckjQH9pehdYwNSKVMEvGqIa
bD5iAsU6cz5G1gReD/4wnp7YeNWgg7R/JfpinqEXswc+Pmxv5ZnetZqT7Hkxkn2y
dz5hCbNR38Ipq9x3OHEOdUUCgYAtG4K0CmVZKQaUBkVU+CvvgN0O90cgH50m70ou
SlLqNPR3fj5dip00kWIoPTy8EL9UzHs3DrlxjqM7Sy8My72TYTEf2NABuaJS10oR
wfKC2ZJR0svcQ1YAS/iMHo9PjvstmcTps/ZCbwJO+SkoyIRdcRQENYMqzY8rXyqS
k2hrOQKBgBZw8oh2IBCE8IQ+t0oouqKRe0w+TZ3gVA9j2GtTy6mWqIObRrQevMNz
I1UPYB77c9Z8wxY/nNjWGIKMlNw/z6ttA+10N+K2sYZGpZBpTIbpmU1r47r3hxBu
DhiP48LzFsOuZymPg4rdRameUYCDWJvnYomd1hOXGrhD2EnfoEd8
-----END RSA PRIVATE KEY-----
";

    const ISSUER: &str = "https://idp.example";

    fn jwk(pem: &str, alg: Algorithm, kid: &str, name_alg: bool) -> Value {
        let key = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
            _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
        }
        .expect("test key");
        let mut jwk = Jwk::from_encoding_key(&key, alg).expect("jwk");
        jwk.common.key_id = Some(kid.to_string());
        if !name_alg {
            jwk.common.key_algorithm = None;
        }
        serde_json::to_value(jwk).expect("json")
    }

    /// The JWK set the tests trust: the EC key as `ec-1` (for ES256), the RSA key as
    /// `rsa-1` (any RSA algorithm), and a symmetric key that must never be used.
    fn jwk_set(extra: &[Value]) -> String {
        let mut keys = vec![
            jwk(EC_KEY, Algorithm::ES256, "ec-1", true),
            jwk(RSA_KEY, Algorithm::RS256, "rsa-1", false),
            json!({"kty": "oct", "kid": "hmac-1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}),
        ];
        keys.extend_from_slice(extra);
        json!({ "keys": keys }).to_string()
    }

    struct Fixture {
        dir: tempfile::TempDir,
        sec: SecurityConfig,
    }

    impl Fixture {
        fn new(extra: &[(&str, &str)]) -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("jwks.json");
            std::fs::write(&path, jwk_set(&[])).expect("write");
            let url = format!("file://{}", path.display());
            let mut pairs = vec![
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                ("sasl.oauthbearer.jwks.endpoint.url", url.as_str()),
                (
                    "sasl.oauthbearer.expected.audience",
                    "kafka-broker, other-audience",
                ),
                ("sasl.oauthbearer.expected.issuer", ISSUER),
            ];
            pairs.extend_from_slice(extra);
            let sec = SecurityConfig::from_pairs(pairs).expect("keys");
            Fixture { dir, sec }
        }

        fn path(&self) -> PathBuf {
            self.dir.path().join("jwks.json")
        }

        fn validator(&self) -> SignedValidator {
            SignedValidator::from_config(&self.sec, "SASL").expect("validator")
        }
    }

    fn now() -> SystemTime {
        SystemTime::now()
    }

    fn secs(t: SystemTime) -> i64 {
        t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs() as i64
    }

    fn claims(now: SystemTime) -> Value {
        let now = secs(now);
        json!({
            "sub": "alice", "iss": ISSUER, "aud": "kafka-broker", "scope": "kafka",
            "iat": now, "exp": now + 3600,
        })
    }

    fn sign(pem: &str, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
        let key = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
            _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
        }
        .expect("test key");
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, claims, &key).expect("signed")
    }

    fn es256(claims: &Value) -> String {
        sign(EC_KEY, Algorithm::ES256, Some("ec-1"), claims)
    }

    fn with(mut claims: Value, key: &str, value: Value) -> Value {
        claims[key] = value;
        claims
    }

    fn without(mut claims: Value, key: &str) -> Value {
        claims.as_object_mut().expect("object").remove(key);
        claims
    }

    fn refused(v: &SignedValidator, token: &str, now: SystemTime) -> TokenError {
        let r = v.validate(token, now).expect_err("refused");
        // No error quotes the token, nor its signature.
        let message = r.error.to_string();
        assert!(token.len() < 8 || !message.contains(token), "{message}");
        if let Some(sig) = token.rsplit('.').next().filter(|s| s.len() > 8) {
            assert!(!message.contains(sig), "{message}");
        }
        r.error
    }

    #[test]
    fn a_valid_token_is_accepted_with_each_served_algorithm() {
        let f = Fixture::new(&[]);
        let v = f.validator();
        let now = now();
        let c = claims(now);
        for token in [
            es256(&c),
            sign(RSA_KEY, Algorithm::RS256, Some("rsa-1"), &c),
            sign(RSA_KEY, Algorithm::PS384, Some("rsa-1"), &c),
            // No kid: the set's only key for ES256.
            sign(EC_KEY, Algorithm::ES256, None, &c),
            // An audience list naming one expected audience; a scope list.
            es256(&with(
                c.clone(),
                "aud",
                json!(["elsewhere", "other-audience"]),
            )),
            es256(&with(c.clone(), "scope", json!(["read", "write"]))),
            // Fractional dates, and exp within the clock skew.
            es256(&with(c.clone(), "iat", json!(secs(now) as f64 + 0.5))),
            es256(&with(c.clone(), "exp", json!(secs(now) - 10))),
        ] {
            let t = v.validate(&token, now).expect("accepted");
            assert_eq!(t.subject, "alice");
        }
        let t = v.validate(&es256(&c), now).expect("accepted");
        assert_eq!(secs(t.expires), secs(now) + 3600);
        // A token that never expires, as far as times go: bounded, no overflow.
        for never in [json!(u64::MAX), json!(1e300), json!(i64::MAX)] {
            let t = v
                .validate(&es256(&with(c.clone(), "exp", never)), now)
                .expect("accepted");
            assert_eq!(secs(t.expires), LATEST_DATE_S);
        }
        // The subject claim may be another one, and is trimmed.
        let f = Fixture::new(&[("sasl.oauthbearer.sub.claim.name", "client_id")]);
        let t = f
            .validator()
            .validate(&es256(&with(c, "client_id", json!(" svc-1 "))), now)
            .expect("accepted");
        assert_eq!(t.subject, "svc-1");
    }

    #[test]
    fn an_expired_token_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let c = with(claims(now), "exp", json!(secs(now) - 31));
        assert!(matches!(
            refused(&v, &es256(&c), now),
            TokenError::Expired { .. }
        ));
        // exp is required, and must be a number: a string is not taken for "absent".
        let e = refused(&v, &es256(&without(claims(now), "exp")), now);
        assert_eq!(e, TokenError::Missing("exp".into()));
        let e = refused(
            &v,
            &es256(&with(claims(now), "exp", json!("9999999999"))),
            now,
        );
        assert_eq!(e, TokenError::Claim("exp".into(), "not a number"));
        // With no clock skew allowed, a second past exp is too late.
        let v = Fixture::new(&[("sasl.oauthbearer.clock.skew.seconds", "0")]).validator();
        let c = with(claims(now), "exp", json!(secs(now)));
        assert!(matches!(
            refused(&v, &es256(&c), now),
            TokenError::Expired { .. }
        ));
    }

    #[test]
    fn a_token_not_yet_valid_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let c = with(claims(now), "nbf", json!(secs(now) + 120));
        assert!(matches!(
            refused(&v, &es256(&c), now),
            TokenError::NotYetValid { .. }
        ));
        let c = with(claims(now), "nbf", json!(secs(now) + 20));
        assert!(v.validate(&es256(&c), now).is_ok(), "within the clock skew");
        let c = with(claims(now), "nbf", json!("later"));
        assert_eq!(
            refused(&v, &es256(&c), now),
            TokenError::Claim("nbf".into(), "not a number")
        );
        let c = with(claims(now), "iat", json!(secs(now) + 120));
        assert!(matches!(
            refused(&v, &es256(&c), now),
            TokenError::IssuedInFuture { .. }
        ));
        // iat is required, as Kafka's validator requires it.
        let e = refused(&v, &es256(&without(claims(now), "iat")), now);
        assert_eq!(e, TokenError::Missing("iat".into()));
    }

    #[test]
    fn a_wrong_issuer_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let e = refused(
            &v,
            &es256(&with(claims(now), "iss", json!("https://evil"))),
            now,
        );
        assert_eq!(e, TokenError::Issuer("\"https://evil\"".into()));
        let e = refused(&v, &es256(&without(claims(now), "iss")), now);
        assert_eq!(e, TokenError::Missing("iss".into()));
        // Without an expected issuer, any does.
        let f = Fixture::new(&[]);
        let sec = SecurityConfig::from_pairs([(
            "sasl.oauthbearer.jwks.endpoint.url",
            format!("file:{}", f.path().display()).as_str(),
        )])
        .expect("keys");
        let v = SignedValidator::from_config(&sec, "SASL").expect("validator");
        assert!(v
            .validate(&es256(&without(claims(now), "iss")), now)
            .is_ok());
    }

    #[test]
    fn a_wrong_audience_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        for aud in [json!("someone-else"), json!(["a", "b"]), json!([])] {
            let e = refused(&v, &es256(&with(claims(now), "aud", aud)), now);
            assert_eq!(e, TokenError::Audience);
        }
        let e = refused(&v, &es256(&without(claims(now), "aud")), now);
        assert_eq!(e, TokenError::Missing("aud".into()));
        let e = refused(
            &v,
            &es256(&with(claims(now), "aud", json!(["kafka-broker", 7]))),
            now,
        );
        assert!(matches!(e, TokenError::Claim(..)), "{e}");
    }

    #[test]
    fn a_forged_signature_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let c = claims(now);
        // Signed by a key not in the set, under the trusted key's kid.
        let forged = sign(OTHER_EC_KEY, Algorithm::ES256, Some("ec-1"), &c);
        assert_eq!(refused(&v, &forged, now), TokenError::Signature);
        // A genuine token whose claims were changed after signing.
        let genuine = es256(&c);
        let parts: Vec<&str> = genuine.split('.').collect();
        let evil = B64URL.encode(with(c.clone(), "sub", json!("admin")).to_string());
        let tampered = format!("{}.{}.{}", parts[0], evil, parts[2]);
        assert_eq!(refused(&v, &tampered, now), TokenError::Signature);
        // An RSA signature presented as from the EC key.
        let rsa = sign(RSA_KEY, Algorithm::RS256, Some("ec-1"), &c);
        assert!(matches!(
            refused(&v, &rsa, now),
            TokenError::KeyAlgorithm(..)
        ));
    }

    #[test]
    fn an_unknown_kid_is_refused_and_rereads_the_set_at_most_once_a_second() {
        let f = Fixture::new(&[]);
        let v = f.validator();
        let now = now();
        let c = claims(now);
        let token = sign(OTHER_EC_KEY, Algorithm::ES256, Some("ec-2"), &c);
        // The identity provider adds the key: the first token naming it re-reads the set.
        std::fs::write(
            f.path(),
            jwk_set(&[jwk(OTHER_EC_KEY, Algorithm::ES256, "ec-2", true)]),
        )
        .expect("write");
        assert!(v.validate(&token, now).is_ok(), "found after a re-read");
        assert_eq!(v.jwks.lock().rereads, 1);
        // Another unknown kid within the second: refused without reading the file.
        let unknown = sign(OTHER_EC_KEY, Algorithm::ES256, Some("ec-3"), &c);
        assert_eq!(
            refused(&v, &unknown, now),
            TokenError::UnknownKey(Some("\"ec-3\"".into()))
        );
        assert_eq!(
            refused(&v, &unknown, now),
            TokenError::UnknownKey(Some("\"ec-3\"".into()))
        );
        assert_eq!(v.jwks.lock().rereads, 1, "no re-read per unknown kid");
    }

    #[test]
    fn a_changed_file_is_reread_and_a_broken_one_keeps_the_keys() {
        let f = Fixture::new(&[]);
        let v = f.validator();
        let now = now();
        let token = es256(&claims(now));
        std::fs::write(f.path(), "not json").expect("write");
        v.jwks.lock().checked = Instant::now() - CHECK_INTERVAL;
        assert!(v.validate(&token, now).is_ok(), "the previous keys stay");
        assert_eq!(v.jwks.lock().rereads, 1);
        // Rotated: the old key is gone.
        std::fs::write(
            f.path(),
            json!({"keys": [jwk(OTHER_EC_KEY, Algorithm::ES256, "ec-2", true)]}).to_string(),
        )
        .expect("write");
        v.jwks.lock().checked = Instant::now() - CHECK_INTERVAL;
        v.jwks.lock().forced = Some(Instant::now());
        assert_eq!(
            refused(&v, &token, now),
            TokenError::UnknownKey(Some("\"ec-1\"".into()))
        );
        // And every refresh.ms even if the file's stamp did not change.
        let f = Fixture::new(&[("sasl.oauthbearer.jwks.endpoint.refresh.ms", "1")]);
        let v = f.validator();
        v.jwks.lock().checked = Instant::now() - CHECK_INTERVAL;
        std::thread::sleep(Duration::from_millis(2));
        assert!(v.validate(&token, now).is_ok());
        assert_eq!(v.jwks.lock().rereads, 1);
    }

    #[test]
    fn alg_none_and_hmac_are_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let payload = B64URL.encode(claims(now).to_string());
        for header in [
            json!({"alg": "none"}),
            json!({"alg": "none", "kid": "ec-1"}),
            json!({"alg": "HS256", "kid": "hmac-1"}),
            json!({"alg": "HS256", "kid": "ec-1"}),
        ] {
            let h = B64URL.encode(header.to_string());
            for sig in ["", "c2ln"] {
                let e = refused(&v, &format!("{h}.{payload}.{sig}"), now);
                assert!(matches!(e, TokenError::Algorithm(_)), "{header}: {e}");
            }
        }
        // A real HMAC token with the set's own oct key.
        let key = EncodingKey::from_secret(b"secret-secret-secret-secret").expect("key");
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("hmac-1".into());
        let token = jsonwebtoken::encode(&header, &claims(now), &key).expect("signed");
        assert!(matches!(refused(&v, &token, now), TokenError::Algorithm(_)));
        // The oct key is not loaded at all.
        assert!(v
            .jwks
            .lock()
            .keys
            .keys
            .iter()
            .all(|k| k.kid.as_deref() != Some("hmac-1")));
    }

    #[test]
    fn a_missing_subject_is_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let e = refused(&v, &es256(&without(claims(now), "sub")), now);
        assert_eq!(e, TokenError::Missing("sub".into()));
        let e = refused(&v, &es256(&with(claims(now), "sub", json!("  "))), now);
        assert_eq!(e, TokenError::Missing("sub".into()));
        let e = refused(&v, &es256(&with(claims(now), "sub", json!(42))), now);
        assert_eq!(e, TokenError::Claim("sub".into(), "not a string"));
        let e = refused(&v, &es256(&with(claims(now), "scope", json!(" "))), now);
        assert!(matches!(e, TokenError::Claim(..)), "{e}");
        // A refusal of a verified token says who it named; a forged one does not.
        let r = v
            .validate(&es256(&with(claims(now), "aud", json!("x"))), now)
            .expect_err("refused");
        assert_eq!(r.subject.as_deref(), Some("alice"));
        let forged = sign(OTHER_EC_KEY, Algorithm::ES256, Some("ec-1"), &claims(now));
        assert_eq!(v.validate(&forged, now).expect_err("refused").subject, None);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let v = Fixture::new(&[]).validator();
        let now = now();
        let good = es256(&claims(now));
        let parts: Vec<&str> = good.split('.').collect();
        for token in [
            "",
            "abc",
            "a.b",
            "a.b.c.d",
            &format!("{}.{}", parts[0], parts[1]),
            &format!("!!.{}.{}", parts[1], parts[2]),
            &format!("{}.%%.{}", parts[0], parts[2]),
            &format!("{}.{}.{}", B64URL.encode("[1]"), parts[1], parts[2]),
            &format!("{}.{}.{}", parts[0], B64URL.encode("[1]"), parts[2]),
        ] {
            let e = refused(&v, token, now);
            assert!(
                matches!(e, TokenError::Malformed(_) | TokenError::Signature),
                "{token}: {e}"
            );
        }
    }

    #[test]
    fn the_client_first_message_is_parsed_as_rfc_7628_has_it() {
        let m = parse_client_first(b"n,,\x01auth=Bearer a.b-c_d\x01\x01").expect("parsed");
        assert_eq!((m.authzid, m.token), (None, "a.b-c_d"));
        let m = parse_client_first(
            b"n,a=al=2Cice=3D,\x01auth=bearer  t\x01traceId=x y\x01logicalCluster=lkc-1\x01\x01",
        )
        .expect("parsed");
        assert_eq!(m.authzid.as_deref(), Some("al,ice="));
        assert_eq!(m.token, "t");
        assert_eq!(
            m.extensions.into_iter().collect::<Vec<_>>(),
            [("logicalCluster", "lkc-1"), ("traceId", "x y")]
        );
        use MalformedMessage::*;
        for (message, why) in [
            (&b""[..], Gs2Header),
            (b"y,,\x01auth=Bearer t\x01\x01", Gs2Header),
            (b"n,\x01auth=Bearer t\x01\x01", Gs2Header),
            (b"n,,auth=Bearer t\x01\x01", Gs2Header),
            (b"n,b=x,\x01auth=Bearer t\x01\x01", Gs2Header),
            (b"n,a=x=41,\x01auth=Bearer t\x01\x01", Authzid),
            (b"n,,\x01auth=Bearer t\x01", Unterminated),
            (b"n,,\x01auth=Bearer t", Unterminated),
            (b"n,,\x01\x01", NoAuth),
            (b"n,,\x01k=v\x01\x01", NoAuth),
            (b"n,,\x01auth=Bearer\x01\x01", NoAuth),
            (b"n,,\x01auth=Basic dXNlcg\x01\x01", Scheme),
            (b"n,,\x01auth=Bearer t+t/t=\x01\x01", TokenChars),
            (b"n,,\x01auth=Bearer \x01\x01", TokenChars),
            (
                b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
                Duplicate("auth".into()),
            ),
            (b"n,,\x01auth=Bearer t\x01k1=v\x01\x01", Pair),
            (b"n,,\x01auth=Bearer t\x01k=\x01\x01", Pair),
            (b"n,,\x01auth=Bearer t\x01\x01\x01", Pair),
            (b"n,,\x01auth=Bearer t\xff\x01\x01", NotUtf8),
        ] {
            assert_eq!(parse_client_first(message), Err(why), "{message:?}");
        }
        // The token is not in its Debug.
        let m = parse_client_first(b"n,,\x01auth=Bearer secret-token\x01\x01").expect("parsed");
        assert!(!format!("{m:?}").contains("secret-token"));
    }

    #[test]
    fn the_jwks_url_is_checked_at_start_up() {
        let f = Fixture::new(&[]);
        let p = f.path();
        for (url, ok) in [
            (format!("file://{}", p.display()), true),
            (format!("file:{}", p.display()), true),
            (format!("FILE://localhost{}", p.display()), true),
            (
                format!("file://{}", p.display()).replace("jwks.json", "jwks%2Ejson"),
                true,
            ),
            ("file://idp.example/jwks.json".to_string(), false),
            ("file:jwks.json".to_string(), false),
            ("file:///no/such/jwks.json".to_string(), false),
        ] {
            let sec =
                SecurityConfig::from_pairs([("sasl.oauthbearer.jwks.endpoint.url", url.as_str())])
                    .expect("keys");
            assert_eq!(Validator::from_config(&sec, "SASL").is_ok(), ok, "{url}");
        }
        let refuse = |pairs: &[(&str, &str)], needle: &str| {
            let sec = SecurityConfig::from_pairs(pairs.iter().copied()).expect("keys");
            let e = format!(
                "{:#}",
                SaslListener::from_config(&sec, "SASL").expect_err("refused")
            );
            assert!(e.contains(needle), "{e}");
        };
        refuse(
            &[("sasl.enabled.mechanisms", "OAUTHBEARER")],
            "unsecured validator",
        );
        refuse(
            &[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                (
                    "sasl.oauthbearer.jwks.endpoint.url",
                    "https://user:pw@idp.example/keys",
                ),
            ],
            "only a file: URL is served",
        );
        let url = format!("file://{}", p.display());
        refuse(
            &[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                ("sasl.oauthbearer.jwks.endpoint.url", url.as_str()),
                ("sasl.oauthbearer.clock.skew.seconds", "soon"),
            ],
            "clock.skew.seconds must be a number",
        );
        std::fs::write(
            &p,
            json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string(),
        )
        .expect("write");
        refuse(
            &[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                ("sasl.oauthbearer.jwks.endpoint.url", url.as_str()),
            ],
            "no usable signature key",
        );
        // The https URL, which may hold credentials, is not echoed.
        let sec = SecurityConfig::from_pairs([
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "https://user:pw@idp.example/keys",
            ),
        ])
        .expect("keys");
        let e = format!(
            "{:#}",
            SaslListener::from_config(&sec, "SASL").expect_err("refused")
        );
        assert!(!e.contains("pw@"), "{e}");
        // Per listener, over the broker-wide key.
        let sec = SecurityConfig::from_pairs([
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "https://idp.example/keys",
            ),
            (
                "listener.name.sasl.sasl.oauthbearer.jwks.endpoint.url",
                url.as_str(),
            ),
        ])
        .expect("keys");
        assert!(SaslListener::from_config(&sec, "OTHER").is_err());
        assert!(format!(
            "{:#}",
            SaslListener::from_config(&sec, "SASL").expect_err("oct only")
        )
        .contains("no usable"));
    }

    fn authentication(f: &Fixture) -> Authentication {
        let a = Authentication::new(SaslListener::from_config(&f.sec, "SASL").expect("listener"));
        assert!(a.handshake(MECHANISM).is_ok());
        a
    }

    fn first(token: &str) -> Vec<u8> {
        format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
    }

    #[test]
    fn a_refused_token_is_answered_with_kafkas_error_then_fails() {
        let f = Fixture::new(&[]);
        let a = authentication(&f);
        let token = es256(&with(claims(now()), "aud", json!("elsewhere")));
        match a.authenticate(&first(&token), |_, _| None) {
            Step::Continue(challenge) => assert_eq!(challenge, INVALID_TOKEN.as_bytes()),
            _ => panic!("a challenge first"),
        }
        assert!(!a.is_authenticated() && !a.has_failed());
        match a.authenticate(b"\x01", |_, _| None) {
            Step::Failed(r) => {
                assert_eq!(r.to_client, INVALID_TOKEN);
                assert!(r.detail.contains("audience"), "{}", r.detail);
                assert!(!r.detail.contains(&token));
            }
            _ => panic!("then a failure"),
        }
        assert!(a.has_failed());
        assert_eq!(a.claimed_principal().as_deref(), Some("User:alice"));
        // A malformed message fails at once.
        let a = authentication(&f);
        match a.authenticate(b"n,,auth=Bearer x", |_, _| None) {
            Step::Failed(r) => assert!(r.to_client.contains("OAUTHBEARER"), "{}", r.to_client),
            _ => panic!("a malformed message fails"),
        }
        // An authorization id other than the subject fails.
        let a = authentication(&f);
        let token = es256(&claims(now()));
        let message = format!("n,a=bob,\x01auth=Bearer {token}\x01\x01");
        assert!(matches!(
            a.authenticate(message.as_bytes(), |_, _| None),
            Step::Failed(_)
        ));
    }

    #[test]
    fn the_session_lasts_until_the_token_expires_or_the_reauth_limit() {
        let now_s = secs(now());
        // No connections.max.reauth.ms: the token's remaining life (as Kafka's).
        let f = Fixture::new(&[]);
        let a = authentication(&f);
        let token = es256(&with(claims(now()), "exp", json!(now_s + 60)));
        assert!(matches!(
            a.authenticate(&first(&token), |_, _| None),
            Step::Done(_)
        ));
        assert!(a.is_authenticated());
        assert_eq!(a.principal(), Some("User:alice"));
        let life = a.session_lifetime().expect("bounded by exp");
        assert!(
            life <= Duration::from_secs(60) && life > Duration::from_secs(55),
            "{life:?}"
        );
        // A limit longer than the token: still the token.
        let f = Fixture::new(&[("connections.max.reauth.ms", "600000")]);
        let a = authentication(&f);
        assert!(matches!(
            a.authenticate(&first(&token), |_, _| None),
            Step::Done(_)
        ));
        let life = a.session_lifetime().expect("bounded");
        assert!(
            life <= Duration::from_secs(60) && life > Duration::from_secs(55),
            "{life:?}"
        );
        // A shorter limit: the limit.
        let f = Fixture::new(&[("connections.max.reauth.ms", "5000")]);
        let a = authentication(&f);
        assert!(matches!(
            a.authenticate(&first(&token), |_, _| None),
            Step::Done(_)
        ));
        assert_eq!(a.session_lifetime(), Some(Duration::from_secs(5)));
        // Re-authentication on the connection: a fresh token of the same subject renews
        // the session; another subject is refused.
        assert!(a.handshake(MECHANISM).is_ok());
        let later = es256(&with(claims(now()), "exp", json!(now_s + 2)));
        assert!(matches!(
            a.authenticate(&first(&later), |_, _| None),
            Step::Done(_)
        ));
        let life = a.session_lifetime().expect("bounded");
        assert!(life <= Duration::from_secs(2), "{life:?}");
        assert!(a.handshake(MECHANISM).is_ok());
        let bob = es256(&with(claims(now()), "sub", json!("bob")));
        match a.authenticate(&first(&bob), |_, _| None) {
            Step::Failed(r) => assert!(r.to_client.contains("Cannot change principals")),
            _ => panic!("another principal is refused"),
        }
        // A token that expired within the clock skew is accepted with no session left.
        let f = Fixture::new(&[]);
        let a = authentication(&f);
        let stale = es256(&with(claims(now()), "exp", json!(now_s - 5)));
        assert!(matches!(
            a.authenticate(&first(&stale), |_, _| None),
            Step::Done(_)
        ));
        assert_eq!(a.session_lifetime(), Some(Duration::ZERO));
        assert!(!a.is_authenticated(), "expired at once");
        // A token that never expires: a session as long as times go, no overflow.
        let a = authentication(&f);
        let never = es256(&with(claims(now()), "exp", json!(u64::MAX)));
        assert!(matches!(
            a.authenticate(&first(&never), |_, _| None),
            Step::Done(_)
        ));
        assert!(a.is_authenticated());
        assert!(a.session_lifetime() > Some(Duration::from_secs(1 << 39)));
    }
}
