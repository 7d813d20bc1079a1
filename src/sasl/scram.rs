//! The server side of SASL/SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: SHA-256 and
//! SHA-512, no channel binding, no extensions (Kafka's `tokenauth` is for delegation
//! tokens, not served), an authorization id only if it equals the user.
//!
//! Invariants: the client is authenticated only when its proof matches the stored key
//! (compared in constant time) over this exchange's own auth message and nonces; a
//! failure says why in Kafka's words and never echoes key material. HMACs, digests and
//! the nonce come from ring; only the message grammar is written here.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use corelog_controller::scram::{ScramCredential, ScramMechanism};
use ring::{digest, hmac, rand::SecureRandom};
use subtle::ConstantTimeEq;

fn algorithms(m: ScramMechanism) -> (hmac::Algorithm, &'static digest::Algorithm) {
    match m {
        ScramMechanism::Sha256 => (hmac::HMAC_SHA256, &digest::SHA256),
        ScramMechanism::Sha512 => (hmac::HMAC_SHA512, &digest::SHA512),
    }
}

fn mac(m: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let k = hmac::Key::new(algorithms(m).0, key);
    hmac::sign(&k, data).as_ref().to_vec()
}

/// The stored credential for a salted password (what AlterUserScramCredentials sends).
pub fn credential(
    m: ScramMechanism,
    salt: &[u8],
    iterations: i32,
    salted_password: &[u8],
) -> ScramCredential {
    let client_key = mac(m, salted_password, b"Client Key");
    let stored_key = digest::digest(algorithms(m).1, &client_key)
        .as_ref()
        .to_vec();
    ScramCredential {
        salt: salt.to_vec(),
        iterations,
        stored_key,
        server_key: mac(m, salted_password, b"Server Key"),
    }
}

/// One exchange, from the client's first message to its final one.
pub struct ScramServer {
    mechanism: ScramMechanism,
    step: Step,
}

enum Step {
    First,
    Final {
        user: String,
        gs2_header: String,
        client_nonce: String,
        nonce: String,
        /// client-first-bare "," server-first
        auth_prefix: String,
        credential: ScramCredential,
    },
    Done,
}

/// What a message leads to.
pub enum Outcome {
    /// Send this to the client and wait for its next message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send the server's final message.
    Authenticated { user: String, last: Vec<u8> },
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            step: Step::First,
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Takes the client's next message; `lookup` finds a user's credential.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Outcome, String> {
        let message = std::str::from_utf8(message).map_err(|_| "SCRAM message is not UTF-8")?;
        match std::mem::replace(&mut self.step, Step::Done) {
            Step::First => self.first(message, lookup),
            Step::Final {
                user,
                gs2_header,
                client_nonce,
                nonce,
                auth_prefix,
                credential,
            } => {
                let fin = ClientFinal::parse(message)?;
                let expected_binding = B64.encode(gs2_header.as_bytes());
                if fin.channel_binding != expected_binding {
                    return Err("Invalid channel binding".into());
                }
                // librdkafka before 2.6.1 sends its own nonce again in front of the
                // combined one (confluentinc/librdkafka#4895); Kafka 3.8.1-3.9 accept
                // that form, and so does this broker: the server nonce is still checked
                // whole, and the proof covers the message as sent. (Debian's kcat links
                // librdkafka 2.0.)
                let doubled = fin
                    .nonce
                    .strip_prefix(client_nonce.as_str())
                    .is_some_and(|rest| rest == nonce);
                if fin.nonce != nonce && !doubled {
                    return Err("Invalid nonce".into());
                }
                let auth_message = format!("{auth_prefix},{}", fin.without_proof);
                let signature = mac(
                    self.mechanism,
                    &credential.stored_key,
                    auth_message.as_bytes(),
                );
                if fin.proof.len() != signature.len() {
                    return Err("Invalid client proof".into());
                }
                let client_key: Vec<u8> = fin
                    .proof
                    .iter()
                    .zip(&signature)
                    .map(|(a, b)| a ^ b)
                    .collect();
                let computed = digest::digest(algorithms(self.mechanism).1, &client_key);
                if !bool::from(computed.as_ref().ct_eq(&credential.stored_key)) {
                    return Err("Invalid client proof".into());
                }
                let server_signature = mac(
                    self.mechanism,
                    &credential.server_key,
                    auth_message.as_bytes(),
                );
                Ok(Outcome::Authenticated {
                    user,
                    last: format!("v={}", B64.encode(server_signature)).into_bytes(),
                })
            }
            Step::Done => Err("SCRAM exchange already finished".into()),
        }
    }

