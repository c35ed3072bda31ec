//! The accept loop out of file descriptors (EMFILE), for real.
//!
//! The test runs its scenario in a child process: this test binary again,
//! started by `sh` after `ulimit -n 256`, so the lowered limit and the
//! descriptors it fills up touch no other test. In the child, a client
//! connects (its connection waits in the backlog), then every descriptor
//! left is taken, so each `accept` fails with EMFILE until some are freed.

#![cfg(unix)]

use std::fs::File;
use std::future::Future;
use std::io::{self, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use weir_net::{AcceptLoop, Backoff};

/// Set in the child's environment: run the scenario instead of spawning.
const CHILD: &str = "WEIR_NET_EMFILE_CHILD";
/// What the child prints once every check passed.
const DONE: &str = "weir-net emfile scenario: all checks passed";
const TEST: &str = "emfile_pauses_with_growing_delays_then_accepts_the_waiting_connection";

#[test]
fn emfile_pauses_with_growing_delays_then_accepts_the_waiting_connection() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 256 && exec "$0" "$@""#)
        .arg(exe)
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(DONE),
        "child: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// The loop's log lines, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }

    /// The `retry_in_ms` of every back-off warning so far, in order.
    fn retry_delays(&self) -> Vec<u64> {
        self.text()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("class=ResourceExhausted"))
            .map(|l| {
                let (_, rest) = l.split_once("retry_in_ms=").expect("retry_in_ms field");
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().expect("retry_in_ms value")
            })
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn child() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(scenario(&logs));
    println!("{DONE}");
}

/// Opens `/dev/null` until the process is out of descriptors.
fn take_every_descriptor() -> Vec<File> {
    let mut taken = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(file) => taken.push(file),
            Err(err) if err.raw_os_error() == Some(libc::EMFILE) => return taken,
            Err(err) => panic!("expected EMFILE, got {err}"),
        }
        assert!(
            taken.len() < 100_000,
            "the descriptor limit was not lowered"
        );
    }
}

/// Waits (bounded) until the loop has logged `n` back-off warnings.
async fn until_backoffs(logs: &Logs, n: usize) {
    bounded(async {
        while logs.retry_delays().len() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("timed out")
}

/// The delays `Backoff` gives from a fresh start.
fn fresh_delays(n: usize) -> Vec<u64> {
    let mut backoff = Backoff::new();
    (0..n)
        .map(|_| backoff.next_delay().as_millis() as u64)
        .collect()
}

async fn scenario(logs: &Logs) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (handed_tx, mut handed) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();

    let accept = AcceptLoop::new(&listener).run(
        async {
            let _ = stopped.await;
        },
        |stream, peer| {
            let _ = handed_tx.send(peer);
            drop(stream);
            async {}
        },
    );

    let drive = async {
        // Round 1: a waiting connection, no descriptor for it.
        let first = TcpStream::connect(addr).await.expect("connect");
        let mut taken = take_every_descriptor();
        let started = Instant::now();
        until_backoffs(logs, 4).await;
        let delays = logs.retry_delays();
        assert_eq!(delays[..4], fresh_delays(4), "{}", logs.text());
        // Pauses, not a busy loop: three pauses (10 + 20 + 40 ms) lie
        // between the first warning and the fourth.
        assert!(started.elapsed() >= Duration::from_millis(70));
        assert!(
            handed.try_recv().is_err(),
            "nothing accepted without a descriptor"
        );

        // Free two descriptors: the next retry accepts the waiting client.
        taken.truncate(taken.len() - 2);
        let peer = bounded(handed.recv()).await.expect("handed over");
        assert_eq!(peer, first.local_addr().expect("client addr"));
        let text = logs.text();
        assert!(text.contains("accepting again"), "{text}");
        assert!(text.contains("os error"), "{text}");

        // Round 2: after that success the pauses start over at 10 ms.
        let before = logs.retry_delays().len();
        let second = TcpStream::connect(addr).await.expect("connect");
        taken.extend(take_every_descriptor());
        until_backoffs(logs, before + 2).await;
        assert_eq!(
            logs.retry_delays()[before..before + 2],
            fresh_delays(2),
            "{}",
            logs.text()
        );

        // Stopping during a pause ends the loop; the client still waits.
        stop.send(()).expect("loop still running");
        drop(taken);
        second
    };

    let ((), second) = bounded(async { tokio::join!(accept, drive) }).await;
    assert!(
        handed.try_recv().is_err(),
        "the second client was never accepted"
    );
    drop(second);
}
