//! `ackscope import` of a real tcpdump capture and `ackscope export --pcapng` read back by tshark.
//! Needs tcpdump and tshark (`cargo xtask setup` installs them) and the right to capture on lo
//! (root, as in CI).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{ackscope, require_root, s, text};

const ROUNDS: usize = 6;

fn temp(name: &str) -> common::Scratch {
    common::temp("pcap-test", name)
}

/// Story 1 on plain std sockets: each side writes a 4-byte length then a 2048-byte body with
/// Nagle on, so each body waits for the peer's delayed ACK of the length.
fn nagle_exchange(listener: TcpListener) {
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 2052];
        for _ in 0..ROUNDS {
            conn.read_exact(&mut buf).unwrap();
            conn.write_all(&buf[..4]).unwrap();
            conn.write_all(&buf[4..]).unwrap();
        }
    });
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = [7u8; 2048];
    let mut buf = [0u8; 2052];
    for _ in 0..ROUNDS {
        conn.write_all(&2048u32.to_be_bytes()).unwrap();
        conn.write_all(&body).unwrap();
        conn.read_exact(&mut buf).unwrap();
    }
    drop(conn);
    server.join().unwrap();
}

/// Captures the exchange with tcpdump on lo.
fn capture(file: &Path) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut tcpdump = Command::new("tcpdump")
        .args(["-i", "lo", "--immediate-mode", "-U", "-w", s(file), &format!("tcp port {port}")])
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump runs (cargo xtask setup installs it; capturing on lo needs root)");
    // tcpdump says "listening on lo" once its filter is attached.
    let mut stderr = BufReader::new(tcpdump.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "tcpdump did not start: {line}");
    nagle_exchange(listener);
    std::thread::sleep(Duration::from_millis(200));
    // SIGINT: tcpdump flushes and closes the file.
    let killed = Command::new("kill").args(["-INT", &tcpdump.id().to_string()]).status().unwrap();
    assert!(killed.success());
    tcpdump.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    eprintln!("tcpdump: {line}{rest}");
}

/// "1 stall: Nagle x delayed ACK, client->server, median 43.6 ms; ..." -> (count, median).
fn nagle_line(out: &str, direction: &str) -> Option<(u32, f64)> {
    let line = out.lines().find(|l| l.contains(&format!("Nagle x delayed ACK, {direction},")))?;
    let count = line.split(' ').next()?.parse().ok()?;
    let median = line.split("median ").nth(1)?.split(' ').next()?.parse().ok()?;
    Some((count, median))
}

#[test]
#[ignore = "needs root (capturing on lo with tcpdump): cargo xtask test runs it as root"]
fn a_tcpdump_capture_imports_with_its_nagle_stalls_and_exports_back() {
    require_root("capturing on lo with tcpdump");
    let pcap = temp("nagle.pcap");
    capture(&pcap);
    let session = temp("nagle.ackscope");
    let imported = ackscope(&["import", s(&pcap), "-o", s(&session)]);
    assert!(imported.status.success());
    let out = text(&imported.stdout);
    assert!(out.contains("conn 1: client 127.0.0.1:"), "{out}");
    // The first exchanges of a connection are ACKed at once (quick-ACK mode); the rest stall.
    for direction in ["client->server", "server->client"] {
        let (count, median) = nagle_line(&out, direction).expect("a Nagle line");
        assert!(count >= 2, "{direction}: {count} stalls");
        assert!((30.0..=60.0).contains(&median), "{direction}: median {median} ms");
    }

    let shown = ackscope(&["show", s(&session)]);
    assert!(shown.status.success());
    let shown = text(&shown.stdout);
    assert!(shown.contains("an imported packet capture"), "{shown}");
    assert!(shown.contains("conn 1: "), "{shown}");
    assert_eq!(nagle_line(&shown, "client->server"), nagle_line(&out, "client->server"));

    let pcapng = temp("nagle-export.pcapng");
    let exported = ackscope(&["export", s(&session), "--pcapng", s(&pcapng)]);
    assert!(exported.status.success());
    let original = Command::new("tshark").args(["-r", s(&pcap)]).output().expect("tshark runs");
    let comments = Command::new("tshark")
        .args(["-r", s(&pcapng), "-T", "fields", "-e", "frame.comment"])
        .output()
        .expect("tshark runs");
    assert!(comments.status.success(), "{}", text(&comments.stderr));
    let comments = text(&comments.stdout);
    eprintln!("tshark comments:\n{comments}");
    assert_eq!(comments.lines().count(), text(&original.stdout).lines().count(), "packet count");
    let stalls = comments.lines().filter(|l| l.contains("Nagle x delayed ACK")).count();
    let (c2s, _) = nagle_line(&out, "client->server").unwrap();
    let (s2c, _) = nagle_line(&out, "server->client").unwrap();
    assert_eq!(stalls as u32, c2s + s2c, "one comment per stall");
    assert!(comments.contains("delayed ACK"));
}

