//! SCRAM credentials (KIP-554) as the metadata log keeps them: per user and mechanism,
//! the salt, the iteration count, and the stored and server keys of RFC 5802 — never
//! the password, nor the salted password it was derived from.
//!
//! Invariants: `iterations` is within Kafka's bounds ([`ITERATIONS_MIN`],
//! [`ITERATIONS_MAX`]) and a user name is non-empty (checked at the edge before a
//! command is proposed; applying is total). Key material is never printed: `Debug`
//! shows lengths only, because commands are logged.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Kafka's bounds on a SCRAM credential's iteration count.
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;

/// The SCRAM mechanisms, with Kafka's wire numbers (AlterUserScramCredentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    pub fn from_wire(n: i8) -> Option<ScramMechanism> {
        match n {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha512),
            _ => None,
        }
    }

    pub fn wire(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        match name {
            "SCRAM-SHA-256" => Some(Self::Sha256),
            "SCRAM-SHA-512" => Some(Self::Sha512),
            _ => None,
        }
    }
}

/// One user's credential for one mechanism.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ScramCredential {{ iterations: {}, salt: {} bytes, keys: redacted }}",
            self.iterations,
            self.salt.len()
        )
    }
}

/// A credential to set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub user: String,
    pub mechanism: ScramMechanism,
    pub credential: ScramCredential,
}

/// Every user's SCRAM credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentials {
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

impl ScramCredentials {
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users.get(user)?.get(&mechanism)
    }

    /// A user's mechanisms and iteration counts.
    pub fn describe(&self, user: &str) -> Option<Vec<(ScramMechanism, i32)>> {
        self.users
            .get(user)
            .map(|m| m.iter().map(|(k, c)| (*k, c.iterations)).collect())
    }

    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// Deletions first, then upsertions (a request never names one pair in both: the
    /// edge refuses that as a duplicate).
    pub fn alter(&mut self, deletions: &[(String, ScramMechanism)], upsertions: &[ScramUpsertion]) {
        for (user, mechanism) in deletions {
            if let Some(m) = self.users.get_mut(user) {
                m.remove(mechanism);
                if m.is_empty() {
                    self.users.remove(user);
                }
            }
        }
        for u in upsertions {
            debug_assert!(!u.user.is_empty(), "checked at the edge");
            self.users
                .entry(u.user.clone())
                .or_default()
                .insert(u.mechanism, u.credential.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(i: i32) -> ScramCredential {
        ScramCredential {
            salt: vec![1; 16],
            iterations: i,
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
        }
    }

    #[test]
    fn upsert_then_delete_and_nothing_secret_in_debug() {
        let mut c = ScramCredentials::default();
        c.alter(
            &[],
            &[ScramUpsertion {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha512,
                credential: cred(8192),
            }],
        );
        assert_eq!(
            c.describe("alice"),
            Some(vec![(ScramMechanism::Sha512, 8192)])
        );
        assert!(c.get("alice", ScramMechanism::Sha256).is_none());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("2, 2") && shown.contains("redacted"),
            "{shown}"
        );
        c.alter(&[("alice".into(), ScramMechanism::Sha512)], &[]);
        assert_eq!(c.describe("alice"), None);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<ScramCredentials>(&json).unwrap(), c);
    }
}
