//! Weir's ketama ring against nginx's own (`hash ... consistent`, Debian's
//! nginx): the same keys go to the same servers.
//!
//! Pinned: an upstream with `balance = "hash"` and `hash_ring = "ketama"`
//! picks, for every key, the server nginx picks from the same list; and
//! an nginx in front of a `[fleet]` of three replicas, hashing the cache
//! key the way the fleet does, sends every request straight to its owner,
//! so no replica forwards any.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// A server that answers every request with `name`.
async fn named_server(name: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(
                    move |_req: http::Request<hyper::body::Incoming>| async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(name),
                        )))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The body of a `GET {url}` with `X-Key: {key}` and `Host: site.test`.
async fn body_for(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    url: &str,
    key: &str,
) -> String {
    let req = http::Request::get(url)
        .header("x-key", key)
        .header(http::header::HOST, "site.test")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = client.request(req).await.expect("response");
    assert_eq!(resp.status(), 200, "{url} {key}");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ketama_upstream_picks_the_server_nginx_picks_for_every_key() {
    let names = ["one", "two", "three", "four"];
    let mut servers = Vec::new();
    for n in names {
        servers.push(named_server(n).await);
    }
    // nginx and Weir name the servers alike: `ip:port`, weights 1 and 2.
    let weights = [1, 2, 1, 1];
    let nginx_servers: String = servers
        .iter()
        .zip(weights)
        .map(|(s, w)| format!("        server {s} weight={w};\n"))
        .collect();
    let Some(nginx) = Nginx::start_with(&format!(
        "    upstream backends {{\n        hash $http_x_key consistent;\n{nginx_servers}    }}\n\
         \x20   server {{\n        listen 127.0.0.1:{{port}};\n        location / {{ proxy_pass http://backends; }}\n    }}\n"
    )) else {
        return;
    };
    let weir_servers: Vec<String> = servers
        .iter()
        .zip(weights)
        .map(|(s, w)| format!("{{ url = \"http://{s}\", weight = {w} }}"))
        .collect();
    let weir = WeirProcess::start(&format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n\
         [[upstream]]\nname = \"backends\"\nservers = [{}]\n\
         balance = \"hash\"\nhash_key = \"header:x-key\"\nhash_ring = \"ketama\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"backends\"\n",
        weir_servers.join(", ")
    ));
    let client = client(false);
    let mut counts = std::collections::HashMap::new();
    for k in 0..400 {
        let key = format!("user-{k}");
        let by_nginx = body_for(&client, &format!("http://{}/", nginx.addr), &key).await;
        let by_weir = body_for(&client, &weir.url("/"), &key).await;
        assert_eq!(by_weir, by_nginx, "key {key}");
        *counts.entry(by_weir).or_insert(0) += 1;
    }
    // Every server owns some keys; "two" (weight 2) about twice the others.
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(
        counts["two"] > counts["one"] && counts["two"] > counts["four"],
        "{counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_in_front_of_a_ketama_fleet_sends_each_request_to_its_owner() {
    let origin = start_origin().await;
    let port = free_port();
    let addrs: Vec<SocketAddr> = [1, 2, 3]
        .iter()
        .map(|&i| SocketAddr::from(([127, 0, 0, i], port)))
        .collect();
    let peers: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
    let replicas: Vec<WeirProcess> = addrs
        .iter()
        .map(|&a| {
            WeirProcess::start_at(
                a,
                &format!(
                    "[[listener]]\naddress = \"{a}\"\n\n[admin]\naddress = \"{}:0\"\n\n\
                     [[upstream]]\nname = \"origin\"\nurl = \"http://{}\"\n\n\
                     [[route]]\npath_prefix = \"/\"\nupstream = \"origin\"\ncache = true\n\n\
                     [fleet]\nself = \"{a}\"\npeers = [{}]\nsecret = \"ketama-test-secret-0123456\"\n",
                    a.ip(),
                    origin.addr,
                    peers.join(", ")
                ),
            )
        })
        .collect();
    let servers: String = addrs
        .iter()
        .map(|a| format!("        server {a};\n"))
        .collect();
    // The fleet's cache key: "GET http://" host path ["?" query].
    let Some(nginx) = Nginx::start_with(&format!(
        "    upstream fleet {{\n        hash \"GET http://$host$request_uri\" consistent;\n{servers}    }}\n\
         \x20   server {{\n        listen 127.0.0.1:{{port}};\n        location / {{\n\
         \x20           proxy_set_header Host $host;\n            proxy_pass http://fleet;\n        }}\n    }}\n"
    )) else {
        return;
    };
    let client = client(false);
    for k in 0..300 {
        let url = format!("http://{}/bytes/{}", nginx.addr, 10 + k);
        let req = http::Request::get(url)
            .header(http::header::HOST, "site.test")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = client.request(req).await.expect("response");
        assert_eq!(resp.status(), 200, "key {k}");
        resp.into_body().collect().await.expect("body");
    }
    let mut owned = Vec::new();
    for r in &replicas {
        let (_, _, body) = get(&format!("http://{}/metrics", r.admin_addr()), false).await;
        let text = String::from_utf8_lossy(&body).into_owned();
        let sample = |result: &str| -> u64 {
            let prefix = format!("weir_fleet_requests_total{{result=\"{result}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
                .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
        };
        assert_eq!(
            sample("forwarded"),
            0,
            "nginx sent {} a request it does not own",
            r.addr
        );
        owned.push(sample("owner"));
    }
    assert_eq!(owned.iter().sum::<u64>(), 300, "{owned:?}");
    assert!(
        owned.iter().all(|&n| n > 50),
        "each replica owns about a third: {owned:?}"
    );
}
