//! Header rules of an HTTP intermediary, in one place.
//!
//! - Hop-by-hop fields are removed in both directions (RFC 9110 §7.6.1).
//! - `TE` is only ever forwarded as `TE: trailers` (RFC 9110 §10.1.4),
//!   the one value HTTP/2 allows too (RFC 9113 §8.2.2).
//! - `Via` gets Weir's entry (RFC 9110 §7.6.3).
//! - `X-Forwarded-For`, `-Proto` and `-Host` (de-facto standard) are
//!   appended to for trusted peers and replaced for everyone else, so an
//!   untrusted client cannot forge its address; `Forwarded` (RFC 7239) from
//!   an untrusted peer is removed for the same reason.
//! - Several HTTP/2 `cookie` fields are joined with `"; "` before an
//!   HTTP/1.1 hop (RFC 9113 §8.2.3).
//! - A response head from an upstream is checked and cleaned before it goes
//!   downstream ([`response_head`]).
//! - A protocol upgrade (RFC 9110 §7.8) is the one exception to the first
//!   rule: on a route that tunnels it, `Upgrade` and `Connection: upgrade`
//!   are set again for the next hop ([`requested_upgrade`], [`set_upgrade`]),
//!   and an RFC 8441 extended CONNECT becomes an RFC 6455 handshake
//!   ([`websocket_key`]).

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};
use weir_http::{list, transfer_coding};

