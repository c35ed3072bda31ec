//! Active health checks: every `interval`, a `GET path` to each server of
//! an upstream with `[upstream.health]`, through the server's own pool;
//! `fall` failures in a row make it unhealthy, `rise` passes make it
//! healthy again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use http::{Request, header};
use http_body_util::{BodyExt as _, Either, Empty};

use super::UpstreamGroup;
use super::server::Server;
use crate::config::{HealthCheck, Protocol};
use crate::upstream::UpstreamClient;

/// Most body bytes a check reads (the rest closes the connection).
const MAX_CHECK_BODY: usize = 64 << 10;

/// Starts one task per server of `group` when it has checks; each stops
/// when the group is dropped.
pub fn spawn(group: &Arc<UpstreamGroup>, client: &UpstreamClient) {
    let Some(check) = group.health.clone() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    for index in 0..group.servers.len() {
        runtime.spawn(run(
            Arc::downgrade(group),
            index,
            check.clone(),
            client.clone(),
        ));
    }
}

async fn run(group: Weak<UpstreamGroup>, index: usize, check: HealthCheck, client: UpstreamClient) {
    let Some(mut retired) = group.upgrade().map(|g| g.retired()) else {
        return;
    };
    let mut tick = tokio::time::interval(check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // Retired by a reload (or the group is gone: the sender with it).
            _ = retired.wait_for(|r| *r) => return,
        }
        let Some(group) = group.upgrade() else {
            return;
        };
        let server = Arc::clone(&group.servers[index]);
        let h2 = group.protocol == Protocol::H2c;
        let passed = tokio::select! {
            passed = probe(&client, &server, &check, h2) => passed,
            _ = retired.wait_for(|r| *r) => return,
        };
        apply(&group, &server, &check, passed);
    }
}

/// One check (over HTTP/2 with `h2`, on the server's HTTP/2 connection):
/// `Ok(status)` when it answered, else why not.
async fn probe(
    client: &UpstreamClient,
    server: &Server,
    check: &HealthCheck,
    h2: bool,
) -> Result<u16, String> {
    let mut req = Request::new(Either::Right(Empty::new()));
    if h2 {
        *req.version_mut() = http::Version::HTTP_2;
    }
    // The server's own pool (its scheme's: TLS for an https:// server).
    let uri = format!(
        "{}://{}{}{}",
        server.url.scheme, server.url.authority, server.url.base_path, check.path
    );
    *req.uri_mut() = uri.parse().map_err(|e| format!("{uri}: {e}"))?;
    req.headers_mut().insert(
        header::USER_AGENT,
        http::HeaderValue::from_static("weir-health-check"),
    );
    let exchange = async {
        let resp = client.send(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut read = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            read += frame.data_ref().map_or(0, |d| d.len());
            if read > MAX_CHECK_BODY {
                break;
            }
        }
        Ok(status)
    };
    tokio::time::timeout(check.timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", check.timeout.as_millis())))
}

fn apply(group: &UpstreamGroup, server: &Server, check: &HealthCheck, result: Result<u16, String>) {
    let passed = match &result {
        Ok(status) => check
            .expect
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(status)),
        Err(_) => false,
    };
    let healthy = server.healthy.load(Ordering::Relaxed);
    if passed == healthy {
        server.streak.store(0, Ordering::Relaxed);
        return;
    }
    let streak = server.streak.fetch_add(1, Ordering::Relaxed) + 1;
    let needed = if healthy { check.fall } else { check.rise };
    if streak < needed {
        return;
    }
    server.streak.store(0, Ordering::Relaxed);
    server.healthy.store(passed, Ordering::Relaxed);
    let what = match &result {
        Ok(status) => format!("status {status}"),
        Err(e) => e.clone(),
    };
    if passed {
        tracing::info!(
            target: "weir::upstream",
            upstream = %group.name,
            server = %server.authority,
            "server healthy again after {needed} passing checks ({what})"
        );
    } else {
        tracing::warn!(
            target: "weir::upstream",
            upstream = %group.name,
            server = %server.authority,
            "server unhealthy after {needed} failed checks (last: {what})"
        );
    }
}
