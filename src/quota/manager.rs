//! Per-shard quota sensors and throttle decisions.
//!
//! Owner: one `QuotaManager` per shard (in the handlers' `Ctx`), touched only by that
//! shard's thread: no lock, no atomics. A request's bytes are recorded in the sensor of
//! the quota that applies to its client (see `entity`), and the throttle time is
//! Kafka's `(rate − quota) / quota × window`, capped at `samples × window`.
//!
//! **Cross-shard accounting.** A client's connections may sit on several shards. Once
//! per window, a little after it closes, every shard sends every other shard its bytes
//! per active sensor in that window (`ShardMessage::QuotaUsage`, one message per peer
//! per second, nothing when idle). A shard's measured rate is its own samples plus the
//! reported ones, so it sees the client's total with at most about one window of lag
//! for the remote part. Chosen over forwarding every record to an "owner" shard (a mesh
//! hop on every request) and over shared atomics (cross-core cache traffic on the hot
//! path). The lag lets a client spread over k shards overshoot by at most about
//! (k−1) windows' worth of quota at the start of a burst; the throttle formula then
//! pays it back, so the long-run rate is still the quota.
//!
//! Resolution of the applicable quota is cached per client id and recomputed when the
//! metadata snapshot changes (kept alive by the cache, so a pointer comparison is
//! sound). Without any quota configured, a request costs one `is_empty` check.
//!
//! Bounds (client ids are up to 32 KiB each and a hostile client may send a new one on
//! every request): per shard and kind at most `SENSORS_MAX` sensors holding at most
//! `SENSOR_NAME_BYTES_MAX` of names; past that, new clients are not measured (logged
//! once). The resolution cache is cleared when it holds `RESOLVED_CACHE_MAX` client
//! ids or `RESOLVED_CACHE_BYTES_MAX` of them. Sensors idle for a whole span are dropped
//! at the next tick.

use super::entity;
use corelog_shards::client_quota::{QuotaKind, UsageReport};
use corelog_shards::metadata::ClusterMetadata;
use corelog_shards::shard::Shard;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::sampled_rate::SampledRate;

/// Sensors per kind per shard; past this, new sensors are not created (unthrottled,
/// logged). Each costs `samples × 24` bytes plus its name.
pub const SENSORS_MAX: usize = 20_000;
/// Bytes of sensor names per kind per shard.
pub const SENSOR_NAME_BYTES_MAX: usize = 8 << 20;
/// Client ids whose resolution is cached; the cache is cleared when full.
pub const RESOLVED_CACHE_MAX: usize = 10_000;
/// Bytes of client ids in the resolution cache.
pub const RESOLVED_CACHE_BYTES_MAX: usize = 4 << 20;
/// How long after a window closes the shards exchange it (lets late requests land).
const EXCHANGE_DELAY_MS: u64 = 20;

/// The window settings (`--quota-window-num`, `--quota-window-size-seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaConfig {
    pub samples: usize,
    pub window_ms: u64,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        // 30 one-second samples: a rate over half a minute, steadier than Kafka's default
        // of 11 and still quick to follow a client that changes pace.
        QuotaConfig {
            samples: 30,
            window_ms: 1000,
        }
    }
}

/// The process-wide origin of quota time: every shard numbers windows from it.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_millis()).unwrap_or(u64::MAX)
}

/// The quotas that apply to one client id.
#[derive(Debug, Default)]
struct Resolved {
    produce: Option<(Arc<str>, f64)>,
    fetch: Option<(Arc<str>, f64)>,
    /// In µs of handling time per second (`request_percentage` × 10 000).
    request: Option<(Arc<str>, f64)>,
}

struct Cache {
    snapshot: Option<Arc<ClusterMetadata>>,
    /// user → client id → resolution (two levels, so a lookup allocates nothing).
    by_client: HashMap<Box<str>, HashMap<Box<str>, Rc<Resolved>>>,
    /// Entries and bytes of names held, bounded as the module comment says.
    entries: usize,
    bytes: usize,
}

/// One kind's sensors, bounded in count and name bytes. Clients that find the table full
/// share one overflow sensor: they are throttled together rather than not at all (a
/// flood of made-up client ids must not switch quotas off for everyone after it).
#[derive(Default)]
struct Sensors {
    rates: HashMap<Arc<str>, SampledRate>,
    name_bytes: usize,
    overflow: Option<SampledRate>,
}

