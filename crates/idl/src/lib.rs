//! `baton-idl`: Baton's interface definition macro, in the role of Mach's MIG and Accent's
//! MatchMaker. `#[baton_idl::interface(base = N)]` on a trait generates, next to the
//! trait, the code that carries its calls in IPC messages; the runtime the generated code
//! calls is `baton-idl-rt`, which the generated code names as `::baton_idl_rt`: a crate
//! using the macro depends on it, or names another path to it with `rt = <path>` (a
//! re-export, such as `baton_rt::idl_rt` for the user programs, which depend only on
//! `baton-rt`). `docs/idl.md` has the full story.
//!
//! ```
//! use baton_idl_rt::{Error, SendRight};
//!
//! #[baton_idl::interface(base = 2000)]
//! pub trait Names {
//!     fn register(&mut self, name: &[u8], port: SendRight) -> Result<(), Error>;
//!     fn lookup(&mut self, name: &[u8]) -> Result<SendRight, Error>;
//! }
//!
//! assert_eq!((NAMES_REGISTER_ID, NAMES_LOOKUP_ID), (2000, 2001));
//! ```
//!
//! generates, for the trait `Names` (names derive from the trait's: `Names` → `names` /
//! `NAMES`; everything gets the trait's visibility):
//!
//! | item | what |
//! |---|---|
//! | `trait Names` | the trait, unchanged: servers implement it |
//! | `const NAMES_BASE: u64` | the `base` argument: the first request id |
//! | `const NAMES_REGISTER_ID: u64`, … | one request id per method, `base + index` in declaration order |
//! | `const NAMES_IDS: Range<u64>` | all request ids, for servers that serve several interfaces |
//! | `struct NamesClient<T: Transport>` | the client stub: a transport and the server's send-right name; one method per trait method, and `impl Names for NamesClient<T>` |
//! | `fn names_dispatch<S: Names + ?Sized>(server: &mut S, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error>` | the server side: decodes a request, calls the method, writes the reply |
//!
//! # Rules for the trait
//! No generics, supertraits, `unsafe` or associated items other than methods; at most
//! `REPLY_ID_OFFSET` (100) methods. Each method takes `&mut self` and plain named
//! arguments whose types implement `Marshal` (client side) and `Unmarshal` (server side),
//! is not `const`, `async`, `unsafe`, `extern` or generic, and returns `Result<T, E>`
//! where `E` is `baton_abi::Error` and `T` implements both traits too. Anything else is a
//! compile error pointing at the offending part. Method names `new`, `dest`, `set_dest`,
//! `transport` and `into_parts` are taken by the client's own methods.
//!
//! # Invariants
//! - The generated code never panics on message bytes: all decoding goes through
//!   `baton-idl-rt`, which returns errors.
//! - A request's ids, and its reply ids (request id + 100), stay below the kernel's
//!   reserved ids; the generated code checks it at compile time.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ItemTrait, Pat, PathArguments, ReceiverKind,
    ReturnType, Safety, TraitItem, TraitItemFn, Type,
};

/// The most methods an interface may have: `baton_idl_rt::REPLY_ID_OFFSET`, so that
/// request and reply ids never overlap.
const METHODS_MAX: usize = 100;

/// Names of the generated client's own methods, which interface methods cannot have.
const RESERVED: [&str; 5] = ["new", "dest", "set_dest", "transport", "into_parts"];

