//! Writes the pattern-prefix fixture blobs and prints their `SHA256SUMS`
//! lines.
//!
//! ```text
//! cargo run -p weir-origin --example write_blobs -- fixtures
//! ```
//!
//! `blob-64k.bin` is the first 65536 bytes of the origin pattern and
//! `blob-1m.bin` the first 1048576, so `/bytes/{n}` and the files agree.

use std::path::PathBuf;

use weir_origin::pattern;

/// The blobs: file name and length in bytes.
const BLOBS: [(&str, usize); 2] = [("blob-64k.bin", 64 * 1024), ("blob-1m.bin", 1024 * 1024)];

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fixtures".to_owned()),
    );
    for (name, len) in BLOBS {
        std::fs::write(dir.join(name), pattern::bytes(0, len))?;
        println!("{}  {name}", pattern::sha256_hex(len as u64));
    }
    Ok(())
}
