//! `[[upstream]]` checks: servers, policies, `[upstream.tls]`.

use std::path::Path;

use crate::config::{Balance, Config, HashKey, UpstreamTarget};

fn parse(upstream: &str) -> Result<Config, String> {
    let text =
        format!("[[upstream]]\nname = \"app\"\n{upstream}\n\n[[route]]\nupstream = \"app\"\n");
    Config::parse(&text, "t.toml", Path::new(".")).map_err(|e| e.to_string())
}

#[test]
fn servers_weights_and_policies() {
    let c = parse(
        "servers = [\"http://10.0.0.1:80\", { url = \"http://10.0.0.2:80\", weight = 3, max_connections = 8 }]\n\
         balance = \"hash\"\nhash_key = \"cookie:session\"\n\
         [upstream.health]\npath = \"/healthz?deep=1\"\nexpect_status = \"200,204,300-399\"\n\
         [upstream.retry]\nattempts = 3\n",
    )
    .expect("valid");
    let u = &c.upstreams[0];
    let UpstreamTarget::Servers(s) = &u.target else {
        panic!("servers");
    };
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].weight, s[1].weight, s[1].max_connections),
        (1, 3, Some(8))
    );
    assert_eq!(
        u.balance,
        Balance::Hash(
            HashKey::Cookie("session".into()),
            crate::config::RingHash::Weir
        )
    );
    let h = u.health.as_ref().expect("health");
    assert_eq!(h.expect, vec![(200, 200), (204, 204), (300, 399)]);
    assert_eq!((h.rise, h.fall), (2, 3));
    assert_eq!(u.retry.attempts, 3);
    assert_eq!(u.outlier.consecutive_failures, 5);
}

