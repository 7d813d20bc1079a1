//! Kernel TLS (kTLS): a session rustls has negotiated, handed to the kernel, so that the
//! socket itself seals what is sent and opens what is read. The writer then sends
//! responses exactly as on a plaintext connection — byte parts with `sendmsg`,
//! segment-file ranges with `splice` (`frame_writer.rs`) — and record bytes never enter
//! user space to be encrypted.
//!
//! What the kernel takes is probed once per process ([`support`]): loopback TCP pairs
//! get the `tls` upper-layer protocol and, for each protocol version and AEAD that
//! rustls may negotiate, transmit and receive keys. A session goes to the kernel only
//! when its version and AEAD were taken there ([`choose`]); otherwise, or with offload
//! turned off, it stays in user space (`tls.rs`).
//!
//! Invariants:
//! - keys are handed over only once rustls has sent every record it queued (the record
//!   sequence numbers given with them count those) and holds nothing read from the
//!   client (the handshake reads the socket one record at a time), so no record is
//!   sealed or opened twice, or skipped;
//! - key material is zeroed once the kernel has it, and never logged;
//! - the kernel here cannot change keys: a client's TLS 1.3 KeyUpdate (like any alert)
//!   reaches the reader as a control record and ends the connection
//!   ([`map_read_error`]); on the sending side the writer ends a connection before
//!   [`RECORDS_PER_KEY_MAX`] records have been sealed under one key.

use nix::libc;
use nix::sys::socket::setsockopt;
use nix::sys::socket::sockopt::{self, TlsCryptoInfo};
use rustls::{CipherSuite, ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};
use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::OnceLock;
use zeroize::Zeroize;

/// Records the writer seals under one key before it ends the connection (a client
/// reconnects at once). RFC 8446 §5.5 bounds AES-GCM at 2^24.5 full-size records per
/// key; rustls in user space changes keys before that, the kernel cannot.
pub const RECORDS_PER_KEY_MAX: u64 = 1 << 24;

/// Plaintext bytes in one TLS record at most (the kernel fills records to this size).
pub const RECORD_PLAINTEXT_MAX: usize = 1 << 14;

/// The AEADs both rustls and the kernel implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Aead {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Aead {
    const ALL: [Aead; 3] = [Aead::Aes128Gcm, Aead::Aes256Gcm, Aead::Chacha20Poly1305];

    fn key_len(self) -> usize {
        match self {
            Aead::Aes128Gcm => 16,
            Aead::Aes256Gcm | Aead::Chacha20Poly1305 => 32,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Aead::Aes128Gcm => "AES-128-GCM",
            Aead::Aes256Gcm => "AES-256-GCM",
            Aead::Chacha20Poly1305 => "ChaCha20-Poly1305",
        }
    }
}

/// The AEAD of a cipher suite rustls negotiated, if the kernel has one like it.
pub fn aead_of(suite: SupportedCipherSuite) -> Option<Aead> {
    Some(match suite.suite() {
        CipherSuite::TLS13_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Aead::Aes128Gcm,
        CipherSuite::TLS13_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Aead::Aes256Gcm,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Aead::Chacha20Poly1305,
        _ => return None,
    })
}

/// What the running kernel takes, found by [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// (TLS 1.3?, AEAD) pairs the kernel took in both directions.
    pub taken: Vec<(bool, Aead)>,
    /// Why nothing was taken at all, when that is so.
    pub unavailable: Option<String>,
}

impl Support {
    pub fn takes(&self, tls13: bool, aead: Aead) -> bool {
        self.taken.contains(&(tls13, aead))
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.unavailable {
            return format!("unavailable ({why})");
        }
        let list = |tls13: bool| {
            let names: Vec<&str> = Aead::ALL
                .iter()
                .filter(|a| self.takes(tls13, **a))
                .map(|a| a.name())
                .collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        format!("TLS 1.2: {}; TLS 1.3: {}", list(false), list(true))
    }
}

/// Where a session's records are sealed and opened, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Kernel,
    User(&'static str),
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Kernel => "kernel",
            Path::User(_) => "user space",
        }
    }
}