impl Sensors {
    /// The sensor `name`, created if there is room; the shared overflow sensor when the
    /// table is full.
    fn get_or_create(
        &mut self,
        name: &Arc<str>,
        config: QuotaConfig,
        now: u64,
    ) -> Option<&mut SampledRate> {
        if !self.rates.contains_key(&**name) {
            if self.rates.len() >= SENSORS_MAX
                || self.name_bytes.saturating_add(name.len()) > SENSOR_NAME_BYTES_MAX
            {
                return Some(self.overflow.get_or_insert_with(|| {
                    SampledRate::new(config.samples, config.window_ms, now)
                }));
            }
            self.name_bytes += name.len();
            self.rates.insert(
                name.clone(),
                SampledRate::new(config.samples, config.window_ms, now),
            );
        }
        self.rates.get_mut(&**name)
    }

    fn expire(&mut self, now: u64) {
        let mut freed = 0usize;
        self.rates.retain(|name, r| {
            let keep = !r.idle(now);
            if !keep {
                freed += name.len();
            }
            keep
        });
        self.name_bytes = self.name_bytes.saturating_sub(freed);
    }
}

pub struct QuotaManager {
    config: QuotaConfig,
    shard: Rc<Shard>,
    produce: RefCell<Sensors>,
    fetch: RefCell<Sensors>,
    request: RefCell<Sensors>,
    cache: RefCell<Cache>,
    full_warned: Cell<bool>,
}

impl QuotaManager {
    pub fn new(config: QuotaConfig, shard: Rc<Shard>) -> QuotaManager {
        assert!(config.samples >= 1);
        assert!(config.window_ms >= 1);
        let _ = epoch();
        QuotaManager {
            config,
            shard,
            produce: RefCell::new(Sensors::default()),
            fetch: RefCell::new(Sensors::default()),
            request: RefCell::new(Sensors::default()),
            cache: RefCell::new(Cache {
                snapshot: None,
                by_client: HashMap::new(),
                entries: 0,
                bytes: 0,
            }),
            full_warned: Cell::new(false),
        }
    }

    /// Byte-rate throttles are capped at the whole measurement span; the request-time
    /// throttle at one window, as Kafka caps it (the client is not told of it, so a
    /// long hold would only time its requests out).
    fn max_throttle_ms(&self, kind: QuotaKind) -> u64 {
        match kind {
            QuotaKind::Request => self.config.window_ms,
            QuotaKind::Produce | QuotaKind::Fetch => self
                .config
                .window_ms
                .saturating_mul(self.config.samples as u64),
        }
    }

    fn sensors(&self, kind: QuotaKind) -> &RefCell<Sensors> {
        match kind {
            QuotaKind::Produce => &self.produce,
            QuotaKind::Fetch => &self.fetch,
            QuotaKind::Request => &self.request,
        }
    }

