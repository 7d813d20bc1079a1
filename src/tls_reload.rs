//! A TLS listener's certificate and key, reloaded from `ssl.keystore.location` when the
//! file changes, without a restart (Kafka reloads a keystore on a config update; here
//! the file's modification time is the signal, so renewing a certificate in place —
//! what cert-manager or an ACME client does — is enough).
//!
//! Invariants: every handshake is served a complete, usable certificate and key — a
//! file that cannot be read, parsed, or whose key does not match its certificate is
//! logged (once per change of the file) and the previous one stays in use; the file is
//! looked at no more than once per [`CHECK_INTERVAL`] whatever the rate of handshakes.
//! Connections already open keep the certificate they were served.

use anyhow::Context;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often the keystore file's modification time is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The certificate chain and key in one PEM keystore (Kafka's PEM keystore file).
pub fn certified_key(pem: &[u8]) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("unreadable PEM certificate ({e})"))?;
    if chain.is_empty() {
        anyhow::bail!("the keystore holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| anyhow::anyhow!("the keystore holds no usable private key ({e})"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .context("the keystore's private key is of a type TLS cannot sign with")?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .context("the keystore's private key does not match its certificate")?;
    Ok(certified)
}

struct Loaded {
    key: Arc<CertifiedKey>,
    /// The file's modification time when last read (whether or not it was usable).
    modified: Option<SystemTime>,
    checked: Instant,
}

/// Serves the keystore file's certificate, reloaded when the file changes.
pub struct ReloadingKeystore {
    path: PathBuf,
    listener: String,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ReloadingKeystore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReloadingKeystore({})", self.path.display())
    }
}

impl ReloadingKeystore {
    /// Reads the keystore now; an unusable one is an error (the broker does not start).
    pub fn open(path: PathBuf, listener: &str) -> anyhow::Result<ReloadingKeystore> {
        // Reloads read the same file whatever the working directory is by then.
        let path = crate::paths::absolute(path)?;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let pem = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let key = Arc::new(certified_key(&pem)?);
        Ok(ReloadingKeystore {
            path,
            listener: listener.to_string(),
            loaded: Mutex::new(Loaded {
                key,
                modified,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to serve now, after reloading the file if it changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.checked.elapsed() < CHECK_INTERVAL {
            return loaded.key.clone();
        }
        loaded.checked = Instant::now();
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if modified.is_none() || modified == loaded.modified {
            return loaded.key.clone();
        }
        loaded.modified = modified;
        let fresh = std::fs::read(&self.path)
            .map_err(anyhow::Error::from)
            .and_then(|pem| certified_key(&pem));
        match fresh {
            Ok(key) => {
                loaded.key = Arc::new(key);
                tracing::info!(listener = %self.listener, path = %self.path.display(), "TLS keystore reloaded");
            }
            Err(e) => {
                tracing::warn!(listener = %self.listener, path = %self.path.display(), error = %format!("{e:#}"), "TLS keystore changed but is unusable; the previous certificate stays in use");
            }
        }
        loaded.key.clone()
    }
}

impl ResolvesServerCert for ReloadingKeystore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
