//! The store: complete responses in memory, byte-bounded (moka, TinyLFU
//! eviction), several Vary variants per primary key.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_cache_semantics::{BeforeRequest, CachePolicy};
use weir_http::{delta, directive};

/// Most variants (distinct Vary selections) kept per primary key; the
/// oldest is dropped beyond it.
const MAX_VARIANTS: usize = 8;

/// One stored response: its head, its policy and its whole body.
#[derive(Debug)]
pub(crate) struct Entry {
    pub status: StatusCode,
    /// The fields as forwarded (hop-by-hop removed, `Via` added).
    pub headers: HeaderMap,
    /// Freshness, Vary and validators (RFC 9111), from `http-cache-semantics`.
    pub policy: CachePolicy,
    /// The body, complete, as received (byte-identical to the origin's).
    pub body: Arc<[Bytes]>,
    /// Sum of the body's chunk lengths, in bytes.
    pub body_len: u64,
    /// When it stops being fresh.
    pub fresh_until: SystemTime,
    /// When it was stored or last refreshed.
    pub stored_at: SystemTime,
    /// `stale-if-error` window after `fresh_until` (RFC 5861 §4).
    pub stale_if_error: Duration,
    /// `stale-while-revalidate` window after `fresh_until` (RFC 5861 §3);
    /// zero when the response forbids serving it stale.
    pub stale_while_revalidate: Duration,
}

impl Entry {
    /// Builds an entry; the freshness windows come from the policy and the
    /// response's `Cache-Control`.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        policy: CachePolicy,
        body: Vec<Bytes>,
    ) -> Entry {
        let now = SystemTime::now();
        let body_len = body.iter().map(|b| b.len() as u64).sum();
        let fresh_until = now + policy.time_to_live(now);
        // RFC 9111 §4.2.4: no stale response against `no-cache`,
        // `must-revalidate` or `proxy-revalidate`. (`s-maxage` implies
        // proxy-revalidate, §5.2.2.10, but `s-maxage` with
        // `stale-while-revalidate` is how CDNs are told to use it, and they
        // do: so is Weir.)
        let forbids_stale = ["no-cache", "must-revalidate", "proxy-revalidate"]
            .iter()
            .any(|d| directive::has(headers.get_all(header::CACHE_CONTROL), d));
        let stale_while_revalidate = if forbids_stale {
            Duration::ZERO
        } else {
            directive_secs(&headers, "stale-while-revalidate")
        };
        Entry {
            stale_if_error: directive_secs(&headers, "stale-if-error"),
            stale_while_revalidate,
            status,
            headers,
            policy,
            body: body.into(),
            body_len,
            fresh_until,
            stored_at: now,
        }
    }

    /// How long it has been stale at `now` (zero while fresh).
    pub fn stale_for(&self, now: SystemTime) -> Duration {
        now.duration_since(self.fresh_until).unwrap_or_default()
    }

    /// Bytes it is charged for: the body plus an estimate of the fields.
    fn weight(&self) -> u64 {
        let fields: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum();
        self.body_len + fields as u64 + 512
    }
}

/// The seconds of the first `Cache-Control: name=N` response directive
/// (quoted or not), or zero: also when N is not a delta-seconds value or
/// does not fit a `u64`.
fn directive_secs(headers: &HeaderMap, name: &str) -> Duration {
    directive::argument(headers.get_all(header::CACHE_CONTROL), name)
        .and_then(|n| delta::parse(&n))
        .map_or(Duration::ZERO, Duration::from_secs)
}

/// The variants of one primary key.
type Variants = Arc<Vec<Arc<Entry>>>;

/// Complete responses by primary key, bounded by total bytes.
pub(crate) struct Store {
    inner: moka::sync::Cache<String, Variants>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("entries", &self.inner.entry_count())
            .field("weighted_bytes", &self.inner.weighted_size())
            .finish()
    }
}

