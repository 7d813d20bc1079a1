//! How this broker proves itself to the others and checks them, from Kafka's keys:
//!
//! - the controller port — the quorum's votes and log, registrations, heartbeats —
//!   secured as `controller.listener.names`' listener maps in
//!   `listener.security.protocol.map`, with that listener's `listener.name.<name>.*`
//!   settings: TLS (mutual with `ssl.client.auth=required`), SASL PLAIN
//!   (`sasl.mechanism.controller.protocol`, users from its `plain.sasl.jaas.config`), and
//!   with an authorizer the right to CLUSTER_ACTION (`corelog_controller::port_security`);
//! - the replica fetchers' side of the inter-broker listener: TLS towards its CAs with
//!   this broker's certificate, SASL with `sasl.mechanism.inter.broker.protocol` and the
//!   `username`/`password` of that mechanism's `sasl.jaas.config` on the listener.
//!
//! Invariants: every setting is Kafka's key with Kafka's meaning; a secured listener
//! whose credentials are missing or unusable stops the start with what to set (never a
//! silent fallback to plaintext); no password appears in an error.

use crate::listeners::SecurityProtocol;
use crate::sasl::SaslListener;
use crate::security_config::SecurityConfig;
use anyhow::{bail, Context};
use corelog_controller::acl::AuthorizerPolicy;
use corelog_controller::port_security::{PortSasl, PortSecurity, PortTls, Refusal};
use corelog_kafka_client::security::{
    tls_client_config, ClientSecurity, SaslCredentials, SaslMechanism, TlsClient,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Refusals on the controller port, counted off the shards (whose counters are
/// per-thread): `/metrics` reports them under `shard="controller"`.
pub static CONTROLLER_PORT_REFUSALS: PortRefusals = PortRefusals {
    failed_authentications: AtomicU64::new(0),
    denied: AtomicU64::new(0),
};

pub struct PortRefusals {
    failed_authentications: AtomicU64,
    denied: AtomicU64,
}

impl PortRefusals {
    pub fn failed_authentications(&self) -> u64 {
        self.failed_authentications.load(Ordering::Relaxed)
    }

    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }
}

/// The controller port's security: `listener` (upper case) is the controller listener,
/// `protocol` what it maps to.
pub fn controller_port(
    sec: &SecurityConfig,
    listener: &str,
    protocol: SecurityProtocol,
    authorizer: Option<AuthorizerPolicy>,
) -> anyhow::Result<PortSecurity> {
    let tls = if protocol.uses_tls() {
        let server = crate::tls_config::server_config(sec, listener)?;
        if sec
            .get(listener, "ssl.client.auth")
            .map(str::to_ascii_lowercase)
            .as_deref()
            != Some("required")
            && !protocol.uses_sasl()
        {
            tracing::warn!(
                listener,
                "the controller listener uses SSL without ssl.client.auth=required: any process that reaches the port can join the quorum"
            );
        }
        let mapping = server.principal_mapping.clone();
        Some(PortTls {
            server: server.rustls,
            client: client_tls(sec, listener)?.config,
            principal_of: Arc::new(move |cert| mapping.principal(cert.as_ref()).ok()),
        })
    } else {
        None
    };
    let sasl = if protocol.uses_sasl() {
        let mechanism = sec
            .get(listener, "sasl.mechanism.controller.protocol")
            .unwrap_or("PLAIN")
            .trim()
            .to_ascii_uppercase();
        if mechanism != "PLAIN" {
            bail!("sasl.mechanism.controller.protocol {mechanism} is not served: the controller listener takes PLAIN (SCRAM credentials live in the metadata log it carries)");
        }
        let server = SaslListener::from_config(sec, listener)?;
        if !server.mechanisms.iter().any(|m| m == "PLAIN") {
            bail!("controller listener {listener}: sasl.enabled.mechanisms must include PLAIN");
        }
        let (username, password) = own_credentials(sec, listener, "PLAIN")?;
        let failed_delay = server.failed_delay;
        Some(PortSasl::new(
            Arc::new(move |user, password| server.accepts_plain(user, password)),
            username,
            password,
            failed_delay,
        ))
    } else {
        None
    };
    Ok(PortSecurity {
        tls,
        sasl,
        // As Kafka: on a PLAINTEXT controller listener every peer is User:ANONYMOUS,
        // which then needs CLUSTER_ACTION (or to be a super user).
        authorizer,
        audit: Some(Arc::new(move |r: &Refusal<'_>| audit(r))),
    })
}

/// The controller port without `controller.listener.names`, where the rest of the
/// broker is secured (an authorizer, or a TLS or SASL listener). Left open, any process
/// that reaches it — any local user, loopback being no boundary between the users of
/// one host — could commit any metadata change (ACLs, topics, SCRAM users).
///
/// A quorum of this node alone (a single secured broker, as the quickstart of
/// docs/security.md starts one) needs no peer: the port takes SASL PLAIN with a secret drawn at
/// start and known to this process only, so it keeps its zero-configuration start and
/// nothing else gets in. A quorum with other members needs credentials they share:
/// refused, with what to set. `voters` is the quorum (node id to address).
pub fn unconfigured_controller_port(
    node_id: i32,
    voters: &std::collections::BTreeMap<i32, String>,
    secured_elsewhere: bool,
) -> anyhow::Result<PortSecurity> {
    if !secured_elsewhere {
        return Ok(PortSecurity::default());
    }
    if voters.len() != 1 || !voters.contains_key(&node_id) {
        bail!("the controller port needs the cluster's credentials: the broker's listeners or ACLs are secured and its controller quorum has other members, so set controller.listener.names (e.g. CONTROLLER), map it in listener.security.protocol.map (e.g. CONTROLLER:SASL_SSL) and give listener.name.controller.* its TLS and PLAIN settings (docs/security.md, \"A secured cluster\")");
    }
    let secret = local_secret()?;
    let expected = (LOCAL_CONTROLLER_USER.to_string(), secret.clone());
    tracing::info!(
        "the controller port takes only this broker process (no controller.listener.names; a secret drawn at start): set controller.listener.names for other brokers to join"
    );
    Ok(PortSecurity {
        tls: None,
        sasl: Some(PortSasl::new(
            Arc::new(move |user, password| {
                use subtle::ConstantTimeEq;
                user == expected.0 && bool::from(expected.1.as_bytes().ct_eq(password))
            }),
            LOCAL_CONTROLLER_USER.into(),
            secret,
            std::time::Duration::from_millis(100),
        )),
        // Only this process holds the secret: authenticating is the whole check.
        authorizer: None,
        audit: Some(Arc::new(move |r: &Refusal<'_>| audit(r))),
    })
}

/// The user this broker logs in to its own controller port as, when the port takes
/// only the broker itself.
const LOCAL_CONTROLLER_USER: &str = "corelog-local-controller";

/// 256 random bits from the operating system, as hex.
fn local_secret() -> anyhow::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| {
            anyhow::anyhow!(
                "no randomness from the operating system for the controller port's secret"
            )
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Logs and counts a refused controller-port connection, as the Kafka listeners do.
fn audit(r: &Refusal<'_>) {
    let peer = r
        .peer
        .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
    let principal = r.principal.unwrap_or("unknown");
    // Rate-limited as the Kafka listeners' audit is: an attack is seen, not a flood.
    static LOG: std::sync::Mutex<Option<crate::rate_limited_log::RateLimitedLog>> =
        std::sync::Mutex::new(None);
    let suppressed = {
        let mut log = LOG.lock().unwrap_or_else(|p| p.into_inner());
        log.get_or_insert_with(|| {
            crate::rate_limited_log::RateLimitedLog::new(std::time::Duration::from_secs(1))
        })
        .allow(std::time::Instant::now())
    };
    if r.authentication {
        CONTROLLER_PORT_REFUSALS
            .failed_authentications
            .fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = suppressed {
            tracing::warn!(%peer, listener = "CONTROLLER", principal, reason = r.reason, suppressed, "authentication failed");
        }
    } else {
        CONTROLLER_PORT_REFUSALS
            .denied
            .fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = suppressed {
            tracing::warn!(%peer, listener = "CONTROLLER", principal, reason = r.reason, suppressed, "operation denied");
        }
    }
}

/// How the replica fetchers speak to the inter-broker listener `listener`.
pub fn inter_broker_client(
    sec: &SecurityConfig,
    listener: &str,
    protocol: SecurityProtocol,
) -> anyhow::Result<ClientSecurity> {
    let tls = if protocol.uses_tls() {
        Some(client_tls(sec, listener)?)
    } else {
        None
    };
    let sasl = if protocol.uses_sasl() {
        let name = sec
            .get(listener, "sasl.mechanism.inter.broker.protocol")
            .with_context(|| format!("the inter-broker listener {listener} uses SASL: set sasl.mechanism.inter.broker.protocol (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"))?;
        let mechanism = SaslMechanism::from_name(name).with_context(|| {
            format!("sasl.mechanism.inter.broker.protocol {name} is not served (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        })?;
        // As Kafka: the mechanism brokers log in with is one their listener enables.
        let enabled = sec
            .get(listener, "sasl.enabled.mechanisms")
            .unwrap_or_default();
        if !enabled
            .split(',')
            .any(|m| m.trim().eq_ignore_ascii_case(mechanism.name()))
        {
            bail!(
                "sasl.mechanism.inter.broker.protocol {} must be one of listener {listener}'s sasl.enabled.mechanisms ({enabled})",
                mechanism.name()
            );
        }
        let (username, password) = own_credentials(sec, listener, mechanism.name())?;
        Some(SaslCredentials::new(mechanism, username, password))
    } else {
        None
    };
    Ok(ClientSecurity { tls, sasl })
}

/// The client side of TLS towards `listener`'s peers: its truststore as the CAs, its
/// keystore (when it has one) as this broker's certificate, and the peer's name checked
/// unless `ssl.endpoint.identification.algorithm` is empty.
fn client_tls(sec: &SecurityConfig, listener: &str) -> anyhow::Result<TlsClient> {
    let trusted = crate::tls_config::truststore_pem(sec, listener)?.with_context(|| format!("listener {listener} carries inter-broker or controller traffic over TLS: set ssl.truststore.location (the CAs that signed the other brokers' certificates)"))?;
    let identity = crate::tls_config::keystore_pem(sec, listener)?;
    let verify_hostname = match sec.get(listener, "ssl.endpoint.identification.algorithm") {
        None => true,
        Some(a) if a.trim().eq_ignore_ascii_case("https") => true,
        Some(a) if a.trim().is_empty() => false,
        Some(other) => bail!(
            "listener {listener}: ssl.endpoint.identification.algorithm {other} is https or empty"
        ),
    };
    let config = tls_client_config(&trusted, identity.as_deref(), verify_hostname)
        .map_err(|e| anyhow::anyhow!("listener {listener}: {e}"))?;
    Ok(TlsClient { config })
}

/// This broker's own user and password for `mechanism` on `listener`: the `username`
/// and `password` options of `listener.name.<name>.<mechanism>.sasl.jaas.config`, or of
/// `sasl.jaas.config`.
fn own_credentials(
    sec: &SecurityConfig,
    listener: &str,
    mechanism: &str,
) -> anyhow::Result<(String, String)> {
    let key = format!("{}.sasl.jaas.config", mechanism.to_ascii_lowercase());
    let jaas = sec
        .get(listener, &key)
        .or_else(|| sec.get(listener, "sasl.jaas.config"))
        .with_context(|| {
            format!(
                "listener {listener}: this broker logs in to others with {mechanism}: set listener.name.{}.{key} with username=\"…\" password=\"…\"",
                listener.to_ascii_lowercase()
            )
        })?;
    let options = crate::sasl::jaas::options(jaas)
        .map_err(|e| anyhow::anyhow!("listener {listener}: {e}"))?;
    match (options.get("username"), options.get("password")) {
        (Some(u), Some(p)) if !u.is_empty() => Ok((u.clone(), p.clone())),
        _ => bail!("listener {listener}: {key} needs username=\"…\" and password=\"…\" (this broker's own login)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(pairs: &[(&str, &str)]) -> SecurityConfig {
        SecurityConfig::from_pairs(pairs.iter().copied()).expect("valid keys")
    }

    #[test]
    fn a_plaintext_inter_broker_listener_needs_nothing() {
        let c = inter_broker_client(&sec(&[]), "PLAINTEXT", SecurityProtocol::Plaintext).unwrap();
        assert!(c.is_plaintext());
    }

    #[test]
    fn sasl_inter_broker_needs_a_mechanism_and_this_brokers_login() {
        let e = inter_broker_client(&sec(&[]), "INTERNAL", SecurityProtocol::SaslPlaintext)
            .unwrap_err();
        assert!(format!("{e:#}").contains("sasl.mechanism.inter.broker.protocol"));
        let e = inter_broker_client(
            &sec(&[
                ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
                (
                    "listener.name.internal.sasl.enabled.mechanisms",
                    "SCRAM-SHA-512",
                ),
            ]),
            "INTERNAL",
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("scram-sha-512.sasl.jaas.config"),
            "{e:#}"
        );
        let e = inter_broker_client(
            &sec(&[
                ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
                ("listener.name.internal.sasl.enabled.mechanisms", "PLAIN"),
            ]),
            "INTERNAL",
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("sasl.enabled.mechanisms"),
            "{e:#}"
        );
        let c = inter_broker_client(
            &sec(&[
                ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
                ("listener.name.internal.sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
                (
                    "listener.name.internal.scram-sha-512.sasl.jaas.config",
                    r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="s3cret";"#,
                ),
            ]),
            "INTERNAL",
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap();
        let sasl = c.sasl.expect("SASL");
        assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(sasl.username, "broker");
        assert!(!format!("{sasl:?}").contains("s3cret"));
    }

    #[test]
    fn tls_needs_the_cas_to_trust() {
        let e = inter_broker_client(&sec(&[]), "INTERNAL", SecurityProtocol::Ssl).unwrap_err();
        assert!(
            format!("{e:#}").contains("ssl.truststore.location"),
            "{e:#}"
        );
    }

    #[test]
    fn the_controller_port_takes_plain_only() {
        let e = controller_port(
            &sec(&[("sasl.mechanism.controller.protocol", "SCRAM-SHA-256")]),
            "CONTROLLER",
            SecurityProtocol::SaslPlaintext,
            None,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("PLAIN"), "{e:#}");
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="pw" user_broker="pw";"#;
        let port = controller_port(
            &sec(&[
                ("listener.name.controller.sasl.enabled.mechanisms", "PLAIN"),
                ("listener.name.controller.plain.sasl.jaas.config", jaas),
            ]),
            "CONTROLLER",
            SecurityProtocol::SaslPlaintext,
            None,
        )
        .unwrap();
        let sasl = port.sasl.expect("SASL");
        assert!((sasl.verify)("broker", b"pw"));
        assert!(!(sasl.verify)("broker", b"nope"));
        assert_eq!(sasl.username, "broker");
    }

    #[test]
    fn a_plaintext_controller_listener_is_authorized_as_anonymous() {
        let policy = AuthorizerPolicy {
            super_users: vec![],
            allow_everyone_if_no_acl_found: false,
        };
        let port = controller_port(
            &sec(&[]),
            "CONTROLLER",
            SecurityProtocol::Plaintext,
            Some(policy),
        )
        .unwrap();
        assert!(port.tls.is_none() && port.sasl.is_none() && port.authorizer.is_some());
    }

    #[test]
    fn an_unconfigured_controller_port_beside_secured_listeners_takes_only_this_process() {
        let alone = std::collections::BTreeMap::from([(1, "127.0.0.1:9093".to_string())]);
        let open = unconfigured_controller_port(1, &alone, false).unwrap();
        assert!(
            open.sasl.is_none() && open.tls.is_none(),
            "nothing secured: zero configuration"
        );

        let port = unconfigured_controller_port(1, &alone, true).unwrap();
        let sasl = port.sasl.as_ref().expect("a secret");
        let own = sasl.credentials();
        assert!((sasl.verify)(
            &own.username,
            own.password.expose().as_bytes()
        ));
        assert!(!(sasl.verify)(&own.username, b""));
        assert!(!(sasl.verify)("admin", own.password.expose().as_bytes()));
        let other = unconfigured_controller_port(1, &alone, true).unwrap();
        assert_ne!(
            other.sasl.unwrap().credentials().password.expose(),
            own.password.expose(),
            "a secret of each start"
        );

        let cluster = std::collections::BTreeMap::from([
            (1, "10.0.0.1:9093".to_string()),
            (2, "10.0.0.2:9093".to_string()),
        ]);
        let e = unconfigured_controller_port(1, &cluster, true).unwrap_err();
        assert!(format!("{e}").contains("controller.listener.names"), "{e}");
        assert!(unconfigured_controller_port(1, &cluster, false).is_ok());
        let elsewhere = std::collections::BTreeMap::from([(2, "10.0.0.2:9093".to_string())]);
        assert!(
            unconfigured_controller_port(1, &elsewhere, true).is_err(),
            "an observer"
        );
    }
}
