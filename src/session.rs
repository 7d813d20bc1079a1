//! What one connection knows about its client beyond single requests: its SASL
//! authentication, when it came in on a SASL listener. Handlers see it through
//! `Call::session`; the connection's reader consults it to hold every request but
//! ApiVersions, SaslHandshake and SaslAuthenticate until the client is authenticated.

/// One connection's session.
pub struct Session {
    /// `None` on a listener without SASL.
    pub auth: Option<crate::sasl::Authentication>,
}

impl Session {
    /// Whether requests other than the authentication exchange may be served.
    pub fn may_serve(&self) -> bool {
        self.auth.as_ref().is_none_or(|a| a.is_authenticated())
    }
}
