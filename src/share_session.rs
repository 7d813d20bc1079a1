//! A connection's share session (KIP-932), the state ShareFetch and ShareAcknowledge
//! keep between a share consumer's requests (`kafka::api::share_session` serves them).
//!
//! A share session is Kafka's: a member opens it with epoch 0 (replacing the one it had),
//! names the partitions it reads (kept by the session, less those it forgets), and
//! numbers each next request 1, 2, … (after `i32::MAX`, 1 again); -1 closes it after its
//! acknowledgements, and what the member still holds on its partitions is released. A
//! session lives with its connection, as Kafka's ends when the connection closes (its
//! records are released then too). At most `MAX_SHARE_SESSIONS` are open on a broker
//! (Kafka's `group.share.max.share.sessions`): a further epoch 0 is
//! SHARE_SESSION_LIMIT_REACHED.
//!
//! Invariants: `OPEN_SESSIONS` counts the sessions held by connections of this broker,
//! each once from its opening to its close or its connection's end; a connection's share
//! requests hold their turns in the order they came.

use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use uuid::Uuid;

/// Kafka's `group.share.max.share.sessions` default.
pub const MAX_SHARE_SESSIONS: usize = 2000;

static OPEN_SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// The epoch of a request that opens a session, and of one that closes it.
pub const OPEN_EPOCH: i32 = 0;
pub const CLOSE_EPOCH: i32 = -1;

/// One connection's share session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSession {
    pub group: String,
    pub member: String,
    /// The epoch the next request must carry.
    pub next_epoch: i32,
    /// The partitions the member reads through it: (topic id, partition).
    pub partitions: BTreeSet<(Uuid, i32)>,
}

/// The share session a connection holds, if any, and the turns of the connection's
/// share requests: a connection's requests are served concurrently, but one share
/// request's session step and acknowledgements must come after the previous one's, as
/// Kafka serves a connection's requests one at a time (an ACCEPT, then a close, must not
/// become a release, then a refused ACCEPT).
#[derive(Default)]
pub struct ShareSessionSlot {
    session: RefCell<Option<ShareSession>>,
    /// (the next ticket to hand out, the ticket whose turn it is).
    turns: std::cell::Cell<(u64, u64)>,
    turn_ended: event_listener::Event,
}

impl Drop for ShareSessionSlot {
    fn drop(&mut self) {
        if self.session.get_mut().is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A share request's turn on its connection's session, until dropped.
pub struct Turn<'a> {
    slot: &'a ShareSessionSlot,
    ticket: u64,
}

impl Turn<'_> {
    /// Whether a later share request of the connection waits for this one (a long
    /// poll then ends: the client has moved on).
    pub fn others_wait(&self) -> bool {
        self.slot.turns.get().0 > self.ticket + 1
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let (next, _) = self.slot.turns.get();
        self.slot.turns.set((next, self.ticket + 1));
        self.slot.turn_ended.notify(usize::MAX);
    }
}

/// Why a request's session epoch is refused (its top-level error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    NotFound,
    InvalidEpoch,
    LimitReached,
}

impl SessionError {
    pub fn code(self) -> i16 {
        match self {
            SessionError::NotFound => ResponseError::ShareSessionNotFound,
            SessionError::InvalidEpoch => ResponseError::InvalidShareSessionEpoch,
            SessionError::LimitReached => ResponseError::ShareSessionLimitReached,
        }
        .code()
    }
}

