//! The operator's view of the lock collection ([`LockAdmin`]): list, inspect and force-unlock,
//! each one command judged by the server's `$$NOW`.
//!
//! - **Listing** is one `aggregate` per page: `$match` on `_id` between the name prefix and
//!   its successor (a range, so no character of a prefix is a pattern) and after the previous
//!   page's last name, `$sort` by `_id`, `$limit` one more than the page (which tells whether
//!   another page follows), and `$project` of ShedLock's fields plus `now: "$$NOW"`, so every
//!   lock of the page is judged by the server's clock read in the same command. The batch
//!   size exceeds the limit, so the whole page comes in the first answer and no cursor is left
//!   open. Documents are kept after release, so free locks are listed too.
//! - **An acquisition** is what the document says of it: `<lockedAt ms>/<fencingToken>/
//!   <lockedBy>` (`-` for a field that is not there or not a date or integer). This provider's
//!   `lockedBy` is unique per acquisition; Java's is the host name, the same for each of its
//!   acquisitions, which `lockedAt`, exact to the millisecond, tells apart.
//! - **Force-unlock** is one `findAndModify` that matches those fields and a `lockUntil` still
//!   after `$$NOW`, sets `lockUntil` to `$$NOW`, as a release does, and counts `fencingToken`
//!   up by one. The count retires the acquisition: a second force-unlock of it, and its
//!   holder's extend and release (which match the token too), change nothing, however their
//!   commands interleave. The document stays, the next acquisition's token is larger still,
//!   and Java nodes see a normal released lock.

use std::time::SystemTime;

use async_trait::async_trait;
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::error::Error as DriverError;
use mongodb::options::Collation;
use shedlock_core::{
    AcquisitionId, ConfigurationError, ErrorKind, LockAdmin, LockError, LockInfo, LockPage,
    LockProvider, LockState, Operation, PageCursor, PageRequest, raw,
};

use crate::storage::{FENCING_TOKEN, LOCK_UNTIL, LOCKED_AT, LOCKED_BY};
use crate::{MongoLockProvider, PROVIDER};

/// The projected field carrying the server's `$$NOW`.
const NOW: &str = "now";

/// How an acquisition id marks a field the document does not hold (as a date or integer).
const ABSENT: &str = "-";

#[async_trait]
impl LockAdmin for MongoLockProvider {
    /// One `aggregate`, in `_id` order (UTF-8 byte order, the simple collation, whatever the
    /// collection's default); the cursor is the last name of the page.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let limit = request.limit.max(1);
        let mut range = doc! { "$gte": &request.prefix };
        if let Some(end) = prefix_end(&request.prefix) {
            range.insert("$lt", end);
        }
        if let Some(after) = &request.after {
            range.insert("$gt", after.as_str());
        }
        let fetch = limit.saturating_add(1);
        let pipeline = vec![
            doc! { "$match": { "_id": range } },
            doc! { "$sort": { "_id": 1 } },
            doc! { "$limit": i64::try_from(fetch).unwrap_or(i64::MAX) },
            with_server_now(),
        ];
        let mut documents = self.aggregate(Operation::List, "", pipeline, fetch).await?;
        let more = documents.len() > limit;
        documents.truncate(limit);
        let locks = documents
            .iter()
            .map(|document| self.lock_info(Operation::List, document))
            .collect::<Result<Vec<_>, _>>()?;
        let next = match locks.last() {
            Some(last) if more => Some(PageCursor::new(last.name.clone())),
            _ => None,
        };
        Ok(LockPage { locks, next })
    }

    /// One `aggregate`: the document by `_id`, with `$$NOW`.
    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.check_name(name)?;
        let pipeline = vec![doc! { "$match": { "_id": name } }, with_server_now()];
        let documents = self
            .aggregate(Operation::Inspect, name, pipeline, 1)
            .await?;
        documents
            .first()
            .map(|document| self.lock_info(Operation::Inspect, document))
            .transpose()
    }

    /// One `findAndModify`: `{_id, lockedBy, lockedAt, fencingToken?, $expr: lockUntil >
    /// $$NOW}` gets `lockUntil: $$NOW`.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        self.check_name(name)?;
        let Some(seen) = Acquisition::parse(acquisition.as_str()) else {
            return Err(LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "acquisition id {:?} is not one the mongo provider produced (<lockedAt \
                     ms>/<fencingToken>/<lockedBy>, as a listing or inspect shows it); nothing \
                     was changed",
                    acquisition.as_str()
                ),
            ));
        };
        let live = doc! { "$gt": [format!("${LOCK_UNTIL}"), "$$NOW"] };
        let mut filter = doc! { "_id": name, LOCKED_BY: seen.locked_by };
        match seen.locked_at {
            Some(millis) => {
                filter.insert(LOCKED_AT, DateTime::from_millis(millis));
                filter.insert("$expr", live);
            }
            None => {
                let not_a_date = doc! { "$ne": [{ "$type": format!("${LOCKED_AT}") }, "date"] };
                filter.insert("$expr", doc! { "$and": [live, not_a_date] });
            }
        }
        if let Some(token) = seen.fencing_token {
            filter.insert(FENCING_TOKEN, token);
        }
        // The token counts up as well: that retires the acquisition whatever the timing, so a
        // second force-unlock of it, or its holder's extend or release, matches nothing even
        // when it started before this one and was retried after it with an earlier `$$NOW`.
        let update = vec![doc! { "$set": {
            LOCK_UNTIL: "$$NOW",
            FENCING_TOKEN: { "$add": [
                { "$ifNull": [format!("${FENCING_TOKEN}"), Bson::Int64(0)] },
                Bson::Int64(1),
            ] },
        } }];
        let storage = &self.storage;
        let freed = self
            .bounded(
                Operation::ForceUnlock,
                name,
                storage
                    .collection
                    .find_one_and_update(filter, update)
                    .projection(doc! { "_id": 1 })
                    .max_time(storage.operation_timeout)
                    .into_future(),
            )
            .await?;
        Ok(freed.is_some())
    }
}