/// Generates client stub, server dispatch and message ids for an interface trait. See the
/// crate documentation.
#[proc_macro_attribute]
pub fn interface(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = TokenStream2::from(item);
    match expand(args.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        // Keep the trait itself, so one mistake does not cascade into "not found" errors.
        Err(e) => {
            let errors = e.to_compile_error();
            quote!(#item #errors).into()
        }
    }
}

/// One method of the interface, checked.
struct Method {
    /// The method's name.
    name: Ident,
    /// Its documentation attributes, copied to the client's method.
    docs: Vec<Attribute>,
    /// Argument names and types (after `&mut self`).
    args: Vec<(Ident, Type)>,
    /// The whole return type, `Result<T, E>`.
    ret: Type,
    /// `T` of the return type.
    ok: Type,
    /// The request id constant's name.
    id_const: Ident,
}

/// The macro's work on token streams, so that it can be tested outside the compiler.
fn expand(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let args = parse_args(args)?;
    let tr: ItemTrait = syn::parse2(item)?;
    let methods = check_trait(&tr)?;
    Ok(generate(&tr, &args.base, &args.rt, &methods))
}

/// The macro's arguments.
struct Args {
    /// `base = <expr>`: the first request id.
    base: Expr,
    /// `rt = <path>`: where the generated code finds `baton-idl-rt` (default
    /// `::baton_idl_rt`).
    rt: TokenStream2,
}

/// Parses `base = <expr>` and the optional `rt = <path>`.
fn parse_args(args: TokenStream2) -> syn::Result<Args> {
    let mut base: Option<Expr> = None;
    let mut rt: Option<syn::Path> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("base") {
            if base.is_some() {
                return Err(meta.error("`base` given twice"));
            }
            base = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("rt") {
            if rt.is_some() {
                return Err(meta.error("`rt` given twice"));
            }
            rt = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error(
                "unknown argument; expected `base = <first message id>` \
                 or `rt = <path to baton_idl_rt>`",
            ))
        }
    });
    parser.parse2(args)?;
    let base = base.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "missing `base = <first message id>`, e.g. #[baton_idl::interface(base = 2000)]",
        )
    })?;
    let rt = match rt {
        Some(path) => quote!(#path),
        None => quote!(::baton_idl_rt),
    };
    Ok(Args { base, rt })
}

/// Adds `e` to the errors found so far.
fn push(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

/// Checks the trait and its methods; every problem found is reported at once.
fn check_trait(tr: &ItemTrait) -> syn::Result<Vec<Method>> {
    let mut errors = None;
    if let Some(unsafety) = &tr.unsafety {
        push(
            &mut errors,
            syn::Error::new(unsafety.span(), "an interface trait cannot be `unsafe`"),
        );
    }
    if !tr.generics.params.is_empty() || tr.generics.where_clause.is_some() {
        push(
            &mut errors,
            syn::Error::new_spanned(&tr.generics, "an interface trait cannot be generic"),
        );
    }
    if !tr.supertraits.is_empty() {
        push(
            &mut errors,
            syn::Error::new_spanned(
                &tr.supertraits,
                "an interface trait cannot have supertraits (its client implements it)",
            ),
        );
    }
    let prefix = upper_snake(&tr.ident.to_string());
    let mut methods = Vec::new();
    for item in &tr.items {
        match item {
            TraitItem::Fn(f) => match check_method(f, &prefix) {
                Ok(m) => methods.push(m),
                Err(e) => push(&mut errors, e),
            },
            other => push(
                &mut errors,
                syn::Error::new_spanned(other, "an interface trait may contain only methods"),
            ),
        }
    }
    if methods.len() > METHODS_MAX {
        push(
            &mut errors,
            syn::Error::new(
                tr.ident.span(),
                format!("an interface has at most {METHODS_MAX} methods (REPLY_ID_OFFSET)"),
            ),
        );
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(methods),
    }
}

/// Checks one method's signature.
fn check_method(f: &TraitItemFn, prefix: &str) -> syn::Result<Method> {
    let sig = &f.sig;
    let mut errors = None;
    let mut fail = |span: Span, msg: &str| push(&mut errors, syn::Error::new(span, msg));
    if let Some(t) = &sig.constness {
        fail(t.span(), "interface methods cannot be `const`");
    }
    if let Some(t) = &sig.asyncness {
        fail(t.span(), "interface methods cannot be `async`");
    }
    match &sig.safety {
        Safety::Default => {}
        other => fail(
            other.span(),
            "interface methods cannot be `unsafe` or `safe`",
        ),
    }
    if let Some(abi) = &sig.abi {
        fail(abi.span(), "interface methods cannot have an ABI");
    }
    if let Some(v) = &sig.variadic {
        fail(v.span(), "interface methods cannot be variadic");
    }
    if RESERVED.iter().any(|r| sig.ident == r) {
        fail(
            sig.ident.span(),
            "this name is taken by the generated client's own methods \
             (new, dest, set_dest, transport, into_parts)",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        fail(
            sig.generics.span(),
            "interface methods cannot be generic (every argument type must be concrete)",
        );
    }

    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r))
            if r.mutability.is_none()
                && matches!(&r.kind, ReceiverKind::Reference(_, _, Some(_))) => {}
        Some(FnArg::Receiver(r)) => fail(r.span(), "interface methods must take `&mut self`"),
        _ => fail(
            sig.ident.span(),
            "interface methods must take `&mut self` first",
        ),
    }
    let mut args = Vec::new();
    for input in inputs {
        let FnArg::Typed(pt) = input else {
            fail(input.span(), "`self` must be the first argument");
            continue;
        };
        match &*pt.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                if matches!(&*pt.ty, Type::ImplTrait(_)) {
                    fail(pt.ty.span(), "interface arguments cannot be `impl Trait`");
                }
                args.push((p.ident.clone(), (*pt.ty).clone()));
            }
            other => fail(
                other.span(),
                "interface arguments must be plain names (`name: Type`)",
            ),
        }
    }

    let result = result_types(&sig.output);
    if let Some((_, ok @ Type::ImplTrait(_))) = &result {
        fail(ok.span(), "interface results cannot be `impl Trait`");
    }
    if result.is_none() {
        fail(
            match &sig.output {
                ReturnType::Default => sig.ident.span(),
                ReturnType::Type(_, t) => t.span(),
            },
            "interface methods must return `Result<T, Error>` (baton_abi::Error)",
        );
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let (ret, ok) = result.ok_or_else(|| syn::Error::new(sig.span(), "no return type"))?;
    Ok(Method {
        name: sig.ident.clone(),
        docs: f
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .cloned()
            .collect(),
        args,
        ret,
        ok,
        id_const: format_ident!(
            "{}_{}_ID",
            prefix,
            upper_snake(&sig.ident.to_string()),
            span = sig.ident.span()
        ),
    })
}

