//! Ids and clocks, injectable so that runs can be reproduced byte for byte.
//!
//! ```
//! use rath_session::Stamper;
//!
//! let stamper = Stamper::counter();
//! assert_eq!(stamper.next_id().as_str(), "00000000-0000-4000-8000-000000000001");
//! assert_eq!(stamper.now().to_string(), "2026-01-01T00:00:00+00:00");
//! assert_eq!(stamper.now().to_string(), "2026-01-01T00:00:01+00:00");
//! ```
//!
//! Every constructor and lineage operation in this crate takes its id and timestamp from the
//! [`Stamper`] carried by the session it starts from, so a whole derivation tree shares one
//! source.
//!
//! - [`Stamper::system`], the default: UUIDv7 ids (48-bit Unix milliseconds, then random
//!   bits from the operating system's generator, monotonic within a process) in canonical
//!   lowercase `8-4-4-4-12` form, and the wall clock. Ids never collide across runs or
//!   processes, sort by creation time, and are what Python OpenRath's loader accepts.
//! - [`Stamper::counter`]: the counter ids the Python OpenRath fixtures use, and a stepping
//!   clock. For tests, evidence packets and explicitly deterministic runs: two runs mint the
//!   same ids, so they must not share a store.
//! - [`Stamper::seeded`]: UUIDv7-shaped ids from a seed, with the counter's clock.
//!
//! ```
//! use rath_session::Stamper;
//!
//! let a = Stamper::system().next_id();
//! let b = Stamper::system().next_id();
//! assert_ne!(a, b);
//! assert!(a.as_str() < b.as_str(), "time-ordered");
//! assert_eq!(a.as_str().len(), 36);
//! assert_eq!(&a.as_str()[14..15], "7"); // version 7
//! assert!(rath_session::is_uuid(a.as_str()));
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::SessionId;

/// A UTC instant with microsecond precision, rendered like Python's `datetime.isoformat()`.
///
/// ```
/// use rath_session::Timestamp;
///
/// let t = Timestamp::from_unix_micros(1_767_225_603_000_000);
/// assert_eq!(t.to_string(), "2026-01-01T00:00:03+00:00");
/// assert_eq!(Timestamp::parse("2026-01-01T00:00:03+00:00"), Some(t));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    unix_micros: i64,
}

impl Timestamp {
    /// The instant `micros` microseconds after the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Self {
            unix_micros: micros,
        }
    }

    /// Microseconds since the Unix epoch.
    pub const fn unix_micros(self) -> i64 {
        self.unix_micros
    }

    /// The current wall-clock time.
    pub fn now_utc() -> Self {
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
        };
        Self::from_unix_micros(micros)
    }

    /// Parses an ISO-8601 timestamp as Python writes it (`YYYY-MM-DDTHH:MM:SS[.ffffff]` followed
    /// by `+00:00`, `Z`, or another `±HH:MM` offset). Returns `None` when the text is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b' ') {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let s = text.get(r)?;
            if !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
            return None;
        }
        if second > 60 {
            return None;
        }
        let mut rest = &text[19..];
        let mut micros = 0i64;
        if let Some(frac) = rest.strip_prefix('.') {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let mut value: i64 = 0;
            for (i, c) in frac[..digits].bytes().enumerate() {
                if i < 6 {
                    value = value * 10 + i64::from(c - b'0');
                }
            }
            for _ in digits..6 {
                value *= 10;
            }
            micros = value;
            rest = &frac[digits..];
        }
        let offset_secs = match rest {
            "" | "Z" | "z" => 0,
            _ => {
                let rb = rest.as_bytes();
                if rb.len() != 6 || rb[3] != b':' {
                    return None;
                }
                let sign = match rb[0] {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                let h: i64 = rest.get(1..3)?.parse().ok()?;
                let m: i64 = rest.get(4..6)?.parse().ok()?;
                sign * (h * 3600 + m * 60)
            }
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
        Some(Self::from_unix_micros(secs * 1_000_000 + micros))
    }

    /// This instant plus `micros` microseconds.
    pub const fn plus_micros(self, micros: i64) -> Self {
        Self::from_unix_micros(self.unix_micros.saturating_add(micros))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.unix_micros.div_euclid(1_000_000);
        let micros = self.unix_micros.rem_euclid(1_000_000);
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            tod / 3600,
            (tod / 60) % 60,
            tod % 60
        )?;
        if micros != 0 {
            write!(f, ".{micros:06}")?;
        }
        f.write_str("+00:00")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not an ISO-8601 timestamp: {text}")))
    }
}

