//! The response cache (RFC 9111), in memory, for the routes that set
//! `cache = true`.
//!
//! - `key`: the primary key and the request as the cache sees it;
//! - `store`: complete responses, byte-bounded, Vary variants per key;
//! - `fill`: filling while the client streams, and the bodies served;
//! - `collapse`: one upstream request per key at a time;
//! - `revalidate`: background revalidation (`stale-while-revalidate`);
//! - `conditional`: a client's own conditional request against an entry.
//! - `bounded`: response heads as the policy sees them (delta-seconds
//!   capped at 2^31, RFC 9111 §1.2.2).
//!
//! Freshness, Vary matching, validators and storability are decided by
//! `http-cache-semantics` (shared-cache rules). Only `GET` is stored;
//! `HEAD` is answered from a fresh `GET` entry. Requests with
//! `Authorization` bypass the cache. An unsafe method answered 2xx/3xx
//! invalidates the entries of its URI (RFC 9111 §4.4). Responses carry
//! `X-Cache: HIT` (stored, or read from another request's fill),
//! `MISS` (from the upstream, perhaps being stored) or `STALE` (a stale
//! entry served under `stale-while-revalidate` or `stale-if-error`, RFC
//! 5861 §3 and §4), and `Age` on hits.
//!
//! A stale entry with validators is revalidated with a conditional
//! request; a `304` refreshes it and the client gets the stored body with
//! `X-Cache: HIT`. Inside its `stale-while-revalidate` window it is served
//! at once instead, and one request per key revalidates it in the
//! background ([`Revalidation`]). A client's own `If-None-Match` /
//! `If-Modified-Since` is evaluated against the response the cache
//! serves, which then becomes a `304`; requests that fill the cache go
//! upstream without them, so the cache always gets the full response.

mod bounded;
mod collapse;
mod conditional;
mod fill;
mod key;
/// The primary cache key of a `GET` (see `key::primary`).
pub(crate) use key::primary as primary_key;
mod lookup;
mod miss;
mod revalidate;
mod state;
mod store;
#[doc(hidden)]
pub mod test_hooks;
#[cfg(test)]
mod tests;
mod ticket;

pub use fill::{Abandoned, CacheSource};
pub use lookup::Lookup;
pub use miss::{Fill, FillStart};
pub use revalidate::Revalidation;
pub use state::{Cache, Hit, X_CACHE};
pub use ticket::{After, Ticket};
