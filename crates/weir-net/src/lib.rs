//! Weir's accept loop, shared by every listener: the proxy's listeners, the
//! admin listener and the built-in origin.
//!
//! [`AcceptLoop`] accepts connections on a [`tokio::net::TcpListener`] until
//! a stop future resolves, sets `TCP_NODELAY` on each accepted socket (unless
//! told not to), and hands each `(TcpStream, SocketAddr)` to a handler. It
//! never ends on an accept error; what it does instead is one rule, the same
//! for every listener:
//!
//! | `accept` error | what it means | the loop |
//! |---|---|---|
//! | `ECONNABORTED`, `ECONNRESET`, `EINTR`, `EPERM`, `EPROTO`; on Linux also `ENETDOWN`, `ENOPROTOOPT`, `EHOSTDOWN`, `ENONET`, `EHOSTUNREACH`, `EOPNOTSUPP`, `ENETUNREACH` | the one connection being accepted failed (the peer gave up, a firewall rule forbids it, a network error was already pending on it) or a signal interrupted the call; the next queued connection may be fine | accepts again at once, logs at debug |
//! | `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM` | the process or the system is out of file descriptors, socket buffers or memory; the connection stays queued and accepting again at once would fail again | logs a warning and pauses, 10 ms doubling to 1 s, back to 10 ms after a success ([`Backoff`]) |
//! | anything else | not documented for `accept` on a TCP socket | the same as exhaustion: it may persist, and a pause costs little |
//!
//! So a listener never spins on a failing `accept` and never stops serving
//! because of one. [`classify`] is the table's first two columns;
//! [`Backoff`] the pause.
//!
//! Sources: the Linux man page accept(2), ERRORS and NOTES ("Linux accept()
//! passes already-pending network errors on the new socket as an error code
//! from accept() … the application should detect the network errors defined
//! for the protocol after accept() and treat them like EAGAIN by retrying";
//! the list for TCP/IP is the Linux row above) and POSIX `accept()`
//! (`ECONNABORTED`, `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`, `EPROTO`). The
//! split into "per connection: retry now" and "anything else: pause" is the
//! one hyper 0.14's `AddrIncoming` and tk-listen make; they pause a fixed
//! second, Weir starts short and grows the pause so that a brief shortage
//! costs little latency and a lasting one costs little CPU and log.

mod accept;
mod backoff;
mod classify;

pub use accept::AcceptLoop;
pub use backoff::Backoff;
pub use classify::{ErrorClass, classify};
