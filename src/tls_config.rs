//! A TLS listener's server settings from Kafka's `ssl.*` keys (`security_config.rs`),
//! as a rustls `ServerConfig`: the certificate chain and key in PEM form
//! (`ssl.keystore.type=PEM` with `ssl.keystore.certificate.chain` and
//! `ssl.keystore.key`, or one `ssl.keystore.location` file holding both), the trusted
//! CAs (`ssl.truststore.certificates` or `ssl.truststore.location`), `ssl.client.auth`
//! (none, requested, required), `ssl.enabled.protocols` (TLSv1.2, TLSv1.3) and
//! `ssl.principal.mapping.rules` (`tls_principal`). A keystore file is reloaded when it
//! changes (`tls_reload`).
//!
//! Invariants: a config is built only from a complete, consistent set of keys — a key
//! without its certificate, a chain without its key, client authentication without a
//! truststore, a keystore type other than PEM or an encrypted key is refused with what
//! to set instead; no key material appears in an error. The crypto is rustls' with the
//! ring provider; secret extraction is on so that a session can be handed to the
//! kernel (kTLS).

use crate::security_config::SecurityConfig;
use anyhow::{bail, Context};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// A listener's TLS server settings; its `Debug` shows nothing of the key.
#[derive(Clone)]
pub struct TlsServerConfig {
    pub rustls: Arc<ServerConfig>,
    /// How a client certificate's subject becomes a principal
    /// (`ssl.principal.mapping.rules`).
    pub principal_mapping: Arc<crate::tls_principal::PrincipalMapping>,
}

impl std::fmt::Debug for TlsServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsServerConfig(..)")
    }
}

/// The server settings of `listener` (a TLS listener).
pub fn server_config(sec: &SecurityConfig, listener: &str) -> anyhow::Result<TlsServerConfig> {
    let get = |key: &str| sec.get(listener, key).filter(|v| !v.trim().is_empty());
    let context = |what: &str| format!("listener {listener}: {what}");
    if let Some(t) = get("ssl.keystore.type") {
        if !t.eq_ignore_ascii_case("PEM") {
            bail!("listener {listener}: ssl.keystore.type {t} is not served; use PEM (ssl.keystore.type=PEM)");
        }
    }
    // Kafka refuses both with a PEM store: only a key password exists there.
    if get("ssl.keystore.password").is_some() {
        bail!("listener {listener}: ssl.keystore.password cannot be specified with PEM format, only key password may be specified (and encrypted keys are not served: leave both unset)");
    }
    if get("ssl.truststore.password").is_some() {
        bail!("listener {listener}: ssl.truststore.password cannot be specified for PEM format; leave it unset");
    }
    if get("ssl.key.password").is_some() {
        bail!("listener {listener}: encrypted private keys are not served; give an unencrypted PKCS#8 key (openssl pkcs8 -topk8 -nocrypt) and leave ssl.key.password unset");
    }
    let Some(keystore) = keystore_pem(sec, listener)? else {
        bail!("listener {listener} uses TLS: set ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key");
    };
    let chain = certificates(&keystore).with_context(|| context("the keystore's certificates"))?;
    if chain.is_empty() {
        bail!("listener {listener}: the keystore holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(&keystore).map_err(|e| {
        anyhow::anyhow!("listener {listener}: the keystore holds no usable private key ({e})")
    })?;

    let client_auth = match get("ssl.client.auth")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            bail!("listener {listener}: ssl.client.auth {other} is none, requested or required")
        }
    };
    let trusted = truststore_pem(sec, listener)?;
    if let Some(t) = get("ssl.truststore.type") {
        if !t.eq_ignore_ascii_case("PEM") {
            bail!("listener {listener}: ssl.truststore.type {t} is not served; use PEM");
        }
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocol_versions(get("ssl.enabled.protocols"))?)
        .with_context(|| context("TLS protocol versions"))?;
    let builder = match (client_auth, trusted) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => bail!("listener {listener}: ssl.client.auth={} needs the CAs to trust (ssl.truststore.location or ssl.truststore.certificates)", if client_auth == ClientAuth::Required { "required" } else { "requested" }),
        (auth, Some(pem)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(&pem).with_context(|| context("the truststore"))? {
                roots
                    .add(cert)
                    .with_context(|| context("a truststore certificate"))?;
            }
            if roots.is_empty() {
                bail!("listener {listener}: the truststore holds no certificate");
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .with_context(|| context("the client certificate verifier"))?,
            )
        }
    };
    // A keystore file is reloaded when it changes (`tls_reload`); an inline one is fixed.
    let mut config = match get("ssl.keystore.location") {
        Some(path) => {
            let keystore = crate::tls_reload::ReloadingKeystore::open(path.into(), listener)
                .with_context(|| context("the keystore"))?;
            builder.with_cert_resolver(Arc::new(keystore))
        }
        None => builder
            .with_single_cert(chain, key)
            .with_context(|| context("the certificate and key do not match or are unusable"))?,
    };
    config.enable_secret_extraction = true;
    let principal_mapping = match get("ssl.principal.mapping.rules") {
        None => crate::tls_principal::PrincipalMapping::default(),
        Some(rules) => crate::tls_principal::PrincipalMapping::parse(rules)
            .map_err(|e| anyhow::anyhow!("listener {listener}: {e}"))?,
    };
    Ok(TlsServerConfig {
        rustls: Arc::new(config),
        principal_mapping: Arc::new(principal_mapping),
    })
}

