//! Pieces the three simulated backends share: a server clock of their own, a simulated
//! network path (latency, a closed port), time helpers, ISO-8601 text for the document
//! layouts, and the small Unicode tables some broken providers use to "clean" names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A backend's own wall clock: the machine's clock shifted by a fixed offset (servers are
/// rarely in sync with their clients), advanced by the monotonic clock so it never jumps.
#[derive(Debug, Clone, Copy)]
pub struct ServerClock {
    origin_wall: SystemTime,
    origin: Instant,
}

impl ServerClock {
    /// A clock `offset_ms` ahead of the machine's (behind when negative).
    pub fn with_offset_ms(offset_ms: i64) -> Self {
        Self {
            origin_wall: add_ms(SystemTime::now(), offset_ms),
            origin: Instant::now(),
        }
    }

    /// The server's wall-clock time.
    pub fn now(&self) -> SystemTime {
        self.origin_wall + self.origin.elapsed()
    }
}

/// A small xorshift generator, good enough for jitter, member choice and throttling.
#[derive(Debug)]
pub struct Rng(AtomicU64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed | 1))
    }

    /// The next value. One atomic step, so tasks drawing at once each get a value of
    /// their own: a load and a separate store let a slow task write back an older state,
    /// and the generator then replayed values, so a retried request met the same throttle
    /// again (a control's retries ran out, about once a CI run).
    pub fn next(&self) -> u64 {
        let step = |mut x: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let previous = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
            .expect("the update always answers Some");
        step(previous)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// Why a request never got an answer.
#[derive(Debug, Clone)]
pub enum NetError {
    /// No connection within the client's connect (or server selection) timeout.
    ConnectTimeout(Duration),
}

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetError::ConnectTimeout(after) => {
                write!(f, "no connection to 127.0.0.1:9 within {after:?}")
            }
        }
    }
}

impl std::error::Error for NetError {}

/// One client's path to the server: a little latency each way, or a closed port.
#[derive(Debug)]
pub struct Net {
    reachable: bool,
    connect_timeout: Duration,
    jitter: Rng,
}

static NET_SEED: AtomicU64 = AtomicU64::new(0x2545_f491_4f6c_dd1d);

impl Net {
    /// A working connection.
    pub fn up() -> Self {
        Self {
            reachable: true,
            connect_timeout: Duration::from_secs(2),
            jitter: Rng::new(NET_SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)),
        }
    }

    /// A connection to a closed port: every request fails after `connect_timeout`.
    pub fn down(connect_timeout: Duration) -> Self {
        Self {
            reachable: false,
            connect_timeout,
            jitter: Rng::new(7),
        }
    }

    /// Another connection along the same path (up or down alike).
    pub fn same_path(&self) -> Self {
        if self.reachable {
            Self::up()
        } else {
            Self::down(self.connect_timeout)
        }
    }

    /// The request travels to the server (or never arrives).
    pub async fn send(&self) -> Result<(), NetError> {
        if !self.reachable {
            tokio::time::sleep(self.connect_timeout).await;
            return Err(NetError::ConnectTimeout(self.connect_timeout));
        }
        if self.jitter.next().is_multiple_of(5) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// The answer travels back.
    pub async fn receive(&self) {
        tokio::task::yield_now().await;
    }
}

