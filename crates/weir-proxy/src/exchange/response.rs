//! The last phases of every forwarded response, upstream or cached or
//! composed: the route's transforms, the body log and the access log stage
//! ([`Exchange::respond`]).

use http::{Response, StatusCode};
use weir_stream::body::SourceBody;
use weir_stream::{TransformExt as _, pull};
use weir_transform::chain::ResponseChain;

use super::context::Exchange;
use crate::access_log::ResponseLog;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::body_log::{BodyLog, Direction};
use crate::cache::Hit;
use crate::outcome::Outcome;

impl Exchange<'_> {
    /// A response the cache answers (a hit, a collapsed fill, a refreshed
    /// or stale entry).
    pub(crate) fn respond_from_cache(self, hit: Hit) -> Response<ResponseBody> {
        let Hit { head, body, empty } = hit;
        let no_body = self.head_only || empty;
        let source = if no_body {
            ResponseSource::empty()
        } else {
            ResponseSource::Cache(body)
        };
        self.respond(head, source, no_body)
    }

    /// The last phases of every forwarded response: the route's transforms
    /// (planned on the final head; a `HEAD` or `304` gets their head edits,
    /// the same fields as the `GET` or `200` it stands for, and no stage),
    /// the body log, and the access log stage; the record takes the final
    /// status.
    pub(crate) fn respond(
        mut self,
        mut parts: http::response::Parts,
        source: ResponseSource,
        no_body: bool,
    ) -> Response<ResponseBody> {
        let status = parts.status;
        self.record.status = status.as_u16();
        let route = self.target.route;
        let plan_head = !no_body || self.head_only || status == StatusCode::NOT_MODIFIED;
        let chain = match &self.transforms {
            Some(ask) if plan_head => {
                route
                    .transforms
                    .plan(&ask.method, &ask.headers, status, &mut parts.headers)
            }
            _ => ResponseChain::default(),
        };
        let body_log = match route.body_log {
            Some(spec) if !no_body => BodyLog::capture(
                spec.response_bytes,
                Direction::Response,
                self.record.method(),
                &self.target.path,
            ),
            _ => BodyLog::off(),
        };
        let log = ResponseLog::new(self.record, Outcome::Ok, !no_body);
        Response::from_parts(
            parts,
            SourceBody::new(pull(source, body_log.then(chain).then(log))),
        )
    }
}
