//! Seeing and freeing locks, for operators: the part of a backend the executor never needs.
//!
//! A stuck lock (a holder that died with a long `lock_at_most_for`) otherwise has to be freed by
//! hand, by someone who knows each backend's key layout. [`LockAdmin`] lists and inspects locks
//! and frees one, and it is a separate trait from [`LockProvider`](crate::LockProvider) so that
//! an application that only runs jobs never links the operator's powers by accident.
//!
//! Freeing is safe by construction: [`LockAdmin::force_unlock`] takes the
//! [`AcquisitionId`] the operator saw and frees the lock only if that same acquisition still
//! holds it (a compare-and-free on the backend). A lock that changed hands since it was listed
//! is left alone, so an operator can never free a lock a healthy node has just taken.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::Stream;

use crate::error::LockError;

/// How many locks one page holds unless the caller asks otherwise: large enough that a listing
/// takes few round trips, small enough that 100,000 locks never sit in memory at once.
pub const DEFAULT_PAGE_SIZE: usize = 500;

/// Whether a lock was held when it was read, judged by the backend's clock where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockState {
    /// Held: its `held_until` had not passed.
    Held,
    /// Free: any node may take it now. The record may remain (SQL rows, MongoDB documents and
    /// ZooKeeper nodes are kept, as ShedLock keeps them), naming the last holder. ShedLock's
    /// records do not say whether that holder released the lock or ran out of
    /// `lock_at_most_for`, so neither does this state.
    Free,
}

impl fmt::Display for LockState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockState::Held => "held",
            LockState::Free => "free",
        })
    }
}

/// What identifies one acquisition of a lock on its backend, as [`LockAdmin::force_unlock`]
/// compares it.
///
/// The stored holder identity alone is not enough everywhere: Java ShedLock writes the host
/// name only, the same for every acquisition from that host, so a provider adds what changes
/// with each acquisition (the stored `locked_at`, a node version or a revision). The text is
/// the provider's own and printable, so an operator can pass it back from a listing (the CLI's
/// `--acquisition`); only the provider that produced it reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AcquisitionId(String);

impl AcquisitionId {
    /// Wraps a provider's encoding of an acquisition.
    pub fn new(encoded: impl Into<String>) -> Self {
        Self(encoded.into())
    }

    /// The provider's encoding.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AcquisitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One lock as its backend stores it, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Held or free when read.
    pub state: LockState,
    /// The last holder's name, when stored: as [`LockHolder::locked_by`](crate::LockHolder)
    /// shows it, without the acquisition's id (which is in [`acquisition`](Self::acquisition)).
    pub locked_by: Option<String>,
    /// When the last holder took it, when stored.
    pub locked_at: Option<SystemTime>,
    /// When it frees itself (or freed itself), as stored or as the backend's clock plus the
    /// remaining time to live.
    pub held_until: Option<SystemTime>,
    /// How long it stays held, by the backend's clock: `None` when free. The one figure that
    /// does not depend on the reader's clock.
    pub remaining: Option<Duration>,
    /// The fencing token of the last acquisition, where the backend keeps one.
    pub fencing_token: Option<u64>,
    /// What [`LockAdmin::force_unlock`] compares to free exactly this acquisition.
    pub acquisition: AcquisitionId,
}

impl LockInfo {
    /// A lock read from a backend; fields the backend does not store stay `None`.
    pub fn new(name: impl Into<String>, state: LockState, acquisition: AcquisitionId) -> Self {
        Self {
            name: name.into(),
            state,
            locked_by: None,
            locked_at: None,
            held_until: None,
            remaining: None,
            fencing_token: None,
            acquisition,
        }
    }

    /// Sets the holder from the stored `locked_by` or lock value, which it names as
    /// [`raw::holder_of`](crate::raw::holder_of) reads it: the acquisition's id taken off.
    pub fn with_locked_by(mut self, locked_by: impl AsRef<str>) -> Self {
        self.locked_by = Some(crate::identity::holder_of(locked_by.as_ref()).to_owned());
        self
    }

    /// Sets the stored acquisition time.
    pub fn with_locked_at(mut self, locked_at: SystemTime) -> Self {
        self.locked_at = Some(locked_at);
        self
    }

    /// Sets the expiry.
    pub fn with_held_until(mut self, held_until: SystemTime) -> Self {
        self.held_until = Some(held_until);
        self
    }

    /// Sets the time left by the backend's clock.
    pub fn with_remaining(mut self, remaining: Duration) -> Self {
        self.remaining = Some(remaining);
        self
    }

    /// Sets the fencing token.
    pub fn with_fencing_token(mut self, fencing_token: u64) -> Self {
        self.fencing_token = Some(fencing_token);
        self
    }

