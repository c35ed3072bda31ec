//! `[fleet]`: this replica's place among its peers, for cache sharding
//! (see `crate::fleet`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration;
use super::error::{ConfigError, Errors};

/// `[fleet]`: a replica among peers that share one cache by consistent
/// hashing (see `crate::fleet`).
#[derive(Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// This replica's address as its peers reach it (`self`, `${VAR}`
    /// expanded from the environment).
    pub self_addr: SocketAddr,
    /// How the peers are found.
    pub discovery: FleetDiscovery,
    /// The shared secret a peer's forwarded request carries (`secret`, or
    /// the trimmed contents of `secret_file`; at least 16 visible ASCII
    /// characters).
    pub secret: String,
    /// How long a forwarded miss may wait for the owner's response head
    /// before this replica serves it itself (`peer_timeout`, default 1 s).
    pub peer_timeout: Duration,
    /// How long a rate-limit ask (`scope = "fleet"`) may wait for the
    /// key's owner before this replica's own bucket decides
    /// (`rate_timeout`, default 100 ms).
    pub rate_timeout: Duration,
    /// The ring cache keys are placed on (`ring`, default `"ketama"`:
    /// nginx's `hash ... consistent`, so an nginx in front can send each
    /// request straight to its owner).
    pub ring: super::ring::RingHash,
    /// `hash_balance_factor`: bounded load, the most forwards one replica
    /// keeps in flight to one member, in percent of the average per member
    /// (101–1000; `None`, the default: no bound).
    pub balance_factor: Option<u32>,
    /// `l1_bytes`: the size of this replica's L1 of the owners' answers,
    /// in bytes (0, the default: none; at most 1 GiB).
    pub l1_bytes: u64,
    /// `l1_ttl`: the longest an L1 entry answers before it is revalidated
    /// with its owner (default 5 s).
    pub l1_ttl: Duration,
}

impl std::fmt::Debug for FleetSettings {
    /// Everything but the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetSettings")
            .field("self_addr", &self.self_addr)
            .field("discovery", &self.discovery)
            .field("peer_timeout", &self.peer_timeout)
            .field("rate_timeout", &self.rate_timeout)
            .field("ring", &self.ring)
            .field("balance_factor", &self.balance_factor)
            .field("l1_bytes", &self.l1_bytes)
            .field("l1_ttl", &self.l1_ttl)
            .finish_non_exhaustive()
    }
}

/// Where a replica finds its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetDiscovery {
    /// `peers`: a fixed list of `ip:port`, this replica included.
    Static(Vec<SocketAddr>),
    /// `peers_dns`: a `name:port` whose A/AAAA records are the peers (a
    /// Kubernetes headless Service), resolved again every `refresh`
    /// (`dns_refresh`, default 5 s).
    Dns {
        /// The `name:port` to resolve.
        name: String,
        /// Time between two resolutions.
        refresh: Duration,
    },
    /// `peers_endpointslices`: the ready endpoints of a Kubernetes
    /// Service, watched through the API server's EndpointSlices (those
    /// `serving` and not `terminating`), each at `self`'s port.
    EndpointSlices {
        /// The Service's name.
        service: String,
        /// `namespace`: its namespace (`None`: the pod's own, or the
        /// kubeconfig's).
        namespace: Option<String>,
    },
}

/// The shortest `dns_refresh` accepted.
const MIN_DNS_REFRESH: Duration = Duration::from_millis(100);

