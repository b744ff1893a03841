//! `cargo xtask bench memory --hostile`: what peers that never read, or never finish saying who
//! they are, cost the release probe's servers in memory.
//!
//! - The UI server (`ackscope --port P`): a run of `--count` requests (100,000 unless told)
//!   started from a page as the browser starts one, read to its end; then 10, then 100 more
//!   WebSocket pages that open and never read a byte. Its RSS with 0, 10 and 100 of them: a
//!   page should cost its cursor and one message on its way, not a copy of the session.
//! - The control port (`ackscope server`'s echo port, which also takes remote probes' control
//!   connections): 1,000 connections that open with the control magic and start a Hello, then
//!   stall, never giving the token. Twice, each on a fresh server: a Hello whose length prefix
//!   says 16 MiB (the most any control message may be) followed by 64 KiB of it, and a Hello
//!   whose prefix says 400 bytes followed by 200 of them. Its RSS before and after.
//!
//! The pages speak just enough WebSocket (RFC 6455) over a `TcpStream` to be let in and to
//! start the run: xtask has no WebSocket crate, and a page that never reads needs none.
//! Like the other benchmarks this measures: a missed target is printed, the exit code stays 0.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::spec::MAX_BROWSER_REQUESTS;
use ackscope_shared::wire::{self, ToBrowser, ToProbe};
use ackscope_shared::{PerSide, RrSpec, Scenario};

use crate::bench::met_or_missed;
use crate::setup;
use crate::steps::Steps;

/// 100 idle pages add less than this to the UI server.
const IDLE_PAGES_TARGET_MB: f64 = 50.0;
/// 1,000 stalled Hellos add less than this to `ackscope server`.
const STALLED_HELLOS_TARGET_MB: f64 = 20.0;
const STALLED_HELLOS: usize = 1000;
/// Descriptors the servers and this program need: the connections and their own.
const FILES_NEEDED: u64 = 4096;

/// `bench memory --hostile`, the UI server's run of `count` requests.
pub(crate) fn run(count: u32) -> Result<(), String> {
    let mut steps = Steps::new(9);
    setup::ensure_build_tools(&mut steps)?;
    crate::build_web(&mut steps)?;
    crate::build_probe(&mut steps)?;
    // The servers started below inherit it.
    raise_file_limit(FILES_NEEDED)?;

    steps.start(&format!(
        "the UI server: a {count}-request run started from a page, read to its end"
    ));
    let ui = Server::start(
        Command::new(setup::probe_binary()).args(["--port", &free_port()?.to_string()]),
    )?;
    let addr = ui.address("http://")?;
    let (events, stream_bytes) = start_and_read_a_run(&addr, count)?;
    let alone_kb = settled_rss_kb(ui.pid())?;
    steps.done(&format!("{events} events, {:.1} MB on the WebSocket", mb(stream_bytes / 1024)));

    steps.start("10, then 100 pages that open the WebSocket and never read");
    let mut idle = Vec::new();
    let mut rss_kb = Vec::new();
    for pages in [10, 100] {
        while idle.len() < pages {
            idle.push(open_page(&addr)?);
        }
        rss_kb.push(settled_rss_kb(ui.pid())?);
    }
    drop(idle);
    drop(ui);
    steps.done("measured");

    let mut held = Vec::new();
    for hello in [StalledHello::Huge, StalledHello::Short] {
        steps.start(&format!(
            "ackscope server: {STALLED_HELLOS} connections that start a Hello ({}) and stall",
            hello.describe()
        ));
        held.push((hello, stalled_hellos(hello)?));
        steps.done("measured");
    }

    let (ten, hundred) = (rss_kb[0], rss_kb[1]);
    let added_mb = mb(hundred.saturating_sub(alone_kb));
    println!(
        "\nmemory ui_rss_mb={:.1} with_10_idle_pages_mb={:.1} with_100_idle_pages_mb={:.1} \
         events={events} stream_mb={:.1} per_idle_page_kb={:.0}",
        mb(alone_kb),
        mb(ten),
        mb(hundred),
        mb(stream_bytes / 1024),
        hundred.saturating_sub(alone_kb) as f64 / 100.0
    );
    println!(
        "  100 idle pages add < {IDLE_PAGES_TARGET_MB} MB ({added_mb:.1}):{}",
        met_or_missed(added_mb < IDLE_PAGES_TARGET_MB)
    );
    for (hello, cost) in held {
        let added_mb = mb(cost.after_kb.saturating_sub(cost.before_kb));
        println!(
            "memory control_rss_mb={:.1} with_{STALLED_HELLOS}_{}_mb={:.1} still_open={}",
            mb(cost.before_kb),
            hello.name(),
            mb(cost.after_kb),
            cost.still_open
        );
        println!(
            "  {STALLED_HELLOS} stalled Hellos ({}) add < {STALLED_HELLOS_TARGET_MB} MB \
             ({added_mb:.1}):{}",
            hello.describe(),
            met_or_missed(added_mb < STALLED_HELLOS_TARGET_MB)
        );
    }
    Ok(())
}

