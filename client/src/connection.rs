//! One TCP connection to one broker, pipelined, owned by one executor.
//!
//! Owns: the socket (split into a write half behind an async lock and a read half owned
//! by a reader task), the queue of requests awaiting a response, the correlation-id
//! counter, the in-flight limit (`--max-in-flight`) and the versions negotiated with this
//! broker at connect time.
//!
//! Invariants:
//! - Kafka answers requests on a connection in the order they were sent, so `pending` is
//!   a FIFO: a request is pushed onto it and written under the same write lock, and the
//!   reader pops the front for each response. A response whose correlation id is not the
//!   front's breaks the connection (never a panic).
//! - At most `max_in_flight` requests are outstanding: a caller holds a slot (`reserve`)
//!   from before it writes until its response is read.
//! - Once broken, the connection stays broken: every waiter and every later call gets
//!   the error that broke it. There is no reconnect; a load test with a dead broker
//!   should say so, not paper over it.
//!
//! - A secured connection (`ClientSecurity`) is usable only once its TLS handshake and
//!   its SASL exchange have succeeded: `connect_with` returns it no earlier.
//!
//! Not here: which broker leads what (`cluster.rs`), message contents (`protocol.rs`),
//! how SASL's messages are made (`sasl.rs`).

use super::protocol::{self, Versions};
use crate::error::{ClientError, Result};
use crate::sasl::{Next, SaslClient};
use crate::security::{ClientSecurity, SaslCredentials};
use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use futures::lock::Mutex;
use glommio::net::TcpStream;
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The byte stream under a connection: TCP, or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Stream for T {}
type BoxedStream = Box<dyn Stream>;