// Howard Hinnant's civil-calendar conversions (public-domain algorithms).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Where ids and timestamps come from. Implement it to inject your own.
pub trait StampSource: Send + Sync + fmt::Debug {
    /// A fresh session id.
    fn next_id(&self) -> SessionId;
    /// A fresh opaque token with a prefix, for request ids, tool-call ids and the like.
    fn next_token(&self, prefix: &str) -> String;
    /// The current time.
    fn now(&self) -> Timestamp;
    /// True when ids and times are reproducible (no wall clock, no entropy).
    fn is_deterministic(&self) -> bool;
    /// Where the source is in its sequence, when it can be continued elsewhere
    /// ([`Stamper::restore`]); `None` (the default) for sources that cannot.
    fn state(&self) -> Option<StamperState> {
        None
    }
}

/// Where a deterministic stamper is in its sequence: what a stopped run writes down so that
/// another process continues with the very ids, tokens and clock readings the run would
/// have made next ([`Stamper::state`], [`Stamper::restore`]).
///
/// ```
/// use rath_session::Stamper;
///
/// let a = Stamper::counter();
/// a.next_id();
/// a.next_token("req");
/// let state = a.state().expect("a counter can be continued");
/// let b = Stamper::restore(&state).expect("a known source");
/// assert_eq!(b.next_id(), a.next_id());
/// assert_eq!(b.next_token("req"), a.next_token("req"));
/// assert_eq!(b.now(), a.now());
/// assert!(Stamper::system().state().is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StamperState {
    /// `counter`, `seeded` or `branch`.
    pub source: String,
    /// Ids minted so far.
    pub ids: u64,
    /// Tokens minted so far.
    pub tokens: u64,
    /// Clock readings so far.
    pub ticks: u64,
    /// The clock's first reading, in microseconds since the Unix epoch.
    pub clock_start: i64,
    /// The clock's step per reading, in microseconds.
    pub clock_step: i64,
    /// The generator state of a `seeded` source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_state: Option<u64>,
    /// The tag of a `branch` source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A shared, cheaply cloned handle to a [`StampSource`].
///
/// ```
/// use rath_session::{Session, Stamper};
///
/// let s = Session::user_with("hi", Stamper::counter());
/// let f = s.fork();
/// assert_eq!(s.id().as_str(), "00000000-0000-4000-8000-000000000001");
/// assert_eq!(f.id().as_str(), "00000000-0000-4000-8000-000000000002");
/// ```
#[derive(Clone, Debug)]
pub struct Stamper(Arc<dyn StampSource>);

impl Stamper {
    /// Wraps any source.
    pub fn new(source: impl StampSource + 'static) -> Self {
        Self(Arc::new(source))
    }

    /// UUIDv7 ids and the wall clock: the default. Ids are unique across runs and processes
    /// (74 random bits per id from a generator seeded by the operating system) and strictly
    /// increasing within a process (an id minted in the same millisecond as the previous one
    /// increments it). Tokens are `<prefix>_<32 hex digits>` from the same generator.
    pub fn system() -> Self {
        static SYSTEM: std::sync::OnceLock<Stamper> = std::sync::OnceLock::new();
        SYSTEM
            .get_or_init(|| Self::new(SystemSource::default()))
            .clone()
    }

    /// Counter ids shaped like the Python OpenRath fixtures
    /// (`00000000-0000-4000-8000-00000000000N`) and a clock that starts at
    /// 2026-01-01T00:00:00Z and advances one second per reading.
    pub fn counter() -> Self {
        Self::new(CounterSource::new(
            Timestamp::from_unix_micros(1_767_225_600_000_000),
            1_000_000,
        ))
    }