/// What a request's epoch does to the session `current` (pure): the session after it
/// (`None`: closed), and the session whose records are to be released (an older one
/// replaced is not: its records time out, as in Kafka). `fetch` says whether the request
/// is a ShareFetch (which may open a session) or a ShareAcknowledge (which may not).
pub fn step(
    current: Option<&ShareSession>,
    group: &str,
    member: &str,
    epoch: i32,
    fetch: bool,
) -> Result<Option<ShareSession>, SessionError> {
    let ours = current.filter(|s| s.group == group && s.member == member);
    match epoch {
        OPEN_EPOCH if fetch => Ok(Some(ShareSession {
            group: group.to_string(),
            member: member.to_string(),
            next_epoch: 1,
            partitions: BTreeSet::new(),
        })),
        OPEN_EPOCH => Err(SessionError::InvalidEpoch),
        CLOSE_EPOCH => match ours {
            Some(_) => Ok(None),
            None => Err(SessionError::NotFound),
        },
        e => match ours {
            None => Err(SessionError::NotFound),
            Some(s) if s.next_epoch != e => Err(SessionError::InvalidEpoch),
            Some(s) => {
                let mut next = s.clone();
                next.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                Ok(Some(next))
            }
        },
    }
}

impl ShareSessionSlot {
    /// Takes the next turn: call in request order, before anything waits, and hold the
    /// turn until the request is served.
    pub async fn turn(&self) -> Turn<'_> {
        let (next, serving) = self.turns.get();
        self.turns.set((next + 1, serving));
        let ticket = next;
        loop {
            if self.turns.get().1 == ticket {
                return Turn { slot: self, ticket };
            }
            let listener = self.turn_ended.listen();
            if self.turns.get().1 == ticket {
                return Turn { slot: self, ticket };
            }
            listener.await;
        }
    }

    pub fn get(&self) -> Option<ShareSession> {
        self.session.borrow().clone()
    }

    /// Applies a request's epoch; returns the session closed by it, if any.
    pub fn advance(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        fetch: bool,
    ) -> Result<Option<ShareSession>, SessionError> {
        let mut slot = self.session.borrow_mut();
        let next = step(slot.as_ref(), group, member, epoch, fetch)?;
        let opening = slot.is_none() && next.is_some();
        if opening && OPEN_SESSIONS.fetch_add(1, Ordering::Relaxed) >= MAX_SHARE_SESSIONS {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
            return Err(SessionError::LimitReached);
        }
        if next.is_none() && slot.is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
        let closed = if next.is_none() { slot.take() } else { None };
        *slot = next;
        Ok(closed)
    }

    /// Adds and removes partitions of the open session.
    pub fn update(&self, add: impl IntoIterator<Item = (Uuid, i32)>, forget: &[(Uuid, i32)]) {
        if let Some(s) = self.session.borrow_mut().as_mut() {
            s.partitions.extend(add);
            for p in forget {
                s.partitions.remove(p);
            }
        }
    }

    /// The session, taken as its connection ends.
    pub fn take(&self) -> Option<ShareSession> {
        let taken = self.session.borrow_mut().take();
        if taken.is_some() {
            OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> ShareSession {
        step(None, "g", "m", OPEN_EPOCH, true).unwrap().unwrap()
    }

    #[test]
    fn epochs_open_advance_and_close_a_session_as_kafkas_do() {
        let s = open();
        assert_eq!(s.next_epoch, 1);
        assert_eq!(
            step(Some(&s), "g", "m", 2, true),
            Err(SessionError::InvalidEpoch)
        );
        let s1 = step(Some(&s), "g", "m", 1, false).unwrap().unwrap();
        assert_eq!(s1.next_epoch, 2);
        assert_eq!(step(Some(&s1), "g", "m", -1, false), Ok(None));
        assert_eq!(step(None, "g", "m", 1, true), Err(SessionError::NotFound));
        assert_eq!(step(None, "g", "m", -1, true), Err(SessionError::NotFound));
        // Another member, or another group, has no session here.
        assert_eq!(
            step(Some(&s1), "g", "other", 2, true),
            Err(SessionError::NotFound)
        );
        // An acknowledgement cannot open a session.
        assert_eq!(
            step(None, "g", "m", 0, false),
            Err(SessionError::InvalidEpoch)
        );
        let mut late = s1.clone();
        late.next_epoch = i32::MAX;
        assert_eq!(
            step(Some(&late), "g", "m", i32::MAX, true)
                .unwrap()
                .unwrap()
                .next_epoch,
            1
        );
    }
}
