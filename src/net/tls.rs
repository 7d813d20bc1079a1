//! TLS on one connection: the rustls handshake, then the session either handed to the
//! kernel (`ktls.rs`: the socket seals and opens records, the connection reads and
//! writes as if it were plaintext) or kept in user space — a reader that yields the
//! client's plaintext and the writer's side (`FrameWriter` seals each response through
//! [`TlsSession::seal`]). In user space the reader and the writer are two tasks of the
//! connection's shard; they share the rustls session, borrowing it only between awaits.
//!
//! Invariants: no byte reaches the request parser before the handshake has finished
//! and been verified (client certificate included when required); a handshake that
//! fails or does not finish within [`HANDSHAKE_TIMEOUT`] closes only this connection,
//! after rustls' alert has been sent where one applies; the handshake reads the socket
//! one TLS record at a time, so nothing the client sends after it is read before the
//! session's path is chosen (the kernel must see every record from there on); in user
//! space ciphertext is read only as the reader needs plaintext, so a session never
//! buffers more than one socket read ahead.

use crate::net::ktls;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use rustls::pki_types::CertificateDer;
use rustls::{ServerConfig, ServerConnection};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A client that has not finished its handshake by then is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Ciphertext read from the socket at a time.
const READ_CHUNK: usize = 16 << 10;

/// A TLS record's header, and the largest body one may have (RFC 8446 §5.2: 2^14
/// bytes of plaintext and 256 of expansion; TLS 1.2 allows 2048 of expansion).
const RECORD_HEADER: usize = 5;
const RECORD_BODY_MAX: usize = (1 << 14) + 2048;

/// Plaintext handed to rustls at a time before its records are sent.
pub const SEAL_CHUNK: usize = 64 << 10;

