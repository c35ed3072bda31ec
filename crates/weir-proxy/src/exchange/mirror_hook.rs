//! The mirror hook of the upstream request phase: a copy of the request,
//! its body a secondary branch of the client's, sent to the route's shadow
//! upstream from a task of its own (see [`crate::mirror`]).

use std::sync::Arc;

use http::{Request, Version};
use http_body_util::{Either, Empty};
use tokio::sync::OwnedSemaphorePermit;
use weir_stream::{ConsumerOptions, Share, ShareOptions, TransformExt as _, pull, share};

use crate::access_log::RequestTally;
use crate::body::idle::ClientBody;
use crate::body::request::{Outgoing, RequestBody, RequestSource};
use crate::body_log::BodyLog;
use crate::config::Protocol;
use crate::mirror::Mirror;
use crate::proxy::Proxy;
use crate::route::Route;

/// A mirror copy that got a slot; its body, if any, is split off the
/// client's with [`Admitted::split`].
pub(crate) struct Admitted<'p> {
    mirror: &'p Mirror,
    permit: OwnedSemaphorePermit,
    body: Option<RequestSource>,
    share: Option<Share<ClientBody>>,
}

/// The route's mirror, if it has one and one of its `max_in_flight` slots
/// is free (else the copy is counted as `skipped`).
pub(crate) fn admit<'p>(proxy: &'p Proxy, route: &Route) -> Option<Admitted<'p>> {
    let mirror = proxy.mirrors.get(route.index)?.as_ref()?;
    let permit = mirror.admit()?;
    Some(Admitted {
        mirror,
        permit,
        body: None,
        share: None,
    })
}

impl Admitted<'_> {
    /// Shares the client's body between the upstream request (the primary
    /// consumer, returned) and the copy (a secondary one that is detached
    /// when it falls `hwm` chunks or 1 MiB behind).
    pub(crate) fn split(&mut self, client: ClientBody) -> RequestSource {
        let shared = share(
            client,
            ShareOptions {
                hwm_chunks: self.mirror.spec.hwm,
                ..ShareOptions::default()
            },
        );
        let primary = shared.consumer(ConsumerOptions::primary());
        self.body = Some(RequestSource::Shared(shared.consumer(Mirror::branch())));
        self.share = Some(shared);
        RequestSource::Shared(primary)
    }

    /// Sends the copy of `parts` (the upstream request's head, already
    /// rewritten) to the mirror, at `forward_path` with the same query;
    /// over HTTP/2 when the mirror's upstream says `protocol = "h2c"`,
    /// else over HTTP/1.1.
    pub(crate) fn send(self, parts: &http::request::Parts, forward_path: &str, proxy: &Proxy) {
        let m = self.mirror;
        let body = match self.body {
            Some(source) => Outgoing::once(
                pull(
                    source,
                    BodyLog::off().then(RequestTally::new(Arc::default())),
                ),
                weir_stream::CancelToken::new(),
            ),
            None => Either::Right(Empty::new()),
        };
        let mut req: Request<RequestBody> = Request::new(body);
        *req.method_mut() = parts.method.clone();
        // The primary's URI parts are valid, so this only fails on a path
        // the primary request could not have had either.
        *req.uri_mut() = m
            .url
            .request_uri(forward_path, parts.uri.query())
            .unwrap_or_else(|| parts.uri.clone());
        *req.headers_mut() = parts.headers.clone();
        let shadow = proxy.upstreams.get(m.spec.upstream);
        if shadow.is_some_and(|u| u.group.protocol == Protocol::H2c) {
            *req.version_mut() = Version::HTTP_2;
        }
        m.spawn(proxy.client.clone(), req, self.share, self.permit);
    }
}