/// The range `bench memory --hostile --count N` takes: a run started from a page makes at most
/// this many requests.
pub(crate) const MAX_COUNT: u32 = MAX_BROWSER_REQUESTS;

/// A control connection that starts its Hello and stops.
#[derive(Clone, Copy)]
enum StalledHello {
    /// The length prefix of the largest control message, then 64 KiB of it.
    Huge,
    /// A Hello's usual few hundred bytes announced, half of them sent.
    Short,
}

impl StalledHello {
    fn name(self) -> &'static str {
        match self {
            StalledHello::Huge => "stalled_16mib_hellos",
            StalledHello::Short => "stalled_short_hellos",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            StalledHello::Huge => "16 MiB announced, 64 KiB sent",
            StalledHello::Short => "400 bytes announced, 200 sent",
        }
    }

    /// What the connection sends before it stalls.
    fn opening(self) -> Vec<u8> {
        let (announced, sent) = match self {
            StalledHello::Huge => (wire::MAX_MESSAGE_BYTES, 64 << 10),
            StalledHello::Short => (400, 200),
        };
        let mut opening = ackscope_shared::control::CONTROL_MAGIC.to_vec();
        opening.extend((announced as u32).to_le_bytes());
        // The Hello's first field, the protocol version, then anything: it never ends.
        opening.push(wire::PROTOCOL_VERSION as u8);
        opening.resize(8 + sent, b'x');
        opening
    }
}

/// `ackscope server`'s RSS before and after the connections, and how many of them it still held
/// open at the end (it may refuse and close them).
struct HelloCost {
    before_kb: u64,
    after_kb: u64,
    still_open: usize,
}

fn stalled_hellos(hello: StalledHello) -> Result<HelloCost, String> {
    let server = Server::start(Command::new(setup::probe_binary()).args([
        "server",
        "--listen",
        "127.0.0.1:0",
    ]))?;
    let addr = server.address("127.0.0.1:")?;
    let before_kb = settled_rss_kb(server.pid())?;
    let opening = hello.opening();
    let mut connections = Vec::with_capacity(STALLED_HELLOS);
    for _ in 0..STALLED_HELLOS {
        let mut stream = TcpStream::connect(&addr)
            .map_err(|e| format!("connecting to ackscope server on {addr}: {e}"))?;
        stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        // A server that closed the connection at once, or stopped reading, is measured as it is.
        let _ = stream.write_all(&opening);
        connections.push(stream);
    }
    let after_kb = settled_rss_kb(server.pid())?;
    let still_open = connections.iter().filter(|stream| is_open(stream)).count();
    Ok(HelloCost { before_kb, after_kb, still_open })
}

/// Whether the server still holds `stream` open: a read finds nothing yet rather than its end
/// (a refusal it sent counts as closed once the end follows it).
fn is_open(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut buffer = [0u8; 4096];
    let mut reader = stream;
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

/// A page starts a run of `count` requests and reads the stream to the run's end: its events
/// and the bytes of every message.
fn start_and_read_a_run(addr: &str, count: u32) -> Result<(u64, u64), String> {
    let mut page = open_page(addr)?;
    page.set_read_timeout(Some(Duration::from_secs(300))).map_err(|e| e.to_string())?;
    let spec =
        Scenario::Rr(RrSpec { requests: count, nodelay: PerSide::both(true), ..RrSpec::default() });
    let start = wire::encode(&ToProbe::StartRun { spec });
    page.write_all(&client_frame(&start)).map_err(|e| format!("starting the run: {e}"))?;
    let (mut events, mut bytes) = (0u64, 0u64);
    loop {
        let payload = read_binary_message(&mut page)
            .map_err(|e| format!("reading the run from the UI server: {e}"))?;
        bytes += payload.len() as u64;
        match wire::decode::<ToBrowser>(&payload) {
            Ok(ToBrowser::Events { events: batch, .. }) => events += batch.len() as u64,
            Ok(ToBrowser::RunFinished { .. }) => return Ok((events, bytes)),
            Ok(ToBrowser::Rejected { reason }) => {
                return Err(format!("the UI server refused the run: {reason}"))
            }
            Ok(_) => {}
            Err(e) => return Err(format!("a message from the UI server did not decode: {e}")),
        }
    }
}

/// The UI server's WebSocket, opened as its own page opens it (its Origin), the handshake's
/// answer read and nothing after it.
fn open_page(addr: &str) -> Result<TcpStream, String> {
    let mut stream =
        TcpStream::connect(addr).map_err(|e| format!("connecting to the UI server: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    )
    .map_err(|e| format!("asking for the WebSocket: {e}"))?;
    // Byte by byte, so that nothing past the answer's head is read.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        stream.read_exact(&mut byte).map_err(|e| format!("the WebSocket's answer: {e}"))?;
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.1 101") {
        return Err(format!("the UI server did not open the WebSocket:\n{head}"));
    }
    Ok(stream)
}

/// One binary WebSocket message from a client: final, masked (every client frame is).
fn client_frame(payload: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x5a, 0xc3, 0x17, 0x8e];
    let mut frame = vec![0x82];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len @ 126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend((len as u16).to_be_bytes());
        }
        len => {
            frame.push(0x80 | 127);
            frame.extend((len as u64).to_be_bytes());
        }
    }
    frame.extend(MASK);
    frame.extend(payload.iter().enumerate().map(|(i, byte)| byte ^ MASK[i % 4]));
    frame
}