/// Why a handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake: {}", explain(.0))]
    Tls(#[from] rustls::Error),
    #[error("TLS handshake: {0}")]
    Io(#[from] io::Error),
    #[error("TLS handshake not finished within {0:?}")]
    Timeout(Duration),
    #[error("client closed the connection during the TLS handshake")]
    Eof,
    #[error("TLS record of {0} bytes, more than a record may hold")]
    Oversized(usize),
    #[error("not TLS: the client's first bytes are no TLS record (a plaintext Kafka client on a TLS listener?)")]
    NotTls,
    #[error("handing the TLS session to the kernel: {0}")]
    Kernel(io::Error),
}

/// A session after its handshake: who the client is, and where its records are sealed.
pub struct Established {
    /// The client's certificate chain (leaf first), when it sent one.
    pub peer_certificates: Option<Vec<CertificateDer<'static>>>,
    /// The negotiated protocol and cipher suite, for the log.
    pub description: String,
    pub path: ktls::Path,
    /// The session in user space; `None` when the kernel has it.
    pub user: Option<Rc<TlsSession>>,
}

/// One connection's established TLS session.
pub struct TlsSession {
    conn: RefCell<ServerConnection>,
}

impl TlsSession {
    /// Encrypts `plain` into TLS records (appended to `out`). At most [`SEAL_CHUNK`]
    /// should be given at once so that the records are sent as they are made.
    pub fn seal(&self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        conn.writer().write_all(plain)?;
        while conn.wants_write() {
            conn.write_tls(out)?;
        }
        Ok(())
    }

    /// Queues the close_notify alert (the orderly end of the session).
    pub fn close(&self) {
        self.conn.borrow_mut().send_close_notify();
    }

    /// TLS records rustls has queued on its own (alerts, key-update answers), for the
    /// writer to send.
    pub fn pending(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        while conn.wants_write() {
            conn.write_tls(out)?;
        }
        Ok(())
    }
}

/// Runs the server side of the handshake on `stream`, within [`HANDSHAKE_TIMEOUT`],
/// then hands the session to the kernel when `offload` is on and the kernel takes its
/// version and cipher ([`ktls::choose`]), or keeps it in user space.
pub async fn accept<S: AsyncRead + AsyncWrite + AsRawFd + Unpin>(
    stream: &mut S,
    config: Arc<ServerConfig>,
    offload: bool,
) -> Result<Established, HandshakeError> {
    let handshake = async {
        let mut conn = ServerConnection::new(config)?;
        let mut record = vec![0u8; RECORD_HEADER + RECORD_BODY_MAX];
        let mut out = Vec::new();
        while conn.is_handshaking() {
            if conn.wants_read() {
                // A header that is no TLS record still goes to rustls, which refuses it
                // with an alert: the client hears why at once, not after the timeout.
                let len = match read_record(stream, &mut record).await {
                    Err(HandshakeError::NotTls) => RECORD_HEADER,
                    other => other?,
                };
                let mut rest = &record[..len];
                while !rest.is_empty() {
                    conn.read_tls(&mut rest)?;
                }
                if let Err(e) = conn.process_new_packets() {
                    // Tell the client why (rustls queued the alert), then give up.
                    out.clear();
                    while conn.wants_write() {
                        conn.write_tls(&mut out)?;
                    }
                    let _ = stream.write_all(&out).await;
                    close_after_alert(stream).await;
                    return Err(e.into());
                }
                if len == RECORD_HEADER && !valid_header(&record) {
                    return Err(HandshakeError::NotTls);
                }
            }
            out.clear();
            while conn.wants_write() {
                conn.write_tls(&mut out)?;
            }
            if !out.is_empty() {
                stream.write_all(&out).await?;
            }
        }
        Ok(conn)
    };
    let conn = futures_lite::future::or(handshake, async {
        glommio::timer::sleep(HANDSHAKE_TIMEOUT).await;
        Err(HandshakeError::Timeout(HANDSHAKE_TIMEOUT))
    })
    .await?;
    let peer_certificates = conn
        .peer_certificates()
        .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
    let description = format!(
        "{:?} {:?}",
        conn.protocol_version(),
        conn.negotiated_cipher_suite().map(|s| s.suite())
    );
    let mut path = ktls::choose(
        offload,
        ktls::support(),
        conn.protocol_version(),
        conn.negotiated_cipher_suite(),
    );
    // SAFETY: the descriptor is `stream`'s, which is borrowed for this whole call, so
    // it stays open while `socket` is used.
    let socket = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    if path == ktls::Path::Kernel {
        if let Err(e) = ktls::set_ulp(socket.as_fd()) {
            tracing::warn!(error = %e, "the kernel refused TCP_ULP tls; this session stays in user space");
            path = ktls::Path::User("the kernel refused TCP_ULP tls");
        }
    }
    if path == ktls::Path::Kernel {
        to_kernel(conn, socket)?;
        return Ok(Established {
            peer_certificates,
            description,
            path,
            user: None,
        });
    }
    let mut conn = conn;
    // The writer seals at most SEAL_CHUNK and sends it before sealing more, so rustls'
    // own bound on queued records would only turn a large part into a short write.
    conn.set_buffer_limit(None);
    Ok(Established {
        peer_certificates,
        description,
        path,
        user: Some(Rc::new(TlsSession {
            conn: RefCell::new(conn),
        })),
    })
}

/// Hands `conn`'s keys to the kernel. rustls has sent all it queued (the handshake loop
/// wrote it) and holds no record read from the client (the handshake read whole
/// records and stopped at its end), so the sequence numbers it gives are the kernel's
/// next ones.
fn to_kernel(mut conn: ServerConnection, socket: BorrowedFd<'_>) -> Result<(), HandshakeError> {
    let state = conn.process_new_packets()?;
    if state.plaintext_bytes_to_read() != 0 || state.tls_bytes_to_write() != 0 {
        return Err(HandshakeError::Kernel(io::Error::other(
            "rustls still holds data of this session",
        )));
    }
    let tls13 = conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3);
    let secrets = conn.dangerous_extract_secrets()?;
    let (tx_seq, tx) = &secrets.tx;
    let (rx_seq, rx) = &secrets.rx;
    ktls::set_keys(socket, tls13, tx, *tx_seq, rx, *rx_seq).map_err(HandshakeError::Kernel)
}