#[test]
fn bad_groups_name_the_file_line_and_key() {
    for (text, line, key) in [
        (
            "url = \"http://a:1\"\nservers = [\"http://b:1\"]",
            4,
            "upstream[0].servers",
        ),
        ("servers = []", 3, "upstream[0].servers"),
        (
            "servers = [\"http://a:1\", \"http://a:1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [\"http://127.0.0.1:80\", \"http://127.0.0.1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [\"http://[::1]:1\", \"http://[0:0::1]:1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [\"https://Api.Example:443\", \"https://api.example\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [\"http://127.0.0.1:1\", \"http://[::ffff:127.0.0.1]:1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [\"http://example.com:1\", \"http://example.com.:1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        ("url = \"http://127.1:1\"", 3, "upstream[0].url"),
        ("url = \"http://2130706433:1\"", 3, "upstream[0].url"),
        ("url = \"http://0x7f000001:1\"", 3, "upstream[0].url"),
        ("url = \"http://127.0.0.01:1\"", 3, "upstream[0].url"),
        (
            "servers = [\"http://a:1/x\", \"http://b:1/y\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "servers = [{ url = \"http://a:1\", weight = 0 }]",
            3,
            "upstream[0].servers[0].weight",
        ),
        (
            "servers = [{ url = \"http://a:1\", wieght = 2 }]",
            3,
            "wieght",
        ),
        ("servers = [7]", 3, "upstream[0].servers"),
        (
            "url = \"http://a:1\"\nbalance = \"random\"",
            4,
            "upstream[0].balance",
        ),
        (
            "url = \"http://a:1\"\nbalance = \"hash\"",
            4,
            "upstream[0].hash_key",
        ),
        (
            "url = \"http://a:1\"\nbalance = \"hash\"\nhash_key = \"query:x\"",
            5,
            "upstream[0].hash_key",
        ),
        (
            "servers = [{ url = \"http://a:1\", weight = 1000 }, { url = \"http://b:1\", weight = 1000 }, \
             { url = \"http://c:1\", weight = 1000 }, { url = \"http://d:1\", weight = 1000 }, \
             { url = \"http://e:1\", weight = 97 }]\nbalance = \"hash\"\nhash_key = \"client_addr\"",
            4,
            "upstream[0].balance",
        ),
        (
            "url = \"http://a:1\"\nhash_key = \"client_addr\"",
            4,
            "upstream[0].hash_key",
        ),
        (
            "url = \"http://a:1\"\nhash_ring = \"ketama\"",
            4,
            "upstream[0].hash_ring",
        ),
        (
            "url = \"http://a:1\"\nbalance = \"hash\"\nhash_key = \"client_addr\"\nhash_ring = \"jump\"",
            6,
            "upstream[0].hash_ring",
        ),
        (
            "url = \"http://a:1\"\n[upstream.health]\npath = \"healthz\"",
            5,
            "upstream[0].health.path",
        ),
        (
            "url = \"http://a:1\"\n[upstream.health]\npath = \"/h\"\nexpect_status = \"200-100\"",
            6,
            "expect_status",
        ),
        (
            "url = \"http://a:1\"\n[upstream.health]\npath = \"/ok?x=1#frag\"",
            5,
            "upstream[0].health.path",
        ),
        (
            "url = \"http://a:1\"\n[upstream.health]\npath = \"/h\"\nexpect_status = \"100,101\"",
            6,
            "expect_status",
        ),
        (
            "url = \"http://a:1\"\n[upstream.health]\npath = \"/h\"\nexpect_status = \"199-299\"",
            6,
            "expect_status",
        ),
        (
            "url = \"http://a:1\"\n[upstream.retry]\nretry_body_bytes = 67108865",
            5,
            "upstream[0].retry.retry_body_bytes",
        ),
        (
            "url = \"http://a:1\"\n[upstream.retry]\nattempts = 11",
            5,
            "upstream[0].retry.attempts",
        ),
        (
            "url = \"http://a:1\"\n[upstream.outlier]\nfailure_statuses = \"5xx\"",
            5,
            "upstream[0].outlier.failure_statuses",
        ),
        (
            "url = \"http://a:1\"\n[upstream.outlier]\nmax_ejected_percent = 101",
            5,
            "max_ejected_percent",
        ),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.starts_with(&format!("t.toml:{line}:")), "{text}: {e}");
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn https_servers_get_tls_settings_and_http_ones_none() {
    let c = parse("servers = [\"https://10.0.0.1\", \"https://10.0.0.2:8443\"]\nprotocol = \"h2\"")
        .expect("valid");
    let u = &c.upstreams[0];
    let tls = u.tls.as_ref().expect("https: tls settings");
    assert!(tls.ca.is_none() && tls.server_name.is_none() && tls.client_cert.is_none());
    assert!(!tls.roots.is_empty(), "the system roots");
    assert_eq!(
        u.protocol,
        crate::config::Protocol::H2c,
        "\"h2\" is h2c's alias"
    );
    let c = parse("url = \"http://10.0.0.1\"").expect("valid");
    assert!(c.upstreams[0].tls.is_none());
}

#[test]
fn bad_upstream_tls_names_the_file_line_and_key() {
    for (text, line, key) in [
        (
            "servers = [\"https://a:1\", \"http://b:1\"]",
            3,
            "upstream[0].servers[1]",
        ),
        (
            "url = \"http://a:1\"\n[upstream.tls]\nserver_name = \"a\"",
            4,
            "upstream[0].tls",
        ),
        (
            "url = \"https://a:1\"\n[upstream.tls]\nserver_name = \"not a name\"",
            5,
            "upstream[0].tls.server_name",
        ),
        (
            "url = \"https://a:1\"\n[upstream.tls]\nkey = \"k.pem\"",
            5,
            "upstream[0].tls.cert",
        ),
        (
            "url = \"https://a:1\"\n[upstream.tls]\nca = \"no-such-ca.pem\"",
            5,
            "upstream[0].tls.ca",
        ),
        ("url = \"ftp://a:1\"", 3, "upstream[0].url"),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.starts_with(&format!("t.toml:{line}:")), "{text}: {e}");
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn one_https_server_in_two_upstreams_needs_the_same_tls_settings() {
    let text = "[[upstream]]\nname = \"a\"\nurl = \"https://10.0.0.1\"\n\n\
                [[upstream]]\nname = \"b\"\nurl = \"https://10.0.0.1\"\n[upstream.tls]\nserver_name = \"b.test\"\n\n\
                [[route]]\nupstream = \"a\"\n";
    let e = Config::parse(text, "t.toml", Path::new("."))
        .expect_err("two TLS setups for one server")
        .to_string();
    assert!(e.starts_with("t.toml:8:"), "{e}");
    assert!(e.contains("upstream[1].tls"), "{e}");
    let same = text.replace("[upstream.tls]\nserver_name = \"b.test\"\n", "");
    Config::parse(&same, "t.toml", Path::new(".")).expect("the same (default) settings");
}

#[test]
fn retry_body_bytes_takes_up_to_64_mib_and_health_statuses_from_200() {
    let c = parse("url = \"http://a:1\"\n[upstream.retry]\nretry_body_bytes = 67108864")
        .expect("64 MiB");
    assert_eq!(c.upstreams[0].retry.body_bytes, 64 << 20);
    let c = parse(
        "url = \"http://a:1\"\n[upstream.health]\npath = \"/h\"\nexpect_status = \"200,599\"",
    )
    .expect("200 and 599");
    let expect = c.upstreams[0].health.as_ref().map(|h| h.expect.clone());
    assert_eq!(expect, Some(vec![(200, 200), (599, 599)]));
}

#[test]
fn failure_statuses_default_to_every_5xx() {
    let c = parse("url = \"http://a:1\"").expect("default");
    assert_eq!(c.upstreams[0].outlier.failure_statuses, vec![(500, 599)]);
    let c = parse("url = \"http://a:1\"\n[upstream.outlier]\nfailure_statuses = \"502-504\"")
        .expect("gateway failures");
    assert_eq!(c.upstreams[0].outlier.failure_statuses, vec![(502, 504)]);
}
