//! Runs the origin alone, for trying endpoints by hand or load testing.
//!
//! ```text
//! cargo run -p weir-origin --example origin -- 127.0.0.1:8081 fixtures
//! ```
//!
//! Stops gracefully on Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::TcpListener;
use weir_origin::{OriginConfig, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8081".to_owned())
        .parse()
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    let root = PathBuf::from(args.next().unwrap_or_else(|| "fixtures".to_owned()));
    let listener = TcpListener::bind(addr).await?;
    eprintln!("weir-origin on http://{}", listener.local_addr()?);
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(listener, OriginConfig::new(root), ctrl_c).await
}
