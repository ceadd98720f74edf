//! A provider's memory of lock names, bounded.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// What a provider remembers about each lock name it used lately, for at most `capacity`
/// names: when a new name needs room, the name remembered longest ago is forgotten, unless it
/// was looked up ([`get_mut`](Self::get_mut)) since room was last made past it; such a name goes
/// to the back of the order instead, as if remembered anew (the clock algorithm's second
/// chance). A job that runs on every tick therefore stays remembered however many other names
/// come and go between its runs, as long as fewer than `capacity` new names come between two of
/// them; a lookup costs one flag set, with no reordering on the hot path.
///
/// An application may use a new lock name for every order, file or tenant, so anything a
/// provider keeps per name must be bounded, or the process grows for as long as it runs.
/// Whatever is kept here may therefore only save work (an insert attempt, a read before a
/// write), never decide an outcome: any name can be forgotten at any time, and the storage
/// still has to check what it is told.
///
/// [`StorageBasedLockProvider`](super::StorageBasedLockProvider) keeps the names known to
/// have a record here; a provider with its own lock primitive keeps what its fast paths need
/// (ZooKeeper: the version its own release left a node at).
///
/// ```
/// use shedlock_core::raw::RecentNames;
///
/// let mut versions = RecentNames::new(2);
/// versions.insert("a", 1);
/// versions.insert("b", 2);
/// versions.insert("c", 3);
/// assert!(!versions.contains("a"), "the oldest name made room");
/// assert_eq!(versions.get_mut("c").map(|version| *version), Some(3));
/// versions.insert("d", 4);
/// assert!(versions.contains("c"), "c was looked up, so b, older and not, made room");
/// assert!(!versions.contains("b"));
/// ```
#[derive(Debug)]
pub struct RecentNames<V> {
    capacity: usize,
    /// The map and the eviction order share each name, so remembering one allocates it once.
    values: HashMap<Arc<str>, Remembered<V>, foldhash::fast::RandomState>,
    order: VecDeque<Arc<str>>,
}

#[derive(Debug)]
struct Remembered<V> {
    value: V,
    /// Looked up since room was last made past this name.
    used: bool,
}

