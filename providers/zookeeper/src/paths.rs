//! Lock names as ZooKeeper node names, and the root every lock node lives under.
//!
//! A name is data: every distinct name must get its own node, and no name may climb out of the
//! root or into a child of another lock. ZooKeeper paths reserve `/`, refuse the segments `.`
//! and `..`, NUL and the characters its `PathUtils` rejects (C0 and C1 controls, the UTF-16
//! surrogates, which rules out every character beyond U+FFFF as Java sees it, the private use
//! area U+E000..U+F8FF, and U+FFF0..U+FFFF). Those characters, and `%` itself, are written as
//! `%XX` per UTF-8 byte (upper-case hex), and a name that is exactly `.` or `..` has its dots
//! written `%2E`. Every other character is kept, so a plain name is the node name ShedLock's
//! Curator provider uses (`/shedlock/<name>`), and the escaping can be undone exactly.

use shedlock_core::LockError;

use crate::PROVIDER;

/// Whether ZooKeeper accepts `c` in a path segment as it is (the server checks UTF-16 code
/// units, so any character outside the Basic Multilingual Plane shows up as a surrogate pair).
fn allowed_in_path(c: char) -> bool {
    !matches!(u32::from(c),
        0x0000..=0x001f | 0x007f..=0x009f | 0xd800..=0xf8ff | 0xfff0..=0xffff | 0x1_0000..)
}

/// The node name of lock `name`: reversible by [`lock_name`], and never `.`, `..`, empty (for a
/// non-empty name), or holding a `/`.
pub(crate) fn node_name(name: &str) -> String {
    if name == "." || name == ".." {
        return "%2E".repeat(name.len());
    }
    let mut node = String::with_capacity(name.len());
    for c in name.chars() {
        if c != '%' && c != '/' && allowed_in_path(c) {
            node.push(c);
            continue;
        }
        let mut bytes = [0; 4];
        for byte in c.encode_utf8(&mut bytes).bytes() {
            node.push('%');
            node.push(hex_digit(byte >> 4));
            node.push(hex_digit(byte & 0xf));
        }
    }
    node
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789ABCDEF"[usize::from(nibble)])
}

