//! The arguments of `#[scheduler_lock(...)]`, read and checked against the core's rules.

use std::time::Duration;

use proc_macro2::Span;
use shedlock_configuration::{ConfigurationError, LockConfiguration, parse_duration};
use syn::meta::ParseNestedMeta;
use syn::{Expr, Ident, LitStr, Path};

const KEYS: &str =
    "`name`, `lock_at_most_for`, `lock_at_least_for`, `keep_alive`, `executor`, `crate`";

/// A duration as written (for error spans and the generated docs) and as parsed.
pub(crate) struct DurationArgument {
    pub(crate) literal: LitStr,
    pub(crate) value: Duration,
}

/// The attribute's arguments after every compile-time check has passed.
pub(crate) struct LockAttribute {
    /// The name template, placeholders still in it (see [`crate::name`]).
    pub(crate) name: LitStr,
    pub(crate) lock_at_most_for: DurationArgument,
    /// Zero when not given, as ShedLock's `lockAtLeastFor` default.
    pub(crate) lock_at_least_for: Option<DurationArgument>,
    /// The name the body gives the lock-lost signal, when the lock is kept alive.
    pub(crate) keep_alive: Option<Ident>,
    /// The expression that gives the executor, when the attribute names it.
    pub(crate) executor: Option<Expr>,
    /// Where `LockConfiguration`, `TaskOutcome` and `LockError` are found.
    pub(crate) crate_path: Path,
}

#[derive(Default)]
struct Arguments {
    name: Option<LitStr>,
    lock_at_most_for: Option<LitStr>,
    lock_at_least_for: Option<LitStr>,
    keep_alive: Option<Ident>,
    executor: Option<Expr>,
    crate_path: Option<Path>,
    /// Problems found while reading, reported together so one build shows them all.
    errors: Option<syn::Error>,
}

impl Arguments {
    fn read(&mut self, meta: ParseNestedMeta<'_>) -> syn::Result<()> {
        let key = meta.path.clone();
        let Some(ident) = key.get_ident().map(ToString::to_string) else {
            return Err(meta.error(format!("unknown key; expected one of {KEYS}")));
        };
        let duplicate = match ident.as_str() {
            "name" => set(&mut self.name, meta.value()?.parse()?),
            "lock_at_most_for" => set(&mut self.lock_at_most_for, meta.value()?.parse()?),
            "lock_at_least_for" => set(&mut self.lock_at_least_for, meta.value()?.parse()?),
            "keep_alive" => {
                let value = meta.value()?;
                let ident = value.parse::<Ident>().map_err(|error| {
                    syn::Error::new(
                        error.span(),
                        "`keep_alive` takes the name the body uses for the lock-lost signal, as in `keep_alive = lost`; the body then checks `lost.is_cancelled()`",
                    )
                })?;
                set(&mut self.keep_alive, ident)
            }
            "executor" => set(&mut self.executor, meta.value()?.parse()?),
            "crate" => set(&mut self.crate_path, meta.value()?.parse()?),
            _ => {
                return Err(meta.error(format!("unknown key `{ident}`; expected one of {KEYS}")));
            }
        };
        if duplicate {
            self.push_error(syn::Error::new_spanned(
                &key,
                format!("`{ident}` is given twice"),
            ));
        }
        Ok(())
    }

    fn push_error(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }
}

/// Stores `value` in an empty slot; answers whether the slot was already taken.
fn set<T>(slot: &mut Option<T>, value: T) -> bool {
    slot.replace(value).is_some()
}

impl LockAttribute {
    /// Reads the attribute's arguments; errors point at the key or value at fault, or at the
    /// whole attribute for a key that is missing.
    pub(crate) fn parse(tokens: proc_macro::TokenStream) -> syn::Result<Self> {
        let mut arguments = Arguments::default();
        let parser = syn::meta::parser(|meta| arguments.read(meta));
        syn::parse::Parser::parse(parser, tokens)?;
        arguments.check()
    }
}

impl Arguments {
    fn check(mut self) -> syn::Result<LockAttribute> {
        let name = self.name.take();
        if name.is_none() {
            self.push_error(syn::Error::new(
                Span::call_site(),
                "#[scheduler_lock] needs the lock's name: add `name = \"...\"`",
            ));
        }
        let at_most = self.lock_at_most_for.take();
        if at_most.is_none() {
            self.push_error(syn::Error::new(
                Span::call_site(),
                "#[scheduler_lock] needs `lock_at_most_for = \"...\"`: how long the lock is held if this node dies during the call (pick it well above the longest call)",
            ));
        }
        let at_most = at_most.and_then(|literal| self.duration("lock_at_most_for", literal));
        let at_least = self
            .lock_at_least_for
            .take()
            .map(|literal| self.duration("lock_at_least_for", literal));
        let at_least_parsed = !matches!(at_least, Some(None));
        if let (Some(name), Some(at_most), true) = (&name, &at_most, at_least_parsed) {
            self.check_rules(name, at_most, at_least.as_ref().and_then(Option::as_ref));
        }
        if let Some(errors) = self.errors {
            return Err(errors);
        }
        let (Some(name), Some(lock_at_most_for), lock_at_least_for) = (name, at_most, at_least)
        else {
            unreachable!("every missing or invalid argument pushed an error");
        };
        Ok(LockAttribute {
            name,
            lock_at_most_for,
            lock_at_least_for: lock_at_least_for.flatten(),
            keep_alive: self.keep_alive,
            executor: self.executor,
            crate_path: self
                .crate_path
                .unwrap_or_else(|| syn::parse_quote!(::shedlock)),
        })
    }

    fn duration(&mut self, field: &str, literal: LitStr) -> Option<DurationArgument> {
        match parse_duration(&literal.value()) {
            Ok(value) => Some(DurationArgument { literal, value }),
            Err(error) => {
                self.push_error(syn::Error::new(
                    literal.span(),
                    format!(
                        "{field}: {:?} is not a duration: {} (accepted: ISO-8601 like \"PT10M\", or units like \"10m\", \"1h30m\", \"30s\", \"500ms\")",
                        error.input, error.reason
                    ),
                ));
                None
            }
        }
    }

    /// The rules of `LockConfiguration::new`, applied now rather than on the first call. A
    /// name with placeholders is checked as written; its filled-in form is checked per call.
    fn check_rules(
        &mut self,
        name: &LitStr,
        at_most: &DurationArgument,
        at_least: Option<&DurationArgument>,
    ) {
        let at_least_value = at_least.map_or(Duration::ZERO, |at_least| at_least.value);
        let Err(error) = LockConfiguration::new(name.value(), at_most.value, at_least_value) else {
            return;
        };
        let (span, message) = match (&error, at_least) {
            (ConfigurationError::EmptyName, _) => (
                name.span(),
                "the lock name must not be empty: the name is the lock".to_owned(),
            ),
            (ConfigurationError::ZeroLockAtMostFor { .. }, _) => (
                at_most.literal.span(),
                "lock_at_most_for must be greater than zero: a lock held for no time protects nothing".to_owned(),
            ),
            (ConfigurationError::LockAtLeastExceedsAtMost { .. }, Some(at_least)) => (
                at_least.literal.span(),
                format!(
                    "lock_at_least_for ({:?}) must not exceed lock_at_most_for ({:?})",
                    at_least.literal.value(),
                    at_most.literal.value()
                ),
            ),
            _ => (Span::call_site(), error.to_string()),
        };
        self.push_error(syn::Error::new(span, message));
    }
}
