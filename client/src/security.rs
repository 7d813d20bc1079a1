//! How a connection is secured, as a Kafka client configures it: TLS with rustls
//! (`ssl.truststore.*`, a client certificate for mutual TLS, hostname verification per
//! `ssl.endpoint.identification.algorithm`) and SASL (`sasl.mechanism` PLAIN,
//! SCRAM-SHA-256 or SCRAM-SHA-512 with a user name and password). The broker's replica
//! fetchers and the load generator connect with it.
//!
//! Invariants: a password is never printed (`Debug` shows the user and mechanism only)
//! and never appears in an error; a TLS config built here verifies the server's chain
//! against the given CAs only, and skips the name check only when asked to (Kafka's
//! empty `ssl.endpoint.identification.algorithm`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use std::sync::Arc;

/// What secures a connection; the default is plaintext without SASL.
#[derive(Clone, Default, Debug)]
pub struct ClientSecurity {
    pub tls: Option<TlsClient>,
    pub sasl: Option<SaslCredentials>,
}

impl ClientSecurity {
    pub fn is_plaintext(&self) -> bool {
        self.tls.is_none() && self.sasl.is_none()
    }
}

/// A TLS client's settings (rustls, ring provider).
#[derive(Clone)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient(..)")
    }
}

/// The SASL mechanisms this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAIN" => Some(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Some(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(SaslMechanism::ScramSha512),
            _ => None,
        }
    }
}

/// A SASL user's credentials.
#[derive(Clone)]
pub struct SaslCredentials {
    pub mechanism: SaslMechanism,
    pub username: String,
    password: String,
}

impl SaslCredentials {
    pub fn new(mechanism: SaslMechanism, username: String, password: String) -> SaslCredentials {
        SaslCredentials {
            mechanism,
            username,
            password,
        }
    }

    pub fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A TLS client config: the servers' CAs (PEM), optionally this client's certificate
/// chain and unencrypted key (one PEM holding both) for mutual TLS, and whether the
/// server's certificate must name the host connected to.
pub fn tls_client_config(
    trusted_pem: &[u8],
    identity_pem: Option<&[u8]>,
    verify_hostname: bool,
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(trusted_pem) {
        let cert = cert.map_err(|e| format!("the trusted certificates do not parse: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("a trusted certificate is refused: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no trusted certificate (PEM CERTIFICATE blocks) was given".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName(inner)))
    };
    let config = match identity_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("the client certificate does not parse: {e}"))?;
            if chain.is_empty() {
                return Err("the client keystore holds no certificate".into());
            }
            let key = PrivateKeyDer::from_pem_slice(pem)
                .map_err(|_| "the client keystore holds no unencrypted private key".to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key do not match: {e}"))?
        }
    };
    Ok(Arc::new(config))
}

/// The server's chain is verified as usual; only its name is not checked against the
/// host (Kafka's `ssl.endpoint.identification.algorithm=` empty).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
