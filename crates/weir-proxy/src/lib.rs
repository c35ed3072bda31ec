//! Weir's reverse proxy, as a library.
//!
//! A request moves one way: [`server`] (listener, connection) → the
//! phases of one exchange (`Proxy::handle`: request filter, [`route`],
//! cache lookup, upstream request, send through [`upstream`], response
//! head filter, body pipeline, fan-out) → a `weir-stream` pipeline for the
//! body → the client; [`access_log`] writes one line when the body ends.
//! [`proxy`] holds what every request shares, [`headers`] the
//! intermediary header rules, [`config`] the TOML file, [`metrics`] the
//! only counters, [`reload`] the hot reload of the config. `docs/architecture.md` lists the phases with their files.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use weir_proxy::{config::Config, server::Server};
//! let config = Config::from_file("weir.toml".as_ref()).map_err(std::io::Error::other)?;
//! let server = Server::bind(&config).await?;
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

pub mod access_log;
pub mod admin;
pub mod balance;
pub mod body;
pub mod body_log;
pub mod cache;
pub mod config;
pub mod counted;
mod exchange;
pub mod fleet;
pub mod headers;
mod io;
mod listeners;
pub mod metrics;
pub mod mirror;
pub mod outcome;
pub mod path;
pub mod proxy;
pub mod rate_limit;
pub mod reload;
pub mod request_id;
pub mod route;
pub mod server;
pub mod ssr;
pub mod tls;
pub mod tunnel;
pub mod upstream;
pub mod watch;

pub use config::Config;
pub use proxy::Proxy;
pub use reload::{ReloadError, ReloadSummary, Reloader, StartedOrigin};
pub use server::Server;
