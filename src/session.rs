//! What one connection knows about its client beyond single requests: who it is (its
//! principal, for ACLs and quotas) and where it connects from, and its SASL
//! authentication when it came in on a SASL listener. Handlers see it through
//! `Call::session`; the connection's reader consults it to hold every request but
//! ApiVersions, SaslHandshake and SaslAuthenticate until the client is authenticated.
//!
//! Invariant: the principal never changes once requests other than the SASL exchange
//! are served (they are held until it is set), so a decision made for it stays right
//! for the connection's life.

/// Kafka's principal for a client that has not authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One connection's session.
pub struct Session {
    /// `None` on a listener without SASL.
    pub auth: Option<crate::sasl::Authentication>,
    /// The client's address as ACL entries name hosts (`10.0.0.1`).
    pub host: String,
    /// The principal the transport gives: a TLS client certificate's, else ANONYMOUS.
    pub transport_principal: String,
    /// The connection's share session (KIP-932), ended with it.
    pub share: crate::share_session::ShareSessionSlot,
}

impl Session {
    pub fn new(
        auth: Option<crate::sasl::Authentication>,
        peer: std::net::SocketAddr,
        transport_principal: Option<String>,
    ) -> Session {
        Session {
            auth,
            host: peer.ip().to_string(),
            transport_principal: transport_principal.unwrap_or_else(|| ANONYMOUS.to_string()),
            share: Default::default(),
        }
    }

    /// Whether requests other than the authentication exchange may be served.
    pub fn may_serve(&self) -> bool {
        self.auth.as_ref().is_none_or(|a| a.is_authenticated())
    }

    /// Who the client is: the SASL user on a SASL listener (ANONYMOUS until it has
    /// authenticated), else the transport's principal.
    pub fn principal(&self) -> &str {
        match &self.auth {
            Some(a) => a.principal().unwrap_or(ANONYMOUS),
            None => &self.transport_principal,
        }
    }
}
