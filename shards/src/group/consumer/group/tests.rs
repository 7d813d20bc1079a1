use super::super::embedded;
use super::*;
use proptest::prelude::*;
use uuid::Uuid;

/// Topics by name: (id, partition count); the version changes with every edit.
#[derive(Default)]
struct Topics {
    version: u64,
    by_name: BTreeMap<String, (TopicId, i32)>,
}

impl Topics {
    fn with(names: &[(&str, i32)]) -> Topics {
        let mut t = Topics::default();
        for (name, n) in names {
            t.put(name, *n);
        }
        t
    }

    fn put(&mut self, name: &str, partitions: i32) {
        let id = self
            .by_name
            .get(name)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| Uuid::from_u128(self.by_name.len() as u128 + 1));
        self.by_name.insert(name.to_string(), (id, partitions));
        self.version += 1;
    }

    fn id(&self, name: &str) -> TopicId {
        self.by_name[name].0
    }
}

impl TopicCatalog for Topics {
    fn version(&self) -> u64 {
        self.version
    }
    fn topic(&self, name: &str) -> Option<(TopicId, TopicSpec)> {
        self.by_name.get(name).map(|(id, n)| {
            (
                *id,
                TopicSpec {
                    partitions: *n,
                    racks: Vec::new(),
                },
            )
        })
    }
    fn topic_names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }
}

/// A well-behaved client: it holds what it was given, gives up what it is no longer
/// given before it says so, and reports what it holds in every heartbeat.
#[derive(Debug, Clone)]
struct Client {
    id: String,
    instance: Option<String>,
    epoch: i32,
    owned: Assignment,
    topics: Vec<String>,
    /// A classic-protocol consumer (JoinGroup, SyncGroup, Heartbeat): `Some(true)` a
    /// cooperative one, `Some(false)` an eager one.
    classic: Option<bool>,
    /// A classic client's generation; `None` until it has synced (it must join).
    generation: Option<i32>,
    /// The topics' version a classic client last joined at: a classic consumer
    /// rejoins when its topics change (its metadata snapshot no longer matches).
    seen: u64,
}

impl Client {
    fn new(id: &str, topics: &[&str]) -> Client {
        Client {
            id: id.to_string(),
            instance: None,
            epoch: 0,
            owned: Assignment::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            classic: None,
            generation: None,
            seen: 0,
        }
    }

    fn classic(id: &str, topics: &[&str], cooperative: bool) -> Client {
        Client {
            classic: Some(cooperative),
            ..Client::new(id, topics)
        }
    }