/// Fields that are hop-by-hop whether or not `Connection` names them
/// (RFC 9110 §7.6.1, plus the obsolete `Proxy-Connection` and `Keep-Alive`).
/// `remove_hop_by_hop` reads the first three by position.
static HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Whether `name` is hop-by-hop whatever `Connection` says (RFC 9110
/// §7.6.1): a field no intermediary forwards as it came.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Real-IP`: the client address, as nginx configs commonly set it.
pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// `True-Client-IP`: the client address, as some CDNs set it.
pub const TRUE_CLIENT_IP: HeaderName = HeaderName::from_static("true-client-ip");

/// The answer field of a fleet peek (`crate::fleet::PEEK`): `hit` or `miss`.
pub const FLEET_PEEK: HeaderName = HeaderName::from_static("x-weir-fleet-peek");

/// The field of a replica's `403` to a wrong peer token
/// (`crate::fleet::REFUSED`).
pub const FLEET_REFUSED: HeaderName = HeaderName::from_static("x-weir-fleet-refused");

/// Removes every hop-by-hop field: the fixed list and every field named in
/// `Connection` (RFC 9110 §7.6.1).
///
/// Also repairs framing for the next hop: a message that came with
/// `Transfer-Encoding` loses its `Content-Length` (RFC 9112 §6.3: the
/// transfer coding wins, and an intermediary must not forward the length,
/// or the next hop would frame the body differently: request smuggling);
/// repeated identical `Content-Length` values are folded into one.
///
/// Returns whether the message carried `TE: trailers` (with a non-zero
/// weight), so a request can forward just that.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) -> bool {
    // One pass over the field names finds which of these are there: most
    // messages carry none of them, or only `Connection`, and comparing a
    // name costs far less than looking one up.
    let mut present = [false; HOP_BY_HOP.len()];
    let mut content_length = false;
    for name in headers.keys() {
        if let Some(k) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[k] = true;
        } else if name == header::CONTENT_LENGTH {
            content_length = true;
        }
    }
    let [connection, te, transfer_encoding, ..] = present;

    if transfer_encoding {
        headers.remove(header::CONTENT_LENGTH);
    } else if content_length {
        let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
        if let (Some(first), Some(_)) = (lengths.next(), lengths.next()) {
            // hyper has already refused differing values; keep one.
            let first = first.clone();
            headers.insert(header::CONTENT_LENGTH, first);
        }
    }

    // "trailers" takes no weight; a q of 0 would mean "not acceptable".
    let te_trailers = te && transfer_coding::accepts_trailers(headers.get_all(header::TE));

    if connection {
        let named: Vec<HeaderName> = list::members_all(headers.get_all(header::CONNECTION))
            .filter_map(|name| HeaderName::from_bytes(name).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (name, there) in HOP_BY_HOP.iter().zip(present) {
        if there {
            headers.remove(name);
        }
    }
    te_trailers
}

/// Removes every field HTTP/2 forbids (RFC 9113 §8.2.2): the hop-by-hop
/// ones and those `Connection` names, and `TE` unless it is exactly
/// `trailers`, the one value HTTP/2 allows. hyper's HTTP/2 encoder would
/// drop them with a warning, and the `h2` layer refuses some outright.
pub fn remove_connection_specific(headers: &mut HeaderMap) {
    let te_trailers = headers
        .get_all(header::TE)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    remove_hop_by_hop(headers);
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Fields a trailer section must not carry because they control framing,
/// routing, authentication or how the message is handled (RFC 9110
/// §6.5.1), plus the hop-by-hop and forwarding fields Weir manages. Removed
/// from request trailers, so a client cannot slip them past the header rules.
static NOT_IN_TRAILERS: [HeaderName; 16] = [
    header::CONNECTION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_TYPE,
    header::CONTENT_RANGE,
    header::TRAILER,
    header::HOST,
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
    header::FORWARDED,
    header::VIA,
    header::CACHE_CONTROL,
];

/// Removes from `trailers` every field that must not appear there (see
/// `NOT_IN_TRAILERS` in this module), the `X-Forwarded-*` fields, and the obsolete
/// `Keep-Alive` and `Proxy-Connection`.
pub fn sanitize_trailers(trailers: &mut HeaderMap) {
    for name in &NOT_IN_TRAILERS {
        trailers.remove(name);
    }
    for name in [X_FORWARDED_FOR, X_FORWARDED_PROTO, X_FORWARDED_HOST] {
        trailers.remove(name);
    }
    trailers.remove("keep-alive");
    trailers.remove("proxy-connection");
}

/// A downstream peer's address as `X-Forwarded-For` writes it (a
/// v4-mapped IPv6 address in its IPv4 form), formatted once per connection.
#[derive(Debug, Clone)]
pub struct PeerAddr {
    /// The address.
    pub ip: IpAddr,
    /// Its text, as a field value.
    pub text: HeaderValue,
}

impl PeerAddr {
    /// The peer address `ip`.
    pub fn new(ip: IpAddr) -> PeerAddr {
        let ip = ip.to_canonical();
        // An IP address's text is ASCII digits, dots, colons and hex.
        let text =
            HeaderValue::try_from(ip.to_string()).unwrap_or(HeaderValue::from_static("unknown"));
        PeerAddr { ip, text }
    }
}

/// Where the downstream request came from, for `X-Forwarded-*`.
#[derive(Debug, Clone, Copy)]
pub struct Peer<'a> {
    /// The TCP peer's address.
    pub addr: &'a PeerAddr,
    /// Whether the config lists the peer as a trusted proxy.
    pub trusted: bool,
    /// `"https"` on a TLS listener, else `"http"`: the scheme the client
    /// used to reach Weir (`X-Forwarded-Proto`).
    pub proto: &'static str,
    /// The host the client asked for (`Host`, or HTTP/2 `:authority`).
    pub host: Option<&'a str>,
}

/// Sets `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host` on a
/// request going upstream.
///
/// From a trusted peer, the peer's address is appended to the existing
/// `X-Forwarded-For` chain (all its field lines folded into one), and existing
/// `-Proto`/`-Host` are kept, as are `X-Real-IP` and `True-Client-IP`.
/// From any other peer, all three are replaced, `Forwarded` and
/// `True-Client-IP` are removed and `X-Real-IP` is set to the peer's
/// address: a client cannot name an address of its choosing to an
/// upstream that believes these fields.
pub fn set_forwarded(headers: &mut HeaderMap, peer: Peer<'_>) {
    if peer.trusted {
        let mut chain = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .peekable();
        if chain.peek().is_none() {
            headers.insert(X_FORWARDED_FOR, peer.addr.text.clone());
        } else {
            let mut value = chain.collect::<Vec<&str>>().join(", ");
            value.push_str(", ");
            value.push_str(peer.addr.text.to_str().unwrap_or("unknown"));
            insert_str(headers, X_FORWARDED_FOR, &value);
        }
        if !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(peer.proto));
        }
        if !headers.contains_key(&X_FORWARDED_HOST)
            && let Some(host) = peer.host
        {
            insert_str(headers, X_FORWARDED_HOST, host);
        }
    } else {
        headers.remove(header::FORWARDED);
        headers.remove(TRUE_CLIENT_IP);
        headers.insert(X_REAL_IP, peer.addr.text.clone());
        headers.insert(X_FORWARDED_FOR, peer.addr.text.clone());
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(peer.proto));
        match peer.host {
            Some(host) => insert_str(headers, X_FORWARDED_HOST, host),
            None => {
                headers.remove(&X_FORWARDED_HOST);
            }
        }
    }
}

/// Weir's `Via` entries, `<received-protocol> <pseudonym>` (RFC 9110
/// §7.6.3), one per protocol version, made once and appended by cloning.
#[derive(Debug, Clone)]
pub struct Via {
    v09: Option<HeaderValue>,
    v10: Option<HeaderValue>,
    v11: Option<HeaderValue>,
    v2: Option<HeaderValue>,
    v3: Option<HeaderValue>,
}

impl Via {
    /// The entries for `pseudonym` (an HTTP token; config validation says so).
    pub fn new(pseudonym: &str) -> Via {
        let value = |proto: &str| HeaderValue::try_from(format!("{proto} {pseudonym}")).ok();
        Via {
            v09: value("0.9"),
            v10: value("1.0"),
            v11: value("1.1"),
            v2: value("2"),
            v3: value("3"),
        }
    }

