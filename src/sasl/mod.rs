//! SASL authentication on a listener (Kafka's SASL_PLAINTEXT and SASL_SSL): the
//! mechanisms a listener enables (`sasl.enabled.mechanisms`: PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512, OAUTHBEARER), and one connection's progress through SaslHandshake and
//! SaslAuthenticate (KIP-152) to an authenticated principal.
//!
//! Invariants: a connection on a SASL listener is authenticated only by a mechanism the
//! listener enables, chosen in its handshake, after that mechanism has verified the
//! client's credentials; a failed attempt leaves the connection failed for good (it is
//! closed after its answer). With `connections.max.reauth.ms` (KIP-368) a session lasts
//! that long: the client is told so, may authenticate again on the same connection with
//! the same mechanism and must come out as the same principal, and once the session has
//! expired nothing but the exchange is served (any other request closes the connection,
//! as Kafka closes an expired one). An OAUTHBEARER session also ends when its token
//! expires, with or without that setting (as Kafka's: the shorter of the two). PLAIN
//! users come from the listener's `plain.sasl.jaas.config` (Kafka's
//! `user_<name>="<password>"` options); SCRAM credentials from the metadata log
//! (AlterUserScramCredentials); OAUTHBEARER tokens are checked against a JWK set
//! (`oauthbearer`, KIP-768). Passwords, tokens and keys appear in no error, log line or
//! `Debug` output.

pub mod jaas;
pub mod oauthbearer;
pub mod scram;
pub mod token;
pub mod unsecured_jwt;

use crate::security_config::SecurityConfig;
use corelog_controller::scram::{ScramCredential, ScramMechanism};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Kafka's default `connection.failed.authentication.delay.ms`.
const FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: u64 = 100;

/// A SASL listener's settings.
#[derive(Clone)]
pub struct SaslListener {
    /// In the order configured.
    pub mechanisms: Vec<String>,
    plain_users: BTreeMap<String, String>,
    /// How long a failed authentication's answer is held back.
    pub failed_delay: Duration,
    /// Kafka's `connections.max.reauth.ms`: how long a session lasts (`None`: for the
    /// connection's life, no re-authentication).
    pub reauth: Option<Duration>,
    /// OAUTHBEARER's token validator, when the listener enables it (shared by its
    /// connections, with the JWK set it keeps).
    oauthbearer: Option<Arc<oauthbearer::Validator>>,
}

impl std::fmt::Debug for SaslListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslListener")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.len())
            .field("oauthbearer", &self.oauthbearer)
            .finish()
    }
}

/// The mechanisms served.
pub const MECHANISMS: &[&str] = &[
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    oauthbearer::MECHANISM,
];

impl SaslListener {
    pub fn from_config(sec: &SecurityConfig, listener: &str) -> anyhow::Result<SaslListener> {
        let enabled = sec
            .get(listener, "sasl.enabled.mechanisms")
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "listener {listener} uses SASL: set sasl.enabled.mechanisms (served: {})",
                    MECHANISMS.join(", ")
                )
            })?;
        let mut mechanisms = Vec::new();
        for m in enabled.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let m = m.to_ascii_uppercase();
            if !MECHANISMS.contains(&m.as_str()) {
                anyhow::bail!(
                    "listener {listener}: SASL mechanism {m} is not served (served: {})",
                    MECHANISMS.join(", ")
                );
            }
            mechanisms.push(m);
        }
        if mechanisms.is_empty() {
            anyhow::bail!("listener {listener}: sasl.enabled.mechanisms names no mechanism");
        }
        let plain_users = if mechanisms.iter().any(|m| m == "PLAIN") {
            let jaas = sec.get(listener, "plain.sasl.jaas.config").ok_or_else(|| {
                anyhow::anyhow!(
                    "listener {listener} enables PLAIN: set listener.name.{}.plain.sasl.jaas.config with its user_<name>=\"<password>\" options",
                    listener.to_ascii_lowercase()
                )
            })?;
            jaas::plain_users(jaas).map_err(|e| anyhow::anyhow!("listener {listener}: {e}"))?
        } else {
            BTreeMap::new()
        };
        let oauthbearer = if mechanisms.iter().any(|m| m == oauthbearer::MECHANISM) {
            Some(Arc::new(oauthbearer::Validator::from_config(
                sec, listener,
            )?))
        } else {
            None
        };
        let failed_delay = match sec.get(listener, "connection.failed.authentication.delay.ms") {
            None => FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
            Some(v) => v.parse().map_err(|_| {
                anyhow::anyhow!("connection.failed.authentication.delay.ms must be a number of ms")
            })?,
        };
        let reauth = match sec.get(listener, "connections.max.reauth.ms") {
            None => 0,
            Some(v) => v.trim().parse::<u64>().map_err(|_| {
                anyhow::anyhow!(
                    "connections.max.reauth.ms must be a number of ms (0: no re-authentication)"
                )
            })?,
        };
        Ok(SaslListener {
            mechanisms,
            plain_users,
            failed_delay: Duration::from_millis(failed_delay),
            reauth: (reauth > 0).then(|| Duration::from_millis(reauth)),
            oauthbearer,
        })
    }

    /// Whether PLAIN accepts `user` with `password` (compared in constant time).
    pub fn accepts_plain(&self, user: &str, password: &[u8]) -> bool {
        match self.plain_users.get(user) {
            Some(p) => bool::from(p.as_bytes().ct_eq(password)),
            None => false,
        }
    }
}