    /// One step of the client's own protocol. A classic client heartbeats when it has
    /// a generation; told to rejoin, an eager one gives up everything first, a
    /// cooperative one reports what it owns; after its sync it drops what its
    /// assignment lacks (and a cooperative one rejoins if it dropped anything). Any
    /// other refusal: it was removed, gives everything up and joins afresh.
    fn step(&mut self, g: &mut ConsumerGroup, topics: &Topics, now: i64) -> Result<(), GroupError> {
        let Some(cooperative) = self.classic else {
            return self.beat(g, topics, now).map(|_| ());
        };
        if let Some(generation) = self.generation.filter(|_| self.seen == topics.version) {
            match g.classic_heartbeat(&self.id, None, generation, now) {
                Ok(()) => return Ok(()),
                Err(GroupError::RebalanceInProgress) if cooperative => {}
                Err(_) => self.owned = Assignment::new(),
            }
            self.generation = None;
        }
        self.generation = None;
        self.seen = topics.version;
        let owned = ids_to_names(&self.owned, topics);
        let metadata = embedded::subscription_bytes(
            3,
            &embedded::Subscription {
                topics: self.topics.clone(),
                owned,
                rack: None,
            },
        );
        let join = ClassicJoin {
            member_id: self.id.clone(),
            unknown_member: false,
            instance_id: None,
            protocol_type: CONSUMER_PROTOCOL_TYPE.into(),
            // Both kinds name "range", so they may share a group.
            protocols: if cooperative {
                vec!["cooperative-sticky", "range"]
            } else {
                vec!["range"]
            }
            .into_iter()
            .map(|name| records::ClassicProtocol {
                name: name.into(),
                metadata: metadata.clone(),
            })
            .collect(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            client_id: "c".into(),
            client_host: "h".into(),
        };
        let joined = g
            .classic_join(join, topics, &config(), now)
            .inspect_err(|_| {
                self.owned = Assignment::new();
            })?;
        let (_, bytes) = g.classic_sync(&self.id, None, joined.generation, (None, None), now)?;
        let assigned = names_to_ids(
            &embedded::parse_assignment(&bytes).expect("the broker's assignment parses"),
            topics,
        );
        let dropped = !self.owned.is_subset_of(&assigned);
        self.owned = assigned;
        self.generation = (!(cooperative && dropped)).then_some(joined.generation);
        Ok(())
    }

    fn leave(&self, g: &mut ConsumerGroup, topics: &Topics, now: i64) {
        if self.classic.is_some() {
            let _ = g.classic_leave(&[(self.id.clone(), None)]);
        } else {
            let mut hb = self.request();
            hb.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
            let _ = g.heartbeat(hb, topics, &config(), now, || unreachable!());
        }
    }

    fn request(&self) -> Heartbeat {
        let joining = self.epoch == 0;
        Heartbeat {
            version: 1,
            member_id: self.id.clone(),
            member_epoch: self.epoch,
            instance_id: self.instance.clone(),
            rebalance_timeout_ms: if joining { 30_000 } else { -1 },
            subscribed_topic_names: joining.then(|| self.topics.clone()),
            owned: Some(self.owned.clone()),
            ..Heartbeat::default()
        }
    }

    fn beat(
        &mut self,
        g: &mut ConsumerGroup,
        topics: &Topics,
        now: i64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let answer = g.heartbeat(self.request(), topics, &config(), now, || unreachable!())?;
        self.epoch = answer.member_epoch;
        if let Some(a) = &answer.assignment {
            self.owned = a.clone();
        }
        Ok(answer)
    }
}

fn config() -> ConsumerGroupConfig {
    ConsumerGroupConfig::default()
}

fn ids_to_names(a: &Assignment, topics: &Topics) -> embedded::NamedPartitions {
    topics
        .by_name
        .iter()
        .filter_map(|(name, (id, _))| {
            a.topics()
                .get(id)
                .map(|ps| (name.clone(), ps.iter().copied().collect()))
        })
        .collect()
}

fn names_to_ids(named: &embedded::NamedPartitions, topics: &Topics) -> Assignment {
    let mut a = Assignment::new();
    for (name, ps) in named {
        for p in ps {
            a.insert(topics.id(name), *p);
        }
    }
    a
}

fn assert_disjoint(clients: &[Client]) {
    for (i, a) in clients.iter().enumerate() {
        for b in &clients[i + 1..] {
            assert!(
                !a.owned.intersects(&b.owned),
                "{} and {} both own {:?}",
                a.id,
                b.id,
                a.owned.intersection(&b.owned)
            );
        }
    }
}

/// Heartbeats every client in turn until nothing changes.
fn settle(g: &mut ConsumerGroup, clients: &mut [Client], topics: &Topics, now: i64) {
    for _ in 0..20 {
        let before: Vec<(i32, Assignment)> =
            clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
        for c in clients.iter_mut() {
            c.step(g, topics, now).expect("a step of a member");
        }
        assert_disjoint(clients);
        let after: Vec<(i32, Assignment)> =
            clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
        if before == after && g.state() == ConsumerGroupState::Stable {
            return;
        }
    }
    panic!("the group did not settle: {:?}", g.state());
}

#[test]
fn a_first_member_gets_every_partition_at_epoch_one() {
    let topics = Topics::with(&[("t", 4)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut c = Client::new("m1", &["t"]);
    let a = c.beat(&mut g, &topics, 0).expect("join");
    assert_eq!(a.member_epoch, 1);
    assert_eq!(c.owned.len(), 4);
    assert_eq!(g.state(), ConsumerGroupState::Stable);
    // A plain heartbeat changes nothing and carries no assignment.
    let mut hb = c.request();
    hb.owned = None;
    let again = g
        .heartbeat(hb, &topics, &config(), 1, || unreachable!())
        .expect("hb");
    assert_eq!((again.member_epoch, again.assignment), (1, None));
}

#[test]
fn a_joining_member_gets_partitions_only_after_their_owner_revoked_them() {
    let topics = Topics::with(&[("t", 4)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut clients = vec![Client::new("a", &["t"]), Client::new("b", &["t"])];
    clients[0].beat(&mut g, &topics, 0).expect("a joins");
    // b joins: the target splits, but a still holds everything.
    clients[1].beat(&mut g, &topics, 0).expect("b joins");
    assert_eq!(g.epoch(), 2);
    assert!(clients[1].owned.is_empty(), "nothing is free yet");
    assert_eq!(g.state(), ConsumerGroupState::Reconciling);
    // a's heartbeat tells it to revoke two; it keeps its epoch until it has.
    clients[0].beat(&mut g, &topics, 0).expect("a");
    assert_eq!((clients[0].epoch, clients[0].owned.len()), (1, 2));
    assert_eq!(
        g.member("a").expect("a").assignment.state,
        MemberState::UnrevokedPartitions
    );
    // b still waits: a has not said it gave them up.
    clients[1].beat(&mut g, &topics, 0).expect("b");
    assert!(clients[1].owned.is_empty());
    // a reports it, moves to epoch 2; then b gets them.
    clients[0].beat(&mut g, &topics, 0).expect("a");
    assert_eq!(clients[0].epoch, 2);
    clients[1].beat(&mut g, &topics, 0).expect("b");
    assert_eq!(clients[1].owned.len(), 2);
    assert_disjoint(&clients);
    settle(&mut g, &mut clients, &topics, 0);
}

#[test]
fn a_member_that_leaves_frees_its_partitions_for_the_others() {
    let topics = Topics::with(&[("t", 6)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut clients = vec![
        Client::new("a", &["t"]),
        Client::new("b", &["t"]),
        Client::new("c", &["t"]),
    ];
    settle(&mut g, &mut clients, &topics, 0);
    let mut leave = clients[2].request();
    leave.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
    let a = g
        .heartbeat(leave, &topics, &config(), 0, || unreachable!())
        .expect("leave");
    assert_eq!(a.member_epoch, -1);
    clients.pop();
    settle(&mut g, &mut clients, &topics, 0);
    assert_eq!(clients.iter().map(|c| c.owned.len()).sum::<usize>(), 6);
    // A member that left is unknown afterwards.
    let mut late = Client::new("c", &["t"]);
    late.epoch = 3;
    assert_eq!(
        late.beat(&mut g, &topics, 0),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn expired_sessions_and_revocations_are_reported_for_removal() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut g, &topics, 0).expect("a");
    assert!(g.expired(44_999).is_empty());
    assert_eq!(g.expired(45_000), vec!["a".to_string()]);
    // b joins; a is asked to revoke at 1,000 and never does within its 30 s.
    let mut b = Client::new("b", &["t"]);
    b.beat(&mut g, &topics, 1_000).expect("b");
    let mut hb = a.request();
    hb.owned = None;
    g.heartbeat(hb, &topics, &config(), 1_000, || unreachable!())
        .expect("a");
    assert_eq!(
        g.member("a").expect("a").revocation_deadline_ms,
        Some(31_000)
    );
    b.beat(&mut g, &topics, 20_000).expect("b");
    assert_eq!(g.expired(31_000), vec!["a".to_string()]);
    g.remove_member("a");
    b.beat(&mut g, &topics, 31_000).expect("b");
    assert_eq!(b.owned.len(), 2);
}

#[test]
fn a_heartbeat_at_a_wrong_epoch_is_fenced_but_the_previous_one_is_forgiven() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut g, &topics, 0).expect("a");
    let mut ahead = a.request();
    ahead.member_epoch = 7;
    assert_eq!(
        g.heartbeat(ahead, &topics, &config(), 0, || unreachable!()),
        Err(GroupError::FencedMemberEpoch)
    );
    // A later step's answer is lost: b joins, a moves on; a heartbeat at a's previous
    // epoch that owns only assigned partitions is accepted, one that owns more is not.
    let mut b = Client::new("b", &["t"]);
    b.beat(&mut g, &topics, 0).expect("b");
    let mut clients = vec![a, b];
    settle(&mut g, &mut clients, &topics, 0);
    let a = &clients[0];
    let m = g.member("a").expect("a").assignment.clone();
    assert_eq!(a.epoch, m.epoch);
    let mut stale = a.request();
    stale.member_epoch = m.previous_epoch;
    stale.owned = Some(m.assigned.clone());
    assert_ne!(m.previous_epoch, m.epoch, "a moved on");
    g.heartbeat(stale.clone(), &topics, &config(), 0, || unreachable!())
        .expect("the previous epoch with owned partitions among the assigned ones");
    stale.owned = Some(Assignment::from_partitions([
        (topics.id("t"), 0),
        (topics.id("t"), 1),
    ]));
    assert_eq!(
        g.heartbeat(stale, &topics, &config(), 0, || unreachable!()),
        Err(GroupError::FencedMemberEpoch)
    );
}

#[test]
fn a_fenced_member_rejoins_with_epoch_zero_and_nothing_owned() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut g, &topics, 0).expect("a");
    a.epoch = 0;
    a.owned = Assignment::new();
    let answer = a.beat(&mut g, &topics, 0).expect("rejoin");
    assert_eq!(answer.member_epoch, g.assignment_epoch());
    assert_eq!(a.owned.len(), 2);
}

#[test]
fn a_static_member_that_leaves_for_now_comes_back_to_its_partitions() {
    let topics = Topics::with(&[("t", 4)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut clients = vec![Client::new("a", &["t"]), Client::new("b", &["t"])];
    clients[0].instance = Some("i-a".into());
    settle(&mut g, &mut clients, &topics, 0);
    let epoch = g.epoch();
    let had = clients[0].owned.clone();
    let mut bye = clients[0].request();
    bye.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
    g.heartbeat(bye, &topics, &config(), 0, || unreachable!())
        .expect("leave for now");
    // Another process takes the instance id before it is released: refused.
    let mut thief = Client::new("x", &["t"]);
    thief.instance = Some("i-a".into());
    let mut restarted = Client::new("a2", &["t"]);
    restarted.instance = Some("i-a".into());
    let answer = restarted
        .beat(&mut g, &topics, 10)
        .expect("the instance rejoins");
    assert_eq!(restarted.owned, had, "its partitions, at once");
    assert_eq!(
        (g.epoch(), answer.member_epoch),
        (epoch, epoch),
        "no rebalance"
    );
    assert!(g.member("a").is_none());
    assert_eq!(
        thief.beat(&mut g, &topics, 10),
        Err(GroupError::UnreleasedInstanceId)
    );
    // The old member id is fenced out of the instance.
    let mut old = clients[0].clone();
    old.epoch = epoch;
    assert_eq!(
        old.beat(&mut g, &topics, 10),
        Err(GroupError::FencedInstanceId)
    );
}

#[test]
fn a_pattern_subscription_picks_up_a_new_matching_topic() {
    let mut topics = Topics::with(&[("orders-eu", 2), ("payments", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut hb = Client::new("a", &[]).request();
    hb.subscribed_topic_names = None;
    hb.subscribed_topic_regex = Some("orders-.*".into());
    let a = g
        .heartbeat(hb, &topics, &config(), 0, || unreachable!())
        .expect("join");
    assert_eq!(a.assignment.expect("assignment").len(), 2);
    topics.put("orders-us", 3);
    let mut c = Client::new("a", &[]);
    c.epoch = a.member_epoch;
    c.owned = g.member("a").expect("a").assignment.assigned.clone();
    c.beat(&mut g, &topics, 1).expect("hb");
    assert_eq!(c.owned.len(), 5);
    assert!(c.owned.topics().contains_key(&topics.id("orders-us")));
    assert!(!c.owned.topics().contains_key(&topics.id("payments")));
}

#[test]
fn bad_requests_get_kafkas_errors_and_change_nothing() {
    let topics = Topics::with(&[("t", 1)]);
    let mut g = ConsumerGroup::new("g".into());
    let base = Client::new("a", &["t"]).request();
    let cases: Vec<(Heartbeat, GroupError)> = vec![
        (
            Heartbeat {
                rebalance_timeout_ms: -1,
                ..base.clone()
            },
            GroupError::InvalidRequest(
                "RebalanceTimeoutMs must be provided in first request.".into(),
            ),
        ),
        (
            Heartbeat {
                subscribed_topic_names: Some(vec![]),
                ..base.clone()
            },
            GroupError::InvalidRequest(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.".into(),
            ),
        ),
        (
            Heartbeat {
                owned: None,
                ..base.clone()
            },
            GroupError::InvalidRequest("TopicPartitions must be empty when (re-)joining.".into()),
        ),
        (
            Heartbeat {
                member_id: String::new(),
                ..base.clone()
            },
            GroupError::InvalidRequest("MemberId can't be empty.".into()),
        ),
        (
            Heartbeat {
                member_epoch: -3,
                ..base.clone()
            },
            GroupError::InvalidRequest("MemberEpoch is invalid.".into()),
        ),
        (
            Heartbeat {
                instance_id: Some(String::new()),
                ..base.clone()
            },
            GroupError::InvalidRequest("InstanceId can't be empty.".into()),
        ),
        (
            Heartbeat {
                server_assignor: Some("sticky".into()),
                ..base.clone()
            },
            GroupError::UnsupportedAssignor("sticky".into()),
        ),
        (
            Heartbeat {
                member_epoch: 5,
                ..base.clone()
            },
            GroupError::UnknownMemberId,
        ),
    ];
    for (hb, want) in cases {
        assert_eq!(
            g.heartbeat(hb, &topics, &config(), 0, || unreachable!()),
            Err(want)
        );
    }
    let bad_regex = Heartbeat {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("orders-(".into()),
        ..base.clone()
    };
    assert!(matches!(
        g.heartbeat(bad_regex, &topics, &config(), 0, || unreachable!()),
        Err(GroupError::InvalidRegularExpression(_))
    ));
    assert!(g.is_empty());
    assert_eq!(g.epoch(), 0);
}

#[test]
fn version_zero_joins_get_a_member_id_from_the_broker() {
    let topics = Topics::with(&[("t", 1)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut hb = Client::new("", &["t"]).request();
    hb.version = 0;
    let a = g
        .heartbeat(hb, &topics, &config(), 0, || "generated".into())
        .expect("join");
    assert_eq!(a.member_id, "generated");
    assert!(g.member("generated").is_some());
}

#[test]
fn the_group_size_limit_refuses_new_members_only() {
    let topics = Topics::with(&[("t", 1)]);
    let mut g = ConsumerGroup::new("g".into());
    let cfg = ConsumerGroupConfig {
        max_size: 1,
        ..config()
    };
    let mut a = Client::new("a", &["t"]);
    let hb = a.request();
    let answer = g
        .heartbeat(hb, &topics, &cfg, 0, || unreachable!())
        .expect("a");
    a.epoch = answer.member_epoch;
    let b = Client::new("b", &["t"]).request();
    assert_eq!(
        g.heartbeat(b, &topics, &cfg, 0, || unreachable!()),
        Err(GroupError::GroupMaxSizeReached)
    );
    g.heartbeat(a.request(), &topics, &cfg, 0, || unreachable!())
        .expect("a again");
}

#[test]
fn the_most_named_assignor_is_the_groups() {
    let topics = Topics::with(&[("x", 2), ("y", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    for id in ["b", "a"] {
        let mut hb = Client::new(id, &["x", "y"]).request();
        hb.server_assignor = Some("range".into());
        g.heartbeat(hb, &topics, &config(), 0, || unreachable!())
            .expect("join");
    }
    // Range co-partitions: a (first by member id) gets partition 0 of both topics.
    let want = Assignment::from_partitions([(topics.id("x"), 0), (topics.id("y"), 0)]);
    assert_eq!(g.target("a"), Some(&want));
}

#[derive(Debug, Clone)]
enum Op {
    Join(u8),
    Beat(u8),
    Leave(u8),
    Crash(u8),
    Grow(i32),
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0u8..6).prop_map(Op::Join),
        4 => (0u8..6).prop_map(Op::Beat),
        1 => (0u8..6).prop_map(Op::Leave),
        1 => (0u8..6).prop_map(Op::Crash),
        1 => (1i32..4).prop_map(Op::Grow),
        1 => (1i64..60_000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Under any order of joins, heartbeats, leaves, crashes, topic growth and
    /// expiries, no two live clients ever own the same partition, and once the
    /// survivors keep heartbeating the group settles with every partition owned.
    #[test]
    fn no_partition_is_ever_owned_twice_and_the_group_settles(ops in proptest::collection::vec(op(), 1..60)) {
        let mut topics = Topics::with(&[("t", 3), ("u", 2)]);
        let mut g = ConsumerGroup::new("g".into());
        let mut live: BTreeMap<u8, Client> = BTreeMap::new();
        let mut now = 0i64;
        // What the coordinator writes after every step, as a compacted log keeps it.
        let mut log: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Join(i) => {
                    // Ids 0 and 3 are eager classic consumers, 1 and 4 cooperative
                    // ones, the others speak the consumer protocol.
                    let id = format!("m{i}");
                    live.entry(i).or_insert_with(|| match i % 3 {
                        0 => Client::classic(&id, &["t", "u"], false),
                        1 => Client::classic(&id, &["t", "u"], true),
                        _ => Client::new(&id, &["t", "u"]),
                    });
                }
                Op::Beat(i) => {
                    if let Some(c) = live.get_mut(&i) {
                        if c.step(&mut g, &topics, now).is_err() && c.classic.is_none() {
                            // Fenced or removed: it gives everything up and rejoins.
                            c.epoch = 0;
                            c.owned = Assignment::new();
                        }
                    }
                }
                Op::Leave(i) => {
                    if let Some(c) = live.remove(&i) {
                        c.leave(&mut g, &topics, now);
                    }
                }
                // The process is gone; its session will expire.
                Op::Crash(i) => { live.remove(&i); }
                Op::Grow(n) => {
                    let cur = topics.by_name["t"].1;
                    topics.put("t", cur + n);
                }
                Op::Advance(ms) => {
                    now += ms;
                    for id in g.expired(now) {
                        g.remove_member(&id);
                        // A live client whose member was removed finds out at its next
                        // heartbeat; until then it still owns its partitions, so the
                        // removal must not hand them out first. Kafka relies on the
                        // client's own session timer here; the test's clients stop
                        // using them at once, as a client past its session does.
                        for c in live.values_mut().filter(|c| c.id == id) {
                            c.epoch = 0;
                            c.owned = Assignment::new();
                            c.generation = None;
                        }
                    }
                }
            }
            let clients: Vec<Client> = live.values().cloned().collect();
            assert_disjoint(&clients);
            write(&mut log, &mut g);
            // A coordinator that replays the log has the group exactly.
            assert_same(&replay(&log, now), &g);
        }
        // The crashed members' sessions expire; the survivors keep heartbeating: the
        // group settles with everything owned.
        let mut clients: Vec<Client> = live.into_values().collect();
        let dead: Vec<String> = g
            .members()
            .map(|m| m.member_id.clone())
            .filter(|id| !clients.iter().any(|c| &c.id == id))
            .collect();
        for id in dead {
            g.remove_member(&id);
        }
        for c in clients.iter_mut() {
            if g.member(&c.id).is_none() {
                c.epoch = 0;
                c.owned = Assignment::new();
                c.generation = None;
            }
        }
        if !clients.is_empty() {
            settle(&mut g, &mut clients, &topics, now);
            let total: usize = clients.iter().map(|c| c.owned.len()).sum();
            prop_assert_eq!(total, (topics.by_name["t"].1 + topics.by_name["u"].1) as usize);
        }
    }
}

#[test]
fn a_commit_at_the_previous_epoch_is_taken_only_for_partitions_still_held() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut clients = vec![Client::new("a", &["t"]), Client::new("b", &["t"])];
    clients[0].beat(&mut g, &topics, 0).expect("a");
    settle(&mut g, &mut clients, &topics, 0);
    let m = g.member("a").expect("a").assignment.clone();
    assert_ne!(m.previous_epoch, m.epoch);
    let held = m.assigned.partitions().next().expect("a holds one").1;
    let other = 1 - held;
    assert_eq!(
        g.check_commit("a", m.epoch, [("t", other)].into_iter()),
        Ok(())
    );
    assert_eq!(
        g.check_commit("a", m.previous_epoch, [("t", held)].into_iter()),
        Ok(())
    );
    assert_eq!(
        g.check_commit(
            "a",
            m.previous_epoch,
            [("t", held), ("t", other)].into_iter()
        ),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.check_commit("a", m.epoch + 1, [("t", held)].into_iter()),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.check_commit("z", m.epoch, [("t", held)].into_iter()),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn a_transactional_commit_is_checked_against_the_consumer_group_members() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    assert_eq!(
        g.check_txn_commit("", -1, [("t", 0)].into_iter()),
        Ok(()),
        "an empty group takes a commit from outside the group"
    );
    let mut clients = vec![Client::new("a", &["t"])];
    clients[0].beat(&mut g, &topics, 0).expect("a");
    settle(&mut g, &mut clients, &topics, 0);
    let epoch = g.member("a").expect("a").assignment.epoch;
    assert_eq!(
        g.check_txn_commit("a", epoch, [("t", 0), ("t", 1)].into_iter()),
        Ok(()),
        "the member at its epoch (the request a heartbeat at the same epoch had accepted)"
    );
    assert_eq!(
        g.check_txn_commit("a", epoch + 1, [("t", 0)].into_iter()),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        g.check_txn_commit("z", epoch, [("t", 0)].into_iter()),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        g.check_txn_commit("", -1, [("t", 0)].into_iter()),
        Err(GroupError::UnknownMemberId),
        "nobody from outside while the group has members"
    );
}

#[test]
fn changes_kept_after_a_failed_write_are_written_with_the_next() {
    let topics = Topics::with(&[("t", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut g, &topics, 0).expect("a");
    let lost = g.take_changes();
    assert!(lost.epoch && lost.members.contains("a") && lost.current.contains("a"));
    g.keep_changes(lost.clone());
    // A heartbeat that changes nothing still writes what the failed write did not.
    let mut hb = a.request();
    hb.owned = None;
    g.heartbeat(hb, &topics, &config(), 1, || unreachable!())
        .expect("hb");
    let next = g.take_changes();
    assert_eq!(next, lost);
    assert!(!g.records_for(&next).is_empty());
}

/// Appends the group's changes to a compacted log: the last value of each key, a
/// tombstone deleting it; encoded and decoded as the coordinator does.
fn write(log: &mut BTreeMap<Vec<u8>, Vec<u8>>, g: &mut ConsumerGroup) {
    let changes = g.take_changes();
    for (k, v) in g.records_for(&changes) {
        let key = records::encode_key(&k).expect("key");
        match v {
            Some(v) => {
                log.insert(key, records::encode_value(&v));
            }
            None => {
                log.remove(&key);
            }
        }
    }
}

fn replay(log: &BTreeMap<Vec<u8>, Vec<u8>>, now: i64) -> ConsumerGroup {
    let mut g = ConsumerGroup::new("g".into());
    for (k, v) in log {
        let key = records::decode_key(k).expect("a key written is read back");
        let value = records::decode_value(&key, v).expect("a value written is read back");
        g.restore(&key, Some(value));
    }
    g.finish_restore(now, &config());
    g
}

fn assert_same(replayed: &ConsumerGroup, g: &ConsumerGroup) {
    assert_eq!(
        (replayed.epoch(), replayed.assignment_epoch()),
        (g.epoch(), g.assignment_epoch())
    );
    let view = |g: &ConsumerGroup| {
        g.members()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.metadata(),
                    m.assignment.clone(),
                    g.target(&m.member_id).cloned(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(view(replayed), view(g));
    for m in g.members() {
        for (t, p) in m.assignment.held().partitions() {
            assert_eq!(replayed.holder(t, p), Some(m.member_id.as_str()));
        }
    }
}

#[test]
fn a_pattern_gives_only_the_topics_the_resolving_principal_may_describe() {
    let topics = Topics::with(&[("rx-open", 2), ("rx-secret", 2)]);
    let mut g = ConsumerGroup::new("g".into());
    let only_open = DescribeFilter(std::sync::Arc::new(|t: &str| t == "rx-open"));
    let mut hb = Client::new("a", &[]).request();
    hb.subscribed_topic_names = Some(Vec::new());
    hb.subscribed_topic_regex = Some("rx-.*".into());
    hb.describable = Some(only_open.clone());
    let a = g
        .heartbeat(hb, &topics, &config(), 0, || unreachable!())
        .expect("joins");
    let open = topics.id("rx-open");
    assert_eq!(
        a.assignment,
        Some(Assignment::from_partitions([(open, 0), (open, 1)]))
    );
    // A member that names the topic gets it: only pattern matches are filtered.
    let mut named = Client::new("b", &["rx-secret"]).request();
    named.describable = Some(only_open);
    let b = g
        .heartbeat(named, &topics, &config(), 0, || unreachable!())
        .expect("joins");
    let secret = topics.id("rx-secret");
    assert_eq!(
        b.assignment,
        Some(Assignment::from_partitions([(secret, 0), (secret, 1)]))
    );
}
