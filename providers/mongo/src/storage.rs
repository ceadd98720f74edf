//! Every command this provider sends: one `findAndModify` per acquire, release and extend, each
//! an aggregation pipeline evaluated on the server's `$$NOW`.
//!
//! A lock is one document of ShedLock's layout, `{_id: name, lockUntil, lockedAt, lockedBy}`
//! (BSON dates and a string), plus `fencingToken`, a 64-bit integer Java nodes leave alone.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::ReturnDocument;
use shedlock_core::{
    Capabilities, ErrorKind, LockError, LockHolder, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome},
};

use crate::failure::is_duplicate_key;
use crate::{MAX_LOCK_DURATION, MAX_NAME_CHARS, PROVIDER};

/// ShedLock's field for the instant the lock frees itself.
pub(crate) const LOCK_UNTIL: &str = "lockUntil";
/// ShedLock's field for the instant of the acquisition.
pub(crate) const LOCKED_AT: &str = "lockedAt";
/// ShedLock's field for the holder (ours: `<holder>#<id>`, unique per acquisition).
pub(crate) const LOCKED_BY: &str = "lockedBy";
/// This provider's extra field: the last fencing token handed out for the name.
pub(crate) const FENCING_TOKEN: &str = "fencingToken";

/// The lock collection, as [`LockStorage`].
pub(crate) struct MongoStorage {
    pub(crate) collection: Collection<Document>,
    /// Bounds each command on the server too (`maxTimeMS`), so a command given up here is given
    /// up there rather than left running.
    pub(crate) operation_timeout: Duration,
    /// Where the client goes (hosts, database and collection), with any password masked.
    pub(crate) target: String,
    /// Whether the provider created the client (`connect`, `connect_lazy`), and so may shut it
    /// down; a client the application passed to `build` is the application's.
    pub(crate) owns_client: bool,
}

impl fmt::Debug for MongoStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoStorage")
            .field("target", &self.target)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

/// Which existing documents an acquire may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takeover {
    /// Only a document the upsert has just created (no lock fields yet).
    NewOnly,
    /// Also a document whose `lockUntil` has passed on the server's clock.
    NewOrExpired,
}

/// `duration` in whole milliseconds, rounded up so a lock is never shorter than asked. `None`
/// past [`MAX_LOCK_DURATION`].
fn millis(duration: Duration) -> Option<i64> {
    if duration > MAX_LOCK_DURATION {
        return None;
    }
    i64::try_from(duration.as_nanos().div_ceil(1_000_000)).ok()
}

fn millis_or_error(
    operation: Operation,
    name: &str,
    what: &str,
    duration: Duration,
) -> Result<i64, LockError> {
    millis(duration).ok_or_else(|| {
        LockError::invalid_request(
            PROVIDER,
            operation,
            name,
            format!(
                "{what} {duration:?} is longer than a lock this provider writes (at most {} s, \
                 1000 years: lockUntil must stay a date with a four-digit year, which every \
                 reader of the document can print)",
                MAX_LOCK_DURATION.as_secs()
            ),
        )
    })
}

/// The date `millis` milliseconds after the date `date` evaluates to. Written through
/// `$toLong`/`$toDate` (MongoDB 4.0+) rather than `$add` of a date and a number, which some
/// MongoDB-compatible servers do not implement, or `$dateAdd`, which needs MongoDB 5.0.
fn date_plus(date: &str, millis: i64) -> Document {
    doc! { "$toDate": { "$add": [{ "$toLong": date }, Bson::Int64(millis)] } }
}

/// `{$type: "$field"}` equal to `type_name`.
fn has_type(field: &str, type_name: &str) -> Document {
    doc! { "$eq": [{ "$type": format!("${field}") }, type_name] }
}

/// Whether the acquire may take the document it sees. A document the upsert has just created
/// holds only `_id`; an expired one has a date `lockUntil` at or before `$$NOW`. Anything else,
/// including a `lockUntil` that is not a date, is left exactly as it is and judged by the
/// client from the returned document.
fn free_condition(takeover: Takeover) -> Document {
    let new = doc! { "$and": [
        has_type(LOCK_UNTIL, "missing"),
        has_type(LOCKED_AT, "missing"),
        has_type(LOCKED_BY, "missing"),
    ] };
    match takeover {
        Takeover::NewOnly => new,
        Takeover::NewOrExpired => doc! { "$or": [
            new,
            { "$and": [
                has_type(LOCK_UNTIL, "date"),
                { "$lte": [format!("${LOCK_UNTIL}"), "$$NOW"] },
            ] },
        ] },
    }
}