    /// Appends the entry for a message received as `received` (`1.0`,
    /// `1.1`, `2`, ...).
    pub fn append(&self, headers: &mut HeaderMap, received: Version) {
        let value = match received {
            Version::HTTP_09 => &self.v09,
            Version::HTTP_10 => &self.v10,
            Version::HTTP_2 => &self.v2,
            Version::HTTP_3 => &self.v3,
            _ => &self.v11,
        };
        if let Some(value) = value {
            headers.append(header::VIA, value.clone());
        }
    }
}

/// Appends Weir's `Via` entry, `<received-protocol> <pseudonym>` (RFC 9110
/// §7.6.3), where the protocol is the version of the message as Weir
/// received it (`1.0`, `1.1`, `2`). Per request, prefer a [`Via`] made once.
pub fn append_via(headers: &mut HeaderMap, received: Version, pseudonym: &str) {
    Via::new(pseudonym).append(headers, received);
}

/// Joins several `cookie` fields into one, as an HTTP/1.1 hop requires
/// (RFC 9113 §8.2.3: HTTP/2 may split them).
pub fn join_cookies(headers: &mut HeaderMap) {
    let mut values = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (values.next(), values.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for v in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(v.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

/// The response head filter: an upstream's head as Weir forwards it.
/// Hop-by-hop fields removed, `Content-Length` dropped where it cannot be
/// (1xx, 204: RFC 9110 §8.6), Weir's `Via` appended, the version reset
/// (hyper writes the downstream connection's own). The answer fields of
/// Weir's fleet ([`FLEET_PEEK`], [`FLEET_REFUSED`]) are removed too: only a
/// replica makes them, so an origin's would mislead the replica it reaches.
///
/// # Errors
/// What the upstream sent that Weir cannot forward faithfully: a `101`
/// (Weir never asks to switch protocols, RFC 9110 §15.2.2), or a
/// transfer coding other than `chunked`.
pub fn response_head(parts: &mut http::response::Parts, via: &Via) -> Result<(), &'static str> {
    let status = parts.status;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("101 Switching Protocols that was never asked for");
    }
    if !only_chunked_fields(&parts.headers) {
        return Err("a transfer coding other than chunked");
    }
    remove_hop_by_hop(&mut parts.headers);
    parts.headers.remove(FLEET_PEEK);
    parts.headers.remove(FLEET_REFUSED);
    if status.is_informational() || status == StatusCode::NO_CONTENT {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    via.append(&mut parts.headers, parts.version);
    parts.version = Version::default();
    Ok(())
}

pub use weir_http::transfer_coding::only_chunked;

/// Whether every `Transfer-Encoding` field line of `headers` (if any) is
/// exactly `chunked`, the one coding Weir forwards (RFC 9112 §6.1: the
/// codings of all lines apply, in order).
pub fn only_chunked_fields(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .all(only_chunked)
}

/// The protocol a request asks to switch to (RFC 9110 §7.8) that
/// `allowed` takes, as the client wrote it: the first member of `Upgrade`
/// whose name (before any `/version`) `allowed` accepts, when `Connection`
/// names `upgrade`. `None` when the request asks for nothing, or nothing
/// allowed.
pub fn requested_upgrade(headers: &HeaderMap, allowed: impl Fn(&str) -> bool) -> Option<&str> {
    let asked = list::members_all(headers.get_all(header::CONNECTION))
        .any(|m| m.eq_ignore_ascii_case(b"upgrade"));
    if !asked {
        return None;
    }
    list::members_all(headers.get_all(header::UPGRADE))
        .filter_map(|m| std::str::from_utf8(m).ok())
        .find(|m| allowed(upgrade_name(m)))
}

/// The protocol name of an `Upgrade` member: `websocket` of `websocket`,
/// `h2c` of `h2c/1` (RFC 9110 §7.8: `protocol-name ["/" protocol-version]`).
pub fn upgrade_name(member: &str) -> &str {
    member.split('/').next().unwrap_or(member).trim()
}

/// Sets `Connection: upgrade` and `Upgrade: protocol` on a head whose
/// hop-by-hop fields were removed: the one upgrade a tunnel forwards.
pub fn set_upgrade(headers: &mut HeaderMap, protocol: &str) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    insert_str(headers, header::UPGRADE, protocol);
}

/// A fresh `Sec-WebSocket-Key` (RFC 6455 §4.1: 16 random bytes, base64),
/// for the HTTP/1.1 handshake Weir makes from an RFC 8441 extended CONNECT.
///
/// # Errors
/// The operating system's random source failed.
pub fn websocket_key() -> Result<HeaderValue, getrandom::Error> {
    use base64::Engine as _;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)?;
    let text = base64::engine::general_purpose::STANDARD.encode(nonce);
    // Base64 text is always a valid field value.
    Ok(HeaderValue::try_from(text).unwrap_or(HeaderValue::from_static("")))
}

fn insert_str(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    match HeaderValue::try_from(value) {
        Ok(v) => {
            headers.insert(name, v);
        }
        Err(_) => {
            headers.remove(name);
        }
    }
}

#[cfg(test)]
#[path = "headers_tests.rs"]
mod tests;