/// Where a connection stands.
enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    Plain,
    Scram(scram::ScramServer),
    OAuthBearer(oauthbearer::Exchange),
    Authenticated(String),
    Failed,
}

/// What a SaslAuthenticate leads to.
pub enum Step {
    /// Send these bytes; more are expected.
    Continue(Vec<u8>),
    /// Authenticated; send these bytes (possibly empty).
    Done(Vec<u8>),
    /// Refused; the connection is closed after the answer.
    Failed(Refusal),
}

/// A refused login: Kafka's message for the client, which says no more than Kafka's
/// does (not whether the user exists), and the detail for the audit log.
pub struct Refusal {
    pub to_client: String,
    pub detail: String,
}

/// One connection's authentication.
pub struct Authentication {
    listener: SaslListener,
    state: RefCell<State>,
    /// Set by a SaslHandshake v0: the tokens that follow are bare (a size and the
    /// token), not SaslAuthenticate requests (before KIP-152).
    bare_tokens: std::cell::Cell<bool>,
    /// The user the client claimed, once a token has named one (for the audit line of
    /// a refusal: who tried).
    claimed: RefCell<Option<String>>,
    /// `User:<name>`, set once when the exchange succeeds (what ACLs name; read on every
    /// request, so made once; a re-authentication must give the same).
    principal: std::cell::OnceCell<String>,
    /// The mechanism of the first handshake (a re-authentication must use it again).
    mechanism: RefCell<Option<String>>,
    /// When the session ends (`connections.max.reauth.ms` after authenticating, or
    /// sooner when an OAUTHBEARER token expires).
    expires: std::cell::Cell<Option<std::time::Instant>>,
    /// How long the last authenticated session lasts (what the client is told).
    lifetime: std::cell::Cell<Option<Duration>>,
}

impl Authentication {
    pub fn new(listener: SaslListener) -> Authentication {
        Authentication {
            listener,
            state: RefCell::new(State::Handshake),
            bare_tokens: std::cell::Cell::new(false),
            claimed: RefCell::new(None),
            principal: std::cell::OnceCell::new(),
            mechanism: RefCell::new(None),
            expires: std::cell::Cell::new(None),
            lifetime: std::cell::Cell::new(None),
        }
    }

    pub fn listener(&self) -> &SaslListener {
        &self.listener
    }

    /// The user, once authenticated.
    pub fn user(&self) -> Option<String> {
        match &*self.state.borrow() {
            State::Authenticated(u) => Some(u.clone()),
            _ => None,
        }
    }

    /// The authenticated principal (`User:<name>`), once authenticated.
    pub fn principal(&self) -> Option<&str> {
        self.principal.get().map(String::as_str)
    }

    /// The principal a client claimed (`User:<name>`), authenticated or not.
    pub fn claimed_principal(&self) -> Option<String> {
        self.claimed.borrow().as_ref().map(|u| format!("User:{u}"))
    }

