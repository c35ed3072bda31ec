//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3) as one table.

use http::HeaderValue;
use weir_transform::coding::{Coding, negotiate};

const Z: Coding = Coding::Zstd;
const B: Coding = Coding::Brotli;
const G: Coding = Coding::Gzip;
const DEFAULT: &[Coding] = &[Z, B, G];

/// (field lines, server preference, expected pick)
const TABLE: &[(&[&str], &[Coding], Option<Coding>)] = &[
    // No field, or an empty one: identity.
    (&[], DEFAULT, None),
    (&[""], DEFAULT, None),
    (&[" , ,\t"], DEFAULT, None),
    // One coding, any case, and the x-gzip alias.
    (&["gzip"], DEFAULT, Some(G)),
    (&["GZIP"], DEFAULT, Some(G)),
    (&["x-gzip"], DEFAULT, Some(G)),
    (&["X-GZip"], DEFAULT, Some(G)),
    (&["Br"], DEFAULT, Some(B)),
    (&["ZSTD"], DEFAULT, Some(Z)),
    // Ties (no weights, as browsers send) go to the server preference.
    (&["gzip, deflate, br"], DEFAULT, Some(B)),
    (&["gzip, deflate, br, zstd"], DEFAULT, Some(Z)),
    (&["gzip, br, zstd"], &[G, B, Z], Some(G)),
    (&["br;q=0.8, gzip;q=0.8"], DEFAULT, Some(B)),
    // A higher weight beats the preference.
    (&["br;q=0.5, gzip;q=0.8"], DEFAULT, Some(G)),
    (&["zstd;q=0.001, gzip;q=0.002"], DEFAULT, Some(G)),
    // `*` stands for every coding not listed.
    (&["*"], DEFAULT, Some(Z)),
    (&["*"], &[G, B], Some(G)),
    (&["*, zstd;q=0"], DEFAULT, Some(B)),
    (&["gzip;q=0, *"], &[G], None),
    (&["gzip;q=0, *"], DEFAULT, Some(Z)),
    (&["*;q=0.5, gzip"], DEFAULT, Some(G)),
    (&["*;q=0"], DEFAULT, None),
    (&["*;q=0, identity"], DEFAULT, None),
    // q=0: not acceptable.
    (&["gzip;q=0"], DEFAULT, None),
    (&["gzip;q=0.000, br"], DEFAULT, Some(B)),
    // identity: not acceptable is still answered with identity (None).
    (&["identity"], DEFAULT, None),
    (&["identity;q=0"], DEFAULT, None),
    (&["identity;q=0, gzip"], DEFAULT, Some(G)),
    // identity weighed above every coding wins; a tie compresses.
    (&["gzip;q=0.5, identity"], DEFAULT, None),
    (&["gzip;q=0.5, identity;q=0.5"], DEFAULT, Some(G)),
    (&["gzip;q=0.5, *;q=0.9"], DEFAULT, Some(Z)),
    (&["gzip;q=0.5, *;q=0.9"], &[G], None),
    // identity not listed does not compete.
    (&["gzip;q=0.1"], DEFAULT, Some(G)),
    // Unknown codings are ignored.
    (&["compress, deflate"], DEFAULT, None),
    (&["sdch, foo, bar;q=0.9"], DEFAULT, None),
    (&["foo, gzip;q=0.3"], DEFAULT, Some(G)),
    // Codings not in the preference are never chosen.
    (&["gzip"], &[], None),
    (&["br, zstd"], &[G], None),
    (&["br"], &[G], None),
    // Malformed weights void their member, nothing else.
    (&["gzip;q=2"], DEFAULT, None),
    (&["gzip;q=2, br"], DEFAULT, Some(B)),
    (&["gzip;q=abc"], DEFAULT, None),
    (&["gzip;q=0.1234"], DEFAULT, None),
    (&["gzip;q=1.001"], DEFAULT, None),
    (&["gzip;q=.5"], DEFAULT, None),
    (&["gzip;q=-0"], DEFAULT, None),
    (&["gzip;q="], DEFAULT, None),
    (&["gzip;q"], DEFAULT, None),
    (&["gzip;q=0.5;q=0.9, br;q=0.1"], DEFAULT, Some(B)),
    (&["gzip;q=0, gzip;q=abc"], DEFAULT, None),
    (&["gzip;q=1.0"], DEFAULT, Some(G)),
    (&["gzip;q=1."], DEFAULT, Some(G)),
    (&["gzip;q=0.001"], DEFAULT, Some(G)),
    (&["gzip;Q=0.5, br;q=0.4"], DEFAULT, Some(G)),
    // Parameters other than q are ignored; a malformed token voids its member.
    (&["gzip;level=1"], DEFAULT, Some(G)),
    (&["gz@ip, br;q=0.3"], DEFAULT, Some(B)),
    (&["gzip zstd"], DEFAULT, None),
    // Whitespace around members, `;` and `=`.
    (&["gzip ; q=0.5 , br ; q=0.4"], DEFAULT, Some(G)),
    (&["\tgzip\t,\tbr;q=0.1"], DEFAULT, Some(G)),
    (&["  br  "], DEFAULT, Some(B)),
    (&["gzip;q = 0.3, br;q=0.2"], DEFAULT, Some(G)),
    // Several field lines are one list.
    (&["gzip;q=0.5", "br;q=0.9"], DEFAULT, Some(B)),
    (&["gzip", ""], DEFAULT, Some(G)),
    (&["", "zstd"], DEFAULT, Some(Z)),
    // A coding listed twice keeps its lowest weight.
    (&["gzip", "gzip;q=0"], DEFAULT, None),
    (&["x-gzip;q=0, gzip"], DEFAULT, None),
    (&["br;q=0.9, br;q=0.2, gzip;q=0.5"], DEFAULT, Some(G)),
];

#[test]
fn negotiation_table() {
    let mut failures = Vec::new();
    for &(lines, preference, want) in TABLE {
        let values: Vec<HeaderValue> = lines
            .iter()
            .map(|l| HeaderValue::from_str(l).unwrap())
            .collect();
        let got = negotiate(&values, preference);
        if got != want {
            failures.push(format!(
                "{lines:?} with {preference:?}: got {got:?}, want {want:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn non_ascii_bytes_void_only_their_member() {
    let value = HeaderValue::from_bytes(b"\xffbr, gzip;q=0.5").unwrap();
    assert_eq!(negotiate([&value], DEFAULT), Some(G));
    let value = HeaderValue::from_bytes(b"br;q=0.\xe9").unwrap();
    assert_eq!(negotiate([&value], DEFAULT), None);
}

#[test]
fn long_hostile_values_do_not_panic() {
    let long = format!("{}gzip", ";".repeat(10_000));
    let many = "q=1;".repeat(5_000);
    for line in [long.as_str(), many.as_str(), ";;;,,,===", "*;*;*", "=,=;="] {
        let value = HeaderValue::from_str(line).unwrap();
        let _ = negotiate([&value], DEFAULT);
    }
    let value = HeaderValue::from_str(&long).unwrap();
    assert_eq!(
        negotiate([&value], DEFAULT),
        None,
        "an empty token voids the member"
    );
}