/// The payload of the next binary message from the server, skipping other frames (pings). The
/// server sends each message in one frame, unmasked; a length past the protocol's largest
/// message is refused before anything is allocated for it.
fn read_binary_message(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    loop {
        let mut head = [0u8; 2];
        stream.read_exact(&mut head)?;
        let len = match head[1] & 0x7f {
            126 => {
                let mut len = [0u8; 2];
                stream.read_exact(&mut len)?;
                u64::from(u16::from_be_bytes(len))
            }
            127 => {
                let mut len = [0u8; 8];
                stream.read_exact(&mut len)?;
                u64::from_be_bytes(len)
            }
            len => u64::from(len),
        };
        if head[1] & 0x80 != 0 || len > wire::MAX_MESSAGE_BYTES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame that is masked or of {len} bytes: not the UI server's"),
            ));
        }
        let mut payload = vec![0u8; len as usize];
        stream.read_exact(&mut payload)?;
        match head[0] {
            0x82 => return Ok(payload),
            0x88 => return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "closed")),
            _ => {}
        }
    }
}

/// A server of the release probe, killed when dropped (also when the benchmark fails).
struct Server {
    child: Child,
    /// Its first line of output, which names its address.
    first_line: String,
}

impl Server {
    fn start(command: &mut Command) -> Result<Server, String> {
        let shown = crate::steps::shown(command);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not start `{shown}`: {e}"))?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut first_line = String::new();
        if out.read_line(&mut first_line).is_err() || first_line.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("`{shown}` printed no address"));
        }
        // The rest of its output, read so that it never waits on a full pipe.
        std::thread::spawn(move || io::copy(&mut out, &mut io::sink()));
        Ok(Server { child, first_line })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address in its first line: the word that starts with `prefix`, without it for a URL.
    fn address(&self, prefix: &str) -> Result<String, String> {
        let word = self.first_line.split_whitespace().find(|word| word.starts_with(prefix));
        let word = word.ok_or_else(|| format!("no address in `{}`", self.first_line.trim()))?;
        Ok(word.trim_start_matches("http://").trim_end_matches('/').to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The process's resident memory once it has stopped moving: within 1 MB over the last 2 s
/// (at most a minute of waiting, then the last reading).
fn settled_rss_kb(pid: u32) -> Result<u64, String> {
    let started = Instant::now();
    let mut readings = Vec::new();
    loop {
        readings.push(rss_kb(pid)?);
        let last = &readings[readings.len().saturating_sub(10)..];
        let spread = last.iter().max().unwrap_or(&0) - last.iter().min().unwrap_or(&0);
        if (last.len() == 10 && spread < 1024) || started.elapsed() > Duration::from_secs(60) {
            return Ok(readings[readings.len() - 1]);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `VmRSS` of /proc/PID/status, in KiB.
fn rss_kb(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading process {pid}'s memory (has it ended?): {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("finding a free port: {e}"))?;
    listener.local_addr().map(|addr| addr.port()).map_err(|e| e.to_string())
}

/// Raises this process's open-file limit to `wanted` (or as far as its hard limit lets), so
/// that it and the servers it starts can hold the benchmark's connections.
fn raise_file_limit(wanted: u64) -> Result<(), String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("reading the open-file limit: {}", io::Error::last_os_error()));
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    let raised = libc::rlimit { rlim_cur: wanted.min(limit.rlim_max), rlim_max: limit.rlim_max };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 || raised.rlim_cur < wanted {
        return Err(format!(
            "the benchmark holds {STALLED_HELLOS} connections and more, and the open-file limit \
             is {} (hard limit {}): raise it with `ulimit -n {wanted}` (as root if the hard \
             limit is lower) and run it again",
            limit.rlim_cur, limit.rlim_max
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_frame_is_masked_and_its_length_encoded_by_size() {
        let small = client_frame(b"abc");
        assert_eq!(&small[..2], &[0x82, 0x80 | 3]);
        let unmasked: Vec<u8> = small[6..].iter().zip(&small[2..6]).map(|(b, m)| b ^ m).collect();
        assert_eq!(unmasked, b"abc");
        assert_eq!(&client_frame(&[0; 300])[..4], &[0x82, 0x80 | 126, 0x01, 0x2c]);
        assert_eq!(client_frame(&[0; 70_000])[1], 0x80 | 127);
    }

    #[test]
    fn a_stalled_hello_opens_with_the_control_magic_and_a_length_it_never_completes() {
        for hello in [StalledHello::Huge, StalledHello::Short] {
            let opening = hello.opening();
            assert_eq!(&opening[..4], b"ACKC");
            let announced = u32::from_le_bytes(opening[4..8].try_into().unwrap()) as usize;
            assert!(opening.len() - 8 < announced, "{}", hello.name());
        }
    }
}