    /// The state and remaining time of a lock stored as held until `held_until`, read when the
    /// backend's clock said `now`: held while `held_until` is later.
    pub fn judged_at(mut self, held_until: SystemTime, now: SystemTime) -> Self {
        self.held_until = Some(held_until);
        match held_until.duration_since(now) {
            Ok(remaining) if !remaining.is_zero() => {
                self.state = LockState::Held;
                self.remaining = Some(remaining);
            }
            _ => {
                self.state = LockState::Free;
                self.remaining = None;
            }
        }
        self
    }
}

/// Where a listing continues: the provider's own encoding (a last name, a scan cursor).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageCursor(String);

impl PageCursor {
    /// Wraps a provider's encoding of a position.
    pub fn new(encoded: impl Into<String>) -> Self {
        Self(encoded.into())
    }

    /// The provider's encoding.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Which page of locks to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Only names that start with this (empty: every name).
    pub prefix: String,
    /// Where the previous page ended; `None` for the first page.
    pub after: Option<PageCursor>,
    /// The most locks one page may hold (a backend may return fewer, even none, and still have
    /// more: only a `None` [`LockPage::next`] ends a listing).
    pub limit: usize,
}

impl PageRequest {
    /// The first page of names starting with `prefix`, [`DEFAULT_PAGE_SIZE`] long.
    pub fn first(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            after: None,
            limit: DEFAULT_PAGE_SIZE,
        }
    }

    /// Sets the page size; zero is read as one, so a listing always moves.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPage {
    /// The locks of this page, in the backend's order (by name, except where a backend's scan
    /// has no order, as Redis' `SCAN`).
    pub locks: Vec<LockInfo>,
    /// Where the next page starts; `None` when this was the last.
    pub next: Option<PageCursor>,
}

/// An operator's view of a backend: list, inspect and free locks.
///
/// Every provider of this family implements it beside [`LockProvider`](crate::LockProvider);
/// the conformance kit's admin checks prove an implementation.
#[async_trait]
pub trait LockAdmin: Send + Sync + fmt::Debug {
    /// One page of the locks whose names start with `request.prefix`.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError>;

    /// The lock named `name`, or `None` when the backend has no record of it (never taken, or
    /// its record expired away, as Redis and etcd keys do).
    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError>;

    /// Frees `name` at once if `acquisition` still holds it, ignoring `lock_at_least_for`.
    ///
    /// `Ok(true)`: that acquisition held the lock and it is now free for any node. `Ok(false)`:
    /// it did not hold it any more (released, expired or taken by another node since it was
    /// read); nothing was changed. The holder itself learns of it at its next extend or
    /// release, which then answer `false`. Records are kept where the backend keeps them, so
    /// fencing tokens keep increasing.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError>;
}

#[async_trait]
impl<A: LockAdmin + ?Sized> LockAdmin for std::sync::Arc<A> {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        (**self).list_locks(request).await
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        (**self).inspect_lock(name).await
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        (**self).force_unlock(name, acquisition).await
    }
}

