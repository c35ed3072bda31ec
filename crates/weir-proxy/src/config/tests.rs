//! Tests of reading and validating config files.

use std::net::SocketAddr;
use std::path::Path;

use super::*;

fn err(text: &str) -> String {
    match Config::parse(text, "test.toml", Path::new(".")) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const OK: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n[[route]]\nupstream = \"app\"\n";

#[test]
fn minimal_config_is_valid_with_defaults() {
    let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
    assert_eq!(
        c.listeners.iter().map(|l| l.address).collect::<Vec<_>>(),
        vec!["127.0.0.1:8080".parse::<SocketAddr>().expect("addr")]
    );
    assert!(c.listeners[0].tls.is_none());
    assert_eq!(c.routes[0].path_prefix, "/");
    assert_eq!(c.server.via_pseudonym, "weir");
    assert_eq!(c.client.pool_max_idle_per_host, 32);
    assert_eq!(
        c.admin.map(|a| a.address.to_string()).as_deref(),
        Some("127.0.0.1:9901")
    );
}

#[test]
fn workers_default_to_the_cpus_and_take_1_to_1024() {
    let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
    assert_eq!(c.server.workers, default_workers());
    assert!(c.server.workers >= 1);
    for n in [1, 3, 1024] {
        let c = Config::parse(
            &format!("[server]\nworkers = {n}\n{OK}"),
            "t",
            Path::new("."),
        )
        .expect("valid");
        assert_eq!(c.server.workers, n);
    }
    for bad in ["0", "-1", "1025", "\"2\"", "1.5"] {
        let e = err(&format!("[server]\nworkers = {bad}\n{OK}"));
        assert!(
            e.starts_with("test.toml:2:") && e.contains("server.workers"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn access_log_is_stderr_off_or_a_path_beside_the_config() {
    let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
    assert_eq!(c.server.access_log, AccessLogTarget::Stderr);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("logs")).expect("mkdir");
    let parse = |value: &str| {
        Config::parse(
            &format!("[server]\naccess_log = {value}\n{OK}"),
            "test.toml",
            dir.path(),
        )
    };
    for (value, want) in [
        ("\"stderr\"", AccessLogTarget::Stderr),
        ("\"off\"", AccessLogTarget::Off),
        (
            "\"logs/access.log\"",
            AccessLogTarget::File(dir.path().join("logs/access.log")),
        ),
        (
            "\"access.log\"",
            AccessLogTarget::File(dir.path().join("access.log")),
        ),
    ] {
        let c = parse(value).expect("valid");
        assert_eq!(c.server.access_log, want, "{value}");
    }
    // Refused with file:line:key: what serve could not open for sure, and
    // near-keywords that would silently become file names.
    for (bad, why) in [
        ("\"\"", "empty"),
        ("false", "invalid type"),
        ("1", "invalid type"),
        ("\"OFF\"", "write \"off\" exactly"),
        ("\" stderr\"", "write \"stderr\" exactly"),
        ("\"logs \"", "white space"),
        ("\"a\\u0000b\"", "control characters"),
        ("\"logs\"", "is a directory"),
        ("\"missing/access.log\"", "does not exist"),
    ] {
        let e = match parse(bad) {
            Ok(_) => panic!("{bad} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.starts_with("test.toml:2:") && e.contains("server.access_log") && e.contains(why),
            "{bad}: {e}"
        );
    }
}

#[test]
fn admin_on_a_public_address_needs_allow_public() {
    for addr in ["0.0.0.0:9901", "192.0.2.7:9901", "[::]:9901"] {
        let e = err(&format!("{OK}\n[admin]\naddress = \"{addr}\"\n"));
        assert!(
            e.starts_with("test.toml:9:")
                && e.contains("admin.address")
                && e.contains("not a loopback address")
                && e.contains("allow_public = true"),
            "{addr}: {e}"
        );
        let c = Config::parse(
            &format!("{OK}\n[admin]\naddress = \"{addr}\"\nallow_public = true\n"),
            "t",
            Path::new("."),
        )
        .expect(addr);
        assert_eq!(c.admin.expect("enabled").address.to_string(), addr);
    }
    for addr in [
        "127.0.0.1:0",
        "127.3.4.5:9",
        "[::1]:9901",
        "[::ffff:127.0.0.1]:9",
    ] {
        Config::parse(
            &format!("{OK}\n[admin]\naddress = \"{addr}\"\n"),
            "t",
            Path::new("."),
        )
        .expect(addr);
    }
}

#[test]
fn admin_bad_address_or_key_names_the_key() {
    let e = err(&format!("{OK}\n[admin]\naddress = \"localhost:9901\"\n"));
    assert!(
        e.starts_with("test.toml:9:")
            && e.contains("admin.address")
            && e.contains("127.0.0.1:8080"),
        "{e}"
    );
    let e = err(&format!("{OK}\n[admin]\nenabled = \"yes\"\n"));
    assert!(
        e.starts_with("test.toml:9:") && e.contains("admin.enabled"),
        "{e}"
    );
    let e = err(&format!("{OK}\n[admin]\nadress = \"127.0.0.1:1\"\n"));
    assert!(e.starts_with("test.toml:9:") && e.contains("adress"), "{e}");
    let e = err(&format!(
        "[[listener]]\naddress = \"127.0.0.1:9000\"\n{OK}\n[admin]\naddress = \"127.0.0.1:9000\"\n"
    ));
    assert!(
        e.contains("admin.address") && e.contains("already a [[listener]]"),
        "{e}"
    );
}

#[test]
fn admin_can_be_disabled() {
    let c = Config::parse(
        &format!("{OK}\n[admin]\nenabled = false\naddress = \"0.0.0.0:1\"\n"),
        "t",
        Path::new("."),
    )
    .expect("valid");
    assert!(c.admin.is_none());
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = err(
        "[client]\nconect_timeout = \"1s\"\n[[upstream]]\nname=\"a\"\nurl=\"http://x\"\n[[route]]\nupstream=\"a\"\n",
    );
    assert!(e.starts_with("test.toml:2:"), "{e}");
    assert!(e.contains("conect_timeout"), "{e}");
}

#[test]
fn bad_duration_names_the_key() {
    let e = err(
        "[client]\nconnect_timeout = \"5 parsecs\"\n[[upstream]]\nname=\"a\"\nurl=\"http://x\"\n[[route]]\nupstream=\"a\"\n",
    );
    assert!(e.starts_with("test.toml:2:"), "{e}");
    assert!(e.contains("client.connect_timeout"), "{e}");
}

#[test]
fn dangling_upstream_reference_points_at_the_route() {
    let e = err(&format!(
        "{OK}\n[[route]]\npath_prefix = \"/x\"\nupstream = \"nope\"\n"
    ));
    assert!(e.starts_with("test.toml:10:"), "{e}");
    assert!(e.contains("route[1].upstream"), "{e}");
    assert!(e.contains("declared: app"), "{e}");
}

#[test]
fn a_scheme_other_than_http_or_https_is_refused_with_a_reason() {
    let e = err("[[upstream]]\nname=\"a\"\nurl=\"ftp://x\"\n[[route]]\nupstream=\"a\"\n");
    assert!(
        e.contains("upstream[0].url") && e.contains("not supported"),
        "{e}"
    );
}

#[test]
fn syntax_error_has_a_line() {
    let e = err("[[upstream]\nname = 1\n");
    assert!(e.starts_with("test.toml:1:"), "{e}");
    assert!(!e.contains("key"), "{e}");
}

#[test]
fn single_bracket_table_gets_a_hint() {
    let e = err("[listener]\naddress = \"127.0.0.1:1\"\n");
    assert!(e.contains("[[listener]]"), "{e}");
}

#[test]
fn listener_address_must_be_an_ip_and_unique() {
    let e = err(&format!("[[listener]]\naddress = \"localhost:80\"\n{OK}"));
    assert!(
        e.contains("listener[0].address") && e.contains("127.0.0.1:8080"),
        "{e}"
    );
    let e = err(&format!(
        "[[listener]]\naddress = \"127.0.0.1:9\"\n[[listener]]\naddress = \"127.0.0.1:9\"\n{OK}"
    ));
    assert!(
        e.starts_with("test.toml:4:") && e.contains("already a listener"),
        "{e}"
    );
}

fn with_url(url: &str) -> String {
    format!("[[upstream]]\nname=\"a\"\nurl=\"{url}\"\n[[route]]\nupstream=\"a\"\n")
}

fn with_route(line: &str) -> String {
    format!("{OK}\n[[route]]\nupstream = \"app\"\n{line}\n")
}

#[test]
fn duration_longer_than_seven_days_is_rejected_naming_the_key() {
    let e = err(&format!(
        "[server]\nbody_idle_timeout = \"500000000000y\"\n{OK}"
    ));
    assert!(e.starts_with("test.toml:2:"), "{e}");
    assert!(e.contains("server.body_idle_timeout"), "{e}");
    assert!(
        e.contains("duration \"500000000000y\" is longer than the maximum of 7 days"),
        "{e}"
    );
    let e = err(&format!("[client]\nconnect_timeout = \"7days 1ns\"\n{OK}"));
    assert!(
        e.contains("client.connect_timeout") && e.contains("maximum of 7 days"),
        "{e}"
    );
}

#[test]
fn seven_days_is_the_longest_accepted_duration() {
    let c = Config::parse(
        &format!("[client]\npool_idle_timeout = \"7d\"\n{OK}"),
        "t",
        Path::new("."),
    )
    .expect("valid");
    assert_eq!(c.client.pool_idle_timeout, super::duration::MAX);
}

#[test]
fn upstream_url_port_out_of_range_or_zero_is_rejected() {
    for url in [
        "http://127.0.0.1:99999",
        "http://127.0.0.1:65536",
        "http://127.0.0.1:0",
        "http://127.0.0.1:",
        "http://[::1]:70000",
    ] {
        let e = err(&with_url(url));
        assert!(
            e.starts_with("test.toml:3:") && e.contains("upstream[0].url") && e.contains("port"),
            "{url}: {e}"
        );
    }
    for url in ["http://127.0.0.1:65535", "http://[::1]:1", "http://[::1]"] {
        Config::parse(&with_url(url), "t", Path::new(".")).expect(url);
    }
}

#[test]
fn upstream_url_with_fragment_is_rejected() {
    for url in ["http://x/#frag", "http://x#", "http://x/base#a"] {
        let e = err(&with_url(url));
        assert!(
            e.contains("upstream[0].url") && e.contains("fragment"),
            "{url}: {e}"
        );
    }
}

#[test]
fn path_prefix_with_dot_segments_is_rejected() {
    for prefix in [
        "/a/../b",
        "/a/./b",
        "/..",
        "/a/.",
        "/a/%2e%2E/b",
        "/a/%2E",
        "/a/.%2e/",
    ] {
        let e = err(&with_route(&format!("path_prefix = \"{prefix}\"")));
        assert!(
            e.starts_with("test.toml:10:")
                && e.contains("route[1].path_prefix")
                && e.contains("could never match"),
            "{prefix}: {e}"
        );
    }
    // Dots inside a segment are ordinary characters.
    for prefix in ["/a.b", "/...", "/.well-known", "/v1..2"] {
        Config::parse(
            &with_route(&format!("path_prefix = \"{prefix}\"")),
            "t",
            Path::new("."),
        )
        .expect(prefix);
    }
}

#[test]
fn path_prefix_with_encoded_slash_or_backslash_is_rejected() {
    for prefix in ["/a%2fb", "/a%2Fb", "/a%5cb", "/a%5Cb", r"/a\\b"] {
        let e = err(&with_route(&format!("path_prefix = \"{prefix}\"")));
        assert!(
            e.contains("route[1].path_prefix") && e.contains("slash"),
            "{prefix}: {e}"
        );
    }
}

#[test]
fn route_host_trailing_dot_is_stripped() {
    let c =
        Config::parse(&with_route("host = \"Example.COM.\""), "t", Path::new(".")).expect("valid");
    assert_eq!(c.routes[1].host.as_deref(), Some("example.com"));
    let c = Config::parse(
        &with_route("host = \"example.com.:8080\""),
        "t",
        Path::new("."),
    )
    .expect("valid");
    assert_eq!(c.routes[1].host.as_deref(), Some("example.com"));
    // The same host with and without the dot is a duplicate route.
    let e = err(&format!(
        "{}\n[[route]]\nupstream = \"app\"\nhost = \"example.com\"\n",
        with_route("host = \"example.com.\"")
    ));
    assert!(e.contains("already declared"), "{e}");
}

#[test]
fn route_host_with_space_comma_userinfo_or_slash_is_rejected() {
    for host in [
        "a b",
        "a,b",
        "user@a",
        "a/b",
        "",
        ".",
        "a..b",
        "example.com..",
        "[::1",
        "[nope]",
        "a;b",
        "caf\u{e9}.example",
    ] {
        let e = err(&with_route(&format!("host = \"{host}\"")));
        assert!(
            e.starts_with("test.toml:10:")
                && e.contains("route[1].host")
                && e.contains("is not a host name"),
            "{host:?}: {e}"
        );
    }
    for (host, want) in [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]:80", "[::1]"),
        ("my_host-1.example", "my_host-1.example"),
    ] {
        let c = Config::parse(
            &with_route(&format!("host = \"{host}\"")),
            "t",
            Path::new("."),
        )
        .expect(host);
        assert_eq!(c.routes[1].host.as_deref(), Some(want));
    }
}

#[test]
fn format_duration_prints_one_unit_that_parses_back() {
    use std::time::Duration;
    for (d, want) in [
        (Duration::from_secs(90), "90s"),
        (Duration::from_secs(600), "600s"),
        (Duration::from_millis(250), "250ms"),
        (Duration::from_millis(1500), "1500ms"),
        (Duration::from_micros(1500), "1500us"),
        (Duration::from_nanos(7), "7ns"),
        (super::duration::MAX, "604800s"),
    ] {
        let text = crate::config::format_duration(d);
        assert_eq!(text, want);
        assert_eq!(humantime::parse_duration(&text).expect(want), d);
    }
}

/// A scratch directory for one test, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("weir-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn from_file_refuses_directories_fifos_and_devices() {
    let dir = Scratch::new("not-a-file");
    let e = Config::from_file(&dir.0).expect_err("a directory");
    assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    #[cfg(unix)]
    {
        let dev_zero = Path::new("/dev/zero");
        if dev_zero.exists() {
            let e = Config::from_file(dev_zero).expect_err("/dev/zero");
            assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
        }
        let fifo = dir.0.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if made {
            let e = Config::from_file(&fifo).expect_err("a FIFO");
            assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
            // A symlink is followed to what it names.
            let link = dir.0.join("link");
            std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
            let e = Config::from_file(&link).expect_err("a link to a FIFO");
            assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
        }
    }
    let e = Config::from_file(&dir.0.join("missing.toml")).expect_err("missing");
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
}

#[test]
fn from_file_refuses_a_file_over_one_mib() {
    let dir = Scratch::new("too-large");
    let path = dir.0.join("big.toml");
    let mut text = OK.to_owned();
    text.push_str(&"#".repeat((1 << 20) - OK.len()));
    std::fs::write(&path, &text).expect("write");
    Config::from_file(&path).expect("exactly 1 MiB is read");
    text.push('\n');
    std::fs::write(&path, &text).expect("write");
    let e = Config::from_file(&path).expect_err("over 1 MiB");
    assert!(
        matches!(
            e,
            ConfigError::TooLarge {
                limit_bytes: 1_048_576,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("1048576 bytes"), "{e}");
}

#[test]
fn from_file_names_the_line_of_non_utf8_text() {
    let dir = Scratch::new("non-utf8");
    let path = dir.0.join("latin1.toml");
    let mut bytes = OK.as_bytes().to_vec();
    bytes.extend_from_slice(b"# caf\xe9\n");
    std::fs::write(&path, &bytes).expect("write");
    let e = Config::from_file(&path).expect_err("not UTF-8");
    let text = e.to_string();
    assert!(
        matches!(
            e,
            ConfigError::Invalid {
                line: 7,
                column: 6,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("not valid UTF-8") && text.contains("0xe9"),
        "{text}"
    );
}

#[test]
fn strip_port_keeps_ipv6_brackets() {
    assert_eq!(strip_port("example.com:8080"), "example.com");
    assert_eq!(strip_port("[::1]:80"), "[::1]");
    assert_eq!(strip_port("[::1]"), "[::1]");
    assert_eq!(strip_port("example.com"), "example.com");
}

#[test]
fn a_duplicate_key_or_table_is_named_with_its_table() {
    let text = "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n\n\
                [[route]]\nupstream = \"a\"\nupstream = \"a\"\n";
    let e = Config::parse(text, "t.toml", Path::new("."))
        .expect_err("duplicate")
        .to_string();
    assert!(e.starts_with("t.toml:7:"), "{e}");
    assert!(e.contains("`upstream` is set twice in [[route]]"), "{e}");
    let e = Config::parse(
        "[server]\nworkers = 2\n[server]\n",
        "t.toml",
        Path::new("."),
    )
    .expect_err("duplicate table")
    .to_string();
    assert!(e.starts_with("t.toml:3:"), "{e}");
    assert!(e.contains("`server` is set twice"), "{e}");
}

#[test]
fn route_upgrade_takes_tokens_case_insensitively_and_names_a_bad_one() {
    let c = Config::parse(
        &with_route("path_prefix = \"/ws\"\nupgrade = [\"WebSocket\"]"),
        "t",
        Path::new("."),
    )
    .expect("valid");
    assert_eq!(c.routes[0].upgrade, Vec::<String>::new(), "default: none");
    assert_eq!(c.routes[1].upgrade, ["websocket"]);
    assert_eq!(
        c.server.upgrade_idle_timeout,
        std::time::Duration::from_secs(300)
    );
    let e = err(&with_route(
        "path_prefix = \"/ws\"\nupgrade = [\"web socket\"]",
    ));
    assert!(
        e.contains("test.toml:11:") && e.contains("key `route[1].upgrade[0]`"),
        "{e}"
    );
    assert!(e.contains("not an Upgrade protocol name"), "{e}");
    let twice = err(&with_route(
        "path_prefix = \"/ws\"\nupgrade = [\"websocket\", \"WEBSOCKET\"]",
    ));
    assert!(
        twice.contains("route[1].upgrade[1]") && twice.contains("twice"),
        "{twice}"
    );
    let h2c = err(&with_route("path_prefix = \"/ws\"\nupgrade = [\"H2C\"]"));
    assert!(h2c.contains("h2c cannot be tunnelled"), "{h2c}");
    let idle = Config::parse(
        &format!("[server]\nupgrade_idle_timeout = \"300ms\"\n{OK}"),
        "t",
        Path::new("."),
    )
    .expect("valid");
    assert_eq!(
        idle.server.upgrade_idle_timeout,
        std::time::Duration::from_millis(300)
    );
}

#[test]
fn protocol_defaults_to_http1_and_an_unknown_one_names_file_line_and_key() {
    let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
    assert_eq!(c.upstreams[0].protocol, Protocol::Http1);
    for (value, want) in [
        ("http1", Protocol::Http1),
        ("h2c", Protocol::H2c),
        ("h2", Protocol::H2c),
        ("auto", Protocol::Auto),
    ] {
        let text = OK.replace(
            "url = \"http://127.0.0.1:3000\"\n",
            &format!("url = \"http://127.0.0.1:3000\"\nprotocol = \"{value}\"\n"),
        );
        let c = Config::parse(&text, "t", Path::new(".")).expect("valid");
        assert_eq!(c.upstreams[0].protocol, want, "{value}");
    }
    let e = err(
        "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\nprotocol = \"h3\"\n[[route]]\nupstream = \"app\"\n",
    );
    assert!(e.starts_with("test.toml:4:"), "{e}");
    assert!(e.contains("upstream[0].protocol"), "{e}");
    assert!(e.contains("\"h3\"") && e.contains("h2c"), "{e}");
}