    /// After a SaslHandshake v0, until authenticated: the next frame is a bare token.
    pub fn expects_bare_token(&self) -> bool {
        self.bare_tokens.get()
            && matches!(
                &*self.state.borrow(),
                State::Plain | State::Scram(_) | State::OAuthBearer(_)
            )
    }

    pub fn use_bare_tokens(&self) {
        self.bare_tokens.set(true);
    }

    /// Authenticated, and the session (if it has a lifetime) not yet expired.
    pub fn is_authenticated(&self) -> bool {
        matches!(&*self.state.borrow(), State::Authenticated(_))
            && self
                .expires
                .get()
                .is_none_or(|at| std::time::Instant::now() < at)
    }

    /// How long the session just authenticated lasts (SaslAuthenticate v1+ tells the
    /// client, which re-authenticates before it ends); `None`: for the connection's life.
    pub fn session_lifetime(&self) -> Option<Duration> {
        self.lifetime.get()
    }

    pub fn has_failed(&self) -> bool {
        matches!(&*self.state.borrow(), State::Failed)
    }

    /// SaslHandshake: `Err` when the mechanism is not enabled here, or a handshake
    /// comes out of turn (the connection fails either way).
    pub fn handshake(&self, mechanism: &str) -> Result<(), HandshakeRefusal> {
        let mut state = self.state.borrow_mut();
        // A re-authentication (KIP-368) starts from an authenticated session that has a
        // lifetime, expired or not, with the mechanism it first used.
        let reauthenticating =
            self.expires.get().is_some() && matches!(*state, State::Authenticated(_));
        if !matches!(*state, State::Handshake) && !reauthenticating {
            *state = State::Failed;
            return Err(HandshakeRefusal::OutOfTurn);
        }
        if !self.listener.mechanisms.iter().any(|m| m == mechanism)
            || (reauthenticating && self.mechanism.borrow().as_deref() != Some(mechanism))
        {
            *state = State::Failed;
            return Err(HandshakeRefusal::Unsupported);
        }
        *self.mechanism.borrow_mut() = Some(mechanism.to_string());
        *state = match (
            ScramMechanism::from_name(mechanism),
            &self.listener.oauthbearer,
        ) {
            (Some(m), _) => State::Scram(scram::ScramServer::new(m)),
            (None, Some(validator)) if mechanism == oauthbearer::MECHANISM => {
                State::OAuthBearer(oauthbearer::Exchange::new(validator.clone()))
            }
            _ => State::Plain,
        };
        Ok(())
    }

