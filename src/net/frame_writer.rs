//! Writes response frames to a connection's socket without copying their records: a run
//! of byte parts goes out in one `sendmsg`, a segment-file range with `splice` from the
//! file into a pipe and from the pipe into the socket, both through io_uring (glommio's
//! `splice`, a marked patch in `vendor/glommio`), so record bytes read from disk reach
//! the socket without entering user space, and tail-cache bytes leave from the cache's
//! own buffers.
//!
//! Invariants: parts leave in order and whole — a frame is on the wire completely or the
//! connection fails (a frame cannot be taken back half-written, so any error ends the
//! connection); the pipe is empty between ranges.
//!
//! The socket itself is blocking (glommio's are): byte parts are sent with MSG_DONTWAIT,
//! and a send that finds the buffer full waits for POLLOUT (`glommio::io::wait_writable`,
//! patched in too) and goes on where it stopped. The pipe-to-socket splice runs in
//! io_uring's worker, where blocking on a full socket stops that worker, not the shard.
//!
//! On a TLS connection whose session the kernel has (`net/ktls.rs`) frames go out
//! exactly as on a plaintext one — the socket seals what it is given, spliced file
//! ranges included — and the writer counts the records it may have made, ending the
//! connection before one key has sealed `ktls::RECORDS_PER_KEY_MAX`. On a TLS
//! connection in user space (`net/tls.rs`) the frame is sealed here instead: its parts
//! are gathered into plaintext chunks of `tls::SEAL_CHUNK`, a file range through the
//! same pipe (spliced in by io_uring, read out of the pipe), and each chunk goes out as
//! TLS records. That is the copy user-space TLS cannot avoid.

use crate::kafka::response_frame::{FramePart, ResponseFrame};
use crate::net::ktls;
use crate::net::tls::{TlsSession, SEAL_CHUNK};
use bytes::Bytes;
use corelog_storage::FileRange;
use nix::libc;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;

/// What the pipe is asked to hold (the kernel's default is 64 KiB; an unprivileged
/// process may raise it to `fs.pipe-max-size`, 1 MiB by default).
const PIPE_BYTES: i32 = 1 << 20;
/// Most byte parts one send takes.
const IOVECS_MAX: usize = 64;

/// Who seals what the writer sends.
pub enum Sealing {
    /// Nobody: a plaintext connection.
    Plain,
    /// The kernel (kTLS); `records` bounds the records sealed so far.
    Kernel { records: u64 },
    /// This writer, through the session in user space.
    User(Rc<TlsSession>),
}

/// One connection's writer.
pub struct FrameWriter {
    socket: RawFd,
    /// (read end, write end, capacity), made at the first file range.
    pipe: Option<(OwnedFd, OwnedFd, usize)>,
    sealing: Sealing,
}

impl FrameWriter {
    /// A writer for `socket`, which must stay open while the writer is used.
    pub fn new(socket: RawFd, sealing: Sealing) -> FrameWriter {
        FrameWriter {
            socket,
            pipe: None,
            sealing,
        }
    }

    pub async fn write(&mut self, frame: ResponseFrame) -> io::Result<()> {
        if let Sealing::User(tls) = &self.sealing {
            let tls = tls.clone();
            return self.write_sealed(&tls, frame).await;
        }
        let mut run: Vec<Bytes> = Vec::new();
        for part in frame.into_parts() {
            match part {
                FramePart::Bytes(b) => {
                    run.push(b);
                    if run.len() == IOVECS_MAX {
                        self.write_all(std::mem::take(&mut run)).await?;
                    }
                }
                FramePart::File(range) => {
                    self.write_all(std::mem::take(&mut run)).await?;
                    self.splice(&range).await?;
                }
            }
        }
        self.write_all(run).await?;
        if let Sealing::Kernel { records } = self.sealing {
            if records >= ktls::RECORDS_PER_KEY_MAX {
                return Err(io::Error::other(format!(
                    "this TLS session has sealed up to {records} records under one key, which the kernel cannot change; the connection ends so the client reconnects with new keys"
                )));
            }
        }
        Ok(())
    }

    /// Counts the records the kernel may have sealed for `bytes` sent in one call.
    fn sealed_by_kernel(&mut self, bytes: usize) {
        if let Sealing::Kernel { records } = &mut self.sealing {
            *records += ktls::records_at_most(bytes);
        }
    }

