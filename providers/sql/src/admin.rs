//! The operator's view of the lock table ([`LockAdmin`]), once for every [`SqlBackend`]: what
//! the rows say, judged by the clock the lock statements compare with, and a force-unlock that
//! frees exactly the acquisition the operator saw.
//!
//! An acquisition id is `<locked_by>/<locked_at>`, plus `/<fencing_token>` when the table has
//! the fencing column. `locked_by` alone does not identify an acquisition (Java ShedLock writes
//! its host name, the same every time), but with the stored `locked_at`, exactly as stored, it
//! does. Each part is percent-encoded where it holds `%`, `/`, white space or a control
//! character, so the id is one printable word an operator can paste on a command line.

use std::fmt::Write as _;
use std::future::Future;

use async_trait::async_trait;
use shedlock_core::{
    AcquisitionId, LockAdmin, LockError, LockInfo, LockPage, LockState, Operation, PageCursor,
    PageRequest, TimeSource,
    raw::{LockStorage, NodeTime},
};

use crate::backend::{
    LIKE_ESCAPE, LockSelection, LockedAtOf, SqlAdmin, SqlBackend, StoredAcquisition, StoredLock,
};
use crate::provider::SqlLockProvider;

/// Every statement is one round trip on one connection, bounded by the operation timeout like
/// the lock statements; records are kept, as ShedLock keeps them.
#[async_trait]
impl<B: SqlBackend> LockAdmin for SqlLockProvider<B> {
    /// One statement per page: keyset paging in the name column's order (`name > <cursor>`),
    /// one row more than the page to know whether another follows. The prefix is a `LIKE`
    /// pattern with its wildcards escaped; where the database's `LIKE` matches more than the
    /// exact prefix (a case-insensitive collation, SQLite), the extra rows are dropped here, so
    /// a page may hold fewer locks than asked and still not be the last.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let limit = request.limit.max(1);
        let after = request.after.as_ref().map(PageCursor::as_str);
        let texts = [
            ("prefix", Some(request.prefix.as_str())),
            ("page cursor", after),
        ];
        for (what, text) in texts
            .into_iter()
            .filter_map(|(what, text)| Some((what, text?)))
        {
            if let Some(rule) = self.backend().text_rule(text) {
                return Err(LockError::invalid_request(
                    B::PROVIDER,
                    Operation::List,
                    "",
                    format!("the {what} {text:?} breaks a rule of the name column: {rule}"),
                ));
            }
        }
        let pattern = like_prefix_pattern(&request.prefix);
        let selection = LockSelection::Page {
            pattern: &pattern,
            after,
            limit: i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1),
        };
        let now = self.node_time();
        let mut rows = self
            .within(Operation::List, "", self.storage.read_locks(selection, now))
            .await?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        // The cursor is the last row read, matched exactly or not, so the next page starts
        // after everything this one looked at.
        let next = match (more, rows.last()) {
            (true, Some(last)) => Some(PageCursor::new(last.name.clone())),
            _ => None,
        };
        let fencing = self.has_fencing();
        let locks = rows
            .into_iter()
            .filter(|row| row.name.starts_with(&request.prefix))
            .map(|row| lock_info(row, fencing))
            .collect();
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.storage.check_name(name)?;
        let now = self.node_time();
        let rows = self
            .within(
                Operation::Inspect,
                name,
                self.storage.read_locks(LockSelection::Named(name), now),
            )
            .await?;
        let fencing = self.has_fencing();
        Ok(rows.into_iter().next().map(|row| lock_info(row, fencing)))
    }

    /// One conditional `UPDATE`: `lock_until` becomes now where the row still holds this
    /// acquisition (`locked_by`, `locked_at` and the fencing token as the id names them) and
    /// `lock_until` has not passed. The row and its fencing counter stay.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        self.storage.check_name(name)?;
        let acquisition = self.parse_acquisition(name, acquisition)?;
        let now = self.node_time();
        self.within(
            Operation::ForceUnlock,
            name,
            self.storage.force_unlock(name, &acquisition, now),
        )
        .await
    }
}

impl<B: SqlBackend> SqlLockProvider<B> {
    /// The clock the statements compare with: the database's, or for client time the node's,
    /// as the lock statements of this node would.
    fn node_time(&self) -> NodeTime {
        match self.storage.time_source() {
            TimeSource::Server => NodeTime::ServerTime,
            TimeSource::Client => NodeTime::ClientTime(self.clock.now()),
        }
    }

    async fn within<T>(
        &self,
        operation: Operation,
        name: &str,
        statement: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        tokio::time::timeout(self.operation_timeout, statement)
            .await
            .unwrap_or_else(|_| {
                Err(LockError::Timeout {
                    provider: B::PROVIDER,
                    operation,
                    name: name.to_owned(),
                    after: self.operation_timeout,
                })
            })
    }