#[test]
fn a_truncated_capture_names_the_offset_and_keeps_the_packets_before_it() {
    let pcap = temp("cut.pcap");
    capture(&pcap);
    let bytes = std::fs::read(&pcap).unwrap();
    let cut = temp("cut-short.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let session = temp("cut.ackscope");
    let imported = ackscope(&["import", s(&cut), "-o", s(&session)]);
    assert_eq!(imported.status.code(), Some(1));
    let err = text(&imported.stderr);
    assert!(err.contains(s(&cut)) && err.contains("at byte "), "{err}");
    assert!(ackscope(&["show", s(&session)]).status.success());

    let garbage = temp("garbage.pcap");
    std::fs::write(&garbage, b"not a capture at all").unwrap();
    let refused = ackscope(&["import", s(&garbage), "-o", s(&temp("garbage.ackscope"))]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("not a pcap or pcapng file"));
}

/// A pcap file of one TCP SYN over Ethernet, written by hand (libpcap's format: a 24-byte
/// header, then a 16-byte record header per packet).
fn one_packet_pcap() -> Vec<u8> {
    let mut frame = vec![0u8; 12];
    frame.extend_from_slice(&[0x08, 0x00]); // IPv4
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1];
    let tcp = [0x9c, 0x40, 0x1f, 0x90, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0];
    frame.append(&mut ip);
    frame.extend_from_slice(&tcp);
    let mut pcap = Vec::new();
    pcap.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    pcap.extend_from_slice(&2u16.to_le_bytes());
    pcap.extend_from_slice(&4u16.to_le_bytes());
    for word in [0u32, 0, 65535, 1] {
        pcap.extend_from_slice(&word.to_le_bytes());
    }
    for word in [1u32, 0, frame.len() as u32, frame.len() as u32] {
        pcap.extend_from_slice(&word.to_le_bytes());
    }
    pcap.extend_from_slice(&frame);
    pcap
}

/// Issue 11, defect 9: `ackscope import x.ackscope` with no `-o` wrote its session over the
/// capture it had just read.
#[test]
fn import_never_writes_over_its_input() {
    let dir = common::temp_folder("pcap-test");
    let capture = dir.join("x.ackscope");
    std::fs::write(&capture, one_packet_pcap()).unwrap();

    let imported = ackscope(&["import", s(&capture)]);
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    assert_eq!(std::fs::read(&capture).unwrap(), one_packet_pcap(), "the capture is untouched");
    let beside = dir.join("x.imported.ackscope");
    assert!(text(&imported.stdout).contains(s(&beside)), "{}", text(&imported.stdout));
    assert!(ackscope(&["show", s(&beside)]).status.success());

    let refused = ackscope(&["import", s(&capture), "-o", s(&dir.join(".").join("x.ackscope"))]);
    assert_eq!(refused.status.code(), Some(2));
    let err = text(&refused.stderr);
    assert!(err.contains("written over the capture") && err.contains("-o"), "{err}");
    assert_eq!(std::fs::read(&capture).unwrap(), one_packet_pcap(), "still untouched");
}
