//! One client connection: framing and the in-order response pipeline.
//!
//! A reader task reads size-prefixed frames, parses the request header and starts a
//! handler task per request; a writer task awaits those tasks *in request order* and
//! writes each response. So a connection has up to
//! `INFLIGHT_REQUESTS_PER_CONNECTION_MAX` requests in flight (decoded while earlier
//! ones are being served), yet responses leave in the order Kafka requires. When the
//! bound is reached the reader stops reading — back-pressure through TCP, not an error.
//! (The bound is `--max-inflight-requests-per-connection`, default
//! `INFLIGHT_REQUESTS_PER_CONNECTION_MAX`.) Before a frame's body is read, the reader
//! takes the frame's bytes from the shard's request memory (`request_memory.rs`); the
//! handler task holds them until the request has been handled. A body that does not
//! arrive within `--request-body-timeout-ms` closes the connection, so a slow sender
//! cannot hold that memory indefinitely.
//!
//! Client quotas (`crate::quota`): a Produce is charged when it is read, in request
//! order, before its handler starts; a client over its quota gets its response at once
//! with `throttle_time_ms`, and the reader holds this connection's next request until
//! the throttle time has passed (Kafka's KIP-219 channel mute).
//!
//! Bad input closes only this connection, with a log line: a frame whose size is
//! negative, zero or above `socket.request.max.bytes`, an unknown API key, an
//! unsupported version (other than ApiVersions, which gets KIP-511's answer), or a body
//! that does not decode. Responses to the requests before the bad one are still
//! written. Nothing here panics on input; no buffer is sized from the wire before the
//! size is checked against the limit, and the body buffer grows only as bytes arrive.

use crate::kafka::api::{self, Ctx};
use crate::kafka::frame::{self, FrameError};
use crate::kafka::response_frame::ResponseFrame;
use crate::net::frame_writer::Sealing;
use crate::net::request_memory::RequestMemory;
use crate::net::tls::Established;
use crate::session::Session;
use bytes::{Bytes, BytesMut};
use corelog_metrics::Stage;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use kafka_protocol::messages::ApiKey;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum CloseReason {
    #[error("client closed the connection")]
    Eof,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame size {0} is outside 1..={1}")]
    BadSize(i64, usize),
    #[error("a {0}-byte request before SASL authentication (sasl.server.max.receive.size is {1})")]
    UnauthenticatedTooLarge(usize, usize),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("broker shutting down")]
    Shutdown,
    #[error("a {0}-byte frame's body did not arrive within {1:?}")]
    SlowBody(usize, std::time::Duration),
    #[error("no byte of a {0}-byte frame's body arrived for {1:?}")]
    StalledBody(usize, std::time::Duration),
    #[error("unexpected Kafka request of type {0:?} during SASL authentication")]
    Unauthenticated(kafka_protocol::messages::ApiKey),
    #[error("SASL authentication failed")]
    AuthenticationFailed,
}

type Pending = JoinHandle<Result<Option<ResponseFrame>, FrameError>>;