impl MongoLockProvider {
    /// Refuses what a lock could never be named, as acquiring would.
    fn check_name(&self, name: &str) -> Result<(), LockError> {
        if name.is_empty() {
            return Err(ConfigurationError::EmptyName.into());
        }
        self.capabilities().check_name_length(PROVIDER, name)
    }

    /// Runs a driver call within the operation timeout.
    async fn bounded<T>(
        &self,
        operation: Operation,
        name: &str,
        call: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, LockError> {
        let storage = &self.storage;
        raw::bounded(PROVIDER, operation, name, storage.operation_timeout, call)
            .await?
            .map_err(|error| storage.driver_error(operation, name, error))
    }

    /// The documents of `pipeline`, at most `expected` of them, in one round trip: the batch
    /// size leaves room for all of them and one more, so the server exhausts the cursor in its
    /// first answer instead of leaving it open for a `getMore`.
    async fn aggregate(
        &self,
        operation: Operation,
        name: &str,
        pipeline: Vec<Document>,
        expected: usize,
    ) -> Result<Vec<Document>, LockError> {
        let storage = &self.storage;
        let batch = u32::try_from(expected.saturating_add(1)).unwrap_or(u32::MAX);
        let read = async {
            let mut cursor = storage
                .collection
                .aggregate(pipeline)
                .batch_size(batch)
                .collation(Collation::builder().locale("simple").build())
                .max_time(storage.operation_timeout)
                .await?;
            let mut documents = Vec::with_capacity(expected.min(1024));
            while cursor.advance().await? {
                documents.push(cursor.deserialize_current()?);
            }
            Ok(documents)
        };
        self.bounded(operation, name, read).await
    }

    /// A document as a lock, judged at the `$$NOW` projected beside it.
    ///
    /// A `lockUntil` date decides: held while it is after the server's now. A document holding
    /// none of ShedLock's fields (an acquire's upsert in progress) is free. Any other shape
    /// (`lockUntil` missing or not a date) is shown as held with no end: no acquire, Java's or
    /// this provider's, takes such a document, and force-unlock does not free it either; it
    /// has to be fixed or deleted by hand.
    fn lock_info(&self, operation: Operation, document: &Document) -> Result<LockInfo, LockError> {
        let unexpected = |kind: ErrorKind, what: String| {
            LockError::backend_message(
                kind,
                PROVIDER,
                operation,
                "",
                format!("{} answered {what}", self.storage.target),
            )
        };
        // A document whose _id no lock name can be: another application's, in the collection.
        let Some(Bson::String(name)) = document.get("_id") else {
            return Err(unexpected(
                ErrorKind::CorruptData,
                format!(
                    "a document whose _id is not a string: {:?}",
                    document.get("_id")
                ),
            ));
        };
        // A server that does not evaluate $$NOW in a projection lacks what the provider needs.
        let Some(Bson::DateTime(now)) = document.get(NOW) else {
            return Err(unexpected(
                ErrorKind::Configuration,
                format!("{name:?} without $$NOW, which the command asked for"),
            ));
        };
        let locked_by = match document.get(LOCKED_BY) {
            Some(Bson::String(locked_by)) => Some(locked_by.as_str()),
            _ => None,
        };
        let locked_at = match document.get(LOCKED_AT) {
            Some(Bson::DateTime(locked_at)) => Some(*locked_at),
            _ => None,
        };
        let fencing_token = match document.get(FENCING_TOKEN) {
            Some(Bson::Int64(token)) => Some(*token),
            Some(Bson::Int32(token)) => Some(i64::from(*token)),
            _ => None,
        };
        let acquisition = Acquisition {
            locked_at: locked_at.map(DateTime::timestamp_millis),
            fencing_token,
            locked_by: locked_by.unwrap_or_default(),
        };
        let mut info = LockInfo::new(name.as_str(), LockState::Held, acquisition.id());
        if let Some(locked_by) = locked_by {
            info = info.with_locked_by(locked_by);
            // A Java node's acquisition leaves the counter as the last acquisition of this
            // provider set it, so only a document this provider's acquire wrote shows it.
            if let Some(token) = fencing_token.and_then(|token| u64::try_from(token).ok())
                && shedlock_core::raw::is_acquisition_locked_by(locked_by)
            {
                info = info.with_fencing_token(token);
            }
        }
        if let Some(locked_at) = locked_at {
            info = info.with_locked_at(locked_at.to_system_time());
        }
        let now: SystemTime = now.to_system_time();
        Ok(match document.get(LOCK_UNTIL) {
            Some(Bson::DateTime(lock_until)) => info.judged_at(lock_until.to_system_time(), now),
            None if document.get(LOCKED_BY).is_none() && document.get(LOCKED_AT).is_none() => {
                info.state = LockState::Free;
                info
            }
            _ => info,
        })
    }
}

/// ShedLock's fields and the server's clock, read in the same command.
fn with_server_now() -> Document {
    doc! { "$project": {
        LOCK_UNTIL: 1,
        LOCKED_AT: 1,
        LOCKED_BY: 1,
        FENCING_TOKEN: 1,
        NOW: "$$NOW",
    } }
}

/// The smallest string after every string that starts with `prefix`, in UTF-8 byte order
/// (which is code point order): the last character that has a successor, raised by one, with
/// what follows it cut off. `None` when there is none (an empty prefix, or only U+10FFFF):
/// the range then has no upper end.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{d7ff}' => Some('\u{e000}'),
            other => char::from_u32(u32::from(other) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The fields of a document that identify one acquisition.
#[derive(Debug, PartialEq, Eq)]
struct Acquisition<'a> {
    locked_at: Option<i64>,
    fencing_token: Option<i64>,
    locked_by: &'a str,
}

impl<'a> Acquisition<'a> {
    fn id(&self) -> AcquisitionId {
        let field = |value: Option<i64>| value.map_or_else(|| ABSENT.to_owned(), |v| v.to_string());
        AcquisitionId::new(format!(
            "{}/{}/{}",
            field(self.locked_at),
            field(self.fencing_token),
            self.locked_by
        ))
    }

