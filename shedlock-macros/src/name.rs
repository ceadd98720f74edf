//! Lock names built from the call's arguments: `name = "report-{region}"`.

use proc_macro2::{Ident, TokenStream};
use quote::quote;
use syn::LitStr;

/// A name whose placeholders were all found among the fn's arguments.
pub(crate) struct NameTemplate {
    literal: LitStr,
    /// Each argument named in the template, once, in order of first use.
    placeholders: Vec<Ident>,
}

impl NameTemplate {
    /// Reads `{argument}` and `{argument:spec}` placeholders (`{{` and `}}` are braces), as
    /// `format!` does, and checks each names one of `arguments`. Positional placeholders are
    /// refused: a lock name that depends on argument order breaks when the signature changes.
    pub(crate) fn parse(
        literal: &LitStr,
        fn_name: &Ident,
        arguments: &[Ident],
    ) -> syn::Result<Self> {
        let text = literal.value();
        let error = |message: String| syn::Error::new(literal.span(), message);
        let mut placeholders: Vec<Ident> = Vec::new();
        let mut rest = text.as_str();
        while let Some(index) = rest.find(['{', '}']) {
            let (brace, after) = (&rest[index..=index], &rest[index + 1..]);
            if after.starts_with(brace) {
                rest = &after[1..];
                continue;
            }
            if brace == "}" {
                return Err(error(format!(
                    "the lock name {text:?} has a `}}` that closes nothing; write `}}}}` for a literal brace"
                )));
            }
            let Some(end) = after.find('}') else {
                return Err(error(format!(
                    "the lock name {text:?} has a `{{` that is never closed; write `{{{{` for a literal brace"
                )));
            };
            let placeholder = &after[..end];
            let argument = placeholder
                .split_once(':')
                .map_or(placeholder, |(argument, _spec)| argument)
                .trim();
            if argument.is_empty() || argument.bytes().all(|b| b.is_ascii_digit()) {
                return Err(error(format!(
                    "the placeholder `{{{placeholder}}}` in the lock name must name an argument of `{fn_name}`, like `{{region}}`"
                )));
            }
            let Some(found) = arguments.iter().find(|known| *known == argument) else {
                return Err(error(format!(
                    "`{{{placeholder}}}` in the lock name: `{fn_name}` has no argument `{argument}` ({})",
                    describe(arguments)
                )));
            };
            if !placeholders.contains(found) {
                placeholders.push(found.clone());
            }
            rest = &after[end + 1..];
        }
        Ok(Self {
            literal: literal.clone(),
            placeholders,
        })
    }

    /// An expression for the name: the literal itself, or a `format!` of it with the arguments.
    pub(crate) fn expression(&self) -> TokenStream {
        let literal = &self.literal;
        if self.placeholders.is_empty() {
            return quote!(#literal);
        }
        let placeholders = &self.placeholders;
        quote!(::std::format!(#literal, #(#placeholders = #placeholders),*))
    }
}

fn describe(arguments: &[Ident]) -> String {
    if arguments.is_empty() {
        return "it has no named arguments".to_owned();
    }
    let names: Vec<String> = arguments.iter().map(|name| format!("`{name}`")).collect();
    format!("its arguments are {}", names.join(", "))
}
