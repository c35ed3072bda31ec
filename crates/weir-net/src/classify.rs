//! What an `accept` error says about the next `accept` (the table in the
//! crate docs).

use std::io;

/// The kind of an `accept` error, for deciding what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// About the one connection being accepted (or a signal): the next
    /// `accept` may succeed, so try it at once.
    PerConnection,
    /// The process or the system is out of file descriptors (`EMFILE`,
    /// `ENFILE`), socket buffers (`ENOBUFS`) or memory (`ENOMEM`): retrying
    /// at once would fail again, so pause first.
    ResourceExhausted,
    /// An error `accept` on a TCP socket is not documented to return: treated
    /// like [`ErrorClass::ResourceExhausted`], since it may persist.
    Unexpected,
}

/// Classifies an error returned by [`tokio::net::TcpListener::accept`].
///
/// Decided by the OS error code where there is one (Unix: `libc`
/// constants), else by [`io::ErrorKind`].
#[must_use]
pub fn classify(err: &io::Error) -> ErrorClass {
    #[cfg(unix)]
    if let Some(code) = err.raw_os_error() {
        return classify_errno(code);
    }
    classify_kind(err.kind())
}

#[cfg(unix)]
fn classify_errno(code: i32) -> ErrorClass {
    match code {
        // accept(2), ERRORS; ECONNRESET where a BSD reports a reset peer so.
        libc::ECONNABORTED | libc::ECONNRESET | libc::EINTR | libc::EPERM | libc::EPROTO => {
            ErrorClass::PerConnection
        }
        // accept(2), NOTES, "Error handling": network errors already pending
        // on the new socket, to be treated like EAGAIN (TCP/IP's list).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        libc::ENETDOWN
        | libc::ENOPROTOOPT
        | libc::EHOSTDOWN
        | libc::ENONET
        | libc::EHOSTUNREACH
        | libc::EOPNOTSUPP
        | libc::ENETUNREACH => ErrorClass::PerConnection,
        // tokio waits for readiness again instead of returning it; harmless.
        libc::EAGAIN => ErrorClass::PerConnection,
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => ErrorClass::ResourceExhausted,
        _ => ErrorClass::Unexpected,
    }
}

/// For errors without an OS code, and on platforms without `libc`.
fn classify_kind(kind: io::ErrorKind) -> ErrorClass {
    use io::ErrorKind as K;
    match kind {
        K::ConnectionAborted
        | K::ConnectionReset
        | K::Interrupted
        | K::PermissionDenied
        | K::WouldBlock
        | K::NetworkDown
        | K::NetworkUnreachable
        | K::HostUnreachable => ErrorClass::PerConnection,
        K::OutOfMemory => ErrorClass::ResourceExhausted,
        _ => ErrorClass::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn os(code: i32) -> ErrorClass {
        classify(&io::Error::from_raw_os_error(code))
    }

    #[cfg(unix)]
    #[test]
    fn per_connection_errors_retry_at_once() {
        for code in [
            libc::ECONNABORTED,
            libc::ECONNRESET,
            libc::EINTR,
            libc::EPERM,
            libc::EPROTO,
        ] {
            assert_eq!(os(code), ErrorClass::PerConnection, "errno {code}");
        }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn pending_network_errors_on_linux_retry_at_once() {
        for code in [
            libc::ENETDOWN,
            libc::ENOPROTOOPT,
            libc::EHOSTDOWN,
            libc::ENONET,
            libc::EHOSTUNREACH,
            libc::EOPNOTSUPP,
            libc::ENETUNREACH,
        ] {
            assert_eq!(os(code), ErrorClass::PerConnection, "errno {code}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn exhaustion_backs_off() {
        for code in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert_eq!(os(code), ErrorClass::ResourceExhausted, "errno {code}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn listener_errors_are_unexpected_and_back_off_too() {
        for code in [libc::EBADF, libc::EINVAL, libc::ENOTSOCK, libc::EFAULT] {
            assert_eq!(os(code), ErrorClass::Unexpected, "errno {code}");
        }
    }

    #[test]
    fn errors_without_an_os_code_go_by_kind() {
        let kind = |k: io::ErrorKind| classify(&io::Error::from(k));
        assert_eq!(
            kind(io::ErrorKind::ConnectionAborted),
            ErrorClass::PerConnection
        );
        assert_eq!(
            kind(io::ErrorKind::ConnectionReset),
            ErrorClass::PerConnection
        );
        assert_eq!(
            kind(io::ErrorKind::OutOfMemory),
            ErrorClass::ResourceExhausted
        );
        assert_eq!(kind(io::ErrorKind::Other), ErrorClass::Unexpected);
        assert_eq!(
            classify(&io::Error::other("listener gone")),
            ErrorClass::Unexpected
        );
    }
}
