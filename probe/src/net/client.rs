//! The request/response client: story 1's client, instrumented.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};

use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::{ConnId, EventKind, ReqId, RrSpec};
use socket2::{Domain, Protocol, Socket, Type};

use super::peers::{ConnTag, Peers};
use super::record::Recorder;
use super::{context, xor_in_place, LENGTH_PREFIX_BYTES};

/// Runs `spec`'s requests against `server`, recording every step. Stops at the first error;
/// everything recorded before it has been handed to the recorder's sink.
pub fn run(spec: &RrSpec, server: SocketAddr, peers: &Peers, rec: &mut Recorder) -> io::Result<()> {
    let size = spec.size_bytes as usize;
    // The request body: a recognisable pattern, so a wrong echo is caught below.
    let request: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut expected = request.clone();
    xor_in_place(&mut expected);
    let mut response = vec![0u8; size];
    let prefix = spec.size_bytes.to_be_bytes();

    let mut open: Option<(TcpStream, ConnId)> = None;
    let mut next_conn = 0u32;
    for index in 0..spec.requests {
        let req = ReqId(index);
        if spec.connects_before(index) {
            if let Some((stream, conn)) = open.take() {
                close(stream, conn, req, rec);
            }
            let conn = ConnId(next_conn);
            next_conn += 1;
            rec.record(rec.now_ns(), conn, req, EventKind::RequestStart);
            let stream = connect(
                spec,
                server,
                ConnTag {
                    conn,
                    first_req: req,
                },
                peers,
                rec,
            )?;
            open = Some((stream, conn));
        } else if let Some((_, conn)) = &open {
            rec.record(rec.now_ns(), *conn, req, EventKind::RequestStart);
        }
        let (stream, conn) = open
            .as_mut()
            .expect("connects_before(0) opened a connection");
        let conn = *conn;
        let what = |step: &str| format!("request {index}: client {step} on {server}");
        // Story 1's client: the length and the body as two writes.
        rec.write_all(stream, conn, req, &prefix)
            .map_err(|e| context(e, what("write")))?;
        rec.write_all(stream, conn, req, &request)
            .map_err(|e| context(e, what("write")))?;
        let mut answer_prefix = [0u8; LENGTH_PREFIX_BYTES];
        if !rec
            .read_exact(stream, conn, req, &mut answer_prefix)
            .map_err(|e| context(e, what("read")))?
        {
            return Err(closed_by_server(index, server));
        }
        let answer_len = u32::from_be_bytes(answer_prefix);
        if answer_len != spec.size_bytes || answer_len > MAX_BODY_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "request {index}: the server on {server} announced a {answer_len}-byte \
                     answer to a {}-byte request; is it an ackscope echo server?",
                    spec.size_bytes
                ),
            ));
        }
        if !rec
            .read_exact(stream, conn, req, &mut response)
            .map_err(|e| context(e, what("read")))?
        {
            return Err(closed_by_server(index, server));
        }
        rec.record(rec.now_ns(), conn, req, EventKind::RequestDone);
        rec.flush();
        if response != expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("request {index}: the answer from {server} is not the XORed request"),
            ));
        }
    }
    if let Some((stream, conn)) = open {
        close(stream, conn, ReqId(spec.requests.saturating_sub(1)), rec);
    }
    rec.flush();
    Ok(())
}

/// Opens a connection, registering its port first so the server can tag its side alike.
fn connect(
    spec: &RrSpec,
    server: SocketAddr,
    tag: ConnTag,
    peers: &Peers,
    rec: &mut Recorder,
) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| context(e, "client socket"))?;
    socket
        .set_tcp_nodelay(spec.nodelay.client)
        .map_err(|e| context(e, "set TCP_NODELAY"))?;
    socket
        .bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into())
        .map_err(|e| context(e, "client bind on 127.0.0.1"))?;
    let port = socket
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("client socket has no IP address"))?;
    peers.register(port, tag);
    let start_ns = rec.now_ns();
    let connected = socket.connect(&server.into());
    let done_ns = rec.now_ns();
    connected.map_err(|e| context(e, format!("client connect to {server}")))?;
    rec.record(start_ns, tag.conn, tag.first_req, EventKind::ConnectStart);
    rec.record(done_ns, tag.conn, tag.first_req, EventKind::Connected);
    Ok(socket.into())
}

fn close(stream: TcpStream, conn: ConnId, last_req: ReqId, rec: &mut Recorder) {
    drop(stream);
    rec.record(rec.now_ns(), conn, last_req, EventKind::Closed);
}

fn closed_by_server(index: u32, server: SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("request {index}: the server on {server} closed the connection before answering"),
    )
}