/// SaslHandshake v1 (the exchange then runs in SaslAuthenticate, KIP-152).
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2 (flexible; v1+ tells the session's lifetime, KIP-368).
const SASL_AUTHENTICATE_VERSION: i16 = 2;

/// Largest response frame accepted. A Fetch answer is bounded by `--fetch-max-bytes`
/// (at most 1 GiB by the CLI) plus framing; anything larger is a broken peer.
const RESPONSE_BYTES_MAX: usize = 1 << 30;
const _: () = assert!(RESPONSE_BYTES_MAX <= i32::MAX as usize);

struct Pending {
    correlation_id: i32,
    header_version: i16,
    reply: oneshot::Sender<std::result::Result<Bytes, String>>,
}

pub struct Connection {
    pub addr: SocketAddr,
    /// The write half and the frame buffer it reuses; one lock so a frame is encoded
    /// and written without another request interleaving.
    writer: Mutex<Writer>,
    pending: RefCell<VecDeque<Pending>>,
    slots: Rc<Semaphore>,
    next_correlation_id: Cell<i32>,
    client_id: StrBytes,
    versions: Cell<Option<Versions>>,
    broken: RefCell<Option<String>>,
    /// When to replace this connection, shortly before the broker ends its SASL session
    /// (KIP-368), if it does.
    session_expires: Cell<Option<Instant>>,
}

struct Writer {
    half: WriteHalf<BoxedStream>,
    buf: BytesMut,
}

impl Connection {
    /// Connects in plaintext, starts the reader task and negotiates API versions.
    pub async fn connect(
        addr: SocketAddr,
        client_id: &str,
        max_in_flight: usize,
        timeout: Duration,
    ) -> Result<Rc<Connection>> {
        let host = addr.ip().to_string();
        let plaintext = ClientSecurity::default();
        Self::connect_with(addr, &host, client_id, max_in_flight, timeout, &plaintext).await
    }

    /// Connects with `security` — TLS to `host` (the name the server's certificate must
    /// carry), then API versions, then SASL — and starts the reader task.
    pub async fn connect_with(
        addr: SocketAddr,
        host: &str,
        client_id: &str,
        max_in_flight: usize,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Rc<Connection>> {
        let unreachable = |reason: String| ClientError::Unreachable {
            addr: addr.to_string(),
            reason,
        };
        let tcp = TcpStream::connect_timeout(addr, timeout)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        // Requests are whole frames written at once; Nagle would only add latency.
        tcp.set_nodelay(true).ok();
        let stream: BoxedStream = match &security.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| unreachable(format!("TLS server name {host:?}: {e}")))?;
                let connector = futures_rustls::TlsConnector::from(tls.config.clone());
                let handshake = connector.connect(name, tcp);
                let expired = async {
                    glommio::timer::sleep(timeout).await;
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no TLS handshake within {timeout:?}"),
                    ))
                };
                let stream = futures_lite::future::or(handshake, expired)
                    .await
                    .map_err(|e| unreachable(format!("TLS handshake: {e}")))?;
                Box::new(stream)
            }
        };
        let (reader, writer) = stream.split();
        let conn = Rc::new(Connection {
            addr,
            writer: Mutex::new(Writer {
                half: writer,
                buf: BytesMut::with_capacity(64 * 1024),
            }),
            pending: RefCell::new(VecDeque::new()),
            slots: Rc::new(Semaphore::new(max_in_flight.max(1) as u64)),
            next_correlation_id: Cell::new(1),
            client_id: StrBytes::from_string(client_id.to_owned()),
            versions: Cell::new(None),
            broken: RefCell::new(None),
            session_expires: Cell::new(None),
        });
        // The reader holds only a weak reference so dropping the last `Rc` ends it.
        let weak = Rc::downgrade(&conn);
        glommio::spawn_local(async move {
            let reason = read_loop(reader, &weak).await;
            if let Some(c) = weak.upgrade() {
                c.break_with(reason);
            }
        })
        .detach();
        // A broker that accepts and then says nothing must not hold the caller: the
        // version negotiation and the login share the connect timeout.
        let setup = async {
            let versions = conn
                .negotiate()
                .await
                .map_err(|e| unreachable(format!("{e:#}")))?;
            conn.versions.set(Some(versions));
            if let Some(credentials) = &security.sasl {
                conn.authenticate(credentials.clone())
                    .await
                    .map_err(|e| match e {
                        ClientError::Kafka { .. } => e,
                        e => unreachable(format!("{e:#}")),
                    })?;
            }
            Ok(())
        };
        let expired = async {
            glommio::timer::sleep(timeout).await;
            Err(unreachable(format!(
                "no API versions or SASL login within {timeout:?}"
            )))
        };
        futures_lite::future::or(setup, expired).await?;
        Ok(conn)
    }

    /// SaslHandshake, then SaslAuthenticate until the mechanism is done.
    async fn authenticate(&self, credentials: SaslCredentials) -> Result<()> {
        let mut client = SaslClient::new(credentials);
        let mut handshake = SaslHandshakeRequest::default();
        handshake.mechanism = StrBytes::from_static_str(client.mechanism().name());
        let r: SaslHandshakeResponse = self
            .request(ApiKey::SaslHandshake, SASL_HANDSHAKE_VERSION, &handshake)
            .await?;
        if r.error_code != 0 {
            let enabled: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::Kafka {
                context: format!(
                    "SaslHandshake {} (the broker enables: {})",
                    client.mechanism().name(),
                    enabled.join(", ")
                ),
                code: r.error_code,
            });
        }
        let mut message = client.start().map_err(ClientError::Protocol)?;
        loop {
            let mut req = SaslAuthenticateRequest::default();
            req.auth_bytes = Bytes::from(message);
            let r: SaslAuthenticateResponse = self
                .request(ApiKey::SaslAuthenticate, SASL_AUTHENTICATE_VERSION, &req)
                .await?;
            if r.error_code != 0 {
                let why = r.error_message.as_ref().map(|m| m.to_string());
                return Err(ClientError::Kafka {
                    context: format!(
                        "SaslAuthenticate {}: {}",
                        client.mechanism().name(),
                        why.unwrap_or_default()
                    ),
                    code: r.error_code,
                });
            }
            match client
                .answer(&r.auth_bytes)
                .map_err(ClientError::Protocol)?
            {
                Next::Send(m) => message = m,
                Next::Done => {
                    if r.session_lifetime_ms > 0 {
                        let lifetime = Duration::from_millis(r.session_lifetime_ms as u64);
                        // A new connection a tenth of the session before its end, at most
                        // 5 s before (Kafka's clients renew at 85-95 % of it).
                        let margin = (lifetime / 10).min(Duration::from_secs(5));
                        let renew = Instant::now().checked_add(lifetime - margin);
                        self.session_expires.set(renew);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Whether the broker's SASL session (KIP-368) is close to its end: a caller that
    /// keeps the connection should open a new one now, while this one still serves.
    pub fn session_ending(&self) -> bool {
        self.session_expires
            .get()
            .is_some_and(|renew| Instant::now() >= renew)
    }

    pub fn versions(&self) -> Versions {
        self.versions
            .get()
            .expect("versions are set before connect returns")
    }

    async fn negotiate(&self) -> Result<Versions> {
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str("corelog-load");
        req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let slot = self.reserve().await?;
        let v = protocol::API_VERSIONS_FIRST_TRY;
        let mut body = self.call(&slot, ApiKey::ApiVersions, v, &req).await?;
        let resp = match ApiVersionsResponse::decode(&mut body.clone(), v) {
            Ok(r) if r.error_code == 0 => r,
            // KIP-511: a broker that does not know our version answers in v0 format with
            // UNSUPPORTED_VERSION and its ranges; use them, at the v0 version.
            _ => {
                let r = ApiVersionsResponse::decode(&mut body, 0).map_err(|e| {
                    ClientError::Protocol(format!("ApiVersions response does not decode: {e:#}"))
                })?;
                if r.error_code != 0 && r.api_keys.is_empty() {
                    return Err(ClientError::Kafka {
                        context: "ApiVersions".into(),
                        code: r.error_code,
                    });
                }
                r
            }
        };
        protocol::negotiate(&resp)
    }

    fn break_with(&self, reason: String) {
        if self.broken.borrow().is_none() {
            *self.broken.borrow_mut() = Some(reason.clone());
        }
        for p in self.pending.borrow_mut().drain(..) {
            let _ = p.reply.send(Err(reason.clone()));
        }
        self.slots.close();
    }

    fn check_broken(&self) -> Result<()> {
        match &*self.broken.borrow() {
            Some(r) => Err(ClientError::Connection {
                addr: self.addr,
                reason: format!("broken: {r}"),
            }),
            None => Ok(()),
        }
    }

    /// Waits for an in-flight slot. The slot is released when dropped.
    pub async fn reserve(&self) -> Result<StaticPermit> {
        self.check_broken()?;
        self.slots
            .acquire_static_permit(1)
            .await
            .map_err(|_| ClientError::Connection {
                addr: self.addr,
                reason: "closed".into(),
            })
    }

    /// Writes one request and, unless `expect_response` is false (Produce with acks=0),
    /// registers for its response. Returns the receiver to await.
    async fn write<R: Encodable>(
        &self,
        api: ApiKey,
        version: i16,
        body: &R,
        expect_response: bool,
    ) -> Result<Option<oneshot::Receiver<std::result::Result<Bytes, String>>>> {
        self.check_broken()?;
        let mut writer = self.writer.lock().await;
        self.check_broken()?;
        let id = self.next_correlation_id.get();
        self.next_correlation_id.set(id.wrapping_add(1));
        let w = &mut *writer;
        w.buf.clear();
        protocol::encode_frame(&mut w.buf, api, version, id, &self.client_id, body)?;
        let rx = if expect_response {
            let (tx, rx) = oneshot::channel();
            self.pending.borrow_mut().push_back(Pending {
                correlation_id: id,
                header_version: api.response_header_version(version),
                reply: tx,
            });
            Some(rx)
        } else {
            None
        };
        if let Err(e) = w.half.write_all(&w.buf).await {
            let reason = format!("write failed: {e}");
            self.break_with(reason.clone());
            return Err(ClientError::Connection {
                addr: self.addr,
                reason: reason.to_string(),
            });
        }
        Ok(rx)
    }

    /// Sends a request and returns the response body (after the response header).
    pub async fn call<R: Encodable>(
        &self,
        _slot: &StaticPermit,
        api: ApiKey,
        version: i16,
        body: &R,
    ) -> Result<Bytes> {
        let rx = self.write(api, version, body, true).await?;
        let rx = rx.ok_or_else(|| ClientError::Protocol("no response expected".into()))?;
        match rx.await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(reason)) => Err(ClientError::Connection {
                addr: self.addr,
                reason: format!("broken: {reason}"),
            }),
            Err(_) => Err(ClientError::Connection {
                addr: self.addr,
                reason: "closed".into(),
            }),
        }
    }

    /// Sends a request that gets no response (Produce at acks=0).
    pub async fn send_only<R: Encodable>(&self, api: ApiKey, version: i16, body: &R) -> Result<()> {
        self.write(api, version, body, false).await.map(|_| ())
    }

    /// Sends a request and decodes the response as `T`, holding a slot for its duration.
    pub async fn request<R: Encodable, T: Decodable>(
        &self,
        api: ApiKey,
        version: i16,
        body: &R,
    ) -> Result<T> {
        let slot = self.reserve().await?;
        let mut bytes = self.call(&slot, api, version, body).await?;
        T::decode(&mut bytes, version).map_err(|e| {
            ClientError::Protocol(format!("decoding {api:?} v{version} response: {e:#}"))
        })
    }
}

/// Reads response frames until the socket fails; returns why it stopped.
async fn read_loop(mut reader: ReadHalf<BoxedStream>, conn: &std::rc::Weak<Connection>) -> String {
    let mut size_buf = [0u8; 4];
    // Frames are read into one reused allocation (`reserve` takes it back once the last
    // frame's bytes are dropped). A new allocation per frame is a new mapping for every
    // large fetch response (glibc maps anything over 32 MiB), faulted in page by page
    // while the socket is read into it and unmapped again: more CPU than the copy.
    let mut frames = BytesMut::new();
    loop {
        if let Err(e) = reader.read_exact(&mut size_buf).await {
            return if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "broker closed the connection".to_owned()
            } else {
                format!("read failed: {e}")
            };
        }
        let size = i32::from_be_bytes(size_buf);
        let Ok(size) = usize::try_from(size) else {
            return format!("negative response size {size}");
        };
        if !(4..=RESPONSE_BYTES_MAX).contains(&size) {
            return format!("response size {size} out of range");
        }
        frames.reserve(size);
        frames.resize(size, 0);
        if let Err(e) = reader.read_exact(&mut frames[..]).await {
            return format!("read failed: {e}");
        }
        let body = frames.split().freeze();
        let Some(conn) = conn.upgrade() else {
            return "connection dropped".to_owned();
        };
        let Some(pending) = conn.pending.borrow_mut().pop_front() else {
            return "response without a request".to_owned();
        };
        let mut bytes = body;
        let header = match ResponseHeader::decode(&mut bytes, pending.header_version) {
            Ok(h) => h,
            Err(e) => return format!("bad response header: {e}"),
        };
        if header.correlation_id != pending.correlation_id {
            return format!(
                "response correlation id {} but {} was next",
                header.correlation_id, pending.correlation_id
            );
        }
        // The waiter may have given up (e.g. Ctrl-C); that is not an error.
        let _ = pending.reply.send(Ok(bytes));
    }
}