/// The shortest peer secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// `[fleet]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    /// This replica's address as its peers reach it; `${VAR}` reads the
    /// environment.
    #[serde(rename = "self")]
    pub self_address: Spanned<String>,
    #[serde(default)]
    pub peers: Vec<Spanned<String>>,
    pub peers_dns: Option<Spanned<String>>,
    pub peers_endpointslices: Option<Spanned<String>>,
    pub namespace: Option<Spanned<String>>,
    pub dns_refresh: Option<Spanned<duration::Written>>,
    pub secret: Option<Spanned<String>>,
    pub secret_file: Option<Spanned<String>>,
    #[serde(
        default = "default_peer_timeout",
        deserialize_with = "duration::at_least_1ms"
    )]
    pub peer_timeout: Duration,
    #[serde(
        default = "default_rate_timeout",
        deserialize_with = "duration::at_least_1ms"
    )]
    pub rate_timeout: Duration,
    pub ring: Option<Spanned<String>>,
    pub hash_balance_factor: Option<Spanned<u32>>,
    pub l1_bytes: Option<Spanned<u64>>,
    #[serde(default = "default_l1_ttl", with = "duration")]
    pub l1_ttl: Duration,
}

fn default_l1_ttl() -> Duration {
    Duration::from_secs(5)
}

fn default_dns_refresh() -> Duration {
    Duration::from_secs(5)
}

fn default_rate_timeout() -> Duration {
    Duration::from_millis(100)
}

fn default_peer_timeout() -> Duration {
    Duration::from_secs(1)
}

/// `text` with each `${NAME}` replaced by the environment variable `NAME`.
///
/// # Errors
/// The name of a variable that is not set (or not Unicode), or `"{"` for
/// an unclosed `${`.
fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("{".to_owned());
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `value` with each `${NAME}` replaced (see [`expand_env`]), or an
/// error at its span about `key` naming the variable that is not set.
pub(super) fn expand_env_at(
    value: &Spanned<String>,
    key: &str,
    errors: &Errors<'_>,
) -> Result<String, ConfigError> {
    expand_env(value.get_ref()).map_err(|name| {
        let why = if name == "{" {
            "has a `${` without its `}`".to_owned()
        } else {
            format!("names the environment variable {name}, which is not set")
        };
        errors.at(value.span(), key, why)
    })
}

/// An `ip:port` a peer can reach (not `0.0.0.0`, `[::]` or port 0), with
/// a message naming `key` when it is not one.
fn peer_addr(
    value: &Spanned<String>,
    text: &str,
    key: String,
    errors: &Errors<'_>,
) -> Result<SocketAddr, ConfigError> {
    let Ok(addr) = text.parse::<SocketAddr>() else {
        return Err(errors.at(
            value.span(),
            key,
            format!("{text:?} is not an ip:port address (e.g. \"10.0.0.7:8080\")"),
        ));
    };
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(errors.at(
            value.span(),
            key,
            format!(
                "{addr} cannot be reached by peers: give a replica's own address and port \
                 (for IPv6, \"[${{POD_IP}}]:8080\")"
            ),
        ));
    }
    // IPv4-mapped IPv6 is the IPv4 address: one peer, one ring member.
    Ok(SocketAddr::new(addr.ip().to_canonical(), addr.port()))
}

/// `[fleet]`, checked: `self` an address (after `${VAR}`), one way to find
/// peers (`peers`, which must list `self`, or `peers_dns`), and a secret of
/// at least [`MIN_SECRET_BYTES`] (`secret`, or `secret_file` read now,
/// relative to `base_dir`).
pub(super) fn fleet(
    raw: Option<&RawFleet>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<Option<FleetSettings>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let expanded = expand_env_at(&raw.self_address, "fleet.self", errors)?;
    let self_addr = peer_addr(&raw.self_address, &expanded, "fleet.self".into(), errors)?;
    let discovery = discovery(raw, self_addr, errors)?;
    let secret = secret(raw, base_dir, errors)?;
    let ring = match &raw.ring {
        None => super::ring::RingHash::Ketama,
        Some(r) => super::ring::RingHash::parse(r.get_ref())
            .map_err(|m| errors.at(r.span(), "fleet.ring", m))?,
    };
    let balance_factor = raw
        .hash_balance_factor
        .as_ref()
        .map(|f| errors.within(f, || "fleet.hash_balance_factor".to_owned(), (101, 1000)))
        .transpose()?;
    let l1_bytes = raw
        .l1_bytes
        .as_ref()
        .map(|b| errors.within(b, || "fleet.l1_bytes".to_owned(), (0, 1 << 30)))
        .transpose()?
        .unwrap_or(0);
    Ok(Some(FleetSettings {
        self_addr,
        discovery,
        secret,
        peer_timeout: raw.peer_timeout,
        rate_timeout: raw.rate_timeout,
        ring,
        balance_factor,
        l1_bytes,
        l1_ttl: raw.l1_ttl,
    }))
}

