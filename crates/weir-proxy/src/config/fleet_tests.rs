//! Tests of `[fleet]` parsing (`config/fleet.rs`).

use std::path::Path;

use crate::config::{Config, FleetDiscovery, RingHash};

const BASE: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n[[route]]\nupstream = \"app\"\ncache = true\n\n";
const SECRET: &str = "secret = \"0123456789abcdef\"\n";

fn parse(fleet: &str) -> Result<Config, String> {
    Config::parse(
        &format!("{BASE}[fleet]\n{fleet}"),
        "test.toml",
        Path::new("."),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn a_static_fleet_and_a_dns_fleet_are_read() {
    let c = parse(&format!(
        "self = \"10.0.0.2:8080\"\npeers = [\"10.0.0.1:8080\", \"10.0.0.2:8080\"]\n{SECRET}peer_timeout = \"250ms\"\n"
    ))
    .expect("valid");
    let f = c.fleet.expect("a fleet");
    assert_eq!(f.self_addr.to_string(), "10.0.0.2:8080");
    assert_eq!(f.peer_timeout.as_millis(), 250);
    assert_eq!(f.ring, RingHash::Ketama, "nginx's ring by default");
    assert_eq!(f.balance_factor, None, "no bound on load by default");
    assert!(matches!(&f.discovery, FleetDiscovery::Static(p) if p.len() == 2));
    assert!(
        !format!("{f:?}").contains("0123456789abcdef"),
        "Debug hides the secret"
    );

    let c = parse(&format!(
        "self = \"10.0.0.2:8080\"\npeers_dns = \"weir-peers.ns.svc:8080\"\n{SECRET}\
         ring = \"weir\"\nhash_balance_factor = 125\n"
    ))
    .expect("valid");
    let f = c.fleet.as_ref().expect("a fleet");
    assert_eq!((f.ring, f.balance_factor), (RingHash::Weir, Some(125)));
    let k8s = parse(&format!(
        "self = \"10.0.0.2:8080\"\npeers_endpointslices = \"weir-peers\"\nnamespace = \"prod\"\n{SECRET}"
    ))
    .expect("valid");
    assert_eq!(
        k8s.fleet.as_ref().map(|f| &f.discovery),
        Some(&FleetDiscovery::EndpointSlices {
            service: "weir-peers".into(),
            namespace: Some("prod".into())
        })
    );
    assert_eq!((f.l1_bytes, f.l1_ttl.as_secs()), (0, 5), "no L1 by default");
    let f = c.fleet.expect("a fleet");
    assert_eq!(
        f.discovery,
        FleetDiscovery::Dns {
            name: "weir-peers.ns.svc:8080".into(),
            refresh: std::time::Duration::from_secs(5)
        }
    );
}

#[test]
fn self_reads_the_environment() {
    // A variable nobody sets.
    let c = parse(&format!(
        "self = \"${{WEIR_TEST_NO_SUCH_VARIABLE_XYZ}}:8080\"\npeers_dns = \"p:8080\"\n{SECRET}"
    ));
    let e = c.expect_err("unset variable");
    assert!(e.contains("test.toml:") && e.contains("fleet.self"), "{e}");
    assert!(e.contains("WEIR_TEST_NO_SUCH_VARIABLE_XYZ"), "{e}");
}

#[test]
fn bad_fleets_name_the_line_and_key() {
    let cases: [(&str, &str, &str); 14] = [
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"p:1\"\npeers_endpointslices = \"weir-peers\"\n",
            "fleet.peers_dns",
            "give one of",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers_endpointslices = \"Weir_Peers\"\n",
            "fleet.peers_endpointslices",
            "not a Kubernetes name",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"p:1\"\nnamespace = \"prod\"\n",
            "fleet.namespace",
            "goes with `peers_endpointslices`",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\nring = \"maglev\"\n",
            "fleet.ring",
            "unknown ring \"maglev\"",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\nhash_balance_factor = 100\n",
            "fleet.hash_balance_factor",
            "expected 101 to 1000",
        ),
        (
            "self = \"10.0.0.9:8080\"\npeers = [\"10.0.0.1:8080\"]\n",
            "fleet.self",
            "not one of `peers`",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\", \"10.0.0.1:8080\"]\n",
            "fleet.peers[1]",
            "listed twice",
        ),
        (
            "self = \"nope\"\npeers_dns = \"p:1\"\n",
            "fleet.self",
            "not an ip:port",
        ),
        ("self = \"10.0.0.1:8080\"\n", "fleet", "needs `peers`"),
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"no-port\"\n",
            "fleet.peers_dns",
            "name:port",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\npeers_dns = \"p:1\"\n",
            "fleet.peers_dns",
            "not both",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\nsecret = \"short\"\n",
            "fleet.secret",
            "at least 16",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\nsecret_file = \"/nonexistent/weir-secret\"\n",
            "fleet.secret_file",
            "cannot read /nonexistent/weir-secret: No such file or directory",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\nrate_timeout = \"1ns\"\n",
            "fleet.rate_timeout",
            "shorter than 1ms",
        ),
    ];
    for (text, key, says) in cases {
        let with_secret = if text.contains("secret") {
            text.to_owned()
        } else {
            format!("{text}{SECRET}")
        };
        let e = parse(&with_secret).expect_err(text);
        assert!(e.contains("test.toml:"), "{e}");
        assert!(e.contains(key), "{key}: {e}");
        assert!(e.contains(says), "{says}: {e}");
    }
    let e =
        parse("self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\n").expect_err("no secret");
    assert!(e.contains("needs `secret` or `secret_file`"), "{e}");
    let e = parse(&format!(
        "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\n{SECRET}peer = 1\n"
    ))
    .expect_err("unknown key");
    assert!(e.contains("peer"), "{e}");
    let e = parse(&format!(
        "self = \"0.0.0.0:8080\"\npeers_dns = \"p:8080\"\n{SECRET}"
    ))
    .expect_err("unspecified self");
    assert!(
        e.contains("fleet.self") && e.contains("cannot be reached"),
        "{e}"
    );
    let e = parse(&format!(
        "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\", \"10.0.0.2:0\"]\n{SECRET}"
    ))
    .expect_err("port 0");
    assert!(e.contains("fleet.peers[1]"), "{e}");
    let ok = parse(&format!(
        "self = \"[fd00::1]:8080\"\npeers_dns = \"p:8080\"\n{SECRET}"
    ));
    assert!(ok.is_ok(), "IPv6 in brackets: {ok:?}");
    for (text, key) in [
        (
            "self = \"127.0.0.8:8080\"\npeers = [\"127.0.0.8:8080\", \"[::ffff:127.0.0.8]:8080\"]\n",
            "listed twice",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"x:0\"\n",
            "fleet.peers_dns",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"http://x:8080\"\n",
            "fleet.peers_dns",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers_dns = \"x:8080\"\ndns_refresh = \"1ms\"\n",
            ":15: key `fleet.dns_refresh`: dns_refresh must be at least 100ms",
        ),
        (
            "self = \"10.0.0.1:8080\"\npeers = [\"10.0.0.1:8080\"]\ndns_refresh = \"10s\"\n",
            ":15: key `fleet.dns_refresh`: goes with `peers_dns`",
        ),
    ] {
        let e = parse(&format!("{text}{SECRET}")).expect_err(text);
        assert!(e.contains(key), "{key}: {e}");
    }
    // A FIFO as the secret file is refused at once, not waited on.
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("secret");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let text = format!(
            "self = \"10.0.0.1:8080\"\npeers_dns = \"x:8080\"\nsecret_file = \"{}\"\n",
            fifo.display()
        );
        let e = parse(&text).expect_err("a FIFO");
        assert!(
            e.contains("fleet.secret_file") && e.contains("is not a regular file (give the file"),
            "{e}"
        );
    }
}