    fn first(
        &mut self,
        message: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Outcome, String> {
        // gs2-header: "n,," / "y,," or with an authzid "n,a=NAME,".
        let mut parts = message.splitn(3, ',');
        let cb = parts.next().unwrap_or_default();
        let authzid = parts.next().ok_or("Invalid SCRAM client first message")?;
        let bare = parts.next().ok_or("Invalid SCRAM client first message")?;
        if cb != "n" && cb != "y" {
            return Err("Channel binding is not supported".into());
        }
        let gs2_header = format!("{cb},{authzid},");
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", v)) => user = Some(sasl_name(v)?),
                Some(("r", v)) => client_nonce = Some(v.to_string()),
                Some(("m", _)) => return Err("Mandatory SCRAM extensions are not supported".into()),
                Some((k, _)) if k.len() == 1 => {
                    return Err(format!("Invalid SCRAM client first message attribute {k}"))
                }
                // Kafka's extensions (tokenauth=true): delegation tokens are not served.
                Some(("tokenauth", _)) => {
                    return Err("Delegation token authentication is not supported".into())
                }
                _ => return Err("Invalid SCRAM client first message".into()),
            }
        }
        let user = user.ok_or("SCRAM client first message has no user")?;
        let client_nonce = client_nonce.ok_or("SCRAM client first message has no nonce")?;
        if let Some(a) = authzid.strip_prefix("a=") {
            if sasl_name(a)? != user {
                return Err(
                    "Authentication failed: Client requested an authorization id that is different from username"
                        .into(),
                );
            }
        } else if !authzid.is_empty() {
            return Err("Invalid SCRAM client first message".into());
        }
        let credential = lookup(&user).ok_or("Authentication failed: Invalid user credentials")?;
        let mut random = [0u8; 24];
        ring::rand::SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| "no randomness for a nonce")?;
        // Alphanumeric, as Kafka's server nonces are: some clients mishandle '+', '/'.
        let server_nonce: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        self.step = Step::Final {
            user,
            gs2_header,
            client_nonce,
            nonce,
            auth_prefix: format!("{bare},{server_first}"),
            credential,
        };
        Ok(Outcome::Continue(server_first.into_bytes()))
    }
}

/// A saslname with RFC 5802's escapes (=2C is ',', =3D is '=').
fn sasl_name(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("Invalid SCRAM user name".into()),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

struct ClientFinal<'a> {
    channel_binding: &'a str,
    nonce: &'a str,
    proof: Vec<u8>,
    without_proof: &'a str,
}

impl<'a> ClientFinal<'a> {
    fn parse(m: &'a str) -> Result<ClientFinal<'a>, String> {
        let at = m.rfind(",p=").ok_or("Invalid SCRAM client final message")?;
        let without_proof = &m[..at];
        let proof = B64
            .decode(&m[at + 3..])
            .map_err(|_| "Invalid SCRAM client proof encoding")?;
        let mut channel_binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("c", v)) => channel_binding = Some(v),
                Some(("r", v)) => nonce = Some(v),
                _ => return Err("Invalid SCRAM client final message".into()),
            }
        }
        Ok(ClientFinal {
            channel_binding: channel_binding
                .ok_or("SCRAM client final message has no channel binding")?,
            nonce: nonce.ok_or("SCRAM client final message has no nonce")?,
            proof,
            without_proof,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, with its nonce made ours: the client side
    /// computed here from the password, as a client would.
    #[test]
    fn a_client_with_the_password_is_authenticated_and_a_wrong_one_is_not() {
        let m = ScramMechanism::Sha256;
        let salt = b"0123456789abcdef";
        let iterations = 4096;
        let salted = |password: &str| {
            let mut out = [0u8; 32];
            ring::pbkdf2::derive(
                ring::pbkdf2::PBKDF2_HMAC_SHA256,
                std::num::NonZeroU32::new(iterations as u32).unwrap(),
                salt,
                password.as_bytes(),
                &mut out,
            );
            out.to_vec()
        };
        let stored = credential(m, salt, iterations, &salted("pencil"));
        for (password, ok) in [("pencil", true), ("pencil2", false)] {
            let mut server = ScramServer::new(m);
            let first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
            let Outcome::Continue(server_first) = server
                .step(format!("n,,{first_bare}").as_bytes(), |u| {
                    (u == "user").then(|| stored.clone())
                })
                .expect("first step")
            else {
                panic!("continues")
            };
            let server_first = String::from_utf8(server_first).unwrap();
            let nonce = server_first
                .split(',')
                .next()
                .unwrap()
                .trim_start_matches("r=");
            let without_proof = format!("c=biws,r={nonce}");
            let auth = format!("{first_bare},{server_first},{without_proof}");
            let salted_password = salted(password);
            let client_key = mac(m, &salted_password, b"Client Key");
            let stored_key = digest::digest(&digest::SHA256, &client_key);
            let signature = mac(m, stored_key.as_ref(), auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let fin = format!("{without_proof},p={}", B64.encode(proof));
            let r = server.step(fin.as_bytes(), |_| unreachable!());
            match (r, ok) {
                (Ok(Outcome::Authenticated { user, last }), true) => {
                    assert_eq!(user, "user");
                    let expect = mac(m, &mac(m, &salted_password, b"Server Key"), auth.as_bytes());
                    assert_eq!(last, format!("v={}", B64.encode(expect)).into_bytes());
                }
                (Err(e), false) => assert_eq!(e, "Invalid client proof"),
                _ => panic!("password {password}: unexpected outcome"),
            }
        }
        let mut server = ScramServer::new(m);
        assert!(server.step(b"n,,n=nobody,r=x", |_| None).is_err());
        let mut server = ScramServer::new(m);
        assert!(server
            .step(b"n,,n=user,r=abc", |_| Some(stored.clone()))
            .is_ok());
        let replayed = server.step(b"c=biws,r=abcdef,p=AAAA", |_| None);
        assert_eq!(replayed.err().as_deref(), Some("Invalid nonce"));
        let mut server = ScramServer::new(m);
        assert!(server
            .step(b"n,a=other,n=user,r=x", |_| Some(stored.clone()))
            .is_err());
        assert_eq!(sasl_name("a=2Cb=3D").unwrap(), "a,b=");
    }
}
