//! The client side of SASL's exchanges as Kafka brokers run them (SaslAuthenticate,
//! KIP-152): PLAIN (one message) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677: no channel
//! binding, no extensions). A pure state machine: it turns the server's messages into
//! the client's next one; `connection.rs` carries them.
//!
//! Invariants: the client's SCRAM proof is sent only for a server nonce that extends its
//! own and an iteration count within Kafka's bounds (so a server cannot make the client
//! burn CPU or downgrade the hashing); the exchange succeeds only when the server's final
//! signature verifies (it, too, knew the password's keys). HMAC, PBKDF2, digests and the
//! nonce come from ring; errors never quote a password or key.

use crate::security::{SaslCredentials, SaslMechanism};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use std::num::NonZeroU32;

/// Kafka's bounds on a SCRAM credential's iteration count.
const ITERATIONS_MIN: u32 = 4096;
const ITERATIONS_MAX: u32 = 16384;

/// One exchange's progress.
pub struct SaslClient {
    credentials: SaslCredentials,
    step: Step,
}

enum Step {
    Start,
    /// SCRAM: the client-first message sent.
    ScramFirstSent {
        nonce: String,
        first_bare: String,
    },
    /// SCRAM: the proof sent; the server's signature expected.
    ScramFinalSent {
        server_signature: Vec<u8>,
    },
    Done,
}

/// What the client does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Send these bytes in a SaslAuthenticate request.
    Send(Vec<u8>),
    /// Authenticated.
    Done,
}

impl SaslClient {
    pub fn new(credentials: SaslCredentials) -> SaslClient {
        SaslClient {
            credentials,
            step: Step::Start,
        }
    }

    pub fn mechanism(&self) -> SaslMechanism {
        self.credentials.mechanism
    }

    /// The first message (the server has sent nothing yet).
    pub fn start(&mut self) -> Result<Vec<u8>, String> {
        let random = ring::rand::SystemRandom::new();
        let mut raw = [0u8; 24];
        random
            .fill(&mut raw)
            .map_err(|_| "no random bytes for a SCRAM nonce".to_string())?;
        Ok(self.start_with_nonce(&B64.encode(raw)))
    }

    fn start_with_nonce(&mut self, nonce: &str) -> Vec<u8> {
        let c = &self.credentials;
        match c.mechanism {
            SaslMechanism::Plain => {
                self.step = Step::Done;
                [b"\0", c.username.as_bytes(), b"\0", c.password().as_bytes()].concat()
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let first_bare = format!("n={},r={nonce}", escape(&c.username));
                let message = format!("n,,{first_bare}").into_bytes();
                self.step = Step::ScramFirstSent {
                    nonce: nonce.to_string(),
                    first_bare,
                };
                message
            }
        }
    }

    /// The server's answer to the last message sent.
    pub fn answer(&mut self, server: &[u8]) -> Result<Next, String> {
        match std::mem::replace(&mut self.step, Step::Done) {
            Step::Start => Err("the SASL exchange has not started".into()),
            Step::Done => Ok(Next::Done),
            Step::ScramFirstSent { nonce, first_bare } => {
                let server_first = std::str::from_utf8(server)
                    .map_err(|_| "the server's SCRAM message is not UTF-8".to_string())?;
                let (message, server_signature) =
                    self.client_final(&nonce, &first_bare, server_first)?;
                self.step = Step::ScramFinalSent { server_signature };
                Ok(Next::Send(message))
            }
            Step::ScramFinalSent { server_signature } => {
                let text = std::str::from_utf8(server)
                    .map_err(|_| "the server's SCRAM message is not UTF-8".to_string())?;
                if let Some(e) = text.strip_prefix("e=") {
                    return Err(format!("the server refused the SCRAM proof: {e}"));
                }
                let v = attribute(text, 'v')
                    .ok_or("the server's final SCRAM message has no signature")?;
                let v = B64
                    .decode(v)
                    .map_err(|_| "the server's SCRAM signature is not base64".to_string())?;
                if !ring_eq(&v, &server_signature) {
                    return Err("the server's SCRAM signature does not verify: it does not know this user's credential".into());
                }
                Ok(Next::Done)
            }
        }
    }

