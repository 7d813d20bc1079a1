//! AlterUserScramCredentials (v0, KIP-554): SCRAM credentials set and deleted through
//! the controller, what `kafka-configs --alter --entity-type users --add-config
//! 'SCRAM-SHA-512=[password=…]'` sends. The client salts the password; the broker keeps
//! only the stored and server keys derived from it (`sasl::scram::credential`).
//!
//! Kafka's checks, one result per user in the order first named: a user named twice in
//! one request is DUPLICATE_RESOURCE; an empty user, an empty salt or salted password,
//! or iterations outside 4096..=16384 UNACCEPTABLE_CREDENTIAL; a mechanism other than
//! SCRAM-SHA-256/512 UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not
//! exist RESOURCE_NOT_FOUND. The valid users' changes are committed together.

use super::admin_change::send_admin_change;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_controller::scram::{ScramMechanism, ScramUpsertion, ITERATIONS_MAX, ITERATIONS_MIN};
use corelog_shards::mesh::AdminChange;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct AlterUserScramCredentials;

type Refusal = (ResponseError, String);

impl Handler for AlterUserScramCredentials {
    const KEY: ApiKey = ApiKey::AlterUserScramCredentials;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = AlterUserScramCredentialsRequest;
    type Response = AlterUserScramCredentialsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        // Users in the order first named, each with its outcome so far.
        let mut users: Vec<(String, Option<Refusal>)> = Vec::new();
        let mut named = std::collections::HashMap::<String, usize>::new();
        let mut note = |user: &str| -> usize {
            if let Some(i) = named.get(user) {
                return *i;
            }
            users.push((user.to_string(), None));
            named.insert(user.to_string(), users.len() - 1);
            users.len() - 1
        };
        let mut pairs = std::collections::HashMap::<(String, i8), usize>::new();
        let mut deletions = Vec::new();
        let mut upsertions = Vec::new();
        let mut checks: Vec<(usize, Option<Refusal>)> = Vec::new();
        for d in &req.deletions {
            let i = note(d.name.as_str());
            *pairs.entry((d.name.to_string(), d.mechanism)).or_default() += 1;
            let refusal = match ScramMechanism::from_wire(d.mechanism) {
                None => Some(unknown_mechanism()),
                Some(_) if d.name.is_empty() => Some(empty_user()),
                Some(m) if meta.scram.get(d.name.as_str(), m).is_none() => Some((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".into(),
                )),
                Some(m) => {
                    deletions.push((i, (d.name.to_string(), m)));
                    None
                }
            };
            checks.push((i, refusal));
        }
        for u in &req.upsertions {
            let i = note(u.name.as_str());
            *pairs.entry((u.name.to_string(), u.mechanism)).or_default() += 1;
            let refusal = match ScramMechanism::from_wire(u.mechanism) {
                None => Some(unknown_mechanism()),
                Some(_) if u.name.is_empty() => Some(empty_user()),
                Some(_) if u.iterations < ITERATIONS_MIN => Some((
                    ResponseError::UnacceptableCredential,
                    format!("Too few iterations: at least {ITERATIONS_MIN}"),
                )),
                Some(_) if u.iterations > ITERATIONS_MAX => Some((
                    ResponseError::UnacceptableCredential,
                    format!("Too many iterations: at most {ITERATIONS_MAX}"),
                )),
                Some(_) if u.salt.is_empty() || u.salted_password.is_empty() => Some((
                    ResponseError::UnacceptableCredential,
                    "Salt and salted password must not be empty".into(),
                )),
                Some(m) => {
                    upsertions.push((
                        i,
                        ScramUpsertion {
                            user: u.name.to_string(),
                            mechanism: m,
                            credential: crate::sasl::scram::credential(
                                m,
                                &u.salt,
                                u.iterations,
                                &u.salted_password,
                            ),
                        },
                    ));
                    None
                }
            };
            checks.push((i, refusal));
        }
        for ((user, _), n) in &pairs {
            if *n > 1 {
                if let Some(i) = named.get(user) {
                    users[*i].1 = Some((
                        ResponseError::DuplicateResource,
                        "A user credential cannot be altered twice in the same request".into(),
                    ));
                }
            }
        }
        for (i, refusal) in checks {
            if users[i].1.is_none() {
                users[i].1 = refusal;
            }
        }
        // ALTER on the cluster, else every user named is refused.
        if !Access::new(ctx, call).allows_cluster(Op::Alter) {
            for u in users.iter_mut() {
                u.1 = Some((
                    ResponseError::ClusterAuthorizationFailed,
                    "Cluster authorization failed.".to_string(),
                ));
            }
        }
        let ok = |i: &usize| users[*i].1.is_none();
        let deletions: Vec<_> = deletions.into_iter().filter(|(i, _)| ok(i)).collect();
        let upsertions: Vec<_> = upsertions.into_iter().filter(|(i, _)| ok(i)).collect();
        let touched: std::collections::BTreeSet<usize> = deletions
            .iter()
            .map(|(i, _)| *i)
            .chain(upsertions.iter().map(|(i, _)| *i))
            .collect();
        if !touched.is_empty() {
            let deletions = deletions.into_iter().map(|(_, d)| d).collect();
            let upsertions = upsertions.into_iter().map(|(_, u)| u).collect();
            let r = send_admin_change(ctx, 1, |reply| AdminChange::AlterScramCredentials {
                deletions,
                upsertions,
                reply,
            })
            .await;
            if let Some(Err(e)) = r.into_iter().next() {
                for i in &touched {
                    users[*i].1 = Some((ResponseError::UnknownServerError, e.to_string()));
                }
            }
        }
        let mut body = AlterUserScramCredentialsResponse::default();
        for (user, refusal) in users {
            let mut r = AlterUserScramCredentialsResult::default();
            r.user = StrBytes::from_string(user);
            if let Some((code, message)) = refusal {
                r.error_code = code.code();
                r.error_message = Some(StrBytes::from_string(message));
            }
            body.results.push(r);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for res in &r.results {
            each(res.error_code);
        }
    }
}

fn unknown_mechanism() -> Refusal {
    (
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism".into(),
    )
}

fn empty_user() -> Refusal {
    (
        ResponseError::UnacceptableCredential,
        "Username must not be empty".into(),
    )
}