    /// SaslAuthenticate: the client's next token.
    pub fn authenticate(
        &self,
        token: &[u8],
        scram_credential: impl FnOnce(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Step {
        let mut state = self.state.borrow_mut();
        let step = match &mut *state {
            State::Plain => match plain(token) {
                Ok((user, password)) if self.listener.accepts_plain(&user, password) => {
                    *self.claimed.borrow_mut() = Some(user.clone());
                    match self.authenticated_as(&user, None) {
                        Ok(()) => {
                            *state = State::Authenticated(user);
                            return Step::Done(Vec::new());
                        }
                        Err(m) => Err((m.clone(), m)),
                    }
                }
                Ok((user, _)) => {
                    *self.claimed.borrow_mut() = Some(user);
                    let m = "Authentication failed: Invalid username or password".to_string();
                    Err((m.clone(), m))
                }
                Err(e) => Err((e.clone(), e)),
            },
            State::Scram(server) => {
                let mechanism = server.mechanism();
                let claimed = &self.claimed;
                let lookup = |u: &str| {
                    *claimed.borrow_mut() = Some(u.to_string());
                    scram_credential(u, mechanism)
                };
                match server.step(token, lookup) {
                    Ok(scram::Outcome::Continue(bytes)) => return Step::Continue(bytes),
                    Ok(scram::Outcome::Authenticated { user, last }) => {
                        match self.authenticated_as(&user, None) {
                            Ok(()) => {
                                *state = State::Authenticated(user);
                                return Step::Done(last);
                            }
                            Err(m) => Err((m.clone(), m)),
                        }
                    }
                    Err(e) => {
                        let m = format!(
                            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                            mechanism.name()
                        );
                        Err((m.clone(), format!("{m}: {e}")))
                    }
                }
            }
            State::OAuthBearer(exchange) => {
                match exchange.step(token, std::time::SystemTime::now()) {
                    Ok(oauthbearer::Outcome::Challenge { error, subject }) => {
                        if subject.is_some() {
                            *self.claimed.borrow_mut() = subject;
                        }
                        return Step::Continue(error);
                    }
                    Ok(oauthbearer::Outcome::Authenticated { user, remaining }) => {
                        *self.claimed.borrow_mut() = Some(user.clone());
                        match self.authenticated_as(&user, Some(remaining)) {
                            Ok(()) => {
                                *state = State::Authenticated(user);
                                return Step::Done(Vec::new());
                            }
                            Err(m) => Err((m.clone(), m)),
                        }
                    }
                    Err(f) => Err((f.to_client, f.detail)),
                }
            }
            State::Handshake | State::Authenticated(_) | State::Failed => {
                let m = "Unexpected SaslAuthenticate request".to_string();
                Err((m.clone(), m))
            }
        };
        *state = State::Failed;
        match step {
            Err((to_client, detail)) => Step::Failed(Refusal { to_client, detail }),
            Ok(()) => unreachable!("successes return above"),
        }
    }
}

impl Authentication {
    /// Records a successful exchange for `user`: the principal (the same one again on a
    /// re-authentication, or the exchange is refused, as Kafka refuses it) and, with a
    /// session lifetime, when the session ends: `connections.max.reauth.ms`, or the
    /// credential's remaining life (`credential_left`, an OAUTHBEARER token's) if
    /// shorter, as Kafka's SaslServerAuthenticator bounds it.
    fn authenticated_as(
        &self,
        user: &str,
        credential_left: Option<Duration>,
    ) -> Result<(), String> {
        let principal = format!("User:{user}");
        if let Some(before) = self.principal.get() {
            if *before != principal {
                return Err(format!(
                    "Cannot change principals during re-authentication from {before}: {principal}"
                ));
            }
        }
        let _ = self.principal.set(principal);
        let lifetime = match (self.listener.reauth, credential_left) {
            (Some(r), Some(c)) => Some(r.min(c)),
            (r, c) => r.or(c),
        };
        self.lifetime.set(lifetime);
        // A lifetime too long to represent ends never.
        self.expires
            .set(lifetime.and_then(|d| std::time::Instant::now().checked_add(d)));
        Ok(())
    }
}

/// Why a SaslHandshake is refused.
pub enum HandshakeRefusal {
    Unsupported,
    OutOfTurn,
}

/// PLAIN's message: `[authzid] NUL authcid NUL password`; an authzid must equal the
/// user (as Kafka's PlainSaslServer requires).
fn plain(token: &[u8]) -> Result<(String, &[u8]), String> {
    let mut parts = token.splitn(3, |b| *b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("Invalid SASL/PLAIN response: expected 3 tokens".into());
    };
    let user = std::str::from_utf8(user).map_err(|_| "Invalid SASL/PLAIN user name")?;
    if user.is_empty() {
        return Err("Authentication failed: username not specified".into());
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(
            "Authentication failed: Client requested an authorization id that is different from username"
                .into(),
        );
    }
    Ok((user.to_string(), password))
}

/// Logs (at most a line a second per shard, with how many were left out) and counts a
/// failed authentication — a refused SASL login or TLS handshake: from where, on which
/// listener, and why; never a credential.
pub fn audit_failure(
    listener: &str,
    peer: std::net::SocketAddr,
    principal: Option<&str>,
    why: &str,
) {
    corelog_metrics::record_limit(|c| c.failed_authentications += 1);
    thread_local! {
        static LOG: crate::rate_limited_log::RateLimitedLog =
            crate::rate_limited_log::RateLimitedLog::new(Duration::from_secs(1));
    }
    LOG.with(|log| {
        if let Some(suppressed) = log.allow(std::time::Instant::now()) {
            let principal = principal.unwrap_or("unknown");
            tracing::warn!(%peer, listener, principal, reason = why, suppressed, "authentication failed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> SaslListener {
        let sec = SecurityConfig::from_pairs([
            ("listener.name.sasl.sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
            (
                "listener.name.sasl.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";"#,
            ),
        ])
        .expect("keys");
        SaslListener::from_config(&sec, "SASL").expect("listener")
    }

    #[test]
    fn plain_accepts_the_configured_password_only() {
        for (token, ok) in [
            (&b"\0alice\0secret"[..], true),
            (b"alice\0alice\0secret", true),
            (b"\0alice\0wrong", false),
            (b"bob\0alice\0secret", false),
            (b"\0nobody\0secret", false),
            (b"garbage", false),
        ] {
            let a = Authentication::new(listener());
            assert!(a.handshake("PLAIN").is_ok());
            let step = a.authenticate(token, |_, _| None);
            assert_eq!(matches!(step, Step::Done(_)), ok);
            assert_eq!(a.is_authenticated(), ok);
            assert_eq!(a.has_failed(), !ok);
            if let Step::Failed(r) = step {
                for m in [r.to_client, r.detail] {
                    assert!(!m.contains("secret") && !m.contains("wrong"), "{m}");
                }
            }
        }
    }

    #[test]
    fn only_enabled_mechanisms_in_turn() {
        let a = Authentication::new(listener());
        assert!(matches!(
            a.handshake("SCRAM-SHA-256"),
            Err(HandshakeRefusal::Unsupported)
        ));
        let a = Authentication::new(listener());
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Failed(_)
        ));
        let a = Authentication::new(listener());
        assert!(a.handshake("SCRAM-SHA-512").is_ok());
        assert!(matches!(
            a.handshake("PLAIN"),
            Err(HandshakeRefusal::OutOfTurn)
        ));
        let sec = SecurityConfig::from_pairs([("sasl.enabled.mechanisms", "GSSAPI")]).unwrap();
        assert!(
            SaslListener::from_config(&sec, "X").is_err(),
            "GSSAPI is not served"
        );
    }

    fn reauthenticating(ms: u64) -> SaslListener {
        SaslListener {
            reauth: Some(Duration::from_millis(ms)),
            plain_users: BTreeMap::from([
                ("alice".to_string(), "secret".to_string()),
                ("bob".to_string(), "other".to_string()),
            ]),
            ..listener()
        }
    }

    #[test]
    fn without_a_session_lifetime_there_is_no_second_handshake() {
        let a = Authentication::new(listener());
        assert!(a.handshake("PLAIN").is_ok());
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Done(_)
        ));
        assert_eq!(a.session_lifetime(), None);
        assert!(matches!(
            a.handshake("PLAIN"),
            Err(HandshakeRefusal::OutOfTurn)
        ));
    }

    #[test]
    fn a_session_expires_and_is_renewed_as_the_same_principal_only() {
        let a = Authentication::new(reauthenticating(60_000));
        assert!(a.handshake("PLAIN").is_ok());
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Done(_)
        ));
        assert_eq!(a.session_lifetime(), Some(Duration::from_secs(60)));
        // Again, as the same user: still authenticated, same principal.
        assert!(a.handshake("PLAIN").is_ok());
        assert!(!a.is_authenticated(), "mid-exchange nothing else is served");
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Done(_)
        ));
        assert!(a.is_authenticated());
        assert_eq!(a.principal(), Some("User:alice"));
        // As someone else: refused, the connection fails.
        assert!(a.handshake("PLAIN").is_ok());
        match a.authenticate(b"\0bob\0other", |_, _| None) {
            Step::Failed(r) => assert!(
                r.to_client.contains("Cannot change principals"),
                "{}",
                r.to_client
            ),
            _ => panic!("another principal must be refused"),
        }
        assert!(a.has_failed());
        // Another mechanism than the first is refused too.
        let a = Authentication::new(reauthenticating(60_000));
        assert!(a.handshake("PLAIN").is_ok());
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Done(_)
        ));
        assert!(matches!(
            a.handshake("SCRAM-SHA-512"),
            Err(HandshakeRefusal::Unsupported)
        ));
        // And a session ends when its lifetime is over.
        let a = Authentication::new(reauthenticating(1));
        assert!(a.handshake("PLAIN").is_ok());
        assert!(matches!(
            a.authenticate(b"\0alice\0secret", |_, _| None),
            Step::Done(_)
        ));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!a.is_authenticated(), "expired");
        assert!(
            a.handshake("PLAIN").is_ok(),
            "an expired session may re-authenticate"
        );
    }
}