pub async fn serve(
    ctx: Rc<Ctx>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: Rc<crate::net::shutdown::ShutdownSignal>,
    memory: Rc<RequestMemory>,
) {
    let _ = stream.set_nodelay(true);
    let mut stream = stream;
    let tls = match &ctx.tls {
        None => None,
        Some(config) => {
            let offload = ctx.config.tls_kernel_offload;
            match crate::net::tls::accept(&mut stream, config.rustls.clone(), offload).await {
                Ok(established) => {
                    let kernel = established.user.is_none();
                    corelog_metrics::record_tls_session(kernel);
                    let why = match established.path {
                        crate::net::ktls::Path::User(why) => why,
                        crate::net::ktls::Path::Kernel => "",
                    };
                    tracing::info!(%peer, listener = %ctx.listener, session = %established.description,
                        path = established.path.name(), why, "TLS session established");
                    Some(established)
                }
                Err(e) => {
                    corelog_metrics::record_connection_rejected();
                    crate::sasl::audit_failure(
                        &ctx.listener,
                        peer,
                        None,
                        &format!("TLS handshake failed: {e}"),
                    );
                    return;
                }
            }
        }
    };
    // Responses are written on the descriptor itself (`frame_writer`); the stream's
    // write half is kept only to close the socket's sending side at the end.
    let socket = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (reader, writer) = stream.split();
    let inflight_max = ctx.config.limits.max_inflight_requests_per_connection;
    let (tx, rx) = local_channel::new_bounded::<Pending>(inflight_max);
    let sealing = match &tls {
        None => Sealing::Plain,
        Some(Established { user: None, .. }) => Sealing::Kernel { records: 0 },
        Some(Established {
            user: Some(session),
            ..
        }) => Sealing::User(session.clone()),
    };
    let write_task = glommio::spawn_local(write_loop(writer, socket, rx, peer, sealing));
    // A client certificate names the principal (mutual TLS), unless SASL does.
    let certificate_principal = match (
        &ctx.tls,
        tls.as_ref().and_then(|t| t.peer_certificates.as_ref()),
    ) {
        (Some(config), Some(chain)) if ctx.sasl.is_none() => {
            let Some(leaf) = chain.first() else { return };
            match config.principal_mapping.principal(leaf) {
                Ok(p) => Some(p),
                Err(e) => {
                    // Kafka fails the authentication: this connection only.
                    crate::sasl::audit_failure(&ctx.listener, peer, None, &e.to_string());
                    return;
                }
            }
        }
        _ => None,
    };
    let session = Rc::new(Session::new(
        ctx.sasl.clone().map(crate::sasl::Authentication::new),
        peer,
        certificate_principal,
    ));
    let (kept_ctx, kept_session) = (ctx.clone(), session.clone());
    let reason = match tls.and_then(|t| t.user) {
        None if ctx.tls.is_some() => {
            let reader = crate::net::tls::KernelTlsReader(reader);
            read_loop(ctx, peer, reader, tx, &shutdown, &memory, session).await
        }
        None => read_loop(ctx, peer, reader, tx, &shutdown, &memory, session).await,
        Some(tls_session) => {
            let reader = crate::net::tls::TlsReader::new(reader, tls_session);
            read_loop(ctx, peer, reader, tx, &shutdown, &memory, session).await
        }
    };
    match &reason {
        CloseReason::Eof | CloseReason::Shutdown => {
            tracing::debug!(%peer, %reason, "connection closed")
        }
        CloseReason::Io(e) => tracing::debug!(%peer, error = %e, "connection closed"),
        // Logged and counted where it was refused.
        CloseReason::AuthenticationFailed => {
            tracing::debug!(%peer, %reason, "connection closed")
        }
        other => {
            corelog_metrics::record_connection_rejected();
            tracing::warn!(%peer, reason = %other, "closing connection on bad input")
        }
    }
    // A share consumer's session ends with its connection: what it holds goes back.
    if let Some(s) = kept_session.share.take() {
        crate::kafka::api::share_session::release(&kept_ctx, s).await;
    }
    // The sender is dropped: the writer drains what is in flight, then closes.
    write_task.await;
}