/// The acquire pipeline: when the document is free, ShedLock's three fields from `$$NOW` and
/// the next fencing token; otherwise the document unchanged (a no-op write).
fn acquire_pipeline(takeover: Takeover, locked_by: &str, at_most_ms: i64) -> Vec<Document> {
    let held = doc! {
        LOCK_UNTIL: date_plus("$$NOW", at_most_ms),
        LOCKED_AT: "$$NOW",
        // A holder set to "$..." would otherwise read as a field path.
        LOCKED_BY: { "$literal": locked_by },
        FENCING_TOKEN: { "$add": [
            { "$ifNull": [format!("${FENCING_TOKEN}"), Bson::Int64(0)] },
            Bson::Int64(1),
        ] },
    };
    vec![doc! { "$replaceWith": { "$cond": {
        "if": free_condition(takeover),
        "then": { "$mergeObjects": ["$$ROOT", held] },
        "else": "$$ROOT",
    } } }]
}

/// Release and extend touch only this acquisition's document while it still holds the lock.
fn own_live_lock(held: &HeldRecord) -> Document {
    let mut filter = doc! {
        "_id": &held.name,
        LOCKED_BY: &held.locked_by,
        "$expr": { "$gt": [format!("${LOCK_UNTIL}"), "$$NOW"] },
    };
    // A force-unlock counts the token up, so an acquisition it freed matches no more, even
    // for a command that started before it and was retried after it (whose `$$NOW` is still
    // from before, and would find the `lockUntil` the force-unlock wrote ahead of it).
    if let Some(token) = held
        .fencing_token
        .and_then(|token| i64::try_from(token).ok())
    {
        filter.insert(FENCING_TOKEN, token);
    }
    filter
}

/// The name of a BSON value's type as MongoDB's `$type` spells it, for error messages.
fn type_name(value: Option<&Bson>) -> &'static str {
    match value {
        None => "missing",
        Some(Bson::Double(_)) => "double",
        Some(Bson::String(_)) => "string",
        Some(Bson::Document(_)) => "object",
        Some(Bson::Array(_)) => "array",
        Some(Bson::Binary(_)) => "binData",
        Some(Bson::ObjectId(_)) => "objectId",
        Some(Bson::Boolean(_)) => "bool",
        Some(Bson::DateTime(_)) => "date",
        Some(Bson::Null) => "null",
        Some(Bson::Int32(_)) => "int",
        Some(Bson::Int64(_)) => "long",
        Some(Bson::Timestamp(_)) => "timestamp",
        Some(Bson::Decimal128(_)) => "decimal",
        Some(_) => "another BSON type",
    }
}

impl MongoStorage {
    fn wrong_shape(&self, operation: Operation, name: &str, problem: String) -> LockError {
        LockError::backend_message(
            ErrorKind::CorruptData,
            PROVIDER,
            operation,
            name,
            format!(
                "the document {{_id: {name:?}}} in {} is not a ShedLock lock document: {problem} \
                 (ShedLock writes lockUntil and lockedAt as dates and lockedBy as a string); it \
                 was left unchanged and the lock is not taken: fix or delete the document",
                self.target
            ),
        )
    }

