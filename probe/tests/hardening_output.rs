//! Regression tests of the output defects of the third hardening round, through the real binary:
//! `import` of a capture from a pipe, `import` of a capture whose header would not fit in one
//! message, and strings that command a terminal without an escape character (C1 controls, bidi
//! overrides). Each failed before its fix.

use std::io::Write;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{ackscope, exported_events, s, text};

fn temp_folder() -> common::Scratch {
    common::temp_folder("hardening-output")
}

/// Runs `ackscope ARGS` with `input` on its standard input (a pipe), to completion.
fn ackscope_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // The capture is larger than a pipe's buffer: fed from a thread while the output is read.
    let feeder = std::thread::spawn(move || {
        // The command may stop reading early (a refusal): a broken pipe is its answer, not ours.
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    eprintln!(
        "$ ackscope {} < pipe\n{}{}",
        args.join(" "),
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// The `wrote N segments` count an import printed.
fn segments_written(stdout: &[u8]) -> u64 {
    let out = text(stdout);
    let line = out.lines().find(|l| l.starts_with("wrote ")).unwrap_or_else(|| panic!("{out}"));
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// The lines of `show` that describe the imported connections and their stalls.
fn conversation_lines(stdout: &[u8]) -> Vec<String> {
    text(stdout)
        .lines()
        .filter(|l| l.starts_with("conn ") || l.contains("stall"))
        .map(str::to_string)
        .collect()
}

/// Defect 5a: `ackscope import /dev/stdin` of a capture on a pipe printed "wrote 0 segments" and
/// exited 0: its second pass over the capture found the pipe empty. Now a capture on a pipe
/// (`/dev/stdin` or `-`) imports the same segments as the same capture in a file.
#[test]
fn a_capture_on_a_pipe_imports_as_the_same_capture_in_a_file() {
    let folder = temp_folder();
    let capture = ackscope_shared::synthetic::nagle_capture(200);
    let capture_file = folder.join("nagle.pcapng");
    std::fs::write(&capture_file, &capture).unwrap();
    let from_file = folder.join("from-file.ackscope");
    let imported = ackscope(&["import", s(&capture_file), "-o", s(&from_file)]);
    assert!(imported.status.success());
    let segments = segments_written(&imported.stdout);
    assert_eq!(segments, 3 + 5 * 200, "every packet of the capture is a segment");
    let shown_from_file = ackscope(&["show", s(&from_file)]);
    let expected_lines = conversation_lines(&shown_from_file.stdout);
    assert!(expected_lines.iter().any(|l| l.contains("Nagle")), "{expected_lines:?}");
    let expected_events = exported_events(s(&from_file));

    for name in ["/dev/stdin", "-"] {
        let from_pipe = folder.join("from-pipe.ackscope");
        let imported = ackscope_with_input(&["import", name, "-o", s(&from_pipe)], &capture);
        assert!(imported.status.success(), "import {name} from a pipe");
        assert_eq!(segments_written(&imported.stdout), segments, "import {name} from a pipe");
        let shown = ackscope(&["show", s(&from_pipe)]);
        assert!(shown.status.success());
        assert_eq!(conversation_lines(&shown.stdout), expected_lines, "show of {name}'s import");
        assert!(exported_events(s(&from_pipe)) == expected_events, "the events of {name}'s import");
    }

    // Without -o there is no capture file to name the session after: said, before reading.
    let unnamed = ackscope_with_input(&["import", "-"], &capture);
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(text(&unnamed.stderr).contains("-o FILE"), "the error names the fix");
    // Nor with standard input a file (`import - < capture`): no `-.ackscope` is made.
    let redirected = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["import", "-"])
        .current_dir(&*folder)
        .stdin(std::fs::File::open(&capture_file).unwrap())
        .output()
        .unwrap();
    assert_eq!(redirected.status.code(), Some(2), "{}", text(&redirected.stderr));
    assert!(!folder.join("-.ackscope").exists());
}

/// A pcapng capture of `connections` one-packet connections, each between the longest IPv6
/// endpoints there are (`[fd12:3456:789a:bcde:f012:3456:789a:1000]:20000`, 47 characters), so
/// that the session's list of them is as large as a list of that many connections can be.
fn many_connections_capture(connections: u32) -> Vec<u8> {
    use ackscope_shared::event::tcp_flags;
    use ackscope_shared::packet::{synthesize, Packet};
    use ackscope_shared::pcap::{linktype, PcapngWriter};
    use ackscope_shared::Segment;

    let server = Ipv6Addr::new(0xfd98, 0x7654, 0x3210, 0xfedc, 0xba98, 0x7654, 0x3210, 0xfedc);
    let mut file = Vec::with_capacity(connections as usize * 92 + 1024);
    let mut w = PcapngWriter::new(&mut file);
    let iface = w.interface("eth0", linktype::RAW);
    for i in 0..connections {
        // Five-digit ports and four-digit groups: every endpoint has the longest text.
        let port = 20_000 + (i % 40_000) as u16;
        let group = 0x1000 + (i / 40_000) as u16;
        let client = Ipv6Addr::new(0xfd12, 0x3456, 0x789a, 0xbcde, 0xf012, 0x3456, 0x789a, group);
        let segment = Segment { flags: tcp_flags::ACK, seq: 1, ack: 1, ..Segment::default() };
        let packet = Packet {
            src: IpAddr::V6(client),
            dst: IpAddr::V6(server),
            src_port: port,
            dst_port: 10_443,
            segment,
        };
        w.packet(iface, 1_000_000_000 + u64::from(i) * 1_000, &synthesize(&packet), None);
    }
    file
}

/// Runs `ackscope ARGS` to completion; of its long output only the first and last lines are
/// printed for a failing test to show.
fn ackscope_long_output(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_ackscope")).args(args).output().unwrap();
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let shown = if lines.len() <= 12 {
        lines.join("\n")
    } else {
        format!("{}\n...\n{}", lines[..6].join("\n"), lines[lines.len() - 6..].join("\n"))
    };
    eprintln!("$ ackscope {}\n{shown}\n{}", args.join(" "), text(&output.stderr));
    output
}

/// Defect 5b: a capture of many connections made a `RunStarted` message (the session's header,
/// which lists every connection's endpoints) of more than the 16 MiB a reader takes; `import`
/// exited 0 and `show` could not read the file. Now the header names the first 100,000
/// connections' addresses, the rest are numbered only, and the file reads back whole.
#[test]
fn a_capture_of_more_connections_than_one_message_holds_imports_to_a_readable_file() {
    // 160,000 connections of 108 bytes each in the list: 17.3 MB, over the 16 MiB (16.8 MB)
    // limit; the capture is 15 MB.
    const CONNECTIONS: u32 = 160_000;
    let folder = temp_folder();
    let capture = folder.join("many.pcapng");
    std::fs::write(&capture, many_connections_capture(CONNECTIONS)).unwrap();
    let session = folder.join("many.ackscope");
    let started = Instant::now();
    let imported = ackscope_long_output(&["import", s(&capture), "-o", s(&session)]);
    let import_took = started.elapsed();
    if !imported.status.success() {
        // A refusal is acceptable, if it says which limit.
        let error = text(&imported.stderr);
        assert!(error.contains("limit"), "a refusal says which limit: {error}");
        return;
    }
    let shown = ackscope_long_output(&["show", s(&session)]);
    assert!(shown.status.success(), "show reads the file whole: {}", text(&shown.stderr));
    let shown_text = text(&shown.stdout);
    let conn_lines: Vec<&str> = shown_text.lines().filter(|l| l.starts_with("conn ")).collect();
    assert_eq!(conn_lines.len(), CONNECTIONS as usize, "every connection is shown");
    assert!(
        conn_lines[0].starts_with("conn 1: client [fd12:3456:789a:bcde:f012:3456:789a:1000]:20000"),
        "the first connections have their addresses: {}",
        conn_lines[0]
    );
    let last = conn_lines.last().unwrap();
    assert!(last.starts_with(&format!("conn {CONNECTIONS}: 1 segments")), "numbered: {last}");
    let note = "addresses of the first 100000 connections only";
    assert!(shown_text.contains(note), "show says why the rest have no addresses");
    assert!(text(&imported.stdout).contains(note), "so does the import");
    assert_eq!(segments_written(&imported.stdout), u64::from(CONNECTIONS));
    // Debug builds on a loaded machine: far beyond the second or two it takes.
    assert!(import_took < Duration::from_secs(120), "import took {import_took:?}");
}

/// A session file whose host facts and run outcome hold `hostile`.
fn session_with_strings(path: &Path, hostile: &str) {
    use ackscope_shared::wire::{self, Hello, HostFacts, Instruments, RunOutcome, ToBrowser};
    use ackscope_shared::{RrSpec, RunId, Scenario};

    let host = HostFacts { kernel: hostile.into(), ..HostFacts::default() };
    let run = RunId(1);
    let mut bytes = Vec::new();
    for message in [
        ToBrowser::Hello(Hello::current("0.1.0", host)),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Rr(RrSpec::default()),
            instruments: Instruments::default(),
        },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Failed { error: hostile.into() } },
    ] {
        wire::write_frame(&message, &mut bytes);
    }
    std::fs::write(path, bytes).unwrap();
}

/// Whether `bytes` hold a character a terminal may obey: a C1 control (U+0080-U+009F: U+009B is
/// a Control Sequence Introducer) or a bidi control (U+202E reverses what follows).
fn raw_controls(bytes: &[u8]) -> Vec<char> {
    text(bytes)
        .chars()
        .filter(|&c| {
            ('\u{80}'..='\u{9f}').contains(&c)
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
                || matches!(c, '\u{200e}' | '\u{200f}' | '\u{61c}')
        })
        .collect()
}

/// Defect 7: `export --json` and `export --perfetto` wrote C1 controls raw (U+009B, a Control
/// Sequence Introducer some terminals obey like ESC [), and every command passed bidi overrides
/// (U+202E) through. Now `show` prints them as escapes and both JSON outputs write them as
/// `\uXXXX`: still valid JSON, read back as the same string.
#[test]
fn c1_and_bidi_controls_are_escaped_in_show_and_both_json_exports() {
    let hostile = "6.18\u{9b}2J csi \u{202e}txt.exe bidi \u{200f}\u{2066}\u{61c}";
    let folder = temp_folder();
    let session = folder.join("controls.ackscope");
    session_with_strings(&session, hostile);

    let shown = ackscope(&["show", s(&session)]);
    assert!(shown.status.success());
    assert_eq!(raw_controls(&shown.stdout), [], "show prints no raw control");
    let out = text(&shown.stdout);
    assert!(out.contains("6.18\\u{9b}2J csi \\u{202e}txt.exe"), "shown as escapes: {out}");

    let exported = ackscope(&["export", s(&session), "--json"]);
    assert!(exported.status.success());
    assert_eq!(raw_controls(&exported.stdout), [], "export --json writes no raw control");
    let doc: Value = serde_json::from_slice(&exported.stdout).expect("export --json is JSON");
    assert_eq!(doc["messages"][0]["Hello"]["host"]["kernel"], hostile, "the string round-trips");
    assert_eq!(
        doc["messages"][2]["RunFinished"]["outcome"]["Failed"]["error"], hostile,
        "the outcome round-trips"
    );

    let trace = folder.join("controls.json");
    let perfetto = ackscope(&["export", s(&session), "--perfetto", s(&trace)]);
    assert!(perfetto.status.success());
    let written = std::fs::read(&trace).unwrap();
    assert_eq!(raw_controls(&written), [], "the trace holds no raw control");
    let doc: Value = serde_json::from_slice(&written).expect("the trace is JSON");
    assert_eq!(doc["otherData"]["host"], format!(" {hostile}"), "the string round-trips");
}