/// The lock name a node under the root stands for, for operators listing the root: `%XX`
/// escapes decoded. `None` for a node name the provider never writes (someone else's node, or
/// an escape spelt another way), so two node names never claim one lock.
pub fn lock_name(node: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(node.len());
    let mut rest = node.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let pair = tail.get(..2)?;
            let text = std::str::from_utf8(pair).ok()?;
            if !text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            {
                return None;
            }
            bytes.push(u8::from_str_radix(text, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    // Only the canonical spelling counts, so two node names never claim one lock name.
    (node_name(&name) == node).then_some(name)
}

/// Checks a configured root (`/shedlock`): an absolute ZooKeeper path, not `/` itself, without
/// an empty, `.` or `..` segment, a trailing `/`, or a character ZooKeeper refuses.
pub(crate) fn validate_root(root: &str) -> Result<(), LockError> {
    let rule = if root == "/" {
        Some("it must not be '/' itself: the lock nodes need a parent of their own")
    } else {
        path_rule(root)
    };
    match rule {
        Some(rule) => Err(LockError::backend_message(
            shedlock_core::ErrorKind::Configuration,
            PROVIDER,
            shedlock_core::Operation::Connect,
            "",
            format!("invalid root path {root:?}: {rule}"),
        )),
        None => Ok(()),
    }
}

/// The rule `path` breaks as a ZooKeeper path (a root, or a connect string's chroot), if any:
/// it must be absolute, without an empty, `.` or `..` segment, a trailing `/` (`/` alone
/// aside), or a character ZooKeeper refuses.
pub(crate) fn path_rule(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        Some("it must be an absolute path, starting with '/'")
    } else if path == "/" {
        None
    } else if path.ends_with('/') {
        Some("it must not end with '/'")
    } else if path[1..]
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        Some("it must not contain an empty, '.' or '..' segment")
    } else if !path.chars().all(allowed_in_path) {
        Some(
            "it must not contain control characters, characters beyond U+FFFF, U+E000..U+F8FF \
             or U+FFF0..U+FFFF, which ZooKeeper refuses in paths",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_names_are_kept_as_curator_writes_them() {
        for name in [
            "report",
            "nightly-report_2",
            "with space",
            " job ",
            "résumé",
            "ｊｏｂ",
            "a:b",
            "x'); DROP TABLE shedlock; --",
            "...",
            ".hidden",
            "a.b",
            "zookeeper",
        ] {
            assert_eq!(node_name(name), name);
            assert_eq!(lock_name(name).as_deref(), Some(name));
        }
    }

    #[test]
    fn separators_escapes_and_refused_characters_are_escaped() {
        for (name, node) in [
            ("a/b", "a%2Fb"),
            ("/", "%2F"),
            ("a%2Fb", "a%252Fb"),
            ("100%", "100%25"),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("../x", "..%2Fx"),
            ("nul\0", "nul%00"),
            ("tab\t", "tab%09"),
            ("del\u{7f}", "del%7F"),
            ("c1\u{85}", "c1%C2%85"),
            ("emoji😀", "emoji%F0%9F%98%80"),
            ("private\u{e000}", "private%EE%80%80"),
            ("special\u{fff0}", "special%EF%BF%B0"),
            ("bom\u{feff}", "bom\u{feff}"),
        ] {
            assert_eq!(node_name(name), node, "{name:?}");
            assert_eq!(lock_name(node).as_deref(), Some(name), "{node:?}");
        }
    }

    #[test]
    fn node_names_never_made_by_the_escaping_are_not_lock_names() {
        for node in ["%", "%2", "%2f", "%ZZ", "a%2", "%C3", "%2E%2E%2E", "%61"] {
            assert_eq!(lock_name(node), None, "{node:?}");
        }
    }

    #[test]
    fn roots_must_be_plain_absolute_paths() {
        for root in ["/shedlock", "/a/b", "/ünï", "/.x"] {
            validate_root(root).unwrap();
        }
        for root in [
            "", "shedlock", "/", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\u{1}",
        ] {
            let error = validate_root(root).unwrap_err().to_string();
            assert!(error.contains("invalid root path"), "{root:?}: {error}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn escaping_round_trips_and_stays_one_valid_segment(name in "\\PC*|[./%\\x00-\\x1f]{0,6}|.{0,3}") {
            prop_assume!(!name.is_empty());
            let node = node_name(&name);
            prop_assert_eq!(lock_name(&node), Some(name.clone()));
            prop_assert!(!node.is_empty() && node != "." && node != "..");
            prop_assert!(!node.contains('/'));
            prop_assert!(node.chars().all(allowed_in_path));
            // Characters kept as they are, so a plain name stays a plain name.
            if name.chars().all(|c| c != '%' && c != '/' && allowed_in_path(c))
                && name != "." && name != ".."
            {
                prop_assert_eq!(&node, &name);
            }
        }

        #[test]
        fn distinct_names_get_distinct_nodes(a in any::<String>(), b in any::<String>()) {
            prop_assume!(!a.is_empty() && !b.is_empty() && a != b);
            prop_assert_ne!(node_name(&a), node_name(&b));
        }

        #[test]
        fn names_differing_only_by_escape_spelling_stay_apart(
            prefix in "[a-z%/.]{0,4}",
            c in prop_oneof![
                Just('/'),
                Just('%'),
                proptest::char::range('\u{0}', '\u{1f}'),
                proptest::char::range('\u{7f}', '\u{9f}'),
                proptest::char::range('\u{e000}', '\u{f8ff}'),
                proptest::char::range('\u{fff0}', '\u{ffff}'),
                proptest::char::range('\u{10000}', '\u{10ffff}'),
            ],
        ) {
            let raw = format!("{prefix}{c}");
            // The name that spells out, literally, the escape of an escaped character.
            let spelled = format!("{prefix}{}", node_name(&c.to_string()));
            prop_assert_ne!(&raw, &spelled);
            prop_assert_ne!(node_name(&raw), node_name(&spelled));
        }
    }
}
