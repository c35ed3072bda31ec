//! Access log capture for tests: a global tracing layer keeping the
//! fields of every `weir::access` event, and a wait for the line of a path.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub type Line = HashMap<String, String>;

pub fn access_log() -> &'static Mutex<Vec<Line>> {
    static LINES: OnceLock<Mutex<Vec<Line>>> = OnceLock::new();
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let _ = tracing_subscriber::registry().with(Capture).try_init();
    });
    LINES.get_or_init(|| Mutex::new(Vec::new()))
}

struct Capture;

struct Fields(Line);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target() != "weir::access" {
            return;
        }
        let mut fields = Fields(HashMap::new());
        event.record(&mut fields);
        access_log().lock().expect("lock").push(fields.0);
    }
}

/// The access log line for `path`, waiting for it at most `limit`.
pub async fn access_line(path: &str, limit: Duration) -> Option<Line> {
    let start = Instant::now();
    loop {
        let found = access_log()
            .lock()
            .expect("lock")
            .iter()
            .find(|l| l.get("path").map(String::as_str) == Some(path))
            .cloned();
        if found.is_some() || start.elapsed() > limit {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