#[test]
fn a_fleet_without_caching_routes_or_listening_elsewhere_is_warned_about() {
    let text = "[[listener]]\naddress = \"127.0.0.1:8080\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n[[route]]\nupstream = \"app\"\n\n[fleet]\nself = \"127.0.0.1:9999\"\npeers_dns = \"p:9999\"\nsecret = \"0123456789abcdef\"\n";
    let c = Config::parse(text, "test.toml", Path::new(".")).expect("valid");
    let w = c.warnings().join("\n");
    assert!(w.contains("no route has `cache = true`"), "{w}");
    assert!(
        w.contains("fleet.self 127.0.0.1:9999 is not the address of a [[listener]]"),
        "{w}"
    );
    let text = text
        .replace(
            "upstream = \"app\"\n\n[fleet]",
            "upstream = \"app\"\ncache = true\n\n[fleet]",
        )
        .replace("127.0.0.1:9999", "127.0.0.1:8080");
    let c = Config::parse(&text, "test.toml", Path::new(".")).expect("valid");
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    // A peer_timeout the client's response-head deadline cuts short.
    let slow = text.replace("[fleet]\n", "[fleet]\npeer_timeout = \"45s\"\n");
    let c = Config::parse(&slow, "test.toml", Path::new(".")).expect("valid");
    let w = c.warnings().join("\n");
    assert!(
        w.contains(
            "fleet.peer_timeout (45s) is longer than [client] response_header_timeout (30s)"
        ),
        "{w}"
    );
}