    /// [`Stamper::counter`] when `deterministic`, else [`Stamper::system`]: the one switch a
    /// program needs between reproducible runs (tests, evidence, `--deterministic`) and
    /// unique ids.
    ///
    /// ```
    /// use rath_session::Stamper;
    ///
    /// assert!(Stamper::deterministic_if(true).is_deterministic());
    /// assert!(!Stamper::deterministic_if(false).is_deterministic());
    /// ```
    pub fn deterministic_if(deterministic: bool) -> Self {
        if deterministic {
            Self::counter()
        } else {
            Self::system()
        }
    }

    /// The stamper this process asked for: [`Stamper::counter`] when its arguments hold
    /// [`DETERMINISTIC_FLAG`] or [`DETERMINISTIC_ENV`] is `1`, `true` or `yes`, else
    /// [`Stamper::system`]. Reads only the process's arguments and that one variable (see
    /// [`deterministic_requested`]).
    pub fn from_env() -> Self {
        Self::deterministic_if(deterministic_requested())
    }

    /// UUIDv7-shaped ids (the millisecond field from the stepping clock, the random bits from
    /// a seeded generator), and the same stepping clock as [`Stamper::counter`]. Two stampers
    /// with one seed produce the same sequence.
    ///
    /// ```
    /// use rath_session::Stamper;
    ///
    /// let (a, b) = (Stamper::seeded(7), Stamper::seeded(7));
    /// assert_eq!(a.next_id(), b.next_id());
    /// assert!(rath_session::is_uuid(a.next_id().as_str()));
    /// ```
    pub fn seeded(seed: u64) -> Self {
        Self::new(SeededSource::new(seed))
    }

    /// [`Stamper::seeded`] with a clock that starts at `start` and steps `step_micros` per
    /// reading: the ids and tokens of `seeded(seed)` (their millisecond field from this
    /// clock), and times from a start a caller chose, such as when a durable run first ran
    /// (a re-execution passes the same start and gets the same ids and times).
    ///
    /// ```
    /// use rath_session::{Stamper, Timestamp};
    ///
    /// let start = Timestamp::parse("2026-12-07T10:00:00Z").unwrap();
    /// let (a, b) = (Stamper::seeded_at(7, start, 1_000), Stamper::seeded_at(7, start, 1_000));
    /// assert_eq!(a.next_id(), b.next_id());
    /// assert_eq!(a.now(), start.plus_micros(1_000)); // the id took the first reading
    /// assert!(a.is_deterministic());
    /// ```
    pub fn seeded_at(seed: u64, start: Timestamp, step_micros: i64) -> Self {
        let mut source = SeededSource::new(seed);
        source.clock = CounterSource::new(start, step_micros);
        Self::new(source)
    }

    /// The stamper for one parallel branch forked from this one. For a deterministic source
    /// it is a private deterministic source tagged with one token read from this stamper now,
    /// so a branch's ids, tokens and times do not depend on how a scheduler interleaves it with
    /// its siblings; its ids are UUID-shaped (version 8, from a digest of the tag and a
    /// counter). For a live source it is this stamper itself (its ids are unique anyway).
    ///
    /// ```
    /// use rath_session::Stamper;
    ///
    /// let root = Stamper::counter();
    /// let (a, b) = (root.branch(), root.branch());
    /// let (a1, b1) = (a.next_id(), b.next_id());
    /// assert_ne!(a1, b1);
    /// assert!(rath_session::is_uuid(a1.as_str()));
    /// // The same derivation gives the same ids.
    /// assert_eq!(Stamper::counter().branch().next_id(), a1);
    /// ```
    pub fn branch(&self) -> Stamper {
        if !self.is_deterministic() {
            return self.clone();
        }
        // The branch's clock steps as this one does (a second for the counter).
        let step = self.state().map_or(1_000_000, |s| s.clock_step);
        Stamper::new(BranchSource {
            tag: self.next_token("branch"),
            ids: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            clock: CounterSource::new(self.now(), step),
        })
    }