/// Every lock whose name starts with `prefix`, read page by page of `page_size` as the stream
/// is consumed, so a listing of any length holds one page in memory. The first error ends the
/// stream.
pub fn list_all_locks<'a>(
    admin: &'a dyn LockAdmin,
    prefix: &str,
    page_size: usize,
) -> impl Stream<Item = Result<LockInfo, LockError>> + Send + 'a {
    enum Position {
        Next(PageRequest),
        Done,
    }
    let first = PageRequest::first(prefix).with_limit(page_size);
    futures_util::stream::unfold(
        (Position::Next(first), Vec::new().into_iter()),
        move |(position, mut buffered)| async move {
            let mut position = position;
            loop {
                if let Some(lock) = buffered.next() {
                    return Some((Ok(lock), (position, buffered)));
                }
                let request = match position {
                    Position::Done => return None,
                    Position::Next(request) => request,
                };
                match admin.list_locks(&request).await {
                    Err(error) => {
                        return Some((Err(error), (Position::Done, Vec::new().into_iter())));
                    }
                    Ok(page) => {
                        position = match page.next {
                            Some(cursor) => Position::Next(PageRequest {
                                after: Some(cursor),
                                ..request
                            }),
                            None => Position::Done,
                        };
                        buffered = page.locks.into_iter();
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures_util::StreamExt;

    use super::*;
    use crate::error::{ErrorKind, Operation};

    fn lock(name: &str) -> LockInfo {
        LockInfo::new(name, LockState::Free, AcquisitionId::new(name))
    }

    /// Answers the listing's requests from a script of pages, and records what was asked: the
    /// paging loop is what is under test here, not a backend.
    #[derive(Debug)]
    struct ScriptedPages {
        pages: Mutex<Vec<Result<LockPage, LockError>>>,
        asked: Mutex<Vec<PageRequest>>,
    }

    #[async_trait]
    impl LockAdmin for ScriptedPages {
        async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
            self.asked.lock().unwrap().push(request.clone());
            self.pages.lock().unwrap().remove(0)
        }

        async fn inspect_lock(&self, _name: &str) -> Result<Option<LockInfo>, LockError> {
            unreachable!("a listing does not inspect")
        }

        async fn force_unlock(&self, _: &str, _: &AcquisitionId) -> Result<bool, LockError> {
            unreachable!("a listing does not free")
        }
    }

    fn page(names: &[&str], next: Option<&str>) -> Result<LockPage, LockError> {
        Ok(LockPage {
            locks: names.iter().map(|name| lock(name)).collect(),
            next: next.map(PageCursor::new),
        })
    }

    #[tokio::test]
    async fn a_listing_follows_cursors_through_empty_pages_and_ends_on_the_last() {
        let admin = ScriptedPages {
            pages: Mutex::new(vec![
                page(&["a", "b"], Some("c1")),
                page(&[], Some("c2")),
                page(&["c"], None),
            ]),
            asked: Mutex::new(Vec::new()),
        };
        let names: Vec<String> = list_all_locks(&admin, "p", 2)
            .map(|lock| lock.unwrap().name)
            .collect()
            .await;
        assert_eq!(names, ["a", "b", "c"]);
        let asked = admin.asked.lock().unwrap();
        let cursors: Vec<Option<&str>> = asked
            .iter()
            .map(|request| request.after.as_ref().map(PageCursor::as_str))
            .collect();
        assert_eq!(cursors, [None, Some("c1"), Some("c2")]);
        assert!(
            asked
                .iter()
                .all(|request| request.prefix == "p" && request.limit == 2)
        );
    }

    #[tokio::test]
    async fn a_listing_ends_at_its_first_error() {
        let admin = ScriptedPages {
            pages: Mutex::new(vec![
                page(&["a"], Some("c1")),
                Err(LockError::backend_message(
                    ErrorKind::Unreachable,
                    "scripted",
                    Operation::List,
                    "",
                    "down",
                )),
                page(&["never"], None),
            ]),
            asked: Mutex::new(Vec::new()),
        };
        let results: Vec<Result<LockInfo, LockError>> =
            list_all_locks(&admin, "", 10).collect().await;
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].as_ref().unwrap().name, "a");
        assert!(results[1].is_err());
        assert_eq!(admin.asked.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_lock_is_held_only_while_its_held_until_is_later_than_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let later = lock("x").judged_at(now + Duration::from_millis(1), now);
        assert_eq!(later.state, LockState::Held);
        assert_eq!(later.remaining, Some(Duration::from_millis(1)));
        let at_now = lock("x").judged_at(now, now);
        assert_eq!(at_now.state, LockState::Free);
        assert_eq!(at_now.remaining, None);
        assert_eq!(at_now.held_until, Some(now));
        let earlier = lock("x").judged_at(now - Duration::from_secs(1), now);
        assert_eq!(earlier.state, LockState::Free);
    }

    /// Answers for one held lock, `"x"`, held by the acquisition `"right"`.
    #[derive(Debug)]
    struct OneLock;

    #[async_trait]
    impl LockAdmin for OneLock {
        async fn list_locks(&self, _: &PageRequest) -> Result<LockPage, LockError> {
            page(&["x"], None)
        }

        async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
            Ok((name == "x").then(|| lock(name)))
        }

        async fn force_unlock(
            &self,
            name: &str,
            acquisition: &AcquisitionId,
        ) -> Result<bool, LockError> {
            Ok(name == "x" && acquisition.as_str() == "right")
        }
    }

    #[tokio::test]
    async fn an_arc_answers_as_the_admin_it_holds() {
        let admin: std::sync::Arc<OneLock> = std::sync::Arc::new(OneLock);
        let page = admin.list_locks(&PageRequest::first("")).await.unwrap();
        assert_eq!(page.locks, [lock("x")]);
        assert_eq!(admin.inspect_lock("x").await.unwrap(), Some(lock("x")));
        assert_eq!(admin.inspect_lock("y").await.unwrap(), None);
        let right = AcquisitionId::new("right");
        assert!(admin.force_unlock("x", &right).await.unwrap());
        assert!(
            !admin
                .force_unlock("x", &AcquisitionId::new("wrong"))
                .await
                .unwrap()
        );
    }

    #[test]
    fn states_and_acquisitions_print_as_an_operator_passes_them_back() {
        assert_eq!(LockState::Held.to_string(), "held");
        assert_eq!(LockState::Free.to_string(), "free");
        let acquisition = AcquisitionId::new("2024-01-02T03:04:05.678Z@web-3");
        assert_eq!(acquisition.as_str(), "2024-01-02T03:04:05.678Z@web-3");
        assert_eq!(acquisition.to_string(), "2024-01-02T03:04:05.678Z@web-3");
    }

    #[test]
    fn a_page_size_of_zero_still_moves() {
        assert_eq!(PageRequest::first("").with_limit(0).limit, 1);
        assert_eq!(PageRequest::first("").limit, DEFAULT_PAGE_SIZE);
    }
}
