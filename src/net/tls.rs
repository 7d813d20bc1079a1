//! TLS on one connection, in user space with rustls: the handshake, a reader that
//! yields the client's plaintext, and the writer's side (`FrameWriter` seals each
//! response through [`TlsSession::seal`]). The reader and the writer are two tasks of
//! the connection's shard; they share the rustls session, borrowing it only between
//! awaits.
//!
//! Invariants: no byte reaches the request parser before the handshake has finished
//! and been verified (client certificate included when required); a handshake that
//! fails or does not finish within [`HANDSHAKE_TIMEOUT`] closes only this connection,
//! after rustls' alert has been sent where one applies; ciphertext is read only as the
//! reader needs plaintext, so a session never buffers more than one socket read ahead.

use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use rustls::pki_types::CertificateDer;
use rustls::{ServerConfig, ServerConnection};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A client that has not finished its handshake by then is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Ciphertext read from the socket at a time.
const READ_CHUNK: usize = 16 << 10;

/// Plaintext handed to rustls at a time before its records are sent.
pub const SEAL_CHUNK: usize = 64 << 10;

/// Why a handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake: {0}")]
    Tls(#[from] rustls::Error),
    #[error("TLS handshake: {0}")]
    Io(#[from] io::Error),
    #[error("TLS handshake not finished within {0:?}")]
    Timeout(Duration),
    #[error("client closed the connection during the TLS handshake")]
    Eof,
}

/// One connection's established TLS session.
pub struct TlsSession {
    conn: RefCell<ServerConnection>,
}

impl TlsSession {
    /// The client's certificate chain (leaf first), when it sent one.
    pub fn peer_certificates(&self) -> Option<Vec<CertificateDer<'static>>> {
        self.conn
            .borrow()
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
    }

    /// The negotiated protocol and cipher suite, for the log.
    pub fn describe(&self) -> String {
        let c = self.conn.borrow();
        format!(
            "{:?} {:?}",
            c.protocol_version(),
            c.negotiated_cipher_suite().map(|s| s.suite())
        )
    }

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

/// Runs the server side of the handshake on `stream`, within [`HANDSHAKE_TIMEOUT`].
/// Returns the session and the ciphertext read past the handshake (the client's first
/// records), which the reader takes first.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    config: Arc<ServerConfig>,
) -> Result<(Rc<TlsSession>, Vec<u8>), HandshakeError> {
    let handshake = async {
        let mut conn = ServerConnection::new(config)?;
        let mut buf = vec![0u8; READ_CHUNK];
        let (mut start, mut end) = (0, 0);
        let mut out = Vec::new();
        while conn.is_handshaking() {
            if conn.wants_read() {
                if start == end {
                    end = stream.read(&mut buf).await?;
                    start = 0;
                    if end == 0 {
                        return Err(HandshakeError::Eof);
                    }
                }
                start += conn.read_tls(&mut &buf[start..end])?;
                if let Err(e) = conn.process_new_packets() {
                    // Tell the client why (rustls queued the alert), then give up.
                    out.clear();
                    while conn.wants_write() {
                        conn.write_tls(&mut out)?;
                    }
                    let _ = stream.write_all(&out).await;
                    return Err(e.into());
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
        buf.truncate(end);
        buf.drain(..start);
        // The writer seals at most SEAL_CHUNK and sends it before sealing more, so
        // rustls' own bound on queued records would only turn a large part into a
        // short write.
        conn.set_buffer_limit(None);
        let session = Rc::new(TlsSession {
            conn: RefCell::new(conn),
        });
        Ok((session, buf))
    };
    futures_lite::future::or(handshake, async {
        glommio::timer::sleep(HANDSHAKE_TIMEOUT).await;
        Err(HandshakeError::Timeout(HANDSHAKE_TIMEOUT))
    })
    .await
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
    /// `leftover`: ciphertext the handshake read past its end.
    pub fn new(inner: R, session: Rc<TlsSession>, leftover: Vec<u8>) -> TlsReader<R> {
        let mut buf = leftover;
        let end = buf.len();
        buf.resize(end.max(READ_CHUNK), 0);
        TlsReader {
            inner,
            session,
            buf: buf.into_boxed_slice(),
            start: 0,
            end,
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