    /// A fresh session id.
    pub fn next_id(&self) -> SessionId {
        self.0.next_id()
    }

    /// A fresh token such as `req_0192b3c4…` or, in deterministic mode, `req_000001`.
    pub fn next_token(&self, prefix: &str) -> String {
        self.0.next_token(prefix)
    }

    /// The current time from this source.
    pub fn now(&self) -> Timestamp {
        self.0.now()
    }

    /// True when the source is reproducible.
    pub fn is_deterministic(&self) -> bool {
        self.0.is_deterministic()
    }

    /// Starts a timer whose readings are real in live mode and zero in deterministic mode, so
    /// evidence that records elapsed time stays byte-identical across deterministic runs.
    pub fn start_timer(&self) -> Timer {
        Timer {
            start: Instant::now(),
            deterministic: self.is_deterministic(),
        }
    }

    /// True when both handles point at the same source.
    pub fn same_source(&self, other: &Stamper) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Where this stamper is in its sequence (deterministic sources), to continue it with
    /// [`Stamper::restore`], also in another process; `None` for the system stamper.
    pub fn state(&self) -> Option<StamperState> {
        self.0.state()
    }

    /// A stamper that continues from `state` (see [`StamperState`]); `None` for a source
    /// this crate does not know.
    pub fn restore(state: &StamperState) -> Option<Stamper> {
        let clock = || {
            let c = CounterSource::new(
                Timestamp::from_unix_micros(state.clock_start),
                state.clock_step,
            );
            c.ticks.store(state.ticks, Ordering::Relaxed);
            c
        };
        let source: Arc<dyn StampSource> = match state.source.as_str() {
            "counter" => {
                let c = clock();
                c.ids.store(state.ids, Ordering::Relaxed);
                c.tokens.store(state.tokens, Ordering::Relaxed);
                Arc::new(c)
            }
            "seeded" => Arc::new(SeededSource {
                state: Mutex::new(state.seed_state?),
                tokens: AtomicU64::new(state.tokens),
                clock: clock(),
            }),
            "branch" => Arc::new(BranchSource {
                tag: state.tag.clone()?,
                ids: AtomicU64::new(state.ids),
                tokens: AtomicU64::new(state.tokens),
                clock: clock(),
            }),
            _ => return None,
        };
        Some(Stamper(source))
    }
}

impl Default for Stamper {
    fn default() -> Self {
        Self::system()
    }
}

/// A stopwatch from [`Stamper::start_timer`].
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    start: Instant,
    deterministic: bool,
}

impl Timer {
    /// Milliseconds since the timer started (0.0 in deterministic mode).
    pub fn elapsed_ms(&self) -> f64 {
        if self.deterministic {
            0.0
        } else {
            self.start.elapsed().as_secs_f64() * 1000.0
        }
    }
}

/// Writes a 128-bit value as a canonical lowercase UUID (`8-4-4-4-12`).
fn uuid_text(value: u128) -> SessionId {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 36];
    let mut nibble = 0;
    for (i, slot) in buf.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            *slot = b'-';
            continue;
        }
        *slot = HEX[((value >> (124 - 4 * nibble)) & 0xf) as usize];
        nibble += 1;
    }
    SessionId::from_ascii_inline(&buf)
        .unwrap_or_else(|| SessionId::new(String::from_utf8_lossy(&buf)))
}

/// Sets the version nibble and the RFC 9562 variant bits of a 128-bit value.
const fn with_version(value: u128, version: u128) -> u128 {
    let v = value & !(0xf << 76) & !(0b11 << 62);
    v | (version << 76) | (0b10 << 62)
}

