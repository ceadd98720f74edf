//! The operator's view ([`LockAdmin`]) as the key-value providers' admin tests read it:
//! listings page by page, inspect, and force-unlocks with the outcomes every provider must give.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use shedlock_core::{
    AcquisitionId, LockAdmin, LockHandle, LockInfo, LockProvider, LockState, Operation, PageCursor,
    PageRequest, list_all_locks,
};

use super::errors::assert_invalid_request;
use super::locks::{acquire, assert_not_acquired, config};

const SECOND: Duration = Duration::from_secs(1);

/// Every lock whose name starts with `prefix`, through [`list_all_locks`] in pages of
/// `page_size`.
pub async fn list(admin: &dyn LockAdmin, prefix: &str, page_size: usize) -> Vec<LockInfo> {
    list_all_locks(admin, prefix, page_size)
        .try_collect()
        .await
        .unwrap()
}

/// The names of `locks`, in their order.
pub fn names(locks: &[LockInfo]) -> Vec<&str> {
    locks.iter().map(|lock| lock.name.as_str()).collect()
}

/// The lock `name`, which must exist.
pub async fn inspect(admin: &dyn LockAdmin, name: &str) -> LockInfo {
    admin
        .inspect_lock(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{name:?} should exist"))
}

/// Every page of the locks under `prefix`, followed cursor by cursor as [`list_all_locks`]
/// does: none holds more than `limit`, and the listing ends.
pub async fn pages(admin: &dyn LockAdmin, prefix: &str, limit: usize) -> Vec<Vec<LockInfo>> {
    let mut request = PageRequest::first(prefix).with_limit(limit);
    let mut pages = Vec::new();
    loop {
        let page = admin.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= limit, "{page:?}");
        pages.push(page.locks);
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => return pages,
        }
        assert!(pages.len() < 100_000, "the listing does not end");
    }
}

/// `node` cannot acquire `name`: it is still held.
pub async fn assert_refused(node: &dyn LockProvider, name: &str) {
    assert_not_acquired(node, &config(name, 10 * SECOND)).await;
}

/// Acquires each of `names` on `node` for 30 s.
pub async fn hold_all<'a>(
    node: &dyn LockProvider,
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<Box<dyn LockHandle>> {
    let mut handles = Vec::new();
    for name in names {
        handles.push(acquire(node, &config(name, 30 * SECOND)).await);
    }
    handles
}

/// The names of a listing by prefix: seven under [`PrefixListing::PREFIX`], some that share all
/// or part of it without starting with it, and names under a prefix of pattern characters
/// (`literal_prefix`) next to names that would match it were they patterns.
pub struct PrefixListing<'a> {
    /// Names under [`PrefixListing::PREFIX`]: seven, so that pages of two end with a short one.
    pub inside: [&'a str; 7],
    /// Names that share all or part of the prefix without starting with it.
    pub outside: &'a [&'a str],
    /// A prefix of characters that are special in patterns or regular expressions.
    pub literal_prefix: &'a str,
    /// The names under `literal_prefix`, in name order.
    pub literal_inside: &'a [&'a str],
    /// Names that `literal_prefix` would match, were it a pattern.
    pub lookalikes: &'a [&'a str],
}

impl PrefixListing<'_> {
    /// The prefix of [`inside`](Self::inside).
    pub const PREFIX: &'static str = "jobs/";

    /// Every name, each once.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        self.inside
            .iter()
            .chain(self.outside)
            .chain(self.literal_inside)
            .chain(self.lookalikes)
            .copied()
    }

    /// With every name held, the operator lists each name under the prefix once, in name order,
    /// in pages of at most two; pattern characters in a prefix are characters; the empty prefix
    /// lists every lock, which is returned; a prefix nothing has lists nothing.
    pub async fn assert_listed(&self, operator: &dyn LockAdmin) -> Vec<LockInfo> {
        let listed = list(operator, Self::PREFIX, 2).await;
        let mut expected = self.inside.to_vec();
        expected.sort_unstable();
        assert_eq!(names(&listed), expected, "every name once, in name order");
        assert!(listed.iter().all(|lock| lock.state == LockState::Held));

        let sizes: Vec<usize> = pages(operator, Self::PREFIX, 2)
            .await
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 2, 2, 1]);

        let literal = list(operator, self.literal_prefix, 2).await;
        assert_eq!(names(&literal), self.literal_inside);
        let all = list(operator, "", 3).await;
        assert_eq!(all.len(), self.all().count());
        assert!(list(operator, "nothing-here", 2).await.is_empty());
        all
    }
}

/// A cursor the provider never returned (`cursor`) is refused, naming what it expects.
pub async fn assert_foreign_cursor_refused(operator: &dyn LockAdmin, cursor: &str) {
    let error = operator
        .list_locks(&PageRequest {
            after: Some(PageCursor::new(cursor)),
            ..PageRequest::first(PrefixListing::PREFIX)
        })
        .await
        .unwrap_err();
    assert_invalid_request(
        &error,
        Operation::List,
        &format!("page cursor \"{cursor}\""),
    );
}

/// An acquisition id `provider` did not write is refused by its force-unlock of `name`.
pub async fn assert_foreign_acquisition_refused(
    operator: &dyn LockAdmin,
    name: &str,
    provider: &str,
) {
    let error = operator
        .force_unlock(name, &AcquisitionId::new("7@123/host"))
        .await
        .unwrap_err();
    assert_invalid_request(
        &error,
        Operation::ForceUnlock,
        &format!("is not one the {provider} provider produced"),
    );
}

/// An acquisition's id stays valid across an extend of it: the operator's force-unlock frees
/// `y`, which `other` then takes.
pub async fn assert_an_id_outlives_an_extend(
    holder: &dyn LockProvider,
    operator: &dyn LockAdmin,
    other: &dyn LockProvider,
) {
    let y = acquire(holder, &config("y", 10 * SECOND)).await;
    let seen_y = inspect(operator, "y").await;
    assert!(y.extend(20 * SECOND).await.unwrap());
    assert!(
        operator
            .force_unlock("y", &seen_y.acquisition)
            .await
            .unwrap()
    );
    acquire(other, &config("y", 10 * SECOND)).await;
}

/// The id of an acquisition released since frees nothing.
pub async fn assert_a_released_id_frees_nothing(
    holder: &dyn LockProvider,
    operator: &dyn LockAdmin,
) {
    let free = acquire(holder, &config("free", 10 * SECOND)).await;
    let seen_free = inspect(operator, "free").await;
    assert!(free.unlock().await.unwrap());
    assert!(
        !operator
            .force_unlock("free", &seen_free.acquisition)
            .await
            .unwrap()
    );
}

/// The listing of 1,000 locks, planted under the names `written` (in name order): in ten pages
/// of at most a hundred, each name once, within 10 s. The locks listed.
pub async fn assert_a_thousand_listed_in_pages_of_a_hundred(
    operator: &dyn LockAdmin,
    prefix: &str,
    written: &[String],
) -> Vec<LockInfo> {
    assert_eq!(written.len(), 1000);
    let started = Instant::now();
    let pages = pages(operator, prefix, 100).await;
    let took = started.elapsed();
    let page_count = pages.len();
    let listed: Vec<LockInfo> = pages.into_iter().flatten().collect();
    assert_eq!(
        names(&listed),
        written,
        "all 1,000, once each, in name order"
    );
    assert_eq!(
        listed
            .iter()
            .map(|lock| &lock.name)
            .collect::<HashSet<_>>()
            .len(),
        1000
    );
    assert_eq!(page_count, 10);
    assert!(took < 10 * SECOND, "took {took:?}");
    listed
}
