//! What a lock handle knows of its acquisition between calls, and the rule every handle keeps
//! with it: once the acquisition is over, release and extend answer `false` without asking.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::{ConfigurationError, LockError};

/// A handle's state `S` (the values its next release or extend needs: a version, a TTL, a
/// lease) and whether its acquisition is over, behind one async mutex.
///
/// Every handle's `unlock` and `extend` start the same way: wait for the handle's previous
/// call, then answer `false` without sending anything if the acquisition is over. It is over
/// once a release was answered (`true` or `false`), or an extend answered `false`: the backend
/// said the lock is not this acquisition's any more, and nothing can make it so again. An
/// error ends nothing, since the outcome is not known and the caller may try again.
///
/// ```
/// use shedlock_core::raw::HandleState;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // A handle's state: here, the version its last write left.
/// let state = HandleState::new(7_u64);
/// let mut ongoing = state.ongoing().await.expect("a new acquisition is not over");
/// *ongoing += 1; // an extend wrote version 8
/// ongoing.end(); // a release was answered
/// drop(ongoing);
/// assert!(state.ongoing().await.is_none(), "a second release answers false unasked");
/// # }
/// ```
pub struct HandleState<S> {
    slot: tokio::sync::Mutex<Slot<S>>,
}

struct Slot<S> {
    over: bool,
    state: S,
}

impl<S> HandleState<S> {
    /// The state of an acquisition that was just taken.
    pub fn new(state: S) -> Self {
        Self {
            slot: tokio::sync::Mutex::new(Slot { over: false, state }),
        }
    }

    /// Waits for this handle's other release or extend to finish, then gives its state for
    /// the next one, or `None` if the acquisition is over (the call answers `false`).
    pub async fn ongoing(&self) -> Option<Ongoing<'_, S>> {
        let slot = self.slot.lock().await;
        (!slot.over).then_some(Ongoing { slot })
    }

    /// Whether the acquisition is over, or `None` while a release or extend runs (so `Debug`
    /// never waits for a backend).
    pub fn is_over(&self) -> Option<bool> {
        self.slot.try_lock().ok().map(|slot| slot.over)
    }
}

impl<S> fmt::Debug for HandleState<S> {
    /// Shows only whether the acquisition is over: `S` may hold what a handle keeps private.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.is_over() {
            Some(over) => f.debug_struct("HandleState").field("over", &over).finish(),
            None => f.write_str("HandleState(a release or extend is running)"),
        }
    }
}

/// The state of an acquisition that is not over, held for one release or extend: other calls
/// on the same handle wait until it is dropped.
pub struct Ongoing<'a, S> {
    slot: tokio::sync::MutexGuard<'a, Slot<S>>,
}

impl<S> Ongoing<'_, S> {
    /// Marks the acquisition over: the backend answered a release, or answered that the lock
    /// is not this acquisition's any more. Later releases and extends answer `false` unasked.
    pub fn end(&mut self) {
        self.slot.over = true;
    }
}

impl<S> Deref for Ongoing<'_, S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.slot.state
    }
}

impl<S> DerefMut for Ongoing<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.slot.state
    }
}

/// Refuses an extend to zero, which would end the lock at once, as `try_lock` refuses a zero
/// `lock_at_most_for`: checked before a handle sends anything.
pub fn check_extend(name: &str, lock_at_most_for: Duration) -> Result<(), LockError> {
    if lock_at_most_for.is_zero() {
        return Err(ConfigurationError::ZeroLockAtMostFor {
            name: name.to_owned(),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extend_to_zero_is_refused_naming_the_lock_and_any_other_passes() {
        match check_extend("nightly", Duration::ZERO) {
            Err(LockError::Configuration(ConfigurationError::ZeroLockAtMostFor { name })) => {
                assert_eq!(name, "nightly");
            }
            other => panic!("an extend to zero was not refused: {other:?}"),
        }
        assert!(check_extend("nightly", Duration::from_millis(1)).is_ok());
    }

    #[tokio::test]
    async fn an_error_ends_nothing_and_an_end_is_kept() {
        let state = HandleState::new(1_u32);
        {
            let mut ongoing = state.ongoing().await.expect("new");
            *ongoing = 2;
            // A call that failed returns without ending: the next call may try again.
        }
        assert_eq!(state.is_over(), Some(false));
        let ongoing = state.ongoing().await.expect("an error ended nothing");
        assert_eq!(*ongoing, 2, "the state a call left is kept");
        assert_eq!(state.is_over(), None, "a call is running");
        assert_eq!(
            format!("{state:?}"),
            "HandleState(a release or extend is running)"
        );
        drop(ongoing);
        state.ongoing().await.expect("still not over").end();
        assert_eq!(state.is_over(), Some(true));
        assert_eq!(format!("{state:?}"), "HandleState { over: true }");
        assert!(state.ongoing().await.is_none());
    }
}