/// `listener`'s keystore as one PEM (the key, then the chain): the file
/// `ssl.keystore.location`, or `ssl.keystore.key` with `ssl.keystore.certificate.chain`
/// inline; `None` when it has none. The server's certificate and, towards other
/// brokers, this broker's client certificate (`inter_broker_security`).
pub fn keystore_pem(sec: &SecurityConfig, listener: &str) -> anyhow::Result<Option<Vec<u8>>> {
    let get = |key: &str| sec.get(listener, key).filter(|v| !v.trim().is_empty());
    match (
        get("ssl.keystore.certificate.chain"),
        get("ssl.keystore.key"),
        get("ssl.keystore.location"),
    ) {
        (Some(chain), Some(key), None) => {
            Ok(Some([key.as_bytes(), b"\n", chain.as_bytes()].concat()))
        }
        (None, None, Some(path)) => std::fs::read(path)
            .map(Some)
            .with_context(|| format!("listener {listener}: reading {path}")),
        (None, None, None) => Ok(None),
        _ => bail!("listener {listener}: set either ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key"),
    }
}

/// `listener`'s trusted CAs as PEM (`ssl.truststore.certificates` inline or the file
/// `ssl.truststore.location`); `None` when it has none.
pub fn truststore_pem(sec: &SecurityConfig, listener: &str) -> anyhow::Result<Option<Vec<u8>>> {
    let get = |key: &str| sec.get(listener, key).filter(|v| !v.trim().is_empty());
    match (
        get("ssl.truststore.certificates"),
        get("ssl.truststore.location"),
    ) {
        (Some(pem), None) => Ok(Some(pem.as_bytes().to_vec())),
        (None, Some(path)) => std::fs::read(path)
            .map(Some)
            .with_context(|| format!("listener {listener}: reading {path}")),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => bail!("listener {listener}: set ssl.truststore.certificates or ssl.truststore.location, not both"),
    }
}

fn certificates(pem: &[u8]) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("unreadable PEM certificate ({e})"))
}

/// Kafka's `ssl.enabled.protocols` (default: TLSv1.2 and TLSv1.3).
fn protocol_versions(
    enabled: Option<&str>,
) -> anyhow::Result<Vec<&'static SupportedProtocolVersion>> {
    let Some(list) = enabled else {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    };
    let mut out = Vec::new();
    for v in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        out.push(match v {
            "TLSv1.3" => &rustls::version::TLS13,
            "TLSv1.2" => &rustls::version::TLS12,
            other => bail!("ssl.enabled.protocols: {other} is not served (TLSv1.2, TLSv1.3)"),
        });
    }
    if out.is_empty() {
        bail!("ssl.enabled.protocols names no protocol");
    }
    Ok(out)
}