    fn resolved(&self, meta: &Arc<ClusterMetadata>, client: QuotaClient<'_>) -> Rc<Resolved> {
        let QuotaClient { user, client_id } = client;
        let mut cache = self.cache.borrow_mut();
        let fresh = cache
            .snapshot
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, meta));
        if !fresh || cache.entries >= RESOLVED_CACHE_MAX || cache.bytes > RESOLVED_CACHE_BYTES_MAX {
            cache.snapshot = Some(meta.clone());
            cache.by_client.clear();
            cache.entries = 0;
            cache.bytes = 0;
        }
        if let Some(r) = cache.by_client.get(user).and_then(|m| m.get(client_id)) {
            return r.clone();
        }
        let q = &meta.client_quotas;
        let get = |key| {
            entity::resolve(q, key, user, client_id).map(|a| (Arc::<str>::from(a.sensor), a.quota))
        };
        let r = Rc::new(Resolved {
            produce: get(entity::PRODUCER_BYTE_RATE),
            fetch: get(entity::CONSUMER_BYTE_RATE),
            // Percent of one core: 1 % is 10 ms of handling time per second.
            request: get(entity::REQUEST_PERCENTAGE).map(|(s, pct)| (s, pct * 10_000.0)),
        });
        cache.entries += 1;
        cache.bytes += user.len() + client_id.len();
        cache
            .by_client
            .entry(user.into())
            .or_default()
            .insert(client_id.into(), r.clone());
        r
    }

    /// Records `bytes` of `kind` for `client` and returns how long the client is to be
    /// throttled (zero when it has no quota or is within it).
    pub fn record(&self, kind: QuotaKind, client: QuotaClient<'_>, bytes: u64) -> Duration {
        let meta = self.shard.metadata.snapshot();
        if meta.client_quotas.entries.is_empty() {
            return Duration::ZERO;
        }
        self.apply_remote();
        let resolved = self.resolved(&meta, client);
        let Some((sensor, quota)) = (match kind {
            QuotaKind::Produce => &resolved.produce,
            QuotaKind::Fetch => &resolved.fetch,
            QuotaKind::Request => &resolved.request,
        }) else {
            return Duration::ZERO;
        };
        let now = now_ms(Instant::now());
        let mut sensors = self.sensors(kind).borrow_mut();
        let full = sensors.rates.len() >= SENSORS_MAX;
        if full && !self.full_warned.replace(true) {
            tracing::warn!(
                max = SENSORS_MAX,
                "quota sensor table full: new clients share one overflow sensor"
            );
        }
        let Some(rate) = sensors.get_or_create(sensor, self.config, now) else {
            return Duration::ZERO;
        };
        rate.record_local(bytes, now);
        let ms = rate.throttle_ms(*quota, now, self.max_throttle_ms(kind));
        if ms > 0 {
            corelog_metrics::record_quota_throttle(kind.index(), ms);
        }
        Duration::from_millis(ms)
    }

    /// Records a request's bytes for the connection's client and, when over quota,
    /// extends the connection's hold; returns the `throttle_time_ms` for the response.
    pub fn charge(
        &self,
        kind: QuotaKind,
        client: QuotaClient<'_>,
        bytes: u64,
        connection: &ConnectionThrottle,
    ) -> i32 {
        let d = self.record(kind, client, bytes);
        connection.throttle(d);
        i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
    }

    /// Adds the other shards' reports that arrived since the last look.
    fn apply_remote(&self) {
        if self.shard.quota_usage.is_empty() {
            return;
        }
        let now = now_ms(Instant::now());
        for report in self.shard.quota_usage.drain() {
            for (kind, sensor, bytes) in &report.entries {
                let mut sensors = self.sensors(*kind).borrow_mut();
                if let Some(rate) = sensors.get_or_create(sensor, self.config, now) {
                    rate.record_remote(*bytes, report.window, now);
                }
            }
        }
    }

    /// This shard's bytes per sensor in window `window`; drops sensors idle for a span.
    fn collect(&self, window: u64, now: u64) -> Vec<(QuotaKind, Arc<str>, u64)> {
        let mut out = Vec::new();
        for kind in QuotaKind::ALL {
            let mut sensors = self.sensors(kind).borrow_mut();
            sensors.expire(now);
            for (name, rate) in sensors.rates.iter() {
                let bytes = rate.local_in(window);
                if bytes > 0 {
                    out.push((kind, name.clone(), bytes));
                }
            }
        }
        out
    }

    /// The once-a-window exchange with the other shards; runs for the shard's life.
    pub async fn run_exchange(self: Rc<Self>) {
        let w = self.config.window_ms;
        loop {
            let now = now_ms(Instant::now());
            let next_boundary = (now / w + 1) * w;
            glommio::timer::sleep(Duration::from_millis(
                next_boundary - now + EXCHANGE_DELAY_MS.min(w / 2),
            ))
            .await;
            let now = now_ms(Instant::now());
            let closed = (now / w).saturating_sub(1);
            self.apply_remote();
            let entries = self.collect(closed, now);
            if entries.is_empty() || self.shard.shard_count() < 2 {
                continue;
            }
            let report = Arc::new(UsageReport {
                from_shard: self.shard.id,
                window: closed,
                entries,
            });
            for target in (0..self.shard.shard_count()).filter(|t| *t != self.shard.id) {
                let msg = corelog_shards::mesh::ShardMessage::QuotaUsage(report.clone());
                if !self.shard.peers.tell(target, msg).await {
                    return; // shutting down
                }
            }
        }
    }
}

/// Charges the time a request's handler spent on the core (the sum of its polls, not
/// its waits) against the client's `request_percentage`, extending the connection's
/// hold when over. Kafka measures request-handler and network thread time; on a shard
/// that is the handler's time on the core. The response has already been built, so
/// only the hold enforces this quota (Produce and Fetch report their byte-rate throttle).
pub fn charge_request_time(
    quotas: &QuotaManager,
    client: QuotaClient<'_>,
    spent: Duration,
    connection: &ConnectionThrottle,
) {
    let us = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
    quotas.charge(QuotaKind::Request, client, us, connection);
}

/// Runs a request's handler, timing its polls, then charges that time
/// (`charge_request_time`).
pub async fn timed<T>(
    quotas: &QuotaManager,
    client: QuotaClient<'_>,
    quota: &RequestQuota,
    handler: impl std::future::Future<Output = T>,
) -> T {
    let mut handler = std::pin::pin!(handler);
    let mut spent = Duration::ZERO;
    let out = futures::future::poll_fn(|cx| {
        let started = Instant::now();
        let r = handler.as_mut().poll(cx);
        spent += started.elapsed();
        r
    })
    .await;
    charge_request_time(quotas, client, spent, &quota.connection);
    out
}

