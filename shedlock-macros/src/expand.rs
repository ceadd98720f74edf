//! The fn `#[scheduler_lock]` writes: same name, arguments and body, run under the lock.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use crate::attribute::LockAttribute;
use crate::name::NameTemplate;

pub(crate) fn expand(attribute: LockAttribute, function: ItemFn) -> syn::Result<TokenStream> {
    let fn_name = &function.sig.ident;
    if function.sig.asyncness.is_none() {
        return Err(syn::Error::new(
            Span::call_site(),
            format!(
                "#[scheduler_lock] goes on an async fn, and `{fn_name}` is not async: the lock is held across the call's awaits, so write `async fn {fn_name}`"
            ),
        ));
    }
    let arguments = named_arguments(&function);
    let name = NameTemplate::parse(&attribute.name, fn_name, &arguments)?;
    let executor = executor(&attribute, &function)?;

    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = function;
    let krate = &attribute.crate_path;
    let task_output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, output) => output.to_token_stream(),
    };
    sig.output = syn::parse_quote! {
        -> ::core::result::Result<#krate::TaskOutcome<#task_output>, #krate::LockError>
    };
    let name = name.expression();
    let at_most = duration(attribute.lock_at_most_for.value);
    let at_least = duration(
        attribute
            .lock_at_least_for
            .as_ref()
            .map_or(std::time::Duration::ZERO, |at_least| at_least.value),
    );
    // The task is a non-`move` async block: it borrows the arguments the body only reads, so
    // the executor can stay one of them. Its fake `return` fixes the block's output type, so
    // `?` and `return` in the body mean what they meant in the fn.
    let output_hint = (!contains_impl_trait(&task_output)).then(|| {
        quote! {
            #[allow(
                unknown_lints,
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop,
                clippy::let_unit_value,
                clippy::let_with_type_underscore,
                clippy::needless_return,
                clippy::unreachable
            )]
            if false {
                let task_output: #task_output = loop {};
                return task_output;
            }
        }
    });
    let config = Ident::new("config", Span::mixed_site());
    let execute = match &attribute.keep_alive {
        None => quote_spanned! {executor.span()=>
            (#executor).execute(&#config, async { #output_hint #block })
        },
        // The signal's name comes from the attribute, with its span, so the body sees it.
        Some(lost) => quote_spanned! {executor.span()=>
            (#executor).execute_with_keep_alive(
                &#config,
                async |#lost: #krate::CancellationToken| { #output_hint #block },
            )
        },
    };
    let docs = docs(&attribute);
    Ok(quote! {
        #(#attrs)*
        #docs
        #vis #sig {
            let #config = #krate::LockConfiguration::new(#name, #at_most, #at_least)?;
            #execute.await
        }
    })
}

/// The arguments a lock name or `executor = ...` can refer to: those bound to a plain name.
fn named_arguments(function: &ItemFn) -> Vec<Ident> {
    function
        .sig
        .inputs
        .iter()
        .filter_map(|argument| match argument {
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) => Some(pat.ident.clone()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

/// The executor: the expression the attribute names, or else the one argument whose type is
/// a `LockingTaskExecutor` (behind any references). A parameter rather than a global, so a
/// caller (and a test) picks the provider, and two providers never share a hidden default.
fn executor(attribute: &LockAttribute, function: &ItemFn) -> syn::Result<Expr> {
    let fn_name = &function.sig.ident;
    if let Some(executor) = &attribute.executor {
        check_named_executor(executor, function)?;
        return Ok(executor.clone());
    }
    let candidates: Vec<&syn::PatType> = function
        .sig
        .inputs
        .iter()
        .filter_map(|argument| match argument {
            FnArg::Typed(typed) if names_executor(&typed.ty) => Some(typed),
            _ => None,
        })
        .collect();
    match candidates.as_slice() {
        [] => Err(syn::Error::new(
            Span::call_site(),
            format!(
                "`{fn_name}` has no executor to lock with: add a parameter `executor: &LockingTaskExecutor`, or name where it is with `executor = <argument>` or `executor = self.<field>`"
            ),
        )),
        [single] => match &*single.pat {
            Pat::Ident(pat) => {
                let ident = &pat.ident;
                Ok(syn::parse_quote!(#ident))
            }
            other => Err(syn::Error::new_spanned(
                other,
                "the executor parameter needs a name the lock can use, like `executor: &LockingTaskExecutor`",
            )),
        },
        [_, second, ..] => Err(syn::Error::new_spanned(
            second,
            format!(
                "`{fn_name}` has {} `LockingTaskExecutor` parameters: say which one locks with `executor = <argument>`",
                candidates.len()
            ),
        )),
    }
}

/// `executor = <argument>` must name an argument, and `executor = self.<field>` needs a
/// receiver: said here, at the attribute, rather than as an unresolved name in the fn.
fn check_named_executor(executor: &Expr, function: &ItemFn) -> syn::Result<()> {
    let fn_name = &function.sig.ident;
    let mut root = executor;
    while let Expr::Field(field) = root {
        root = &field.base;
    }
    let Expr::Path(path) = root else {
        return Err(syn::Error::new_spanned(
            executor,
            "`executor = ...` takes an argument's name or a field of `self` (`executor = self.executor`)",
        ));
    };
    let Some(ident) = path.path.get_ident() else {
        return Err(syn::Error::new_spanned(
            executor,
            "`executor = ...` takes an argument's name or a field of `self` (`executor = self.executor`)",
        ));
    };
    if ident == "self" {
        return match function.sig.receiver() {
            Some(_) => Ok(()),
            None => Err(syn::Error::new_spanned(
                executor,
                format!("`executor = self...`, but `{fn_name}` has no `self` parameter"),
            )),
        };
    }
    let arguments = named_arguments(function);
    if arguments.contains(ident) {
        return Ok(());
    }
    Err(syn::Error::new_spanned(
        executor,
        format!("`executor = {ident}`: `{fn_name}` has no argument `{ident}`"),
    ))
}

fn names_executor(ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) => names_executor(&reference.elem),
        Type::Paren(paren) => names_executor(&paren.elem),
        Type::Group(group) => names_executor(&group.elem),
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "LockingTaskExecutor"),
        _ => false,
    }
}

/// `impl Trait` cannot be a `let`'s type, so such an output goes without the type hint.
fn contains_impl_trait(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => contains_impl_trait(&group.stream()),
        _ => false,
    })
}

/// A duration checked at compile time, written out exactly (seconds and nanoseconds).
fn duration(value: std::time::Duration) -> TokenStream {
    let (secs, nanos) = (value.as_secs(), value.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

/// A paragraph added to the fn's docs: its return type is not the one written in the source.
fn docs(attribute: &LockAttribute) -> TokenStream {
    let at_least = attribute
        .lock_at_least_for
        .as_ref()
        .map_or_else(String::new, |at_least| {
            format!(", at least {:?}", at_least.literal.value())
        });
    let kept_alive = attribute
        .keep_alive
        .as_ref()
        .map_or_else(String::new, |lost| {
            format!(", kept alive while the call runs; `{lost}` is cancelled if the lock is lost")
        });
    let text = format!(
        " Each call runs under the lock `{}` (held at most {:?}{at_least}{kept_alive}): it returns \
         `TaskOutcome::Executed` with the body's value when it ran, `TaskOutcome::Skipped` when \
         another node holds the lock, and a `LockError` when the lock could not be taken or its \
         outcome is unknown (then the body did not run).",
        attribute.name.value(),
        attribute.lock_at_most_for.literal.value(),
    );
    quote! {
        #[doc = ""]
        #[doc = #text]
    }
}