/// The return type and its `T`, if it is `Result<T, E>`.
fn result_types(output: &ReturnType) -> Option<(Type, Type)> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let Type::Path(p) = &**ty else {
        return None;
    };
    if p.qself.is_some() {
        return None;
    }
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(a) = &last.arguments else {
        return None;
    };
    let mut types = a.args.iter();
    match (types.next(), types.next(), types.next()) {
        (Some(GenericArgument::Type(ok)), Some(GenericArgument::Type(_)), None) => {
            Some(((**ty).clone(), ok.clone()))
        }
        _ => None,
    }
}

/// Whether `ty` names a reference or a lifetime: a value of it may borrow the message
/// buffer, so the generated fast paths (which return early) leave it to the general path.
fn borrows(ty: &Type) -> bool {
    fn scan(tokens: TokenStream2) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Punct(p) => p.as_char() == '&' || p.as_char() == '\'',
            proc_macro2::TokenTree::Group(g) => scan(g.stream()),
            _ => false,
        })
    }
    scan(quote!(#ty))
}

/// `snake_case` of a `CamelCase` (or already snake) name.
fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).and_then(|j| chars.get(j));
            let next = chars.get(i + 1);
            let boundary = match prev {
                Some(p) if *p == '_' => false,
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(|n| n.is_lowercase()),
                _ => false,
            };
            if boundary {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `UPPER_SNAKE_CASE` of a name.
fn upper_snake(name: &str) -> String {
    snake(name).to_uppercase()
}

/// Generates everything for a checked trait.
fn generate(tr: &ItemTrait, base: &Expr, rt: &TokenStream2, methods: &[Method]) -> TokenStream2 {
    let vis = &tr.vis;
    let trait_name = &tr.ident;
    let trait_str = trait_name.to_string();
    let prefix = upper_snake(&trait_str);
    let span = trait_name.span();
    let base_const = format_ident!("{}_BASE", prefix, span = span);
    let ids_const = format_ident!("{}_IDS", prefix, span = span);
    let client = format_ident!("{}Client", trait_name, span = span);
    let dispatch = format_ident!("{}_dispatch", snake(&trait_str), span = span);
    let count = methods.len() as u64;

    // Locals of the generated code: mixed-site hygiene keeps them apart from the
    // user's argument names.
    let local = |name: &str| Ident::new(name, Span::mixed_site());
    let (w, r, to, len, reply_len, value) = (
        local("__w"),
        local("__r"),
        local("__to"),
        local("__len"),
        local("__reply_len"),
        local("__value"),
    );
    let (server, request, reply) = (local("server"), local("request"), local("reply"));

    let id_consts = methods.iter().enumerate().map(|(i, m)| {
        let id = &m.id_const;
        let i = i as u64;
        let doc = format!("Request id of `{trait_str}::{}`.", m.name);
        quote!(#[doc = #doc] #vis const #id: u64 = #base_const + #i;)
    });

    let client_methods = methods.iter().map(|m| {
        let Method {
            name,
            docs,
            args,
            ret,
            ok,
            id_const,
        } = m;
        let arg_names: Vec<&Ident> = args.iter().map(|(n, _)| n).collect();
        let arg_types = args.iter().map(|(_, t)| t);
        // Spanned at each type, so a type that cannot travel is reported where it is.
        let put_ports = args
            .iter()
            .map(|(n, t)| quote_spanned!(t.span()=> #rt::Marshal::marshal_ports(&#n, &mut #w)?;));
        let put_data = args
            .iter()
            .map(|(n, t)| quote_spanned!(t.span()=> #rt::Marshal::marshal_data(&#n, &mut #w)?;));
        let take_value = quote_spanned!(ok.span()=> #rt::Unmarshal::unmarshal(&mut #r)?);
        // A result of a size known in advance (`Unmarshal::FIXED`) is checked with a few
        // compares of the reply's header words (`fixed::reply`); anything else, or a reply
        // of another shape, goes the general way below. Not for results that borrow the
        // transport's buffer (their type names a lifetime), which a fixed size excludes
        // anyway.
        let fast_reply = if borrows(ok) {
            quote!()
        } else {
            quote! {
                if let ::core::option::Option::Some(__n) =
                    <#ok as #rt::Unmarshal<'static>>::FIXED
                {
                    if let ::core::option::Option::Some(mut #r) = #rt::fixed::reply(
                        #rt::Transport::buffer(&mut self.transport),
                        #reply_len,
                        #id_const,
                        __n,
                    ) {
                        if let ::core::result::Result::Ok(#value) =
                            <#ok as #rt::Unmarshal<'_>>::unmarshal(&mut #r)
                        {
                            if #r.finish().is_ok() {
                                return ::core::result::Result::Ok(#value);
                            }
                        }
                    }
                }
            }
        };
        let doc = format!("Calls `{trait_str}::{name}` on the server (request id [`{id_const}`]).");
        quote! {
            #(#docs)*
            #[doc = ""]
            #[doc = #doc]
            // The trait's own signature is linted where the user wrote it.
            #[allow(clippy::too_many_arguments)]
            pub fn #name(&mut self, #(#arg_names: #arg_types),*) -> #ret {
                let #len = {
                    let mut #w = #rt::client::begin_request(
                        #rt::Transport::buffer(&mut self.transport),
                        self.dest,
                        #id_const,
                    )?;
                    #(#put_ports)*
                    #(#put_data)*
                    #w.finish()
                };
                let #reply_len = #rt::Transport::call_written(&mut self.transport, #len)?;
                #fast_reply
                let mut #r = #rt::client::open_reply(
                    #rt::Transport::buffer(&mut self.transport),
                    #reply_len,
                    #id_const,
                )?;
                let #value: #ok = #take_value;
                #r.finish()?;
                ::core::result::Result::Ok(#value)
            }
        }
    });

    let trait_impl_methods = methods.iter().map(|m| {
        let Method {
            name, args, ret, ..
        } = m;
        let arg_names: Vec<&Ident> = args.iter().map(|(n, _)| n).collect();
        let arg_types = args.iter().map(|(_, t)| t);
        quote! {
            fn #name(&mut self, #(#arg_names: #arg_types),*) -> #ret {
                #client::<T>::#name(self, #(#arg_names),*)
            }
        }
    });

    let arms = methods.iter().map(|m| {
        let Method {
            name,
            args,
            ok,
            id_const,
            ..
        } = m;
        let locals: Vec<Ident> = (0..args.len()).map(|i| local(&format!("__a{i}"))).collect();
        let takes = args.iter().zip(&locals).map(|((_, t), a)| {
            quote_spanned! {t.span()=>
                let #a: #t = match #rt::Unmarshal::unmarshal(&mut #r) {
                    ::core::result::Result::Ok(v) => v,
                    ::core::result::Result::Err(e) => return #to.reject(#reply, e),
                };
            }
        });
        let call = quote!(<S as #trait_name>::#name(#server, #(#locals),*));
        let respond = quote_spanned!(ok.span()=> #rt::ReplyTo::respond(&#to, #reply, #call));
        quote! {
            #id_const => {
                #(#takes)*
                if let ::core::result::Result::Err(e) = #r.finish() {
                    return #to.reject(#reply, e);
                }
                #respond
            }
        }
    });

    // The fast path of the dispatch: a method whose arguments all have a size known in
    // advance (`Unmarshal::FIXED`) takes a request of exactly its shape (`fixed::request`:
    // one compare of the header's first word, and the reply right) without the general
    // decoding; any other request, or one the arguments' decoding refuses, goes to the
    // general path, which decides as it always did.
    let fast_arms =
        |out: &TokenStream2, src: &TokenStream2, wrap: &TokenStream2, shape: &TokenStream2| {
            let arms = methods
            .iter()
            .filter(|m| !m.args.iter().any(|(_, t)| borrows(t)) && !borrows(&m.ok))
            .map(|m| {
                let Method {
                    name,
                    args,
                    id_const,
                    ..
                } = m;
                let types: Vec<&Type> = args.iter().map(|(_, t)| t).collect();
                let locals: Vec<Ident> =
                    (0..args.len()).map(|i| local(&format!("__a{i}"))).collect();
                let takes = types.iter().zip(&locals).map(|(t, a)| {
                    quote_spanned! {t.span()=>
                        let #a: #t = match #rt::Unmarshal::unmarshal(&mut #r) {
                            ::core::result::Result::Ok(v) => v,
                            ::core::result::Result::Err(_) => break 'fast,
                        };
                    }
                });
                quote! {
                    #id_const => {
                        const __FIXED: ::core::option::Option<usize> = {
                            #[allow(unused_mut)]
                            let mut sum = ::core::option::Option::Some(0usize);
                            #(sum = #rt::marshal::fixed_sum(
                                sum,
                                <#types as #rt::Unmarshal<'static>>::FIXED,
                            );)*
                            sum
                        };
                        if let ::core::option::Option::Some(__n) = __FIXED {
                            if let ::core::option::Option::Some((mut #r, __name)) =
                                #shape(#src, __n)
                            {
                                #(#takes)*
                                if #r.finish().is_ok() {
                                    let #to = #rt::ReplyTo {
                                        name: __name,
                                        disposition: #rt::Disposition::MoveSendOnce,
                                        request_id: #id_const,
                                    };
                                    let __result = <S as #trait_name>::#name(#server, #(#locals),*);
                                    return #wrap(#rt::ReplyTo::respond(&#to, #out, __result));
                                }
                            }
                        }
                    }
                }
            });
            quote! {
                #[allow(unreachable_code, clippy::never_loop)]
                'fast: loop {
                    if let ::core::option::Option::Some(__id) = #rt::fixed::request_id(#src) {
                        #[allow(clippy::single_match)]
                        match __id {
                            #(#arms)*
                            _ => {}
                        }
                    }
                    break 'fast;
                }
            }
        };
    let buf = local("buf");
    let buf_len = local("len");
    let scratch = local("scratch");
    let fast_dispatch = fast_arms(
        &quote!(#reply),
        &quote!(#request),
        &quote!(::core::convert::identity),
        &quote!(#rt::fixed::request),
    );
    let fast_in_place = fast_arms(
        &quote!(#buf),
        &quote!(#buf.get(..#buf_len).unwrap_or(&[])),
        &quote!(#rt::Answered::in_place),
        &quote!(#rt::fixed::request),
    );
    // A migrated request as the kernel delivers it to an activation (no reply right),
    // taken by the fast path as it is (`fixed::migrated`), else given its stand-in reply
    // right (`migrated_request`) and answered as above.
    let fast_migrated = fast_arms(
        &quote!(#buf),
        &quote!(&*#buf),
        &quote!(#rt::Answered::in_place),
        &quote!(#rt::fixed::migrated),
    );
    let general = format_ident!("__{}_dispatch_general", snake(&trait_str), span = span);
    let dispatch_in_place = format_ident!("{}_dispatch_in_place", snake(&trait_str), span = span);
    let dispatch_migrated = format_ident!("{}_dispatch_migrated", snake(&trait_str), span = span);
    let migrated_doc = format!(
        "Server side of interface [`{trait_str}`] for a request delivered by a migrating \
         call, as it arrived at the start of an activation's buffer `buf` (no reply right: \
         the reply goes back to the caller when the activation returns). Answers as \
         [`{dispatch_in_place}`] answers the request after `migrated_request(buf)` gave it \
         its stand-in reply right, which the fast path does without rewriting the header. \
         Error `BadFormat` when the request is not what the kernel delivers to an \
         activation (as `migrated_request`)."
    );
    let in_place_doc = format!(
        "Server side of interface [`{trait_str}`], answering in place: the request is \
         `buf[..len]` (received into `buf`, the IPC buffer say). A request the fast path \
         takes (a method whose arguments and result have a size known in advance, a request \
         of exactly that shape) gets its reply written over it, at the start of `buf` \
         (`Answered::in_place`), with no copy; any other is answered as [`{}`] answers it, \
         the reply written into `scratch`, and `buf` still holds the request (for \
         `Dispatched::leftover_rights`).",
        dispatch
    );

    let base_doc = format!("First request id of interface [`{trait_str}`] (its `base`).");
    let ids_doc = format!(
        "All request ids of interface [`{trait_str}`]; replies have id + `REPLY_ID_OFFSET`."
    );
    let client_doc = format!(
        "Client stub of interface [`{trait_str}`]: sends each call as a request to the \
         server's send right `dest` through the transport `T`, and decodes the reply. \
         Also implements [`{trait_str}`] itself, so code generic over the trait can call a \
         local object or a remote server alike."
    );
    let dispatch_doc = format!(
        "Server side of interface [`{trait_str}`]: decodes `request` (a received message), \
         calls the method of `server` its id names, and writes the reply into `reply`. \
         Unknown ids are answered with `NotSupported`, undecodable arguments with the \
         decoding error (`BadFormat`); see `Dispatched` for what the server loop must \
         send and release. Errors only when `request` has no readable header or reply \
         fields, or `reply` cannot hold even an error reply."
    );
    let range_check = quote_spanned! {base.span()=>
        const _: () = ::core::assert!(
            match #base_const.checked_add(#count + #rt::REPLY_ID_OFFSET) {
                ::core::option::Option::Some(end) => end <= #rt::KERNEL_ID_BASE,
                ::core::option::Option::None => false,
            },
            "interface ids and reply ids must stay below KERNEL_ID_BASE",
        );
    };

    quote! {
        #tr

        #[doc = #base_doc]
        #vis const #base_const: u64 = #base;
        #(#id_consts)*
        #[doc = #ids_doc]
        #vis const #ids_const: ::core::ops::Range<u64> = #base_const..#base_const + #count;
        #range_check

        #[doc = #client_doc]
        #vis struct #client<T: #rt::Transport> {
            transport: T,
            dest: u64,
        }

        impl<T: #rt::Transport> #client<T> {
            /// A client that sends its requests through `transport` to the send right
            /// `dest`.
            pub const fn new(transport: T, dest: u64) -> Self {
                Self { transport, dest }
            }

            /// The server's send-right name requests go to.
            pub fn dest(&self) -> u64 {
                self.dest
            }

            /// Sends later requests to the send right `dest`.
            pub fn set_dest(&mut self, dest: u64) {
                self.dest = dest;
            }

            /// The transport.
            pub fn transport(&mut self) -> &mut T {
                &mut self.transport
            }

            /// The transport and the destination name back.
            pub fn into_parts(self) -> (T, u64) {
                (self.transport, self.dest)
            }

            #(#client_methods)*
        }

        impl<T: #rt::Transport> #trait_name for #client<T> {
            #(#trait_impl_methods)*
        }

        /// The general path of the generated dispatch functions: every request their
        /// fast path does not take.
        #[doc(hidden)]
        #[inline(never)]
        #vis fn #general<S: #trait_name + ?Sized>(
            #server: &mut S,
            #request: &[u8],
            #reply: &mut [u8],
        ) -> ::core::result::Result<#rt::Dispatched, #rt::Error> {
            #[allow(unused_mut)]
            let mut #r = #rt::MsgReader::new(#request)?;
            let #to = #rt::ReplyTo::of(&#r)?;
            match #r.id() {
                #(#arms)*
                _ => {
                    let _ = &#server;
                    #to.reject(#reply, #rt::Error::NotSupported)
                }
            }
        }

        #[doc = #dispatch_doc]
        #[inline]
        #vis fn #dispatch<S: #trait_name + ?Sized>(
            #server: &mut S,
            #request: &[u8],
            #reply: &mut [u8],
        ) -> ::core::result::Result<#rt::Dispatched, #rt::Error> {
            #fast_dispatch
            #general(#server, #request, #reply)
        }

        #[doc = #in_place_doc]
        // Into the server loop that calls it: the fast path is a few compares and the
        // method, and a call of its own would cost as much again.
        #[inline(always)]
        #vis fn #dispatch_in_place<S: #trait_name + ?Sized>(
            #server: &mut S,
            #buf: &mut [u8],
            #buf_len: usize,
            #scratch: &mut [u8],
        ) -> ::core::result::Result<#rt::Answered, #rt::Error> {
            #fast_in_place
            let #request = #buf.get(..#buf_len).unwrap_or(&[]);
            #general(#server, #request, #scratch).map(#rt::Answered::in_scratch)
        }

        #[doc = #migrated_doc]
        #[inline(always)]
        #vis fn #dispatch_migrated<S: #trait_name + ?Sized>(
            #server: &mut S,
            #buf: &mut [u8],
            #scratch: &mut [u8],
        ) -> ::core::result::Result<#rt::Answered, #rt::Error> {
            #fast_migrated
            let #buf_len = #rt::migrated_request(#buf)?;
            let #request = #buf.get(..#buf_len).unwrap_or(&[]);
            #general(#server, #request, #scratch).map(#rt::Answered::in_scratch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error messages `expand` gives for a trait, or an empty list.
    fn errors(args: TokenStream2, item: TokenStream2) -> Vec<String> {
        match expand(args, item) {
            Ok(_) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// Asserts `expand` fails with a message containing `needle`.
    fn fails_with(item: TokenStream2, needle: &str) {
        let errs = errors(quote!(base = 1), item);
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "expected an error containing {needle:?}, got {errs:?}"
        );
    }

    #[test]
    fn names() {
        assert_eq!(snake("Names"), "names");
        assert_eq!(snake("NameServer"), "name_server");
        assert_eq!(snake("IOPort"), "io_port");
        assert_eq!(snake("Disk2Io"), "disk2_io");
        assert_eq!(upper_snake("add_one"), "ADD_ONE");
    }

    #[test]
    fn expands_to_valid_items() {
        let out = expand(
            quote!(base = 2000),
            quote! {
                pub trait Names {
                    /// Registers.
                    fn register(&mut self, name: &[u8], port: SendRight) -> Result<(), Error>;
                    fn add(&mut self, a: u64, b: u64) -> core::result::Result<u64, Error>;
                }
            },
        )
        .unwrap();
        let file: syn::File = syn::parse2(out).unwrap();
        let text = quote!(#file).to_string();
        for item in [
            "NAMES_REGISTER_ID",
            "NAMES_ADD_ID",
            "NAMES_BASE",
            "NAMES_IDS",
            "NamesClient",
            "names_dispatch",
        ] {
            assert!(text.contains(item), "{item} missing");
        }
    }

    #[test]
    fn runtime_path() {
        let t = quote!(
            pub trait T {
                fn f(&mut self, x: u64) -> Result<u64, Error>;
            }
        );
        let text = |args| expand(args, t.clone()).unwrap().to_string();
        let default = text(quote!(base = 1));
        assert!(default.contains(":: baton_idl_rt :: Marshal"), "{default}");
        let other = text(quote!(base = 1, rt = my::rt));
        assert!(!other.contains("baton_idl_rt"), "{other}");
        assert!(other.contains("my :: rt :: Marshal"), "{other}");
        assert!(other.contains("my :: rt :: Unmarshal"), "{other}");
        assert!(other.contains("my :: rt :: Dispatched"), "{other}");
    }

    #[test]
    fn arguments_are_checked() {
        let t = quote!(
            trait T {
                fn f(&mut self) -> Result<(), Error>;
            }
        );
        assert!(errors(quote!(base = 1), t.clone()).is_empty());
        assert!(errors(quote!(), t.clone())[0].contains("missing `base"));
        assert!(errors(quote!(bse = 1), t.clone())[0].contains("unknown argument"));
        assert!(errors(quote!(base = 1, base = 2), t.clone())[0].contains("given twice"));
        assert!(errors(quote!(base = 1, rt = a, rt = b), t.clone())[0].contains("given twice"));
        assert!(!errors(quote!(base = 1, rt = 5), t.clone()).is_empty());
        assert!(errors(quote!(rt = some::path, base = 1), t).is_empty());
    }

    #[test]
    fn unsupported_signatures_are_errors() {
        fails_with(
            quote!(
                trait T<X> {}
            ),
            "cannot be generic",
        );
        fails_with(
            quote!(
                trait T: Clone {}
            ),
            "supertraits",
        );
        fails_with(
            quote!(
                unsafe trait T {}
            ),
            "`unsafe`",
        );
        fails_with(
            quote!(
                trait T {
                    const C: u8;
                }
            ),
            "only methods",
        );
        fails_with(
            quote!(
                trait T {
                    type A;
                }
            ),
            "only methods",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(self) -> Result<(), Error>;
                }
            ),
            "`&mut self`",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&self) -> Result<(), Error>;
                }
            ),
            "`&mut self`",
        );
        fails_with(
            quote!(
                trait T {
                    fn f() -> Result<(), Error>;
                }
            ),
            "`&mut self` first",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self, x: u8) -> u8;
                }
            ),
            "must return `Result<T, Error>`",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self);
                }
            ),
            "must return",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self) -> Result<u8>;
                }
            ),
            "must return",
        );
        fails_with(
            quote!(
                trait T {
                    fn f<X>(&mut self, x: X) -> Result<(), Error>;
                }
            ),
            "cannot be generic",
        );
        fails_with(
            quote!(
                trait T {
                    fn f<'a>(&mut self, x: &'a [u8]) -> Result<(), Error>;
                }
            ),
            "cannot be generic",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self, x: impl Copy) -> Result<(), Error>;
                }
            ),
            "`impl Trait`",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self, (a, b): (u8, u8)) -> Result<(), Error>;
                }
            ),
            "plain names",
        );
        fails_with(
            quote!(
                trait T {
                    async fn f(&mut self) -> Result<(), Error>;
                }
            ),
            "`async`",
        );
        fails_with(
            quote!(
                trait T {
                    const fn f(&mut self) -> Result<(), Error>;
                }
            ),
            "`const`",
        );
        fails_with(
            quote!(
                trait T {
                    unsafe fn f(&mut self) -> Result<(), Error>;
                }
            ),
            "`unsafe`",
        );
        fails_with(
            quote!(
                trait T {
                    extern "C" fn f(&mut self) -> Result<(), Error>;
                }
            ),
            "ABI",
        );
        fails_with(
            quote!(
                trait T {
                    fn transport(&mut self) -> Result<(), Error>;
                }
            ),
            "taken by the generated client",
        );
        fails_with(
            quote!(
                trait T {
                    fn f(&mut self) -> Result<impl Copy, Error>;
                }
            ),
            "`impl Trait`",
        );
        // Every problem is reported, not only the first.
        let errs = errors(
            quote!(base = 1),
            quote!(
                trait T {
                    fn f(self);
                    fn g(&mut self, x: impl Copy) -> u8;
                }
            ),
        );
        assert!(errs.len() >= 4, "{errs:?}");
    }

    #[test]
    fn too_many_methods() {
        let fns = (0..=METHODS_MAX).map(|i| {
            let f = format_ident!("f{i}");
            quote!(fn #f(&mut self) -> Result<(), Error>;)
        });
        fails_with(quote!(trait T { #(#fns)* }), "at most 100 methods");
    }
}
