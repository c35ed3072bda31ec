//! Peer discovery by watching a Kubernetes Service's EndpointSlices
//! (`[fleet] peers_endpointslices`), through the API server with the
//! pod's service account (or a kubeconfig outside a cluster).
//!
//! The members are the addresses of the Service's endpoints that are
//! `serving` and not `terminating` (`conditions` of
//! `discovery.k8s.io/v1`; a missing `serving` defers to `ready`, and a
//! missing `ready` counts as ready), each at this replica's port, plus
//! this replica. So a pod leaves the ring as soon as it starts to
//! terminate, while it still runs and can hand its keys over (the fleet's
//! handoff window), and a pod joins when it is ready.
//!
//! The watch lists the slices first and follows their changes, starting
//! again (listing) after an error, with back-off. Until the first list
//! the members stay as they were. Errors are logged when they change.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt as _, watcher};

/// How often the watch checks that its fleet still exists (a reload
/// builds a new one) while no event comes.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// How long to wait before building the API client again after it failed.
const CLIENT_RETRY: Duration = Duration::from_secs(5);

/// The label Kubernetes puts on a Service's EndpointSlices.
const SERVICE_LABEL: &str = "kubernetes.io/service-name";

/// Watches `service`'s EndpointSlices in `namespace` and hands each new
/// member list (the usable addresses at `port`) to `set`, as long as
/// `alive` says the fleet exists (a reload builds a new one).
pub(super) async fn watch(
    service: String,
    namespace: Option<String>,
    port: u16,
    alive: impl Fn() -> bool,
    mut set: impl FnMut(Vec<SocketAddr>),
) {
    let client = loop {
        match kube::Client::try_default().await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(target: "weir::fleet", "cannot reach the Kubernetes API for the fleet's EndpointSlices: {e}");
                tokio::time::sleep(CLIENT_RETRY).await;
                if !alive() {
                    return;
                }
            }
        }
    };
    let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, &namespace);
    let config = watcher::Config::default().labels(&format!("{SERVICE_LABEL}={service}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    // Each slice's usable addresses, by slice name; `listing` while a
    // (re)list is under way.
    let mut slices: HashMap<String, Vec<IpAddr>> = HashMap::new();
    let mut listing: Option<HashMap<String, Vec<IpAddr>>> = None;
    let mut last_error: Option<String> = None;
    loop {
        let event = match tokio::time::timeout(CHECK_EVERY, events.next()).await {
            Err(_) if !alive() => return,
            Err(_) => continue,
            Ok(None) => return,
            Ok(Some(event)) => event,
        };
        if !alive() {
            return;
        }
        let changed = match event {
            Ok(watcher::Event::Init) => {
                listing = Some(HashMap::new());
                false
            }
            Ok(watcher::Event::InitApply(slice)) => {
                if let Some(l) = listing.as_mut() {
                    l.insert(slice_name(&slice), usable(&slice));
                }
                false
            }
            Ok(watcher::Event::InitDone) => {
                slices = listing.take().unwrap_or_default();
                true
            }
            Ok(watcher::Event::Apply(slice)) => {
                slices.insert(slice_name(&slice), usable(&slice));
                true
            }
            Ok(watcher::Event::Delete(slice)) => {
                slices.remove(&slice_name(&slice));
                true
            }
            Err(e) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!(target: "weir::fleet", service = %service, namespace = %namespace, "watching the fleet's EndpointSlices: {e}");
                    last_error = Some(e);
                }
                false
            }
        };
        if changed {
            last_error = None;
            let mut addrs: Vec<SocketAddr> = slices
                .values()
                .flatten()
                .map(|ip| SocketAddr::new(ip.to_canonical(), port))
                .collect();
            addrs.sort_unstable();
            addrs.dedup();
            set(addrs);
        }
    }
}

fn slice_name(slice: &EndpointSlice) -> String {
    slice.metadata.name.clone().unwrap_or_default()
}

/// The addresses of `slice`'s endpoints that take traffic: `serving`
/// (or, when not given, `ready`; ready when neither is given) and not
/// `terminating`. FQDN slices have none.
pub(super) fn usable(slice: &EndpointSlice) -> Vec<IpAddr> {
    if slice.address_type == "FQDN" {
        return Vec::new();
    }
    slice
        .endpoints
        .iter()
        .filter(|e| {
            let c = e.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            serving && !terminating
        })
        .flat_map(|e| e.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_serving_endpoints_that_are_not_terminating_are_members() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "weir-peers-abc"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.4"]},
                {"addresses": ["10.0.0.5"], "conditions": {"ready": false, "serving": true}},
                {"addresses": ["not-an-ip"]}
            ]
        }))
        .expect("an EndpointSlice");
        let ips: Vec<String> = usable(&slice).iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.4", "10.0.0.5"]);
        let mut fqdn = slice;
        fqdn.address_type = "FQDN".into();
        assert!(usable(&fqdn).is_empty());
    }
}
