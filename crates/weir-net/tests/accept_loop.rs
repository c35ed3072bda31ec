//! The accept loop on real sockets (127.0.0.1): handing over, stopping,
//! `TCP_NODELAY`, backpressure from the handler.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use weir_net::AcceptLoop;

/// Fails the test instead of hanging it.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("timed out")
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// Reads until the peer closes; true when it did (EOF or reset) without
/// sending a byte.
async fn closed_without_data(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 16];
    matches!(bounded(stream.read(&mut buf)).await, Ok(0) | Err(_))
}

#[tokio::test]
async fn keeps_accepting_after_the_handler_drops_a_connection() {
    let (listener, addr) = listener().await;
    let handled = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = oneshot::channel::<()>();
    let counter = Arc::clone(&handled);
    let server = tokio::spawn(async move {
        AcceptLoop::new(&listener)
            .run(
                async {
                    let _ = stopped.await;
                },
                |stream, _peer| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    drop(stream);
                    async {}
                },
            )
            .await;
    });
    for n in 1..=3 {
        let mut client = TcpStream::connect(addr).await.expect("connect");
        assert!(
            closed_without_data(&mut client).await,
            "connection {n} closed"
        );
        assert_eq!(handled.load(Ordering::SeqCst), n);
    }
    stop.send(()).expect("loop still running");
    bounded(server).await.expect("loop task");
}

#[tokio::test]
async fn returns_when_stop_resolves_and_leaves_the_listener_open() {
    let (listener, addr) = listener().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let (tx, mut handed) = mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        AcceptLoop::new(&listener)
            .run(
                async {
                    let _ = stopped.await;
                },
                |stream, peer| {
                    let _ = tx.send((stream, peer));
                    async {}
                },
            )
            .await;
        listener
    });
    let client = TcpStream::connect(addr).await.expect("connect");
    let (_, peer) = bounded(handed.recv()).await.expect("handed over");
    assert_eq!(peer, client.local_addr().expect("client addr"));

    stop.send(()).expect("loop still running");
    let listener = bounded(server).await.expect("loop task");
    // The loop ended and dropped the handler (the channel closed), but the
    // listener is the caller's: connections still queue on it.
    assert!(bounded(handed.recv()).await.is_none());
    let _queued = TcpStream::connect(addr).await.expect("still listening");
    drop(listener);
}

#[tokio::test]
async fn a_stop_that_is_already_ready_wins_over_a_waiting_connection() {
    let (listener, addr) = listener().await;
    let _waiting = TcpStream::connect(addr).await.expect("connect");
    let mut handled = 0;
    bounded(
        AcceptLoop::new(&listener).run(std::future::ready(()), |_, _| {
            handled += 1;
            async {}
        }),
    )
    .await;
    assert_eq!(handled, 0);
}

#[tokio::test]
async fn accepted_sockets_get_tcp_nodelay_unless_turned_off() {
    for nodelay in [None, Some(true), Some(false)] {
        let (listener, addr) = listener().await;
        let _client = TcpStream::connect(addr).await.expect("connect");
        let mut seen = None;
        let (stop, stopped) = oneshot::channel::<()>();
        let mut stop = Some(stop);
        let accept = match nodelay {
            None => AcceptLoop::new(&listener),
            Some(on) => AcceptLoop::new(&listener).nodelay(on),
        };
        bounded(accept.run(
            async {
                let _ = stopped.await;
            },
            |stream, _| {
                seen = Some(stream.nodelay().expect("nodelay"));
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                async {}
            },
        ))
        .await;
        assert_eq!(seen, Some(nodelay.unwrap_or(true)), "{nodelay:?}");
    }
}

#[tokio::test]
async fn the_next_accept_waits_for_the_handler() {
    let (listener, addr) = listener().await;
    let release = Arc::new(Notify::new());
    let (tx, mut handed) = mpsc::unbounded_channel();
    let handler_release = Arc::clone(&release);
    let server = tokio::spawn(async move {
        AcceptLoop::new(&listener)
            .run(std::future::pending(), |stream, peer| {
                let _ = tx.send(peer);
                let release = Arc::clone(&handler_release);
                async move {
                    release.notified().await;
                    drop(stream);
                }
            })
            .await;
    });
    let first = TcpStream::connect(addr).await.expect("connect");
    let second = TcpStream::connect(addr).await.expect("connect");
    let peer = bounded(handed.recv()).await.expect("first handed over");
    assert_eq!(peer, first.local_addr().expect("addr"));
    // The second connection is queued, not handed over, while the first
    // handler runs.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(handed.try_recv().is_err(), "second handed over too early");
    release.notify_one();
    let peer = bounded(handed.recv()).await.expect("second handed over");
    assert_eq!(peer, second.local_addr().expect("addr"));
    server.abort();
}
