//! The TCP_INFO decoder against iproute2's `ss -tin` for the same socket.
//!
//! `ss` gets the same `struct tcp_info` over netlink (sock_diag) and decodes it with the C
//! header, so agreement here checks our byte offsets and units against an independent reader.
//! Each comparison brackets the `ss` run between two samples and uses only fields that did not
//! move between them; on an idle socket that is all of them except the `last_*` ages.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use ackscope_probe::net::tcp_info::sample;
use ackscope_shared::TcpInfoSample;

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    (client, server)
}

/// What `ss -tinH` prints for the one established socket whose local port is `port`, as
/// `key:value` pairs ("rto" -> "204", "rtt" -> "0.026/0.014").
fn ss_fields(port: u16) -> (HashMap<String, String>, Vec<String>) {
    let filter = format!("sport = :{port}");
    let args = ["-tinH", "state", "established", filter.as_str()];
    let output = match Command::new("ss").args(args).output() {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            panic!("`ss` is not installed: install iproute2 (apt-get install iproute2)")
        }
        Err(e) => panic!("running ss {args:?}: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ss {args:?} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // A socket is one line of addresses, then its indented details.
    let sockets = stdout.lines().filter(|l| l.starts_with(|c: char| !c.is_whitespace()));
    assert_eq!(sockets.count(), 1, "expected one socket on port {port}:\n{stdout}");
    let words: Vec<String> = stdout.split_whitespace().map(str::to_string).collect();
    let fields = words
        .iter()
        .filter_map(|word| word.split_once(':'))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    eprintln!("ss for port {port}:\n{stdout}");
    (fields, words)
}

/// `ss` prints times in milliseconds with `%g`; back to whole microseconds.
fn ms_to_us(value: &str) -> u32 {
    let ms: f64 = value.parse().unwrap_or_else(|e| panic!("not a number of ms: {value:?}: {e}"));
    (ms * 1000.0).round() as u32
}

fn number<T: std::str::FromStr>(fields: &HashMap<String, String>, key: &str) -> Option<T>
where
    T::Err: std::fmt::Debug,
{
    fields.get(key).map(|v| v.parse().unwrap_or_else(|e| panic!("{key}:{v}: {e:?}")))
}

/// Two samples taken just before and just after `ss` ran, and what `ss` printed.
struct Bracket {
    before: TcpInfoSample,
    after: TcpInfoSample,
    ss: HashMap<String, String>,
    /// The whitespace-separated words, for the few values `ss` prints as "name value".
    words: Vec<String>,
}

/// Samples, runs `ss`, samples again, until nothing but the ages moved in between.
fn bracketed(socket: &TcpStream) -> Bracket {
    let port = socket.local_addr().expect("local addr").port();
    // A busy machine can delay ss long enough for a timer (a window probe, an ACK) to fire.
    for _ in 0..20 {
        let before = sample(socket, false).expect("sample before ss");
        let (ss, words) = ss_fields(port);
        let after = sample(socket, false).expect("sample after ss");
        if without_ages(&before) == without_ages(&after) {
            return Bracket { before, after, ss, words };
        }
        eprintln!("socket moved while ss ran, again:\n{before:?}\n{after:?}");
        thread::sleep(Duration::from_millis(50));
    }
    panic!("the socket on port {port} never stayed still for the length of an ss run");
}

/// The `last_*` fields are ages in ms and grow while the socket idles; the `*_limited_us`
/// counters are time too, and grow for as long as a writer stays window- or buffer-limited,
/// which is what the window-limited case holds the socket in while `ss` runs.
fn without_ages(info: &TcpInfoSample) -> TcpInfoSample {
    TcpInfoSample {
        last_data_sent_ms: 0,
        last_ack_recv_ms: 0,
        last_data_recv_ms: 0,
        rwnd_limited_us: info.rwnd_limited_us.map(|_| 0),
        sndbuf_limited_us: info.sndbuf_limited_us.map(|_| 0),
        ..info.clone()
    }
}

/// Compares every field `ss` shows with ours. `ss` leaves out counters that are zero.
fn assert_agrees(bracket: &Bracket) {
    let Bracket { before: ours, after, ss, words } = bracket;
    let rto = ss.get("rto").expect("ss shows rto");
    assert_eq!(ms_to_us(rto), ours.rto_us, "rto");
    assert_eq!(ss.get("ato").map_or(0, |v| ms_to_us(v)), ours.ato_us, "ato");
    assert_eq!(number::<u32>(ss, "mss"), Some(ours.snd_mss), "mss");
    assert_eq!(number::<u32>(ss, "rcvmss"), Some(ours.rcv_mss), "rcvmss");
    assert_eq!(number::<u32>(ss, "cwnd"), Some(ours.snd_cwnd), "cwnd");
    let counters: [(&str, Option<u64>); 9] = [
        ("bytes_sent", ours.bytes_sent),
        ("bytes_acked", ours.bytes_acked),
        ("bytes_received", ours.bytes_received),
        ("segs_out", ours.segs_out.map(u64::from)),
        ("segs_in", ours.segs_in.map(u64::from)),
        ("rcv_space", Some(u64::from(ours.rcv_space))),
        ("notsent", ours.notsent_bytes.map(u64::from)),
        ("unacked", Some(u64::from(ours.unacked))),
        ("lost", Some(u64::from(ours.lost))),
    ];
    for (key, value) in counters {
        let value = value.unwrap_or_else(|| panic!("a 6.x kernel returns {key}"));
        assert_eq!(number::<u64>(ss, key).unwrap_or(0), value, "{key}");
    }
    // retrans:tcpi_retrans/tcpi_total_retrans, shown when either is non-zero.
    let retrans = ss.get("retrans").and_then(|v| v.split_once('/'));
    let retrans = retrans.map(|(now, total)| (now.parse().ok(), total.parse().ok()));
    let expected = (Some(ours.retrans), Some(ours.total_retrans));
    assert_eq!(retrans.unwrap_or((Some(0), Some(0))), expected, "retrans");
    let snd_wnd = number::<u32>(ss, "snd_wnd");
    assert_eq!(snd_wnd.unwrap_or(0), ours.snd_wnd.expect("snd_wnd"), "snd_wnd");
    // iproute2 6.1 does not print rcv_wnd yet; newer ones do.
    if let Some(rcv_wnd) = number::<u32>(ss, "rcv_wnd") {
        assert_eq!(Some(rcv_wnd), ours.rcv_wnd, "rcv_wnd");
    }

    // rtt:srtt/rttvar, in ms with three decimals at most: allow one microsecond of rounding.
    let (rtt, rttvar) = ss.get("rtt").and_then(|v| v.split_once('/')).expect("ss shows rtt");
    assert!(ms_to_us(rtt).abs_diff(ours.rtt_us) <= 1, "rtt {rtt} ms vs {} us", ours.rtt_us);
    let rttvar_us = ms_to_us(rttvar);
    assert!(rttvar_us.abs_diff(ours.rttvar_us) <= 1, "rttvar {rttvar} vs {}", ours.rttvar_us);
    if let (Some(min_rtt), Some(ours_min)) = (ss.get("minrtt"), ours.min_rtt_us) {
        assert!(ms_to_us(min_rtt).abs_diff(ours_min) <= 1, "minrtt {min_rtt} vs {ours_min}");
    }

    // The ages grow while ss runs: ss's value lies between our two samples.
    let ages = [
        ("lastsnd", ours.last_data_sent_ms, after.last_data_sent_ms),
        ("lastrcv", ours.last_data_recv_ms, after.last_data_recv_ms),
        ("lastack", ours.last_ack_recv_ms, after.last_ack_recv_ms),
    ];
    for (key, before_ms, after_ms) in ages {
        let ss_ms = number::<u32>(ss, key).unwrap_or(0);
        assert!(
            (before_ms..=after_ms).contains(&ss_ms),
            "{key}:{ss_ms} not in {before_ms}..={after_ms}"
        );
    }

    // "delivery_rate 52428800000bps": ss multiplies the kernel's bytes/s by 8.
    let rate = words.iter().skip_while(|w| *w != "delivery_rate").nth(1);
    let rate_bits = rate.and_then(|w| w.strip_suffix("bps")).and_then(|n| n.parse::<u64>().ok());
    if let (Some(bits), Some(bytes)) = (rate_bits, ours.delivery_rate_bytes_per_s) {
        assert_eq!(bits, bytes * 8, "delivery_rate");
    }
}

#[test]
fn an_idle_connection_decodes_as_ss_shows_it() {
    let (mut client, mut server) = pair();
    for round in 0..3u8 {
        client.write_all(&[round; 300]).expect("client write");
        server.read_exact(&mut [0; 300]).expect("server read");
        server.write_all(&[round; 1000]).expect("server write");
        client.read_exact(&mut [0; 1000]).expect("client read");
    }
    // Let any delayed ACK go out, so both ends are idle.
    thread::sleep(Duration::from_millis(150));

    for (name, socket) in [("client", &client), ("server", &server)] {
        let bracket = bracketed(socket);
        eprintln!("{name}: {:?}", bracket.before);
        assert_agrees(&bracket);
    }
    let client_info = sample(&client, false).expect("sample client");
    assert_eq!(client_info.bytes_sent, Some(900));
    assert_eq!(client_info.bytes_received, Some(3000));
}

#[test]
fn a_window_limited_writer_shows_the_same_notsent_bytes_as_ss() {
    let (mut client, server) = pair();
    // The server never reads: its window closes, and the rest stays in the client's queue.
    client.set_nonblocking(true).expect("nonblocking");
    let chunk = vec![0x42; 64 * 1024];
    let mut written = 0usize;
    loop {
        match client.write(&chunk) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("client write: {e}"),
        }
        assert!(written < 1 << 30, "the window never closed");
    }
    thread::sleep(Duration::from_millis(100));

    let bracket = bracketed(&client);
    let ours = &bracket.before;
    eprintln!("wrote {written} bytes; client: {ours:?}");
    let notsent = ours.notsent_bytes.expect("notsent_bytes");
    assert!(notsent > 0, "nothing held back: {ours:?}");
    assert_eq!(number::<u32>(&bracket.ss, "notsent"), Some(notsent), "notsent");
    assert_agrees(&bracket);
    drop(server);
}