    /// Writes every byte of `parts`, in order, with as few sends as the socket allows.
    async fn write_all(&mut self, mut parts: Vec<Bytes>) -> io::Result<()> {
        parts.retain(|b| !b.is_empty());
        let mut first = 0;
        while first < parts.len() {
            let iov: Vec<libc::iovec> = parts[first..]
                .iter()
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                })
                .collect();
            // The socket is blocking (glommio's are; its own sends pass MSG_DONTWAIT as
            // well): without the flag a full send buffer would stop the shard's thread.
            // SAFETY: a zeroed msghdr is valid; the iovecs point into `Bytes` of `parts`,
            // alive for the call.
            let n = unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
                msg.msg_iovlen = iov.len();
                libc::sendmsg(self.socket, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => glommio::io::wait_writable(self.socket).await?,
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                }
                continue;
            }
            let mut n = n as usize;
            self.sealed_by_kernel(n);
            while n > 0 {
                let head = &mut parts[first];
                if n >= head.len() {
                    n -= head.len();
                    first += 1;
                } else {
                    bytes::Buf::advance(head, n);
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// Ends a TLS session in order (close_notify), before the socket is closed.
    pub async fn close(&mut self) -> io::Result<()> {
        let tls = match &self.sealing {
            Sealing::Plain => return Ok(()),
            Sealing::Kernel { .. } => return ktls::send_close_notify(self.socket),
            Sealing::User(tls) => tls.clone(),
        };
        tls.close();
        let mut sealed = Vec::new();
        tls.pending(&mut sealed)?;
        self.write_all(vec![Bytes::from(sealed)]).await
    }

    /// Seals `frame` into TLS records and sends them, a chunk at a time.
    async fn write_sealed(&mut self, tls: &TlsSession, frame: ResponseFrame) -> io::Result<()> {
        let mut plain: Vec<u8> = Vec::with_capacity(SEAL_CHUNK.min(frame.len()));
        let mut sealed = Vec::new();
        tls.pending(&mut sealed)?;
        for part in frame.into_parts() {
            match part {
                FramePart::Bytes(mut b) => {
                    while !b.is_empty() {
                        let take = b.len().min(SEAL_CHUNK - plain.len());
                        plain.extend_from_slice(&b.split_to(take));
                        if plain.len() == SEAL_CHUNK {
                            self.send_sealed(tls, &mut plain, &mut sealed).await?;
                        }
                    }
                }
                FramePart::File(range) => {
                    let (read_end, write_end, capacity) = self.pipe()?;
                    let mut at = range.pos();
                    let mut left = range.len();
                    while left > 0 {
                        let want = left.min(capacity).min(SEAL_CHUNK - plain.len());
                        let filled =
                            glommio::io::splice(range.fd(), Some(at), write_end, want).await?;
                        if filled == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "segment file ended inside a range being sent",
                            ));
                        }
                        drain_pipe(read_end, filled, &mut plain)?;
                        at += filled as u64;
                        left -= filled;
                        if plain.len() == SEAL_CHUNK {
                            self.send_sealed(tls, &mut plain, &mut sealed).await?;
                        }
                    }
                }
            }
        }
        self.send_sealed(tls, &mut plain, &mut sealed).await
    }

    /// Seals `plain` (emptied) after what `sealed` already holds, and sends it all.
    async fn send_sealed(
        &mut self,
        tls: &TlsSession,
        plain: &mut Vec<u8>,
        sealed: &mut Vec<u8>,
    ) -> io::Result<()> {
        if !plain.is_empty() {
            tls.seal(plain, sealed)?;
            plain.clear();
        }
        if !sealed.is_empty() {
            self.write_all(vec![Bytes::from(std::mem::take(sealed))])
                .await?;
        }
        Ok(())
    }

    /// The pipe (read end, write end, capacity), made on first use.
    fn pipe(&mut self) -> io::Result<(RawFd, RawFd, usize)> {
        if let Some((r, w, c)) = &self.pipe {
            return Ok((r.as_raw_fd(), w.as_raw_fd(), *c));
        }
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // Best effort: a smaller pipe only means more rounds.
        // SAFETY: plain fcntl on a descriptor we own.
        let set = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        let capacity = if set > 0 { set as usize } else { 64 << 10 };
        let fds = (r.as_raw_fd(), w.as_raw_fd(), capacity);
        self.pipe = Some((r, w, capacity));
        Ok(fds)
    }

    /// Sends `range` from its file to the socket through the pipe.
    async fn splice(&mut self, range: &FileRange) -> io::Result<()> {
        let (read_end, write_end, capacity) = self.pipe()?;
        let mut at = range.pos();
        let mut left = range.len();
        while left > 0 {
            let filled =
                glommio::io::splice(range.fd(), Some(at), write_end, left.min(capacity)).await?;
            if filled == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file ended inside a range being sent",
                ));
            }
            let mut in_pipe = filled;
            while in_pipe > 0 {
                match glommio::io::splice(read_end, None, self.socket, in_pipe).await {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        in_pipe -= n;
                        self.sealed_by_kernel(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        glommio::io::wait_writable(self.socket).await?
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            at += filled as u64;
            left -= filled;
        }
        corelog_metrics::record_sent_by_splice(range.len() as u64);
        Ok(())
    }
}

/// Reads exactly `n` bytes that a splice has just put into the pipe (they are there: the
/// read does not wait) onto the end of `into`.
fn drain_pipe(read_end: RawFd, n: usize, into: &mut Vec<u8>) -> io::Result<()> {
    let start = into.len();
    into.resize(start + n, 0);
    let mut got = 0;
    while got < n {
        let rest = &mut into[start + got..];
        // SAFETY: `rest` is a valid, writable buffer of its length.
        let r = unsafe { libc::read(read_end, rest.as_mut_ptr().cast(), rest.len()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            into.truncate(start + got);
            return Err(e);
        }
        if r == 0 {
            into.truncate(start + got);
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += r as usize;
    }
    Ok(())
}