/// A UUIDv7 value from a millisecond timestamp and 74 random bits.
const fn uuid_v7(ms: u64, random: u128) -> u128 {
    let rand_a = (random >> 62) & 0xfff;
    let rand_b = random & ((1 << 62) - 1);
    ((ms as u128 & 0xffff_ffff_ffff) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
}

/// True when `text` is a UUID in canonical hyphenated form (any version, either case), the
/// shape Python OpenRath's loader requires of session ids and parent ids.
///
/// ```
/// assert!(rath_session::is_uuid("00000000-0000-4000-8000-000000000001"));
/// assert!(!rath_session::is_uuid("branch_000004.000001"));
/// assert!(!rath_session::is_uuid("01JD8X3M7Q2W5E9R4T6Y8U0I1O"));
/// ```
pub fn is_uuid(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// The live source: UUIDv7 ids, random tokens and the wall clock. See [`Stamper::system`].
#[derive(Debug, Default)]
struct SystemSource {
    /// The last id minted (as a number), so ids within one process strictly increase.
    last: Mutex<u128>,
}

impl SystemSource {
    fn next_value(&self) -> u128 {
        let now_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Err(_) => 0,
        };
        let random: u128 = rand::random();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let last_ms = (*last >> 80) as u64;
        let value = if now_ms > last_ms || *last == 0 {
            uuid_v7(now_ms, random)
        } else {
            // Same (or an earlier, if the clock stepped back) millisecond: count up from the
            // previous id. The 74-bit counter field starts random, so it practically never
            // overflows; if it does, the millisecond field moves on by one.
            let field = ((*last >> 64) & 0xfff) << 62 | (*last & ((1 << 62) - 1));
            let next = field + 1;
            if next >> 74 == 0 {
                uuid_v7(last_ms, next)
            } else {
                uuid_v7(last_ms + 1, random >> 1)
            }
        };
        *last = value;
        value
    }
}

impl StampSource for SystemSource {
    fn next_id(&self) -> SessionId {
        uuid_text(self.next_value())
    }
    fn next_token(&self, prefix: &str) -> String {
        format!("{prefix}_{:032x}", self.next_value())
    }
    fn now(&self) -> Timestamp {
        Timestamp::now_utc()
    }
    fn is_deterministic(&self) -> bool {
        false
    }
}

/// Ids, tokens and clock for one parallel branch of a deterministic run. See
/// [`Stamper::branch`].
#[derive(Debug)]
struct BranchSource {
    tag: String,
    ids: AtomicU64,
    tokens: AtomicU64,
    clock: CounterSource,
}

impl StampSource for BranchSource {
    fn next_id(&self) -> SessionId {
        let n = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        let mut h = Sha256::new();
        h.update(b"openrath branch id\0");
        h.update(self.tag.as_bytes());
        h.update([0]);
        h.update(n.to_be_bytes());
        let digest = h.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        uuid_text(with_version(u128::from_be_bytes(bytes), 8))
    }
    fn next_token(&self, prefix: &str) -> String {
        let n = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}_{}_{n:06}", self.tag)
    }
    fn now(&self) -> Timestamp {
        self.clock.now()
    }
    fn is_deterministic(&self) -> bool {
        true
    }
    fn state(&self) -> Option<StamperState> {
        let mut s = self.clock.state()?;
        s.source = "branch".to_owned();
        s.ids = self.ids.load(Ordering::Relaxed);
        s.tokens = self.tokens.load(Ordering::Relaxed);
        s.tag = Some(self.tag.clone());
        Some(s)
    }
}

/// Counter ids and a stepping clock. See [`Stamper::counter`].
#[derive(Debug)]
pub struct CounterSource {
    ids: AtomicU64,
    tokens: AtomicU64,
    ticks: AtomicU64,
    start: Timestamp,
    step_micros: i64,
}

impl CounterSource {
    /// A counter source whose clock starts at `start` and steps by `step_micros` per reading.
    pub fn new(start: Timestamp, step_micros: i64) -> Self {
        Self {
            ids: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            start,
            step_micros,
        }
    }
}