    /// One acquire: a `findOneAndUpdate` upsert on `_id`, returning the document as it is
    /// afterwards. It is ours exactly when its `lockedBy` is this acquisition's identity.
    ///
    /// MongoDB always returns the document of such an upsert (or a duplicate-key error). A
    /// compatible server that answers with no document instead (SecantusDB does for the loser
    /// of two upserts racing to create a document) is asked once more: the command is safe to
    /// repeat, because the identity is this acquisition's own, so the document it returns
    /// says whether this acquisition holds the lock, whatever the first attempt did.
    async fn acquire(
        &self,
        record: &LockRecord<'_>,
        takeover: Takeover,
    ) -> Result<RecordOutcome, LockError> {
        let name = record.name;
        let at_most = millis_or_error(
            Operation::Acquire,
            name,
            "lock_at_most_for",
            record.lock_at_most_for,
        )?;
        let pipeline = acquire_pipeline(takeover, record.locked_by, at_most);
        for _ in 0..2 {
            let answer = self
                .collection
                .find_one_and_update(doc! { "_id": name }, pipeline.clone())
                .upsert(true)
                .return_document(ReturnDocument::After)
                .projection(doc! { LOCK_UNTIL: 1, LOCKED_AT: 1, LOCKED_BY: 1, FENCING_TOKEN: 1 })
                .max_time(self.operation_timeout)
                .await;
            match answer {
                Ok(Some(document)) => return self.judge(name, record.locked_by, &document),
                Ok(None) => continue,
                // Another node's upsert created the document between our lookup and our insert
                // (a server that does not retry such an upsert itself): that node holds it.
                Err(error) if is_duplicate_key(&error) => {
                    return Ok(RecordOutcome::NotAcquired(None));
                }
                Err(error) => return Err(self.driver_error(Operation::Acquire, name, error)),
            }
        }
        // The server answered, but not what MongoDB answers: the write may have been made.
        Err(LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            Operation::Acquire,
            name,
            format!(
                "{} twice returned no document for an upsert asked to return it; whether the \
                 lock was taken is unknown, so the task must not run",
                self.target
            ),
        ))
    }

    /// Reads the document an acquire returned: ours, someone else's, or not a lock document.
    fn judge(
        &self,
        name: &str,
        locked_by: &str,
        document: &Document,
    ) -> Result<RecordOutcome, LockError> {
        let wrong = |problem: String| self.wrong_shape(Operation::Acquire, name, problem);
        let holder = match document.get(LOCKED_BY) {
            Some(Bson::String(holder)) => holder,
            other => return Err(wrong(format!("lockedBy is {}", type_name(other)))),
        };
        let lock_until = match document.get(LOCK_UNTIL) {
            Some(Bson::DateTime(lock_until)) => *lock_until,
            other => return Err(wrong(format!("lockUntil is {}", type_name(other)))),
        };
        if !matches!(document.get(LOCKED_AT), Some(Bson::DateTime(_))) {
            return Err(wrong(format!(
                "lockedAt is {}",
                type_name(document.get(LOCKED_AT))
            )));
        }
        if holder != locked_by {
            return Ok(RecordOutcome::NotAcquired(Some(LockHolder::from_stored(
                Some(holder),
                Some(lock_until.to_system_time()),
            ))));
        }
        let token = match document.get(FENCING_TOKEN) {
            Some(Bson::Int64(token)) => u64::try_from(*token).ok(),
            Some(Bson::Int32(token)) => u64::try_from(*token).ok(),
            _ => None,
        };
        match token {
            Some(token) if token > 0 => Ok(RecordOutcome::Acquired {
                fencing_token: Some(token),
            }),
            _ => Err(LockError::backend_message(
                token_kind(document.get(FENCING_TOKEN)),
                PROVIDER,
                Operation::Acquire,
                name,
                format!(
                    "the lock was taken, but the document {{_id: {name:?}}} in {} holds no valid \
                     fencingToken ({} {:?}; expected a positive 64-bit integer): the lock \
                     expires at lock_at_most_for and the task must not run; fix or delete the \
                     fencingToken field",
                    self.target,
                    type_name(document.get(FENCING_TOKEN)),
                    document.get(FENCING_TOKEN),
                ),
            )),
        }
    }

    /// Runs an owner-checked pipeline update on this acquisition's document; `true` when it
    /// matched (the acquisition was still the holder and the lock had not expired).
    async fn update_own(
        &self,
        operation: Operation,
        held: &HeldRecord,
        update: Vec<Document>,
    ) -> Result<bool, LockError> {
        self.collection
            .find_one_and_update(own_live_lock(held), update)
            .projection(doc! { "_id": 1 })
            .max_time(self.operation_timeout)
            .await
            .map(|document| document.is_some())
            .map_err(|error| self.driver_error(operation, &held.name, error))
    }
}

/// What kind of failure an acquire that found no valid `fencingToken` after its increment is:
/// a counter that passed the largest 64-bit integer (the server's `$add` then makes it a
/// double) is at its limit; anything else (a negative number, a date, a double or a decimal
/// set by hand) is a field this provider did not write.
fn token_kind(token: Option<&Bson>) -> ErrorKind {
    match token {
        Some(Bson::Double(token)) if *token >= i64::MAX as f64 => ErrorKind::Limit,
        _ => ErrorKind::CorruptData,
    }
}

#[async_trait]
impl LockStorage for MongoStorage {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        // BSON dates and $$NOW count whole milliseconds.
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(MAX_NAME_CHARS)
            .with_time_precision(Duration::from_millis(1))
    }

    fn update_creates_missing_record(&self) -> bool {
        true
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire(record, Takeover::NewOnly).await
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire(record, Takeover::NewOrExpired).await
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        _server_time: NodeTime,
    ) -> Result<bool, LockError> {
        let at_most = millis_or_error(
            Operation::Extend,
            &held.name,
            "lock_at_most_for",
            lock_at_most_for,
        )?;
        let update = vec![doc! { "$set": { LOCK_UNTIL: date_plus("$$NOW", at_most) } }];
        self.update_own(Operation::Extend, held, update).await
    }

    async fn unlock(&self, held: &HeldRecord, _server_time: NodeTime) -> Result<bool, LockError> {
        let at_least = millis_or_error(
            Operation::Release,
            &held.name,
            "lock_at_least_for",
            held.lock_at_least_for,
        )?;
        let update = vec![doc! { "$set": { LOCK_UNTIL: { "$max": [
            "$$NOW",
            date_plus(&format!("${LOCKED_AT}"), at_least),
        ] } } }];
        self.update_own(Operation::Release, held, update).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_past_the_largest_integer_is_a_limit_and_any_other_bad_token_corrupt() {
        // The server's $add turns i64::MAX + 1 into a double.
        let overflowed = Bson::Double(i64::MAX as f64);
        assert_eq!(token_kind(Some(&overflowed)), ErrorKind::Limit);
        for other in [
            Bson::Int64(-3),
            Bson::Int64(0),
            Bson::Double(7.0),
            Bson::String("seven".to_owned()),
        ] {
            assert_eq!(token_kind(Some(&other)), ErrorKind::CorruptData, "{other}");
        }
        assert_eq!(token_kind(None), ErrorKind::CorruptData);
    }
}
