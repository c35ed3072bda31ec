//! The streaming promise of SSR composition, timed on real sockets: with
//! fragments answering after 0, 100, 200 and 1000 ms, the template's first
//! bytes reach the client before 50 ms, the 100 ms fragment before 150 ms,
//! and the page ends after about the largest delay, not the sum; an
//! `async` fragment ready at 100 ms reaches the client before 200 ms,
//! ahead of a 1 s in-order fragment before it.
//!
//! Alone in their test binary, one at a time, so that no other test loads
//! the machine meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::*;
use http_body_util::BodyExt;

/// The tests of this binary run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy whose `/` route composes `template` (a file) from `origin`.
async fn composing(origin: &Origin, template: &str) -> (tempfile::TempDir, Proxy) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("page.html");
    std::fs::write(&path, template).expect("template");
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"site\"\nurl = \"http://{}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"site\"\n\n\
         [route.ssr]\ntemplate_file = {:?}\n",
        origin.addr,
        path.display().to_string()
    );
    let proxy = start_proxy(&config).await;
    (dir, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_fragment_ready_at_100ms_reaches_the_client_before_200ms_ahead_of_a_slow_one() {
    let _serial = SERIAL.lock().await;
    let origin = start_origin().await;
    let (_dir, proxy) = composing(
        &origin,
        "<!doctype html><html><head><title>async</title></head><body>\
         <div><fragment src=\"/fragment/fast?delay_ms=100\" async>wait</fragment></div>\
         <div><fragment src=\"/fragment/slow?delay_ms=1000\"></fragment></div>\
         </body></html>",
    )
    .await;
    let client = client(false);
    let warm = client
        .get(proxy.url("/").parse().expect("url"))
        .await
        .expect("warm-up");
    warm.into_body().collect().await.expect("warm-up body");

    let mut runs = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let resp = client
            .get(proxy.url("/").parse().expect("url"))
            .await
            .expect("head");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut text = String::new();
        let (mut fast, mut slow) = (None, None);
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("frame");
            let Some(d) = frame.data_ref() else { continue };
            text.push_str(std::str::from_utf8(d).expect("utf-8"));
            let at = start.elapsed();
            if fast.is_none() {
                fast = text.find("<template id=\"weir-async-").map(|i| (at, i));
            }
            if slow.is_none() {
                slow = text.find("data-fragment=\"slow\"").map(|i| (at, i));
            }
        }
        let (fast, slow) = (fast.expect("async template"), slow.expect("slow fragment"));
        assert!(fast.1 < slow.1, "the async template comes first: {text}");
        assert!(
            text.contains("data-fragment=\"fast\">fast</div></template><script>"),
            "{text}"
        );
        runs.push((fast.0, slow.0));
    }
    for (fast, slow) in &runs {
        eprintln!(
            "ssr async: async template at {:.1} ms, slow in-order fragment at {:.1} ms",
            ms(*fast),
            ms(*slow)
        );
    }
    let best = runs.iter().map(|r| r.0).min().expect("runs");
    assert!(
        best < Duration::from_millis(200),
        "async template: {runs:?}"
    );
    assert!(
        best >= Duration::from_millis(100),
        "async before its delay? {runs:?}"
    );
    assert!(
        runs.iter()
            .all(|(fast, slow)| fast < slow && *slow >= Duration::from_millis(1000)),
        "{runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_stream_as_they_arrive_and_the_page_takes_the_largest_delay_not_the_sum() {
    let _serial = SERIAL.lock().await;
    let origin = start_origin().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("page.html");
    std::fs::write(
        &path,
        "<!doctype html><html><head><title>timing</title></head><body>\
         <fragment src=\"/fragment/f0?delay_ms=0\"></fragment>\
         <fragment src=\"/fragment/f1?delay_ms=100\"></fragment>\
         <fragment src=\"/fragment/f2?delay_ms=200\"></fragment>\
         <fragment src=\"/fragment/f3?delay_ms=1000\"></fragment>\
         </body></html>",
    )
    .expect("template");
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"site\"\nurl = \"http://{}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"site\"\n\n\
         [route.ssr]\ntemplate_file = {:?}\n",
        origin.addr,
        path.display().to_string()
    );
    let proxy = start_proxy(&config).await;
    let client = client(false);
    // A warm-up page: connections to the origin exist, code paths are hot.
    let warm = client
        .get(proxy.url("/").parse().expect("url"))
        .await
        .expect("warm-up");
    warm.into_body().collect().await.expect("warm-up body");

    let mut runs = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let resp = client
            .get(proxy.url("/").parse().expect("url"))
            .await
            .expect("head");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut text = String::new();
        let (mut ttfb, mut f1, mut f3) = (None, None, None);
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("frame");
            let Some(d) = frame.data_ref() else { continue };
            text.push_str(std::str::from_utf8(d).expect("utf-8"));
            let at = start.elapsed();
            ttfb.get_or_insert(at);
            if f1.is_none() && text.contains("data-fragment=\"f1\"") {
                f1 = Some(at);
            }
            if f3.is_none() && text.contains("data-fragment=\"f3\"") {
                f3 = Some(at);
            }
        }
        let total = start.elapsed();
        assert!(
            text.starts_with("<!doctype html>") && text.ends_with("</body></html>"),
            "{text}"
        );
        runs.push((
            ttfb.expect("bytes"),
            f1.expect("f1"),
            f3.expect("f3"),
            total,
        ));
    }
    for (ttfb, f1, f3, total) in &runs {
        eprintln!(
            "ssr timing: first bytes {:.1} ms, fragment 1 (100 ms) {:.1} ms, fragment 3 (1000 ms) {:.1} ms, page {:.1} ms",
            ms(*ttfb),
            ms(*f1),
            ms(*f3),
            ms(*total)
        );
    }
    // The best of three runs, against noise from the rest of the machine.
    let best = |f: fn(&(Duration, Duration, Duration, Duration)) -> Duration| {
        runs.iter().map(f).min().expect("runs")
    };
    assert!(
        best(|r| r.0) < Duration::from_millis(50),
        "first bytes: {runs:?}"
    );
    assert!(
        best(|r| r.1) < Duration::from_millis(150),
        "fragment 1: {runs:?}"
    );
    assert!(
        best(|r| r.1) >= Duration::from_millis(100),
        "fragment 1 before its delay? {runs:?}"
    );
    let total = best(|r| r.3);
    assert!(
        total >= Duration::from_millis(1000) && total < Duration::from_millis(1250),
        "page took {total:?}: not about the largest delay (1000 ms; the sum is 1300 ms)"
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