impl Store {
    /// A store of at most `max_bytes` (bodies plus field estimates).
    pub fn new(max_bytes: u64) -> Store {
        Store {
            inner: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_k: &String, v: &Variants| {
                    let w: u64 = v.iter().map(|e| e.weight()).sum();
                    u32::try_from(w).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// The variant of `key` whose Vary-selected fields match `view`.
    pub fn find(&self, key: &str, view: &http::request::Parts) -> Option<Arc<Entry>> {
        let variants = self.inner.get(key)?;
        let now = SystemTime::now();
        variants
            .iter()
            .find(|e| matches_request(e, view, now))
            .cloned()
    }

    /// Stores `entry` for `key`, replacing the variant `view` selects.
    pub fn insert(&self, key: &str, view: &http::request::Parts, entry: Arc<Entry>) {
        let now = SystemTime::now();
        let mut variants: Vec<Arc<Entry>> = self
            .inner
            .get(key)
            .map(|v| {
                v.iter()
                    .filter(|e| !matches_request(e, view, now))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if variants.len() >= MAX_VARIANTS {
            variants.remove(0);
        }
        variants.push(entry);
        self.inner.insert(key.to_owned(), Arc::new(variants));
    }

    /// Drops every variant of `key` (RFC 9111 §4.4).
    pub fn remove(&self, key: &str) {
        self.inner.invalidate(key);
    }

    /// Drops `entry` from the variants of `key`, if it is still there (a
    /// response that superseded it could not be stored).
    pub fn remove_variant(&self, key: &str, entry: &Arc<Entry>) {
        let Some(variants) = self.inner.get(key) else {
            return;
        };
        if !variants.iter().any(|e| Arc::ptr_eq(e, entry)) {
            return;
        }
        let kept: Vec<Arc<Entry>> = variants
            .iter()
            .filter(|e| !Arc::ptr_eq(e, entry))
            .cloned()
            .collect();
        if kept.is_empty() {
            self.inner.invalidate(key);
        } else {
            self.inner.insert(key.to_owned(), Arc::new(kept));
        }
    }

    /// Runs pending evictions, so sizes read afterwards are exact (tests).
    #[cfg(test)]
    pub fn sync(&self) {
        self.inner.run_pending_tasks();
    }

    /// Number of primary keys held.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.inner.entry_count()
    }
}

/// Whether `entry` answers `view`: same target and host, Vary-selected
/// fields equal (fresh or stale alike).
pub(crate) fn matches_request(entry: &Entry, view: &http::request::Parts, now: SystemTime) -> bool {
    match entry.policy.before_request(view, now) {
        BeforeRequest::Fresh(_) => true,
        BeforeRequest::Stale { matches, .. } => matches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};

    fn view(ae: &str) -> http::request::Parts {
        Request::get("/x")
            .header("host", "h")
            .header("accept-encoding", ae)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn entry(req: &http::request::Parts, body: &'static [u8]) -> Arc<Entry> {
        let resp = Response::builder()
            .header("cache-control", "max-age=60, stale-if-error=30")
            .header("vary", "accept-encoding")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let policy = CachePolicy::new(req, &resp);
        Arc::new(Entry::new(
            StatusCode::OK,
            resp.headers,
            policy,
            vec![Bytes::from_static(body)],
        ))
    }

    #[test]
    fn vary_variants_are_kept_apart() {
        let store = Store::new(1 << 20);
        let (gz, br) = (view("gzip"), view("br"));
        store.insert("k", &gz, entry(&gz, b"gz"));
        store.insert("k", &br, entry(&br, b"br"));
        assert_eq!(&store.find("k", &gz).unwrap().body[0][..], b"gz");
        assert_eq!(&store.find("k", &br).unwrap().body[0][..], b"br");
        assert!(store.find("k", &view("zstd")).is_none());
        // Same variant again: replaced, not added.
        store.insert("k", &gz, entry(&gz, b"gz2"));
        assert_eq!(&store.find("k", &gz).unwrap().body[0][..], b"gz2");
        store.remove("k");
        assert!(store.find("k", &gz).is_none());
    }

    #[test]
    fn windows_come_from_cache_control() {
        let v = view("gzip");
        let e = entry(&v, b"x");
        assert_eq!(e.stale_if_error, Duration::from_secs(30));
        assert_eq!(e.stale_while_revalidate, Duration::ZERO);
        assert_eq!(e.stale_for(SystemTime::now()), Duration::ZERO);
    }

    fn with_cache_control(cc: &str) -> Entry {
        let req = view("gzip");
        let resp = Response::builder()
            .header("cache-control", cc)
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let policy = CachePolicy::new(&req, &resp);
        Entry::new(StatusCode::OK, resp.headers, policy, Vec::new())
    }

    #[test]
    fn stale_while_revalidate_is_off_when_stale_is_forbidden() {
        let e = with_cache_control("max-age=1, stale-while-revalidate=30");
        assert_eq!(e.stale_while_revalidate, Duration::from_secs(30));
        for cc in [
            "max-age=1, stale-while-revalidate=30, must-revalidate",
            "max-age=1, Proxy-Revalidate, stale-while-revalidate=30",
            "no-cache, stale-while-revalidate=30",
            "max-age=1, no-cache=\"set-cookie\", stale-while-revalidate=30",
        ] {
            let e = with_cache_control(cc);
            assert_eq!(e.stale_while_revalidate, Duration::ZERO, "{cc}");
        }
    }

    #[test]
    fn windows_ignore_directives_inside_quoted_strings() {
        // Before weir-http, a comma inside a quoted argument split it: both
        // `must-revalidate` (SWR off) and `stale-if-error=30` were read
        // out of the quoted strings below.
        let e = with_cache_control(
            "max-age=1, ext=\"a, must-revalidate, b\", stale-while-revalidate=30, \
             other=\"x, stale-if-error=30\"",
        );
        assert_eq!(e.stale_while_revalidate, Duration::from_secs(30));
        assert_eq!(e.stale_if_error, Duration::ZERO);
        // A quoted argument is unescaped, not just stripped of its quotes.
        let e = with_cache_control("max-age=1, stale-if-error=\"30\"");
        assert_eq!(e.stale_if_error, Duration::from_secs(30));
        let e = with_cache_control("max-age=1, stale-if-error=30\"");
        assert_eq!(e.stale_if_error, Duration::ZERO);
    }

    #[test]
    fn remove_variant_keeps_the_others_and_a_replacement() {
        let store = Store::new(1 << 20);
        let (gz, br) = (view("gzip"), view("br"));
        let old = entry(&gz, b"gz");
        store.insert("k", &gz, Arc::clone(&old));
        store.insert("k", &br, entry(&br, b"br"));
        store.remove_variant("k", &old);
        assert!(store.find("k", &gz).is_none());
        assert!(store.find("k", &br).is_some());
        // Already replaced: the replacement stays.
        let newer = entry(&br, b"br2");
        store.insert("k", &br, Arc::clone(&newer));
        store.remove_variant("k", &old);
        assert_eq!(&store.find("k", &br).unwrap().body[0][..], b"br2");
    }

    #[test]
    fn the_byte_budget_evicts() {
        let store = Store::new(4096);
        let v = view("gzip");
        for i in 0..20 {
            let key = format!("k{i}");
            let body: &'static [u8] = Box::leak(vec![0u8; 1000].into_boxed_slice());
            store.insert(&key, &v, entry(&v, body));
        }
        store.sync();
        assert!(store.len() < 20, "{}", store.len());
    }
}
