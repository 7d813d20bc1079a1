//! How the controller port is secured (Kafka's controller listener, mapped to PLAINTEXT,
//! SSL, SASL_PLAINTEXT or SASL_SSL): TLS through rustls, mutual when the port requires
//! client certificates; SASL PLAIN as the first message on a connection; and, with an
//! authorizer, the right to CLUSTER_ACTION on the cluster. The quorum's votes and log,
//! broker registrations, heartbeats and forwarded proposals all travel on this port, so
//! a process without the cluster's credentials can do none of them.
//!
//! Invariants: on a secured port no request is served on a connection before it has
//! finished its TLS handshake (verified by rustls against the trusted CAs), passed SASL
//! when the port uses it, and been authorized; a refusal closes that connection only,
//! after the failed-authentication delay, and is reported through `audit` (logged and
//! counted by the broker). Passwords never appear in `Debug`, logs or errors.

use crate::acl::{AclOperation, Acls, AuthorizerPolicy, Requester, ResourceType};
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A client that has not finished its TLS handshake by then is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Kafka's name for the cluster resource.
pub const CLUSTER_RESOURCE: &str = "kafka-cluster";

/// The principal of a connection that proved nothing (Kafka's `User:ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The controller port's security; the default is plaintext, open to anyone.
#[derive(Clone, Default)]
pub struct PortSecurity {
    pub tls: Option<PortTls>,
    pub sasl: Option<PortSasl>,
    /// With an authorizer, a peer's principal needs CLUSTER_ACTION on the cluster.
    pub authorizer: Option<AuthorizerPolicy>,
    /// Told of every refused connection; the broker logs and counts it.
    pub audit: Option<Arc<dyn Fn(&Refusal<'_>) + Send + Sync>>,
}

impl std::fmt::Debug for PortSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| &s.username))
            .field("authorizer", &self.authorizer.is_some())
            .finish()
    }
}

/// TLS on the port: the server's side, the side this node uses towards its peers, and
/// how a client certificate names its principal (`ssl.principal.mapping.rules`).
#[derive(Clone)]
pub struct PortTls {
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
    pub principal_of: Arc<dyn Fn(&CertificateDer<'_>) -> Option<String> + Send + Sync>,
}

/// SASL PLAIN on the port (the mechanism Kafka's controller listeners take from a JAAS
/// file, since SCRAM credentials live in the very log this port carries).
#[derive(Clone)]
pub struct PortSasl {
    /// Whether `(user, password)` is one the port accepts.
    pub verify: Arc<dyn Fn(&str, &[u8]) -> bool + Send + Sync>,
    /// This node's own user and password towards its peers.
    pub username: String,
    password: Secret,
    /// Kafka's `connection.failed.authentication.delay.ms`.
    pub failed_delay: Duration,
}

impl PortSasl {
    pub fn new(
        verify: Arc<dyn Fn(&str, &[u8]) -> bool + Send + Sync>,
        username: String,
        password: String,
        failed_delay: Duration,
    ) -> PortSasl {
        PortSasl {
            verify,
            username,
            password: Secret(password),
            failed_delay,
        }
    }

    /// The first message this node sends on a new connection to a peer.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            mechanism: "PLAIN".into(),
            username: self.username.clone(),
            password: self.password.clone(),
        }
    }
}

/// A password on the wire; never printed.
#[derive(Clone, Serialize, Deserialize)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What a peer presents as its first request on a SASL port.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub mechanism: String,
    pub username: String,
    pub password: Secret,
}

/// Why a connection was refused, for the audit.
#[derive(Debug)]
pub struct Refusal<'a> {
    pub peer: Option<SocketAddr>,
    /// The principal, once one was established.
    pub principal: Option<&'a str>,
    /// Authentication failed (else: authorization was denied).
    pub authentication: bool,
    pub reason: &'a str,
}

/// The principal a SASL PLAIN login becomes.
pub fn sasl_principal(user: &str) -> String {
    format!("User:{user}")
}

/// Whether `principal` at `host` may use the port: without an authorizer, anyone who
/// authenticated; with one, a super user or a holder of CLUSTER_ACTION on the cluster.
pub fn may_use_port(
    policy: Option<&AuthorizerPolicy>,
    acls: &Acls,
    principal: &str,
    host: &str,
) -> bool {
    match policy {
        None => true,
        Some(policy) => acls.authorize(
            policy,
            Requester { principal, host },
            AclOperation::ClusterAction,
            ResourceType::Cluster,
            CLUSTER_RESOURCE,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_authorizer_anyone_authenticated_may_use_the_port() {
        assert!(may_use_port(None, &Acls::default(), "User:x", "127.0.0.1"));
    }

    #[test]
    fn with_one_only_super_users_and_cluster_action_holders() {
        let policy = AuthorizerPolicy {
            super_users: vec!["User:broker".into()],
            allow_everyone_if_no_acl_found: false,
        };
        let acls = Acls::default();
        assert!(may_use_port(Some(&policy), &acls, "User:broker", "h"));
        assert!(!may_use_port(Some(&policy), &acls, "User:mallory", "h"));
        assert!(!may_use_port(Some(&policy), &acls, ANONYMOUS, "h"));
    }

    #[test]
    fn a_password_is_never_printed() {
        let s = PortSasl::new(
            Arc::new(|_, _| true),
            "broker".into(),
            "hunter2".into(),
            Duration::ZERO,
        );
        let printed = format!(
            "{:?} {:?}",
            s.credentials(),
            PortSecurity {
                sasl: Some(s),
                ..Default::default()
            }
        );
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