/// Whether `name` is a DNS-1123 label, as Kubernetes names Services and
/// namespaces: 1-63 lower-case letters, digits and `-`, neither first nor
/// last a `-`.
fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// `peers_endpointslices` (and `namespace`), checked: the only way to find
/// peers given, names Kubernetes takes.
fn endpointslices(
    raw: &RawFleet,
    service: &Spanned<String>,
    errors: &Errors<'_>,
) -> Result<FleetDiscovery, ConfigError> {
    let other = match (&raw.peers_dns, raw.peers.first()) {
        (Some(dns), _) => Some((dns.span(), "fleet.peers_dns")),
        (None, Some(p)) => Some((p.span(), "fleet.peers")),
        (None, None) => None,
    };
    if let Some((span, key)) = other {
        return Err(errors.at(
            span,
            key,
            "give one of `peers`, `peers_dns` and `peers_endpointslices`",
        ));
    }
    for (value, key) in [
        (Some(service), "peers_endpointslices"),
        (raw.namespace.as_ref(), "namespace"),
    ] {
        if let Some(v) = value
            && !is_dns_label(v.get_ref())
        {
            return Err(errors.at(
                v.span(),
                format!("fleet.{key}"),
                format!("{:?} is not a Kubernetes name (lower-case letters, digits and `-`, at most 63)", v.get_ref()),
            ));
        }
    }
    Ok(FleetDiscovery::EndpointSlices {
        service: service.get_ref().clone(),
        namespace: raw.namespace.as_ref().map(|n| n.get_ref().clone()),
    })
}

/// `peers` (which must list `self`) or `peers_dns`, checked.
fn discovery(
    raw: &RawFleet,
    self_addr: SocketAddr,
    errors: &Errors<'_>,
) -> Result<FleetDiscovery, ConfigError> {
    if let (None, Some(d)) = (&raw.peers_dns, &raw.dns_refresh) {
        return Err(errors.at(
            d.span(),
            "fleet.dns_refresh",
            "goes with `peers_dns` (how often its name is resolved): the other ways to find peers do not poll",
        ));
    }
    if let Some(k8s) = &raw.peers_endpointslices {
        return endpointslices(raw, k8s, errors);
    }
    if let Some(ns) = &raw.namespace {
        return Err(errors.at(
            ns.span(),
            "fleet.namespace",
            "`namespace` goes with `peers_endpointslices`",
        ));
    }
    let discovery = match (&raw.peers_dns, raw.peers.is_empty()) {
        (Some(dns), true) => {
            let name = dns.get_ref();
            let port_ok = name.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p != 0)
            });
            if !port_ok {
                return Err(errors.at(
                    dns.span(),
                    "fleet.peers_dns",
                    format!("{name:?} is not a name:port (e.g. \"weir-peers.default.svc.cluster.local:8080\")"),
                ));
            }
            let refresh = match &raw.dns_refresh {
                None => default_dns_refresh(),
                Some(d) if d.get_ref().0 < MIN_DNS_REFRESH => {
                    return Err(errors.at(
                        d.span(),
                        "fleet.dns_refresh",
                        "dns_refresh must be at least 100ms",
                    ));
                }
                Some(d) => d.get_ref().0,
            };
            FleetDiscovery::Dns {
                name: name.clone(),
                refresh,
            }
        }
        (Some(dns), false) => {
            return Err(errors.at(
                dns.span(),
                "fleet.peers_dns",
                "give either `peers` (a fixed list) or `peers_dns` (a name to resolve), not both",
            ));
        }
        (None, true) => {
            return Err(errors.at(
                raw.self_address.span(),
                "fleet",
                "[fleet] needs `peers` (every replica's ip:port, this one included), `peers_dns` or `peers_endpointslices`",
            ));
        }
        (None, false) => {
            let mut peers = Vec::with_capacity(raw.peers.len());
            for (i, p) in raw.peers.iter().enumerate() {
                let addr = peer_addr(p, p.get_ref(), format!("fleet.peers[{i}]"), errors)?;
                if peers.contains(&addr) {
                    return Err(errors.at(
                        p.span(),
                        format!("fleet.peers[{i}]"),
                        format!("{addr} is listed twice"),
                    ));
                }
                peers.push(addr);
            }
            if !peers.contains(&self_addr) {
                return Err(errors.at(
                    raw.self_address.span(),
                    "fleet.self",
                    format!(
                        "{self_addr} is not one of `peers`: list every replica, this one included"
                    ),
                ));
            }
            FleetDiscovery::Static(peers)
        }
    };
    Ok(discovery)
}

