//! Socket options of one side, applied when its socket is set up.

use std::io;

use ackscope_shared::{BulkSpec, RrSpec, Side, WritePattern};
use socket2::Socket;

use super::context;

/// What one side of a run sets on its sockets and how it writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideOptions {
    pub side_name: &'static str,
    pub write: WritePattern,
    pub nodelay: bool,
    pub cork: bool,
    pub quickack: bool,
    pub sndbuf: Option<u32>,
    pub rcvbuf: Option<u32>,
    pub congestion: Option<String>,
}

impl SideOptions {
    pub fn rr(spec: &RrSpec, side: Side) -> SideOptions {
        SideOptions {
            side_name: side.name(),
            write: *spec.write.get(side),
            nodelay: *spec.nodelay.get(side),
            cork: *spec.cork.get(side),
            quickack: *spec.quickack.get(side),
            sndbuf: *spec.sndbuf.get(side),
            rcvbuf: *spec.rcvbuf.get(side),
            congestion: spec.congestion.get(side).clone(),
        }
    }

    pub fn bulk(spec: &BulkSpec, side: Side) -> SideOptions {
        SideOptions {
            side_name: side.name(),
            sndbuf: *spec.sndbuf.get(side),
            rcvbuf: *spec.rcvbuf.get(side),
            congestion: spec.congestion.get(side).clone(),
            ..SideOptions::default()
        }
    }

    /// Applies the options that must be set before `connect()` or `listen()`: socket buffers
    /// (they size the window scale negotiated in the handshake; accepted sockets inherit them
    /// from the listener), TCP_NODELAY and the congestion control.
    pub fn apply_before_handshake(&self, socket: &Socket) -> io::Result<()> {
        let side = self.side_name;
        socket
            .set_tcp_nodelay(self.nodelay)
            .map_err(|e| context(e, format!("TCP_NODELAY on the {side}")))?;
        if let Some(bytes) = self.sndbuf {
            socket
                .set_send_buffer_size(bytes as usize)
                .map_err(|e| context(e, format!("SO_SNDBUF {bytes} on the {side}")))?;
        }
        if let Some(bytes) = self.rcvbuf {
            socket
                .set_recv_buffer_size(bytes as usize)
                .map_err(|e| context(e, format!("SO_RCVBUF {bytes} on the {side}")))?;
        }
        if let Some(name) = &self.congestion {
            socket.set_tcp_congestion(name.as_bytes()).map_err(|e| {
                let available =
                    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                        .unwrap_or_default();
                context(
                    e,
                    format!(
                        "TCP_CONGESTION {name} on the {side} (this kernel offers: {})",
                        available.trim()
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// The buffer sizes the kernel actually set (what getsockopt says).
pub fn effective_buffers(socket: &Socket) -> io::Result<(u32, u32)> {
    let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok((clamp(socket.send_buffer_size()?), clamp(socket.recv_buffer_size()?)))
}