/// Decides where a session negotiated as `version` with `suite` runs.
pub fn choose(
    offload: bool,
    support: &Support,
    version: Option<ProtocolVersion>,
    suite: Option<SupportedCipherSuite>,
) -> Path {
    if !offload {
        return Path::User("kernel offload turned off (--tls-kernel-offload false)");
    }
    if support.unavailable.is_some() {
        return Path::User("the kernel has no TLS offload");
    }
    let tls13 = match version {
        Some(ProtocolVersion::TLSv1_3) => true,
        Some(ProtocolVersion::TLSv1_2) => false,
        _ => return Path::User("a protocol version the kernel does not take"),
    };
    match suite.and_then(aead_of) {
        Some(aead) if support.takes(tls13, aead) => Path::Kernel,
        _ => Path::User("a cipher the kernel does not take"),
    }
}

/// The running kernel's support, probed at first use and logged once.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let s = probe();
        tracing::info!(support = %s.describe(), "kernel TLS offload");
        s
    })
}

/// Gives loopback TCP pairs the `tls` ULP and, per version and AEAD, (zero) keys for
/// both directions; what the kernel refuses is not taken.
pub fn probe() -> Support {
    let mut taken = Vec::new();
    for tls13 in [false, true] {
        for aead in Aead::ALL {
            let (pair, _peer) = match loopback_pair() {
                Ok(p) => p,
                Err(e) => {
                    return Support {
                        taken: Vec::new(),
                        unavailable: Some(format!("no loopback TCP pair to probe with: {e}")),
                    }
                }
            };
            if let Err(e) = set_ulp(pair.as_fd()) {
                let why = if e.raw_os_error() == Some(libc::ENOENT) {
                    "the kernel has no tls module: modprobe tls".to_string()
                } else {
                    format!("TCP_ULP tls: {e}")
                };
                return Support {
                    taken: Vec::new(),
                    unavailable: Some(why),
                };
            }
            let zero = Keys {
                aead,
                key: &[0; 32][..aead.key_len()],
                iv: &[0; 12],
                seq: 0,
            };
            if set_both(pair.as_fd(), tls13, &zero, &zero).is_ok() {
                taken.push((tls13, aead));
            }
        }
    }
    Support {
        taken,
        unavailable: None,
    }
}

/// A connected TCP pair on loopback, the client first. The kernel takes the ULP only on
/// an established socket, so the peer stays open while the options are set; nothing is
/// sent.
fn loopback_pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    Ok((client, server))
}

/// Gives `socket` the `tls` upper-layer protocol. Until keys are set it passes bytes
/// through untouched, so a session whose keys the kernel then refuses can still stay
/// in user space.
pub fn set_ulp(socket: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(&socket, sockopt::TcpUlp::default(), &b"tls")?;
    Ok(())
}

/// One direction's keys: the key, rustls' 12-byte IV, and the sequence number of the
/// next record.
struct Keys<'a> {
    aead: Aead,
    key: &'a [u8],
    iv: &'a [u8],
    seq: u64,
}

impl<'a> Keys<'a> {
    fn of(secrets: &'a ConnectionTrafficSecrets, seq: u64) -> io::Result<Keys<'a>> {
        let (aead, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Aead::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Aead::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Aead::Chacha20Poly1305, key, iv)
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a cipher the kernel does not take",
                ))
            }
        };
        Ok(Keys {
            aead,
            key: key.as_ref(),
            iv: iv.as_ref(),
            seq,
        })
    }
}

/// Hands both directions' keys (each with the sequence number of its next record) to
/// the kernel; `socket` already has the ULP ([`set_ulp`]).
pub fn set_keys(
    socket: BorrowedFd<'_>,
    tls13: bool,
    tx: &ConnectionTrafficSecrets,
    tx_seq: u64,
    rx: &ConnectionTrafficSecrets,
    rx_seq: u64,
) -> io::Result<()> {
    set_both(
        socket,
        tls13,
        &Keys::of(tx, tx_seq)?,
        &Keys::of(rx, rx_seq)?,
    )
}

fn set_both(socket: BorrowedFd<'_>, tls13: bool, tx: &Keys, rx: &Keys) -> io::Result<()> {
    let mut info = crypto_info(tls13, tx)?;
    let sent = setsockopt(&socket, sockopt::TcpTlsTx, &info);
    zero(&mut info);
    sent?;
    let mut info = crypto_info(tls13, rx)?;
    let set = setsockopt(&socket, sockopt::TcpTlsRx, &info);
    zero(&mut info);
    set?;
    Ok(())
}