/// `secret`, or `secret_file` read now relative to `base_dir`: at least
/// [`MIN_SECRET_BYTES`] visible ASCII characters.
fn secret(raw: &RawFleet, base_dir: &Path, errors: &Errors<'_>) -> Result<String, ConfigError> {
    let secret = match (&raw.secret, &raw.secret_file) {
        (Some(s), None) => (s.get_ref().clone(), s.span(), "fleet.secret"),
        (None, Some(f)) => {
            let path = base_dir.join(f.get_ref());
            // A regular file of at most 1 MiB: a FIFO or a device would
            // block or never end, on the thread that reloads.
            let shown = path.display().to_string();
            let bytes = super::file::read_limited(&path, &shown).map_err(|e| {
                let why = match e {
                    ConfigError::Read { source, .. } => format!("cannot read {shown}: {source}"),
                    ConfigError::NotAFile { .. } => format!(
                        "{shown} is not a regular file (give the file that holds the secret)"
                    ),
                    ConfigError::TooLarge { limit_bytes, .. } => {
                        format!(
                            "{shown} is larger than {limit_bytes} bytes: it holds the secret only"
                        )
                    }
                    other => format!("cannot read {shown}: {other}"),
                };
                errors.at(f.span(), "fleet.secret_file", why)
            })?;
            let text = String::from_utf8_lossy(&bytes);
            (text.trim().to_owned(), f.span(), "fleet.secret_file")
        }
        (Some(s), Some(_)) => {
            return Err(errors.at(
                s.span(),
                "fleet.secret",
                "give either `secret` or `secret_file`, not both",
            ));
        }
        (None, None) => {
            return Err(errors.at(
                raw.self_address.span(),
                "fleet",
                "[fleet] needs `secret` or `secret_file`: peers prove they are peers with it",
            ));
        }
    };
    let (secret, span, key) = secret;
    let visible = secret.bytes().all(|b| b.is_ascii_graphic());
    if secret.len() < MIN_SECRET_BYTES || !visible {
        return Err(errors.at(
            span,
            key,
            format!(
                "the peer secret must be at least {MIN_SECRET_BYTES} visible ASCII characters \
                 (no spaces), e.g. the output of `openssl rand -hex 32`"
            ),
        ));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::expand_env;

    #[test]
    fn env_expansion() {
        // PATH is set in every test environment.
        let path = std::env::var("PATH").expect("PATH");
        assert_eq!(
            expand_env("a${PATH}b").as_deref(),
            Ok(format!("a{path}b").as_str())
        );
        assert_eq!(expand_env("plain:80").as_deref(), Ok("plain:80"));
        assert_eq!(
            expand_env("${WEIR_SURELY_UNSET_VARIABLE}:80"),
            Err("WEIR_SURELY_UNSET_VARIABLE".to_owned())
        );
        assert_eq!(expand_env("${PATH"), Err("{".to_owned()));
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod config_tests;