/// Reads exactly one TLS record (header and body) into `buf`; returns its length.
async fn read_record<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut [u8],
) -> Result<usize, HandshakeError> {
    let eof = |e: io::Error| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            HandshakeError::Eof
        } else {
            HandshakeError::Io(e)
        }
    };
    stream
        .read_exact(&mut buf[..RECORD_HEADER])
        .await
        .map_err(eof)?;
    if !valid_header(buf) {
        return Err(HandshakeError::NotTls);
    }
    let body = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if body > RECORD_BODY_MAX {
        return Err(HandshakeError::Oversized(body));
    }
    stream
        .read_exact(&mut buf[RECORD_HEADER..RECORD_HEADER + body])
        .await
        .map_err(eof)?;
    Ok(RECORD_HEADER + body)
}

/// Whether `header` begins a TLS record: a content type of TLS (change_cipher_spec,
/// alert, handshake, application_data, heartbeat) and a legacy version of 3.x. A Kafka
/// request's size field begins with 0 and fails at once.
fn valid_header(header: &[u8]) -> bool {
    matches!(header.first(), Some(20..=24)) && header.get(1) == Some(&3)
}

/// After an alert: the sending side is shut and what the client still sends is read and
/// dropped for a moment, so that closing does not reset the connection — a reset can
/// discard the alert before the client reads it (a TLS 1.3 client sends its first
/// request right after its certificate, before the alert arrives).
async fn close_after_alert<S: AsyncRead + AsRawFd + Unpin>(stream: &mut S) {
    let _ = nix::sys::socket::shutdown(stream.as_raw_fd(), nix::sys::socket::Shutdown::Write);
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = 64usize << 10;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    futures_lite::future::or(drain, glommio::timer::sleep(ALERT_LINGER)).await;
}

/// How long a connection refused with an alert is read from before it is closed.
const ALERT_LINGER: Duration = Duration::from_millis(250);

/// A rustls error as an operator reads it: what the client did and what to change, then
/// rustls' own words.
fn explain(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let hint = match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => Some(
            "the client's certificate is not signed by a CA the listener trusts (ssl.truststore.location / ssl.truststore.certificates)",
        ),
        rustls::Error::InvalidCertificate(C::Other(other))
            if format!("{other:?}").contains("UnsupportedCertVersion") =>
        {
            Some(
                "the client's certificate is X.509 version 1, which is not accepted: reissue it as version 3 (e.g. openssl x509 -req ... -extfile with extendedKeyUsage=clientAuth)",
            )
        }
        rustls::Error::NoCertificatesPresented => Some(
            "the client sent no certificate and this listener requires one (ssl.client.auth=required); a client whose certificate's issuer is not among the CAs the listener names sends none",
        ),
        rustls::Error::InvalidMessage(_) => {
            Some("the client's bytes are not a TLS handshake (a plaintext client on a TLS listener?)")
        }
        _ => None,
    };
    match hint {
        Some(h) => format!("{h}: {e}"),
        None => e.to_string(),
    }
}

/// The client's plaintext, read through the session from the socket's read half.
/// Ciphertext is handed to rustls only while it holds no plaintext, so its plaintext
/// buffer never overflows however fast the client sends.
pub struct TlsReader<R> {
    inner: R,
    session: Rc<TlsSession>,
    buf: Box<[u8]>,
    /// `buf[start..end]`: ciphertext read but not yet given to rustls.
    start: usize,
    end: usize,
}

impl<R> TlsReader<R> {
    pub fn new(inner: R, session: Rc<TlsSession>) -> TlsReader<R> {
        TlsReader {
            inner,
            session,
            buf: vec![0; READ_CHUNK].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

/// The client's plaintext from a socket whose session the kernel has: the socket's own
/// reads, with the kernel's TLS errors told as such ([`ktls::map_read_error`]).
pub struct KernelTlsReader<R>(pub R);

impl<R: AsyncRead + Unpin> AsyncRead for KernelTlsReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.get_mut().0).poll_read(cx, out) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(ktls::map_read_error(e))),
            other => other,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TlsReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let mut conn = this.session.conn.borrow_mut();
            match conn.reader().read(out) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.start < this.end {
                this.start += conn.read_tls(&mut &this.buf[this.start..this.end])?;
                conn.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                continue;
            }
            drop(conn);
            let n = match Pin::new(&mut this.inner).poll_read(cx, &mut this.buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(n)) => n,
            };
            if n == 0 {
                // The socket ended without close_notify: a truncated stream.
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            (this.start, this.end) = (0, n);
        }
    }
}