/// The kernel's crypto info for one direction. For the GCM ciphers rustls' 12-byte IV
/// is the kernel's 4-byte salt followed by its 8-byte IV; ChaCha20-Poly1305 takes all
/// 12 as its IV.
fn crypto_info(tls13: bool, keys: &Keys) -> io::Result<TlsCryptoInfo> {
    if keys.key.len() != keys.aead.key_len() || keys.iv.len() != 12 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "key or IV of the wrong length for the cipher",
        ));
    }
    let version = if tls13 {
        libc::TLS_1_3_VERSION
    } else {
        libc::TLS_1_2_VERSION
    };
    let rec_seq = keys.seq.to_be_bytes();
    let (key, iv) = (keys.key, keys.iv);
    Ok(match keys.aead {
        Aead::Aes128Gcm => {
            let mut c = libc::tls12_crypto_info_aes_gcm_128 {
                info: libc::tls_crypto_info {
                    version,
                    cipher_type: libc::TLS_CIPHER_AES_GCM_128,
                },
                iv: [0; 8],
                key: [0; 16],
                salt: [0; 4],
                rec_seq,
            };
            c.key.copy_from_slice(key);
            c.salt.copy_from_slice(&iv[..4]);
            c.iv.copy_from_slice(&iv[4..]);
            TlsCryptoInfo::Aes128Gcm(c)
        }
        Aead::Aes256Gcm => {
            let mut c = libc::tls12_crypto_info_aes_gcm_256 {
                info: libc::tls_crypto_info {
                    version,
                    cipher_type: libc::TLS_CIPHER_AES_GCM_256,
                },
                iv: [0; 8],
                key: [0; 32],
                salt: [0; 4],
                rec_seq,
            };
            c.key.copy_from_slice(key);
            c.salt.copy_from_slice(&iv[..4]);
            c.iv.copy_from_slice(&iv[4..]);
            TlsCryptoInfo::Aes256Gcm(c)
        }
        Aead::Chacha20Poly1305 => {
            let mut c = libc::tls12_crypto_info_chacha20_poly1305 {
                info: libc::tls_crypto_info {
                    version,
                    cipher_type: libc::TLS_CIPHER_CHACHA20_POLY1305,
                },
                iv: [0; 12],
                key: [0; 32],
                salt: [],
                rec_seq,
            };
            c.key.copy_from_slice(key);
            c.iv.copy_from_slice(iv);
            TlsCryptoInfo::Chacha20Poly1305(c)
        }
    })
}

fn zero(info: &mut TlsCryptoInfo) {
    match info {
        TlsCryptoInfo::Aes128Gcm(c) => {
            c.key.zeroize();
            c.iv.zeroize();
            c.salt.zeroize();
        }
        TlsCryptoInfo::Aes256Gcm(c) => {
            c.key.zeroize();
            c.iv.zeroize();
            c.salt.zeroize();
        }
        TlsCryptoInfo::Chacha20Poly1305(c) => {
            c.key.zeroize();
            c.iv.zeroize();
        }
    }
}