/// Whose quota a request counts against: the principal's name (`alice` for
/// `User:alice`, `ANONYMOUS` before or without authentication) and the client id (empty
/// when the request names none), resolved in Kafka's precedence (`entity::resolve`).
#[derive(Debug, Clone, Copy)]
pub struct QuotaClient<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> QuotaClient<'a> {
    /// The quota client of a request from `principal` (`Type:name`).
    pub fn of(principal: &'a str, client_id: Option<&'a str>) -> QuotaClient<'a> {
        QuotaClient {
            user: principal
                .split_once(':')
                .map_or(principal, |(_, name)| name),
            client_id: client_id.unwrap_or(""),
        }
    }
}

/// What a handler learns of the quota decision made for its request when the
/// connection read it.
#[derive(Debug)]
pub struct RequestQuota {
    /// The connection's hold, for handlers that charge after the work (Fetch).
    pub connection: Rc<ConnectionThrottle>,
    /// The throttle already decided at read time (Produce), for the response.
    pub throttle_time_ms: i32,
}

/// Charges a request whose cost is known when it is read (Produce: its size) before
/// its handler is started. Deciding here, in request order, is what makes the hold
/// work for pipelined requests: librdkafka keeps many produce requests in flight, and
/// if each handler charged itself they would all be dispatched before the first one
/// had set the hold, letting bursts through (seen as ±20 % over 10 s).
pub fn admit(
    quotas: &QuotaManager,
    api_key: kafka_protocol::messages::ApiKey,
    client: QuotaClient<'_>,
    frame_bytes: usize,
    connection: &Rc<ConnectionThrottle>,
) -> RequestQuota {
    let throttle_time_ms = match api_key {
        kafka_protocol::messages::ApiKey::Produce => {
            quotas.charge(QuotaKind::Produce, client, frame_bytes as u64, connection)
        }
        _ => 0,
    };
    RequestQuota {
        connection: connection.clone(),
        throttle_time_ms,
    }
}

/// A connection's throttle: Kafka's channel mute (KIP-219). The handler that finds the
/// client over its quota extends it; the connection's reader waits it out before
/// handing the next request to a handler.
#[derive(Debug, Default)]
pub struct ConnectionThrottle {
    muted_until: Cell<Option<Instant>>,
}

impl ConnectionThrottle {
    /// Holds this connection's next requests for `d` from now (never shortens a hold).
    pub fn throttle(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        let until = Instant::now() + d;
        let next = match self.muted_until.get() {
            Some(t) if t > until => t,
            _ => until,
        };
        self.muted_until.set(Some(next));
    }

    /// Waits until the hold (if any) is over.
    pub async fn hold(&self) {
        while let Some(until) = self.muted_until.get() {
            let now = Instant::now();
            if until <= now {
                self.muted_until.set(None);
                return;
            }
            glommio::timer::sleep(until - now).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_user_is_the_principals_name() {
        let c = QuotaClient::of("User:alice", Some("app"));
        assert_eq!((c.user, c.client_id), ("alice", "app"));
        let c = QuotaClient::of("User:ANONYMOUS", None);
        assert_eq!((c.user, c.client_id), (entity::ANONYMOUS_USER, ""));
        // Only the first colon separates the type: a DN keeps its own.
        assert_eq!(QuotaClient::of("User:CN=a:b", None).user, "CN=a:b");
    }

    #[test]
    fn sensor_table_is_bounded_and_expires() {
        let config = QuotaConfig {
            samples: 3,
            window_ms: 1000,
        };
        let mut s = Sensors::default();
        let big: Arc<str> = "x".repeat(SENSOR_NAME_BYTES_MAX / 2 + 1).into();
        assert!(s.get_or_create(&big, config, 0).is_some());
        let big2: Arc<str> = "y".repeat(SENSOR_NAME_BYTES_MAX / 2 + 1).into();
        assert!(
            s.get_or_create(&big2, config, 0).is_some() && !s.rates.contains_key(&*big2),
            "name bytes are capped: the newcomer gets the shared overflow sensor"
        );
        assert!(s.overflow.is_some());
        assert!(
            s.get_or_create(&big, config, 0).is_some(),
            "an existing sensor is found"
        );
        s.expire(3_000);
        assert!(s.rates.is_empty());
        assert_eq!(s.name_bytes, 0);
        assert!(s.get_or_create(&big2, config, 3_000).is_some());
        for i in 0..SENSORS_MAX {
            let name: Arc<str> = i.to_string().into();
            s.get_or_create(&name, config, 3_000);
        }
        assert_eq!(s.rates.len(), SENSORS_MAX);
    }

    #[test]
    fn connection_hold_only_grows() {
        let t = ConnectionThrottle::default();
        t.throttle(Duration::from_secs(5));
        let first = t.muted_until.get();
        t.throttle(Duration::from_millis(1));
        assert_eq!(t.muted_until.get(), first);
        t.throttle(Duration::ZERO);
        assert_eq!(t.muted_until.get(), first);
    }
}
