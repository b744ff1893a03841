//! Watching the sockets of processes ackscope did not start: a service on this host, its
//! clients, whatever owns a port.
//!
//! A run measures its own sockets through their descriptors (`net`); a watched process's
//! descriptors are not ours, so what the kernel says about them comes from interfaces that
//! answer for any socket of the network namespace. For now that is [`sock_diag`]: every TCP
//! socket's addresses, state, owner and `tcp_info`, without privileges.

pub mod sock_diag;