async fn read_loop(
    ctx: Rc<Ctx>,
    peer: SocketAddr,
    mut reader: impl AsyncRead + Unpin,
    tx: local_channel::LocalSender<Pending>,
    shutdown: &crate::net::shutdown::ShutdownSignal,
    memory: &RequestMemory,
    session: Rc<Session>,
) -> CloseReason {
    let max = ctx.config.socket_request_max_bytes;
    let throttle = Rc::new(crate::quota::ConnectionThrottle::default());
    let produce_order = Rc::new(crate::kafka::produce_order::ProduceOrder::default());
    loop {
        let mut size_buf = [0u8; 4];
        let read = futures_lite::future::or(
            async { Some(reader.read_exact(&mut size_buf).await) },
            async {
                shutdown.wait().await;
                None
            },
        )
        .await;
        match read {
            None => return CloseReason::Shutdown,
            Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return CloseReason::Eof
            }
            Some(Err(e)) => return CloseReason::Io(e),
            Some(Ok(())) => {}
        }
        let size = i32::from_be_bytes(size_buf);
        if size <= 0 || size as usize > max {
            return CloseReason::BadSize(i64::from(size), max);
        }
        // Kafka's SaslServerAuthenticator: until the client has authenticated, its
        // requests are handshakes and tokens, and a larger one is closed before its body
        // takes any memory.
        let unauthenticated_max = ctx.config.limits.sasl_server_max_receive_size;
        if size as usize > unauthenticated_max && !session.may_serve() {
            corelog_metrics::record_limit(|c| c.unauthenticated_oversize_requests += 1);
            return CloseReason::UnauthenticatedTooLarge(size as usize, unauthenticated_max);
        }
        // A quota throttle (KIP-219): the response that set it has been sent; this
        // connection's next request waits it out before its body is read or takes any
        // request memory — the body backs up in TCP, like Kafka's muted channel. (Checked
        // after the size because the reader is usually already parked on the socket when
        // a handler sets the hold.)
        let held = futures_lite::future::or(
            async {
                throttle.hold().await;
                true
            },
            async {
                shutdown.wait().await;
                false
            },
        )
        .await;
        if !held {
            return CloseReason::Shutdown;
        }
        // The frame's memory before its body: when the shard's budget is spent, this
        // connection reads nothing more until a permit frees (back-pressure).
        let permit = match memory.try_acquire(size as usize) {
            Some(p) => Some(p),
            None => {
                corelog_metrics::record_limit(|c| c.request_memory_waits += 1);
                futures_lite::future::or(memory.acquire(size as usize), async {
                    shutdown.wait().await;
                    None
                })
                .await
            }
        };
        let Some(memory_permit) = permit else {
            return CloseReason::Shutdown;
        };
        // The body must arrive in time and keep arriving: its memory may be what other
        // readers wait for.
        let timeout = ctx.config.limits.request_body_timeout;
        let progress = std::cell::Cell::new(0usize);
        let body = futures_lite::future::or(
            read_body(&mut reader, size as usize, &progress),
            body_watchdog(&progress, size as usize, timeout),
        )
        .await;
        let frame = match body {
            Ok(f) => f,
            Err(e) => return e,
        };
        if let Some(auth) = session.auth.as_ref().filter(|a| a.expects_bare_token()) {
            match bare_token(&ctx, peer, auth, &frame).await {
                Some(answer) => {
                    drop(memory_permit);
                    let task = glommio::spawn_local(async move { Ok(Some(answer)) }).detach();
                    if tx.send(task).await.is_err() {
                        return CloseReason::Eof;
                    }
                    continue;
                }
                None => return CloseReason::AuthenticationFailed,
            }
        }
        // Handed back to the shard's buffers once the request is handled.
        let body = frame.clone();
        let request = match frame::parse_request(frame) {
            Ok(r) => r,
            Err(e) => return CloseReason::Frame(e),
        };
        // Until SASL has authenticated the client, only the exchange itself is served,
        // one request at a time (each step depends on the one before).
        let authenticating = !session.may_serve();
        if authenticating
            && !matches!(
                request.api_key,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
        {
            return CloseReason::Unauthenticated(request.api_key);
        }
        // Only while authenticating does the reader wait for the answer (no channel per
        // request otherwise).
        let (done_tx, done_rx) = match authenticating {
            true => {
                let (tx, rx) = futures::channel::oneshot::channel::<()>();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let c = ctx.clone();
        let produce_order = produce_order.clone();
        let received = Instant::now();
        let api_key = request.api_key as i16;
        let bytes_in = size as usize + 4;
        let quota = crate::quota::admit(
            &ctx.quotas,
            request.api_key,
            crate::quota::QuotaClient::of(session.principal(), request.header.client_id.as_deref()),
            bytes_in,
            &throttle,
        );
        let s = session.clone();
        let task = glommio::spawn_local(async move {
            // Held until the request has been handled (its frame is dropped by then).
            let _memory_permit = memory_permit;
            corelog_metrics::record_stage(Stage::RequestQueue, received.elapsed());
            let result = api::handle(&c, request, peer, &quota, &produce_order, &s).await;
            super::request_buffers::give_back(body);
            if let Some(done) = done_tx {
                let _ = done.send(());
            }
            let bytes_out = match &result {
                Ok(Some(b)) => b.len(),
                _ => 0,
            };
            corelog_metrics::record_request(api_key, received.elapsed(), bytes_in, bytes_out);
            result
        })
        .detach();
        if tx.send(task).await.is_err() {
            return CloseReason::Eof; // the writer failed: the peer is gone
        }
        if authenticating {
            if let Some(done) = done_rx {
                let _ = done.await;
            }
            if session.auth.as_ref().is_some_and(|a| a.has_failed()) {
                // Its answer is queued; the writer sends it before the socket closes.
                return CloseReason::AuthenticationFailed;
            }
        }
    }
}

/// One bare SASL token after a SaslHandshake v0: the answer framed the same way (a
/// size and the token), or `None` when authentication failed (logged, counted, and
/// held back by the failed-authentication delay; v0 closes without an answer, as Kafka
/// does).
async fn bare_token(
    ctx: &Ctx,
    peer: SocketAddr,
    auth: &crate::sasl::Authentication,
    token: &[u8],
) -> Option<ResponseFrame> {
    let meta = ctx.shard.metadata.snapshot();
    let answer = match auth.authenticate(token, |user, m| meta.scram.get(user, m).cloned()) {
        crate::sasl::Step::Continue(bytes) | crate::sasl::Step::Done(bytes) => bytes,
        crate::sasl::Step::Failed(refusal) => {
            let principal = auth.claimed_principal();
            crate::sasl::audit_failure(&ctx.listener, peer, principal.as_deref(), &refusal.detail);
            glommio::timer::sleep(auth.listener().failed_delay).await;
            return None;
        }
    };
    let mut framed = BytesMut::with_capacity(4 + answer.len());
    framed.extend_from_slice(&(answer.len() as i32).to_be_bytes());
    framed.extend_from_slice(&answer);
    Some(ResponseFrame::whole(framed))
}

/// Reads exactly `size` bytes into a buffer of that size from this shard's recycled ones
/// (`request_buffers`: no zero-fill, no growth as the body arrives; a new one is touched
/// only as its bytes arrive). Reads as the socket has bytes, so the watchdog sees every
/// byte that arrives.
async fn read_body(
    reader: &mut (impl AsyncRead + Unpin),
    size: usize,
    progress: &std::cell::Cell<usize>,
) -> Result<Bytes, CloseReason> {
    let mut buf = super::request_buffers::take(size);
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|r| !r.is_empty()) {
        match reader.read(rest).await {
            Ok(0) => return Err(CloseReason::Eof),
            Ok(n) => {
                filled += n;
                progress.set(progress.get() + n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CloseReason::Io(e)),
        }
    }
    debug_assert_eq!(filled, size);
    Ok(buf.freeze())
}

/// Ends a body read that takes longer than `timeout` in all, or that goes
/// `REQUEST_BODY_STALL_MS` without a byte (one timer per frame, not per read).
async fn body_watchdog(
    progress: &std::cell::Cell<usize>,
    size: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, CloseReason> {
    let stall = std::time::Duration::from_millis(crate::limits::REQUEST_BODY_STALL_MS).min(timeout);
    let deadline = Instant::now() + timeout;
    let mut seen = progress.get();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(CloseReason::SlowBody(size, timeout));
        }
        glommio::timer::sleep(stall.min(deadline - now)).await;
        if progress.get() == seen && Instant::now() < deadline {
            return Err(CloseReason::StalledBody(size, stall));
        }
        seen = progress.get();
    }
}

async fn write_loop(
    mut writer: impl AsyncWrite + Unpin,
    socket: std::os::fd::RawFd,
    rx: local_channel::LocalReceiver<Pending>,
    peer: SocketAddr,
    sealing: Sealing,
) {
    use futures_lite::StreamExt;
    let mut rx = rx.stream();
    let mut frames = crate::net::frame_writer::FrameWriter::new(socket, sealing);
    while let Some(task) = rx.next().await {
        let response = match task.await {
            Some(Ok(Some(bytes))) => bytes,
            Some(Ok(None)) => continue, // acks=0: no response
            Some(Err(e)) => {
                corelog_metrics::record_connection_rejected();
                tracing::warn!(%peer, error = %e, "closing connection on bad request");
                break;
            }
            None => break, // handler task cancelled (shutdown)
        };
        if let Err(e) = frames.write(response).await {
            tracing::debug!(%peer, error = %e, "write failed");
            break;
        }
    }
    // A peer that stopped reading must not hold the connection open for the alert.
    futures_lite::future::or(
        async {
            let _ = frames.close().await;
        },
        glommio::timer::sleep(std::time::Duration::from_secs(1)),
    )
    .await;
    let _ = writer.flush().await;
    let _ = writer.close().await;
}