impl StampSource for CounterSource {
    fn next_id(&self) -> SessionId {
        let n = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        // Formatted on the stack: one allocation per id keeps fork cheap.
        let mut buf = *b"00000000-0000-4000-8000-000000000000";
        let mut rest = n;
        let mut at = buf.len();
        while rest != 0 && at > 24 {
            at -= 1;
            buf[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        if rest != 0 {
            return SessionId::new(format!("00000000-0000-4000-8000-{n:012}"));
        }
        SessionId::from_ascii_inline(&buf)
            .unwrap_or_else(|| SessionId::new(String::from_utf8_lossy(&buf)))
    }
    fn next_token(&self, prefix: &str) -> String {
        let n = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}_{n:06}")
    }
    fn now(&self) -> Timestamp {
        let k = self.ticks.fetch_add(1, Ordering::Relaxed);
        self.start.plus_micros(
            self.step_micros
                .saturating_mul(i64::try_from(k).unwrap_or(i64::MAX)),
        )
    }
    fn is_deterministic(&self) -> bool {
        true
    }
    fn state(&self) -> Option<StamperState> {
        Some(StamperState {
            source: "counter".to_owned(),
            ids: self.ids.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
            ticks: self.ticks.load(Ordering::Relaxed),
            clock_start: self.start.unix_micros(),
            clock_step: self.step_micros,
            seed_state: None,
            tag: None,
        })
    }
}

/// Seeded UUIDv7-shaped ids and a stepping clock. See [`Stamper::seeded`].
#[derive(Debug)]
pub struct SeededSource {
    state: Mutex<u64>,
    tokens: AtomicU64,
    clock: CounterSource,
}

impl SeededSource {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(seed ^ 0x9E37_79B9_7F4A_7C15),
            tokens: AtomicU64::new(0),
            clock: CounterSource::new(
                Timestamp::from_unix_micros(1_767_225_600_000_000),
                1_000_000,
            ),
        }
    }

    fn next_u64(&self) -> u64 {
        // splitmix64: tiny, fast and good enough for ids.
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *guard = guard.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *guard;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl StampSource for SeededSource {
    fn next_id(&self) -> SessionId {
        let ms = u64::try_from(self.clock.now().unix_micros() / 1000).unwrap_or(0);
        let random =
            (u128::from(self.next_u64()) << 64 | u128::from(self.next_u64())) & ((1u128 << 74) - 1);
        uuid_text(uuid_v7(ms, random))
    }
    fn next_token(&self, prefix: &str) -> String {
        let n = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}_{n:06}")
    }
    fn now(&self) -> Timestamp {
        self.clock.now()
    }
    fn is_deterministic(&self) -> bool {
        true
    }
    fn state(&self) -> Option<StamperState> {
        let mut s = self.clock.state()?;
        s.source = "seeded".to_owned();
        s.tokens = self.tokens.load(Ordering::Relaxed);
        s.ids = 0;
        s.seed_state = Some(*self.state.lock().unwrap_or_else(|p| p.into_inner()));
        Some(s)
    }
}

/// The command-line flag that asks a program for deterministic (counter) ids and clock.
pub const DETERMINISTIC_FLAG: &str = "--deterministic";

/// The environment variable that does what [`DETERMINISTIC_FLAG`] does when set to `1`, `true`
/// or `yes` (any case).
pub const DETERMINISTIC_ENV: &str = "OPENRATH_DETERMINISTIC";