impl<V> RecentNames<V> {
    /// Remembers at most `capacity` names; 0 remembers none.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            values: HashMap::default(),
            order: VecDeque::new(),
        }
    }

    /// The most names remembered at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many names are remembered now.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no name is remembered.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether `name` is remembered.
    pub fn contains(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// What is remembered for `name`, to read or change in place, looked up as a use: the name
    /// is kept the next time room is made past it. A provider looks a name up this way where
    /// it is about to lock it.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        let remembered = self.values.get_mut(name)?;
        remembered.used = true;
        Some(&mut remembered.value)
    }

    /// What is remembered for `name`, to read or change in place, without counting as a use:
    /// for what a release or other bookkeeping writes, so a name locked once does not stay
    /// remembered as long as one locked on every tick.
    pub fn peek_mut(&mut self, name: &str) -> Option<&mut V> {
        self.values
            .get_mut(name)
            .map(|remembered| &mut remembered.value)
    }

    /// Remembers `value` for `name`, in place of what was remembered for it (which is not a
    /// use). A name not remembered yet is added as the newest, after forgetting the oldest
    /// names not used since room was last made past them, until it fits.
    pub fn insert(&mut self, name: &str, value: V) {
        if let Some(remembered) = self.values.get_mut(name) {
            remembered.value = value;
            return;
        }
        if self.capacity == 0 {
            return;
        }
        // Each pass either forgets a name or clears a flag, so this ends within two passes
        // over the order.
        while self.values.len() >= self.capacity {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            match self.values.get_mut(&oldest) {
                Some(remembered) if remembered.used => {
                    remembered.used = false;
                    self.order.push_back(oldest);
                }
                _ => {
                    self.values.remove(&oldest);
                }
            }
        }
        let name: Arc<str> = Arc::from(name);
        self.values
            .insert(name.clone(), Remembered { value, used: false });
        self.order.push_back(name);
    }

    /// Forgets `name`, returning what was remembered for it. It costs a pass over the names,
    /// so a hot path that only wants a value gone takes it out of an `Option` with
    /// [`get_mut`](Self::get_mut) instead.
    pub fn remove(&mut self, name: &str) -> Option<V> {
        let remembered = self.values.remove(name)?;
        self.order.retain(|kept| &**kept != name);
        Some(remembered.value)
    }

    /// Forgets every name.
    pub fn clear(&mut self) {
        self.values.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_forgets_the_oldest_first() {
        let mut names = RecentNames::new(2);
        names.insert("a", 1);
        names.insert("b", 2);
        // Known already: its value changes, its place in the order does not.
        names.insert("a", 10);
        assert_eq!(names.len(), 2);
        assert!(!names.is_empty());
        names.insert("c", 3);
        assert!(!names.contains("a"), "the first remembered goes first");
        assert!(names.contains("b") && names.contains("c"));
        assert_eq!(names.len(), 2);

        let mut replaced = RecentNames::new(1);
        replaced.insert("a", 1);
        replaced.insert("a", 10);
        assert_eq!((replaced.len(), replaced.remove("a")), (1, Some(10)));

        assert_eq!(names.remove("b"), Some(2));
        assert_eq!(names.remove("b"), None);
        assert!(!names.contains("b"));
        names.insert("d", 4);
        assert!(names.contains("c") && names.contains("d"));
        // "b" left the order as it left the map: "c" is now the oldest.
        names.insert("e", 5);
        assert!(!names.contains("c") && names.contains("d") && names.contains("e"));

        names.clear();
        assert!(names.is_empty() && !names.contains("d"));
        assert_eq!(names.capacity(), 2);
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let mut names = RecentNames::new(0);
        names.insert("a", ());
        assert!(!names.contains("a"));
        assert!(names.is_empty());
        assert_eq!(names.len(), 0);
    }

    /// A name looked up between the new names keeps its place however many come; names
    /// that were never looked up go in the order they came.
    #[test]
    fn a_name_looked_up_since_room_was_last_made_is_kept() {
        let mut names = RecentNames::new(3);
        names.insert("hot", 0);
        for n in 0..1000 {
            names.insert(&n.to_string(), n);
            assert!(names.get_mut("hot").is_some(), "hot forgotten at {n}");
            assert!(names.len() <= 3);
        }
        assert!(names.contains("999") && names.contains("998") && !names.contains("997"));

        // Looked up once: kept past one making of room, then it is the oldest unused one.
        let mut names = RecentNames::new(2);
        names.insert("a", 1);
        names.insert("b", 2);
        assert_eq!(names.get_mut("a").copied(), Some(1));
        names.insert("c", 3);
        assert!(names.contains("a") && !names.contains("b") && names.contains("c"));
        names.insert("d", 4);
        assert!(!names.contains("a") && names.contains("c") && names.contains("d"));
        // Replacing a value or peeking at it is not a use.
        names.insert("c", 30);
        assert_eq!(names.peek_mut("c").copied(), Some(30));
        names.insert("e", 5);
        assert!(!names.contains("c") && names.contains("d") && names.contains("e"));
        // Every name used: the flags are cleared in one pass and the oldest still goes.
        names.get_mut("d");
        names.get_mut("e");
        names.insert("f", 6);
        assert!(!names.contains("d") && names.contains("e") && names.contains("f"));
        assert_eq!(names.order.len(), 2);
    }

    /// Many names through a small memory: it never holds more than its capacity.
    #[test]
    fn never_holds_more_than_its_capacity() {
        let mut names = RecentNames::new(3);
        for (n, name) in (0..100).map(|n| (n, n.to_string())) {
            names.insert(&name, n);
            assert!(names.len() <= 3);
        }
        assert_eq!(names.len(), 3);
        assert!(names.contains("99") && names.contains("97") && !names.contains("96"));
        assert_eq!(names.order.len(), 3, "the order is bounded with the map");
    }
}