    fn client_final(
        &self,
        nonce: &str,
        first_bare: &str,
        server_first: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), String> {
        if let Some(e) = server_first.strip_prefix("e=") {
            return Err(format!("the server refused the SCRAM exchange: {e}"));
        }
        if server_first.starts_with("m=") {
            return Err(
                "the server's SCRAM message asks for an extension this client does not know".into(),
            );
        }
        let server_nonce =
            attribute(server_first, 'r').ok_or("no nonce in the server's SCRAM message")?;
        if !server_nonce.starts_with(nonce) || server_nonce.len() == nonce.len() {
            return Err("the server's SCRAM nonce does not extend the client's".into());
        }
        let salt = attribute(server_first, 's').ok_or("no salt in the server's SCRAM message")?;
        let salt = B64
            .decode(salt)
            .map_err(|_| "the server's SCRAM salt is not base64".to_string())?;
        let iterations: u32 = attribute(server_first, 'i')
            .and_then(|i| i.parse().ok())
            .ok_or("no iteration count in the server's SCRAM message")?;
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(format!(
                "the server's SCRAM iteration count {iterations} is outside {ITERATIONS_MIN}..={ITERATIONS_MAX}"
            ));
        }
        let (mac, pbkdf, hash) = match self.credentials.mechanism {
            SaslMechanism::ScramSha256 => (
                hmac::HMAC_SHA256,
                pbkdf2::PBKDF2_HMAC_SHA256,
                &digest::SHA256,
            ),
            SaslMechanism::ScramSha512 => (
                hmac::HMAC_SHA512,
                pbkdf2::PBKDF2_HMAC_SHA512,
                &digest::SHA512,
            ),
            SaslMechanism::Plain => unreachable!("PLAIN has no second step"),
        };
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(
            pbkdf,
            NonZeroU32::new(iterations).expect("bounded above zero"),
            &salt,
            self.credentials.password().as_bytes(),
            &mut salted,
        );
        let sign = |key: &[u8], data: &[u8]| hmac::sign(&hmac::Key::new(mac, key), data);
        let client_key = sign(&salted, b"Client Key");
        let stored_key = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={server_nonce}");
        let auth_message = format!("{first_bare},{server_first},{without_proof}");
        let client_signature = sign(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(client_signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = sign(&salted, b"Server Key");
        let server_signature = sign(server_key.as_ref(), auth_message.as_bytes());
        let message = format!("{without_proof},p={}", B64.encode(proof)).into_bytes();
        Ok((message, server_signature.as_ref().to_vec()))
    }
}

/// RFC 5802's saslname: `,` and `=` escaped.
fn escape(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

/// The value of attribute `name` in a SCRAM message (`a=value,b=value`).
fn attribute(message: &str, name: char) -> Option<&str> {
    message.split(',').find_map(|part| {
        let mut chars = part.chars();
        (chars.next() == Some(name) && chars.next() == Some('=')).then(|| &part[2..])
    })
}

fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant time, though only the server's own signature is compared here.
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(m: SaslMechanism, user: &str, password: &str) -> SaslCredentials {
        SaslCredentials::new(m, user.into(), password.into())
    }

    #[test]
    fn plain_is_one_message() {
        let mut c = SaslClient::new(creds(SaslMechanism::Plain, "alice", "secret"));
        assert_eq!(c.start().unwrap(), b"\0alice\0secret");
        assert_eq!(c.answer(b"").unwrap(), Next::Done);
    }

    /// RFC 7677's SCRAM-SHA-256 example, message for message.
    #[test]
    fn scram_sha256_follows_rfc7677() {
        let mut c = SaslClient::new(creds(SaslMechanism::ScramSha256, "user", "pencil"));
        let first = c.start_with_nonce("rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let Next::Send(last) = c.answer(server_first).unwrap() else {
            panic!("a proof is sent");
        };
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            c.answer(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            Next::Done
        );
    }

    #[test]
    fn a_server_that_does_not_know_the_key_is_refused() {
        let mut c = SaslClient::new(creds(SaslMechanism::ScramSha256, "user", "pencil"));
        c.start_with_nonce("abc");
        c.answer(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        let e = c.answer(b"v=AAAA").unwrap_err();
        assert!(e.contains("does not verify"), "{e}");
        assert!(!e.contains("pencil"));
    }

    #[test]
    fn bad_server_first_messages_are_refused() {
        for (server, why) in [
            (&b"r=xyz1,s=c2FsdA==,i=4096"[..], "extend"),
            (b"r=abc,s=c2FsdA==,i=4096", "extend"),
            (b"r=abcd,s=c2FsdA==,i=100", "iteration"),
            (b"r=abcd,s=c2FsdA==,i=1000000", "iteration"),
            (b"r=abcd,i=4096", "salt"),
            (b"e=unknown-user", "refused"),
            (b"m=ext,r=abcd,s=c2FsdA==,i=4096", "extension"),
            (b"\xff", "UTF-8"),
        ] {
            let mut c = SaslClient::new(creds(SaslMechanism::ScramSha512, "u", "p"));
            c.start_with_nonce("abc");
            let e = c.answer(server).unwrap_err();
            assert!(e.contains(why), "{e} for {server:?}");
        }
    }

    #[test]
    fn user_names_are_escaped() {
        let mut c = SaslClient::new(creds(SaslMechanism::ScramSha512, "a=b,c", "p"));
        assert_eq!(c.start_with_nonce("n"), b"n,,n=a=3Db=2Cc,r=n");
    }
}