/// True when `args` hold [`DETERMINISTIC_FLAG`] or `env` (the value of [`DETERMINISTIC_ENV`])
/// is `1`, `true` or `yes` (any case).
///
/// ```
/// use rath_session::deterministic_from;
///
/// assert!(deterministic_from(["--deterministic"], None));
/// assert!(deterministic_from(Vec::<String>::new(), Some("1")));
/// assert!(!deterministic_from(["--live"], Some("0")));
/// ```
pub fn deterministic_from<I, S>(args: I, env: Option<&str>) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    args.into_iter().any(|a| a.as_ref() == DETERMINISTIC_FLAG)
        || env
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// True when this process asked for deterministic ids: [`DETERMINISTIC_FLAG`] among its
/// arguments or [`DETERMINISTIC_ENV`] set (see [`deterministic_from`]).
pub fn deterministic_requested() -> bool {
    let env = std::env::var(DETERMINISTIC_ENV).ok();
    deterministic_from(std::env::args().skip(1), env.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_like_python_isoformat() {
        let t = Timestamp::parse("2026-01-01T00:00:03+00:00").unwrap();
        assert_eq!(t.to_string(), "2026-01-01T00:00:03+00:00");
        let t = Timestamp::parse("1999-12-31T23:59:59.5Z").unwrap();
        assert_eq!(t.to_string(), "1999-12-31T23:59:59.500000+00:00");
        let t = Timestamp::parse("2026-03-01T02:00:00+02:00").unwrap();
        assert_eq!(t.to_string(), "2026-03-01T00:00:00+00:00");
        assert_eq!(
            Timestamp::from_unix_micros(0).to_string(),
            "1970-01-01T00:00:00+00:00"
        );
        assert_eq!(Timestamp::parse("nope"), None);
        assert_eq!(Timestamp::parse("2026-13-01T00:00:00+00:00"), None);
    }

    #[test]
    fn seeded_sources_repeat() {
        let a = Stamper::seeded(7);
        let b = Stamper::seeded(7);
        for _ in 0..5 {
            assert_eq!(a.next_id(), b.next_id());
        }
        assert_ne!(Stamper::seeded(8).next_id(), Stamper::seeded(7).next_id());
    }

    #[test]
    fn system_ids_are_uuid_v7_strictly_increasing() {
        let st = Stamper::system();
        let ids: Vec<SessionId> = (0..10_000).map(|_| st.next_id()).collect();
        for w in ids.windows(2) {
            assert!(w[0].as_str() < w[1].as_str(), "{} then {}", w[0], w[1]);
        }
        for id in &ids {
            let s = id.as_str();
            assert!(is_uuid(s), "{s}");
            assert_eq!(s, s.to_ascii_lowercase());
            assert_eq!(&s[14..15], "7", "{s}");
            assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"), "{s}");
        }
        // The millisecond field is the wall clock.
        let ms = u64::from_str_radix(&ids[0].as_str()[..8], 16).unwrap() << 16
            | u64::from_str_radix(&ids[0].as_str()[9..13], 16).unwrap();
        let now = Timestamp::now_utc().unix_micros() / 1000;
        assert!((now - ms as i64).abs() < 60_000, "{ms} vs {now}");
        let t = st.next_token("req");
        assert!(t.starts_with("req_") && t.len() == 36, "{t}");
    }

    #[test]
    fn system_ids_are_unique_across_threads() {
        let st = Stamper::system();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let st = st.clone();
                std::thread::spawn(move || (0..5000).map(|_| st.next_id()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for h in handles {
            for id in h.join().unwrap() {
                assert!(all.insert(id));
            }
        }
        assert_eq!(all.len(), 20_000);
    }

    #[test]
    fn uuid_text_round_trips_bits() {
        assert_eq!(
            uuid_text(0x0123_4567_89ab_cdef_0011_2233_4455_6677).as_str(),
            "01234567-89ab-cdef-0011-223344556677"
        );
        let v = uuid_v7(0x0123_4567_89ab, (1 << 74) - 1);
        assert_eq!(
            uuid_text(v).as_str(),
            "01234567-89ab-7fff-bfff-ffffffffffff"
        );
        let v = with_version(u128::MAX, 8);
        assert_eq!(
            uuid_text(v).as_str(),
            "ffffffff-ffff-8fff-bfff-ffffffffffff"
        );
    }

    #[test]
    fn seeded_and_branch_ids_are_uuids() {
        let s = Stamper::seeded(3);
        let id = s.next_id();
        assert!(is_uuid(id.as_str()) && &id.as_str()[14..15] == "7", "{id}");
        let b = Stamper::counter().branch();
        let nested = b.branch();
        let ids = [b.next_id(), b.next_id(), nested.next_id()];
        assert!(
            ids.iter()
                .all(|i| is_uuid(i.as_str()) && &i.as_str()[14..15] == "8")
        );
        assert_ne!(ids[0], ids[1]);
        assert_ne!(ids[0], ids[2]);
        assert!(b.is_deterministic());
        let live = Stamper::system();
        assert!(live.branch().same_source(&live));
    }

    #[test]
    fn deterministic_timers_read_zero() {
        assert_eq!(Stamper::counter().start_timer().elapsed_ms(), 0.0);
    }
}