    fn parse(id: &'a str) -> Option<Self> {
        let field = |text: &str| match text {
            ABSENT => Some(None),
            number => number.parse::<i64>().ok().map(Some),
        };
        let (locked_at, rest) = id.split_once('/')?;
        let (fencing_token, locked_by) = rest.split_once('/')?;
        Some(Self {
            locked_at: field(locked_at)?,
            fencing_token: field(fencing_token)?,
            locked_by,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_raises_the_last_character_that_can_be() {
        assert_eq!(prefix_end("jobs/").as_deref(), Some("jobs0"));
        assert_eq!(prefix_end("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(prefix_end("x\u{d7ff}").as_deref(), Some("x\u{e000}"));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("\u{10ffff}"), None);
    }

    #[test]
    fn acquisition_ids_round_trip() {
        for acquisition in [
            Acquisition {
                locked_at: Some(1_714_979_289_123),
                fencing_token: Some(7),
                locked_by: "host#0123456789abcdef0123456789abcdef",
            },
            Acquisition {
                locked_at: None,
                fencing_token: None,
                locked_by: "a/b with / slashes",
            },
        ] {
            let id = acquisition.id();
            assert_eq!(Acquisition::parse(id.as_str()), Some(acquisition));
        }
        for bad in ["", "1/2", "x/2/h", "1/y/h", "7@123/host"] {
            assert_eq!(Acquisition::parse(bad), None, "{bad:?}");
        }
    }
}