    /// Reads an id [`lock_info`] wrote for this table, or says what shape it must have.
    fn parse_acquisition(
        &self,
        name: &str,
        id: &AcquisitionId,
    ) -> Result<StoredAcquisition<LockedAtOf<B>>, LockError> {
        let fencing = self.has_fencing();
        let malformed = |reason: String| {
            let shape = if fencing {
                "<locked_by>/<locked_at>/<fencing_token>"
            } else {
                "<locked_by>/<locked_at>"
            };
            LockError::invalid_request(
                B::PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "the acquisition id {:?} is not one this provider gives: {reason}. It must \
                     be {shape} as list and inspect show it, <locked_at> being {}, with `%`, \
                     `/` and white space percent-encoded; nothing was changed",
                    id.as_str(),
                    <B::Admin as SqlAdmin<B>>::LOCKED_AT_KEY
                ),
            )
        };
        let parts: Vec<&str> = id.as_str().split('/').collect();
        let expected = if fencing { 3 } else { 2 };
        if parts.len() != expected {
            return Err(malformed(format!(
                "it has {} part(s) separated by '/', not {expected}",
                parts.len()
            )));
        }
        let decode = |what: &str, part: &str| {
            percent_decode(part)
                .ok_or_else(|| malformed(format!("its {what} part has a malformed % escape")))
        };
        let locked_by = decode("locked_by", parts[0])?;
        let locked_at_key = decode("locked_at", parts[1])?;
        let locked_at = self
            .backend()
            .admin()
            .locked_at_from_key(&locked_at_key)
            .ok_or_else(|| {
                malformed(format!(
                    "its locked_at part {locked_at_key:?} is not {}",
                    <B::Admin as SqlAdmin<B>>::LOCKED_AT_KEY
                ))
            })?;
        let fencing_token = match parts.get(2) {
            None | Some(&"") => None,
            Some(token) => Some(token.parse::<i64>().map_err(|_| {
                malformed(format!(
                    "its fencing token part {token:?} is not an integer"
                ))
            })?),
        };
        Ok(StoredAcquisition {
            locked_by,
            locked_at,
            fencing_token,
        })
    }
}

/// A row as the operator sees it. Its state is the statement's own comparison with now,
/// through [`LockInfo::judged_at`] wherever `lock_until` reads as an instant.
fn lock_info(row: StoredLock, fencing: bool) -> LockInfo {
    let acquisition = acquisition_id(
        &row.locked_by,
        &row.locked_at_key,
        fencing.then_some(row.fencing_token),
    );
    let state = if row.held {
        LockState::Held
    } else {
        LockState::Free
    };
    let mut info = LockInfo::new(row.name, state, acquisition).with_locked_by(row.locked_by);
    if let Some(locked_at) = row.locked_at {
        info = info.with_locked_at(locked_at);
    }
    if let Some(lock_until) = row.lock_until {
        info = info.judged_at(lock_until, row.now);
    }
    // Tokens count acquisitions from 1: 0 is a row no fencing acquisition wrote (a Java
    // node's, or one from before the column was added).
    match row
        .fencing_token
        .and_then(|token| u64::try_from(token).ok())
    {
        Some(token) if token > 0 => info.with_fencing_token(token),
        _ => info,
    }
}

/// `<locked_by>/<locked_at_key>`, then `/<fencing_token>` (empty for NULL) when `fencing` is
/// `Some`, each part percent-encoded.
fn acquisition_id(
    locked_by: &str,
    locked_at_key: &str,
    fencing: Option<Option<i64>>,
) -> AcquisitionId {
    let mut id = String::with_capacity(locked_by.len() + locked_at_key.len() + 22);
    percent_encode(locked_by, &mut id);
    id.push('/');
    percent_encode(locked_at_key, &mut id);
    if let Some(token) = fencing {
        id.push('/');
        if let Some(token) = token {
            let _ = write!(id, "{token}");
        }
    }
    AcquisitionId::new(id)
}

/// Whether `c` is written as `%XX` escapes in an acquisition id: the separator, the escape
/// itself, and what a shell or a terminal would not pass on as one word.
fn needs_escape(c: char) -> bool {
    c == '%' || c == '/' || c.is_whitespace() || c.is_control()
}

fn percent_encode(text: &str, out: &mut String) {
    for c in text.chars() {
        if needs_escape(c) {
            let mut utf8 = [0u8; 4];
            for byte in c.encode_utf8(&mut utf8).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
}

/// The text `percent_encode` wrote; `None` for a `%` not followed by two hex digits, or
/// escapes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// `prefix` as a `LIKE` pattern with [`LIKE_ESCAPE`]: its `%`, `_` and escape characters
/// literal, then `%`.
fn like_prefix_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if c == '%' || c == '_' || c == LIKE_ESCAPE {
            pattern.push(LIKE_ESCAPE);
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_make_wildcards_and_the_escape_literal() {
        assert_eq!(like_prefix_pattern(""), "%");
        assert_eq!(like_prefix_pattern("job-"), "job-%");
        assert_eq!(like_prefix_pattern("50%_a!b\\"), "50!%!_a!!b\\%");
    }

    #[test]
    fn acquisition_ids_are_one_printable_word_that_decodes_to_its_parts() {
        let id = acquisition_id("host name/1%", "2024-06-10 12:00:00.123", Some(Some(7)));
        assert_eq!(
            id.as_str(),
            "host%20name%2F1%25/2024-06-10%2012:00:00.123/7"
        );
        let parts: Vec<_> = id.as_str().split('/').collect();
        assert_eq!(percent_decode(parts[0]).unwrap(), "host name/1%");
        assert_eq!(percent_decode(parts[1]).unwrap(), "2024-06-10 12:00:00.123");

        let unicode = acquisition_id("nœud\t#1", "1718000000123456", None);
        assert_eq!(unicode.as_str(), "nœud%09#1/1718000000123456");
        assert_eq!(
            percent_decode("n%C5%93ud%09#1").unwrap(),
            "nœud\t#1",
            "escaped UTF-8 decodes too"
        );
        assert_eq!(
            acquisition_id("java-host", "1", Some(None)).as_str(),
            "java-host/1/",
            "a NULL token is an empty part"
        );
    }

    #[test]
    fn malformed_escapes_do_not_decode() {
        for bad in ["%", "%2", "%zz", "%+1", "%C5", "a%2"] {
            assert_eq!(percent_decode(bad), None, "{bad}");
        }
        assert_eq!(percent_decode("plain#text").unwrap(), "plain#text");
    }
}
