//! Starting, stopping and draining the origin.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use weir_origin::{OriginConfig, serve};

use common::{bounded, fixtures_dir, get, h1_client, h2_client, read_text, url};

fn localhost() -> SocketAddr {
    ([127, 0, 0, 1], 0).into()
}

/// Waits until connecting to `addr` is refused (the listener is gone).
async fn wait_until_refused(addr: SocketAddr) {
    bounded(async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn spawn_binds_a_free_port_on_localhost() {
    let origin = common::start().await;
    assert!(origin.local_addr().ip().is_loopback());
    assert_ne!(origin.local_addr().port(), 0);
    origin.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_in_flight_request_finish_and_stops_accepting() {
    let origin = common::start().await;
    let addr = origin.local_addr();
    for client in [h1_client(), h2_client()] {
        let origin = common::start().await;
        let target = url(&origin, "/delay/400");
        let in_flight = tokio::spawn(async move { read_text(get(&client, &target).await).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let addr = origin.local_addr();
        bounded(origin.shutdown()).await;
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "shutdown waited for the request"
        );
        assert_eq!(bounded(in_flight).await.expect("task"), "ok\n");
        wait_until_refused(addr).await;
    }
    assert!(
        TcpStream::connect(addr).await.is_ok(),
        "the other origin still runs"
    );
    origin.shutdown().await;
}

#[tokio::test]
async fn idle_keep_alive_connections_do_not_delay_shutdown() {
    for client in [h1_client(), h2_client()] {
        let origin = common::start().await;
        assert_eq!(
            read_text(get(&client, &url(&origin, "/status/200")).await).await,
            "200 OK\n"
        );
        let started = Instant::now();
        bounded(origin.shutdown()).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn drain_gives_up_after_five_seconds() {
    let listener = TcpListener::bind(localhost()).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let config = OriginConfig::new(fixtures_dir());
    let server = tokio::spawn(serve(listener, config, async move {
        let _ = stopped.await;
    }));
    let client = h1_client();
    let target = format!("http://{addr}/delay/60000");
    let stuck = tokio::spawn(async move { client.get(target.parse().expect("uri")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    stop.send(()).expect("server listens for stop");
    bounded(server).await.expect("task").expect("serve ok");
    let took = started.elapsed();
    assert!(took >= weir_origin::DRAIN_TIMEOUT, "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    let outcome = bounded(stuck).await.expect("client task");
    assert!(outcome.is_err(), "the stuck request was cut off");
}

#[tokio::test]
async fn dropping_the_handle_stops_the_server() {
    let origin = common::start().await;
    let addr = origin.local_addr();
    drop(origin);
    wait_until_refused(addr).await;
}

#[tokio::test]
async fn missing_root_is_an_error() {
    let config = OriginConfig::new(fixtures_dir().join("no-such-dir"));
    let err = weir_origin::spawn(localhost(), config)
        .await
        .expect_err("missing root refused");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);

    let file_root = OriginConfig::new(fixtures_dir().join("data.json"));
    let listener = TcpListener::bind(localhost()).await.expect("bind");
    let err = serve(listener, file_root, std::future::pending())
        .await
        .expect_err("file root refused");
    assert_eq!(err.kind(), std::io::ErrorKind::NotADirectory);
}

#[tokio::test]
async fn many_concurrent_requests_on_both_protocols() {
    let origin = common::start().await;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, client) in [h1_client(), h2_client()]
        .into_iter()
        .cycle()
        .take(64)
        .enumerate()
    {
        let target = url(&origin, &format!("/bytes/{}", 1000 + i));
        tasks.spawn(async move {
            let body = common::read_body(get(&client, &target).await).await;
            assert_eq!(body.data, weir_origin::pattern::bytes(0, 1000 + i));
        });
    }
    while let Some(done) = bounded(tasks.join_next()).await {
        done.expect("request task");
    }
    origin.shutdown().await;
}
