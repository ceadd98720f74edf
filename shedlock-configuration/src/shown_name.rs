//! How messages quote a lock name.

use std::fmt;

/// The most characters of a lock name a message quotes whole. A longer name (a 1 MiB name a
/// provider refused, say) is shown by its first [`SHOWN_NAME_HEAD`] characters and its
/// length, so the message stays a line a person reads; the error's `name` field keeps it all.
const SHOWN_NAME_CHARS: usize = 200;

/// How many characters of a longer name a message shows.
const SHOWN_NAME_HEAD: usize = 64;

/// A lock name as messages quote it: whole (`"report"`), or past 200 characters by its first
/// 64 and its length (`"xxxx"... (1048576 characters)`).
pub struct ShownName<'a>(pub &'a str);

impl fmt::Display for ShownName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ShownName(name) = *self;
        match name.char_indices().nth(SHOWN_NAME_CHARS) {
            None => write!(f, "{name:?}"),
            Some(_) => {
                let head: String = name.chars().take(SHOWN_NAME_HEAD).collect();
                write!(f, "{head:?}... ({} characters)", name.chars().count())
            }
        }
    }
}