/// Sends the close_notify alert (the orderly end of the session) through the kernel,
/// as a record of the alert type. Best effort: the socket is closed next either way.
pub fn send_close_notify(socket: RawFd) -> io::Result<()> {
    const ALERT: u8 = 21;
    // Level warning (1), description close_notify (0).
    let alert = [1u8, 0u8];
    // SAFETY: the control buffer is sized by CMSG_SPACE for one byte of data and
    // aligned for cmsghdr; CMSG_FIRSTHDR of a msghdr whose control points at it is
    // that buffer's start; the iovec points at `alert`, alive for the call.
    unsafe {
        let space = libc::CMSG_SPACE(1) as usize;
        let mut control = [0u64; 4];
        debug_assert!(space <= std::mem::size_of_val(&control));
        let mut iov = libc::iovec {
            iov_base: alert.as_ptr() as *mut libc::c_void,
            iov_len: alert.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as usize;
        *libc::CMSG_DATA(cmsg) = ALERT;
        if libc::sendmsg(socket, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What a read error on a kernel-TLS socket means. The kernel answers a read that meets
/// a record other than application data (an alert such as close_notify, or a TLS 1.3
/// KeyUpdate it cannot follow) with EIO, and one that fails authentication with
/// EBADMSG.
pub fn map_read_error(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EIO) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "a TLS control record from the client (an alert such as close_notify, or a key update the kernel cannot follow)",
        ),
        Some(libc::EBADMSG) => io::Error::new(
            io::ErrorKind::InvalidData,
            "a TLS record from the client failed authentication",
        ),
        _ => e,
    }
}

/// An upper bound on the records one send of `bytes` seals: the kernel fills records to
/// [`RECORD_PLAINTEXT_MAX`], and a send may also close a record an earlier one left
/// open.
pub fn records_at_most(bytes: usize) -> u64 {
    bytes.div_ceil(RECORD_PLAINTEXT_MAX) as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(s: CipherSuite) -> SupportedCipherSuite {
        *rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .find(|c| c.suite() == s)
            .unwrap()
    }

    fn all() -> Support {
        Support {
            taken: [false, true]
                .iter()
                .flat_map(|v| Aead::ALL.iter().map(move |a| (*v, *a)))
                .collect(),
            unavailable: None,
        }
    }

    #[test]
    fn every_suite_rustls_negotiates_has_a_kernel_aead() {
        for s in rustls::crypto::ring::ALL_CIPHER_SUITES {
            assert!(aead_of(*s).is_some(), "{:?}", s.suite());
        }
    }

    #[test]
    fn a_session_goes_to_the_kernel_only_where_it_was_taken() {
        let v13 = Some(ProtocolVersion::TLSv1_3);
        let aes = Some(suite(CipherSuite::TLS13_AES_128_GCM_SHA256));
        assert_eq!(choose(true, &all(), v13, aes), Path::Kernel);
        assert!(matches!(choose(false, &all(), v13, aes), Path::User(_)));
        let none = Support {
            taken: vec![],
            unavailable: Some("no module".into()),
        };
        assert!(matches!(choose(true, &none, v13, aes), Path::User(_)));
        let only_12 = Support {
            taken: vec![(false, Aead::Aes128Gcm)],
            unavailable: None,
        };
        assert!(matches!(choose(true, &only_12, v13, aes), Path::User(_)));
        let v12 = Some(ProtocolVersion::TLSv1_2);
        let ecdhe = Some(suite(CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
        assert_eq!(choose(true, &only_12, v12, ecdhe), Path::Kernel);
        assert!(matches!(choose(true, &all(), None, aes), Path::User(_)));
    }

    #[test]
    fn gcm_iv_is_salt_then_explicit_part_and_the_sequence_is_big_endian() {
        let mut iv = [0u8; 12];
        iv.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let aes = Keys {
            aead: Aead::Aes128Gcm,
            key: &[7; 16],
            iv: &iv,
            seq: 0x0102,
        };
        let TlsCryptoInfo::Aes128Gcm(c) = crypto_info(true, &aes).unwrap() else {
            panic!("AES-128-GCM expected")
        };
        assert_eq!(c.salt, [0, 1, 2, 3]);
        assert_eq!(c.iv, [4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(c.key, [7; 16]);
        assert_eq!(c.rec_seq, [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(c.info.version, libc::TLS_1_3_VERSION);
        let chacha = Keys {
            aead: Aead::Chacha20Poly1305,
            key: &[9; 32],
            iv: &iv,
            seq: 5,
        };
        let TlsCryptoInfo::Chacha20Poly1305(c) = crypto_info(false, &chacha).unwrap() else {
            panic!("ChaCha20-Poly1305 expected")
        };
        assert_eq!(c.iv, iv);
        assert_eq!(c.info.version, libc::TLS_1_2_VERSION);
        let short = Keys {
            aead: Aead::Aes256Gcm,
            key: &[9; 16],
            iv: &iv,
            seq: 0,
        };
        assert!(
            crypto_info(true, &short).is_err(),
            "a 16-byte key for AES-256"
        );
    }

    #[test]
    fn record_bound_counts_a_partial_record_and_an_empty_write() {
        assert_eq!(records_at_most(0), 1);
        assert_eq!(records_at_most(1), 2);
        assert_eq!(records_at_most(RECORD_PLAINTEXT_MAX), 2);
        assert_eq!(records_at_most(RECORD_PLAINTEXT_MAX + 1), 3);
    }

    #[test]
    fn the_probe_answers_on_any_kernel() {
        // With or without the tls module: a description either way, never a panic.
        let s = probe();
        assert!(!s.describe().is_empty());
        assert!(s.unavailable.is_some() || !s.taken.is_empty());
    }
}
