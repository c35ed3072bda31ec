//! Body types of the proxy, one file each, so that what they depend on
//! stays one way: [`idle`] (bodies read from a peer, with the idle
//! timeout) is below the access log and the cache; [`request`] and
//! [`response`] (the pipelines sent each way) are above them, and
//! [`replay`] keeps a request body for a retry.

pub mod idle;
pub mod limits;
pub mod replay;
pub mod request;
pub mod response;
