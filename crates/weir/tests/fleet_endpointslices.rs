//! `[fleet] peers_endpointslices`: the members come from a watch of a
//! Service's EndpointSlices through the Kubernetes API.
//!
//! No API server can run here (no cluster, and none in the package
//! registries this machine reaches), so the test serves the two requests
//! the watch makes, over a real socket, as the API server answers them:
//! a list of `discovery.k8s.io/v1` EndpointSlices, then a watch stream of
//! JSON events. `weir serve` reaches it through a kubeconfig, as it would
//! outside a cluster.
//!
//! Pinned: the watch asks for the Service's slices by their label; the
//! members are the endpoints that are serving and not terminating (this
//! replica always among them); a change, a new slice and a deleted one
//! each change the members at once.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// An EndpointSlice of the `weir-peers` Service named `name`, with
/// `endpoints` as `(ip, serving, terminating)`.
fn slice(name: &str, version: &str, endpoints: &[(&str, bool, bool)]) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|&(ip, serving, terminating)| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": serving && !terminating, "serving": serving, "terminating": terminating}
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "weir-test",
            "resourceVersion": version,
            "labels": {"kubernetes.io/service-name": "weir-peers"}
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    })
}

/// What the fake API server saw, and the sender of its watch events.
struct FakeApi {
    addr: SocketAddr,
    /// Each request's path and query.
    seen: Arc<Mutex<Vec<String>>>,
    /// Watch events (`{"type": ..., "object": ...}`), sent to the open watch.
    events: mpsc::UnboundedSender<Value>,
}

/// Serves the slice list `initial` (resource version 1), then one watch
/// stream fed from [`FakeApi::events`]; any other request gets a 404.
async fn fake_api(initial: Vec<Value>) -> FakeApi {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (events, rx) = mpsc::unbounded_channel::<Value>();
    let rx = Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (log, rx, initial) = (Arc::clone(&log), Arc::clone(&rx), initial.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (log, rx, initial) = (Arc::clone(&log), Arc::clone(&rx), initial.clone());
                    async move {
                        let target = req
                            .uri()
                            .path_and_query()
                            .map(ToString::to_string)
                            .unwrap_or_default();
                        log.lock().expect("log").push(target.clone());
                        let path = req.uri().path();
                        let query = req.uri().query().unwrap_or("");
                        type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;
                        let reply = |status: u16, body: Body| {
                            http::Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .body(body)
                                .expect("response")
                        };
                        if path != "/apis/discovery.k8s.io/v1/namespaces/weir-test/endpointslices" {
                            return Ok::<_, Infallible>(reply(
                                404,
                                Full::new(Bytes::from_static(b"{}")).boxed(),
                            ));
                        }
                        if !query.contains("watch=true") {
                            let list = json!({
                                "apiVersion": "discovery.k8s.io/v1",
                                "kind": "EndpointSliceList",
                                "metadata": {"resourceVersion": "1"},
                                "items": initial
                            });
                            return Ok(reply(
                                200,
                                Full::new(Bytes::from(list.to_string())).boxed(),
                            ));
                        }
                        // One watch at a time gets the events; a second
                        // waits (the fake never ends a watch itself).
                        let Some(mut rx) = rx.lock().await.take() else {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return Ok(reply(500, Full::new(Bytes::new()).boxed()));
                        };
                        let (tx, body_rx) =
                            mpsc::unbounded_channel::<Result<Frame<Bytes>, Infallible>>();
                        tokio::spawn(async move {
                            while let Some(event) = rx.recv().await {
                                let line = format!("{event}\n");
                                if tx.send(Ok(Frame::data(Bytes::from(line)))).is_err() {
                                    return;
                                }
                            }
                        });
                        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(body_rx);
                        Ok(reply(200, StreamBody::new(stream).boxed()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    FakeApi { addr, seen, events }
}

/// `weir_fleet_members` on the replica's `/metrics`.
async fn members(weir: &WeirProcess) -> u64 {
    let (_, _, body) = get(&format!("http://{}/metrics", weir.admin_addr()), false).await;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| {
            l.strip_prefix("weir_fleet_members ")
                .and_then(|v| v.trim().parse().ok())
        })
        .expect("weir_fleet_members")
}

/// Waits up to 10 s for the replica to have `want` members.
async fn members_become(weir: &WeirProcess, want: u64) {
    for _ in 0..200 {
        if members(weir).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "members stayed {} (want {want})\n{}",
        members(weir).await,
        weir.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_follow_the_services_endpointslices() {
    let api = fake_api(vec![slice(
        "weir-peers-a",
        "1",
        &[
            ("127.0.0.1", true, false),
            ("127.0.0.2", true, false),
            ("127.0.0.3", true, false),
            ("127.0.0.4", true, true),
            ("127.0.0.5", false, false),
        ],
    )])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: weir-test\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: test-token\n",
            api.addr
        ),
    )
    .expect("kubeconfig");
    let origin = start_origin().await;
    let me = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let weir = WeirProcess::start_at_env(
        me,
        &format!(
            "[[listener]]\naddress = \"{me}\"\n\n[admin]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstream]]\nname = \"origin\"\nurl = \"http://{}\"\n\n\
             [[route]]\npath_prefix = \"/\"\nupstream = \"origin\"\ncache = true\n\n\
             [fleet]\nself = \"{me}\"\npeers_endpointslices = \"weir-peers\"\n\
             secret = \"endpointslices-test-secret\"\n",
            origin.addr
        ),
        &[("KUBECONFIG", kubeconfig.to_str().expect("utf-8 path"))],
    );
    // .1 (this replica), .2 and .3: .4 is terminating, .5 not serving.
    members_become(&weir, 3).await;
    let seen = api.seen.lock().expect("seen").clone();
    assert!(
        seen.iter()
            .all(|t| t.contains("labelSelector=kubernetes.io%2Fservice-name%3Dweir-peers")),
        "{seen:?}"
    );

    // .3 starts to terminate: it leaves at once.
    let modified = slice(
        "weir-peers-a",
        "2",
        &[
            ("127.0.0.1", true, false),
            ("127.0.0.2", true, false),
            ("127.0.0.3", true, true),
        ],
    );
    api.events
        .send(json!({"type": "MODIFIED", "object": modified}))
        .expect("send");
    members_become(&weir, 2).await;
    // A second slice of the Service adds .6 and .7.
    let second = slice(
        "weir-peers-b",
        "3",
        &[("127.0.0.6", true, false), ("127.0.0.7", true, false)],
    );
    api.events
        .send(json!({"type": "ADDED", "object": second.clone()}))
        .expect("send");
    members_become(&weir, 4).await;
    api.events
        .send(json!({"type": "DELETED", "object": second}))
        .expect("send");
    members_become(&weir, 2).await;
    assert!(
        weir.log_text().contains("fleet members changed"),
        "each change is logged"
    );
}