/// Milliseconds since the Unix epoch (negative before it).
pub fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The instant `ms` milliseconds after the Unix epoch.
pub fn from_unix_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// `t + ms` (`ms` may be negative), saturating.
pub fn add_ms(t: SystemTime, ms: i64) -> SystemTime {
    if ms >= 0 {
        t.checked_add(Duration::from_millis(ms as u64))
            .unwrap_or_else(|| UNIX_EPOCH + Duration::from_secs(253_402_300_799))
    } else {
        t.checked_sub(Duration::from_millis(ms.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// A duration in whole milliseconds, rounded up (never shortens a lock), as an i64.
pub fn ceil_ms(d: Duration) -> i64 {
    i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX / 4)
}

/// A duration in whole seconds, rounded up, at least 1.
pub fn ceil_secs(d: Duration) -> i64 {
    i64::try_from(d.as_nanos().div_ceil(1_000_000_000))
        .unwrap_or(i64::MAX / 4)
        .max(1)
}

/// The last instant a four-digit ISO-8601 year can say: 9999-12-31T23:59:59.999Z.
pub const ISO_MAX_MS: i64 = 253_402_300_799_999;

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2024-05-01T10:00:00.123Z`: fixed width while the year has four digits, so the text
/// sorts as the time does (what Java ShedLock's DynamoDB provider stores).
pub fn iso_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// Reads `iso_ms`'s text back, also without the fraction or with more digits of it.
pub fn parse_iso_ms(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.rsplitn(3, '-');
    let d: i64 = date_parts.next()?.parse().ok()?;
    let mo: i64 = date_parts.next()?.parse().ok()?;
    let y: i64 = date_parts.next()?.parse().ok()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms = hms.split(':');
    let h: i64 = hms.next()?.parse().ok()?;
    let mi: i64 = hms.next()?.parse().ok()?;
    let s: i64 = hms.next()?.parse().ok()?;
    let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
    let ms: i64 = frac3.parse().ok()?;
    Some(days_from_civil(y, mo, d) * 86_400_000 + h * 3_600_000 + mi * 60_000 + s * 1000 + ms)
}

// ------------------------------------------------------------------------------------------
// Name "cleaning", as some broken providers do it
// ------------------------------------------------------------------------------------------

/// Base letter, combining mark, precomposed letter: the Latin-1 part of NFC composition.
const COMPOSITIONS: &[(char, char, char)] = &[
    ('a', '\u{300}', 'à'),
    ('a', '\u{301}', 'á'),
    ('a', '\u{302}', 'â'),
    ('a', '\u{303}', 'ã'),
    ('a', '\u{308}', 'ä'),
    ('c', '\u{327}', 'ç'),
    ('e', '\u{300}', 'è'),
    ('e', '\u{301}', 'é'),
    ('e', '\u{302}', 'ê'),
    ('e', '\u{308}', 'ë'),
    ('i', '\u{300}', 'ì'),
    ('i', '\u{301}', 'í'),
    ('i', '\u{302}', 'î'),
    ('i', '\u{308}', 'ï'),
    ('n', '\u{303}', 'ñ'),
    ('o', '\u{300}', 'ò'),
    ('o', '\u{301}', 'ó'),
    ('o', '\u{302}', 'ô'),
    ('o', '\u{303}', 'õ'),
    ('o', '\u{308}', 'ö'),
    ('u', '\u{300}', 'ù'),
    ('u', '\u{301}', 'ú'),
    ('u', '\u{302}', 'û'),
    ('u', '\u{308}', 'ü'),
    ('y', '\u{301}', 'ý'),
    ('y', '\u{308}', 'ÿ'),
    ('A', '\u{300}', 'À'),
    ('A', '\u{301}', 'Á'),
    ('A', '\u{302}', 'Â'),
    ('A', '\u{303}', 'Ã'),
    ('A', '\u{308}', 'Ä'),
    ('C', '\u{327}', 'Ç'),
    ('E', '\u{300}', 'È'),
    ('E', '\u{301}', 'É'),
    ('E', '\u{302}', 'Ê'),
    ('E', '\u{308}', 'Ë'),
    ('I', '\u{301}', 'Í'),
    ('N', '\u{303}', 'Ñ'),
    ('O', '\u{301}', 'Ó'),
    ('O', '\u{308}', 'Ö'),
    ('U', '\u{301}', 'Ú'),
    ('U', '\u{308}', 'Ü'),
];

/// Compatibility decompositions of NFKC that show up in names: ligatures, the ideographic
/// space, superscript digits.
const COMPATIBILITY: &[(char, &str)] = &[
    ('\u{fb00}', "ff"),
    ('\u{fb01}', "fi"),
    ('\u{fb02}', "fl"),
    ('\u{fb03}', "ffi"),
    ('\u{fb04}', "ffl"),
    ('\u{3000}', " "),
    ('\u{b2}', "2"),
    ('\u{b3}', "3"),
    ('\u{b9}', "1"),
    ('\u{2126}', "\u{3a9}"),
    ('\u{212b}', "\u{c5}"),
];

/// NFC for the Latin-1 letters: a base letter followed by its combining mark becomes the
/// precomposed letter.
pub fn nfc_latin(name: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(name.len());
    for c in name.chars() {
        if let Some(&last) = out.last()
            && let Some(&(_, _, composed)) = COMPOSITIONS
                .iter()
                .find(|&&(base, mark, _)| base == last && mark == c)
        {
            out.pop();
            out.push(composed);
            continue;
        }
        out.push(c);
    }
    out.into_iter().collect()
}

/// NFKC as far as names need it: full-width ASCII to ASCII, ligatures and other
/// compatibility characters to their plain form, then NFC.
pub fn nfkc_lite(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let code = u32::from(c);
        if (0xff01..=0xff5e).contains(&code) {
            out.push(char::from_u32(code - 0xfee0).unwrap_or(c));
        } else if let Some(&(_, plain)) = COMPATIBILITY.iter().find(|&&(k, _)| k == c) {
            out.push_str(plain);
        } else {
            out.push(c);
        }
    }
    nfc_latin(&out)
}

/// Characters that print as nothing: zero-width space, joiners, word joiner, BOM, soft
/// hyphen.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{ad}'
    )
}
