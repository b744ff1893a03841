//! `ackscope server` with a client that is not ackscope's own: a few lines of Python speaking
//! the documented protocol, writing the length and the body of each message with two `send()`
//! calls and Nagle left on. Only the server is recorded; its session still names the client's
//! stalls and lists the client's fixes, in `show`, in `export`'s analysis and in the summary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::attribution::StallClass;
use ackscope_shared::report::RunReport;
use common::ackscope;

/// The outside client: `count` requests of 2048 bytes, the length prefix and the body written
/// apart (as story 1's naive client does). Prints the latency of each request in ms.
const CLIENT: &str = r#"
import socket, struct, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port))
body = bytes(range(256)) * 8
for _ in range(count):
    start = time.monotonic()
    s.sendall(struct.pack(">I", len(body)))
    s.sendall(body)
    answer = b""
    while len(answer) < 4 + len(body):
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("the server closed")
        answer += chunk
    assert struct.unpack(">I", answer[:4])[0] == len(body)
    assert answer[4] == body[0] ^ 0x5A
    print("%.3f" % ((time.monotonic() - start) * 1000))
s.close()
"#;

#[test]
fn a_server_only_session_names_the_outside_clients_nagle_stalls() {
    let dir = common::temp_folder("server-view");
    let file = dir.join("server.ackscope");
    let file_arg = file.to_str().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["server", "--listen", "127.0.0.1:0", "-o", file_arg, "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line);
    let port = addr.rsplit(':').next().unwrap();

    let requests = 12;
    let client = Command::new("python3")
        .args(["-c", CLIENT, "127.0.0.1", port, &requests.to_string()])
        .output()
        .expect("python3 (installed by cargo xtask test's set-up)");
    assert!(client.status.success(), "{}", String::from_utf8_lossy(&client.stderr));
    let latencies: Vec<f64> =
        String::from_utf8_lossy(&client.stdout).lines().map(|l| l.parse().unwrap()).collect();
    eprintln!("the client saw (ms): {latencies:?}");
    // After the first exchanges (quick-ACK mode), each request waits for a delayed ACK.
    let slow = latencies.iter().filter(|&&ms| ms >= 30.0).count();
    assert!(slow >= requests / 2, "the client's own view: {latencies:?}");

    common::interrupt(server.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server stops on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    }

    let shown = ackscope(&["show", file_arg]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains(&format!("requests       {requests} in")), "{text}");
    assert!(text.contains("Nagle x delayed ACK, client->server"), "{text}");
    assert!(text.contains("TCP_NODELAY on the client"), "the fixes are the client's: {text}");

    // The server's own summary, printed on Ctrl-C.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let summary = common::report_line(&rest);
    assert_eq!(summary.rr().map(|rr| rr.requests as usize), Some(requests), "{summary:?}");
    let nagle = summary
        .stalls
        .as_deref()
        .unwrap_or_else(|| panic!("no stalls in {summary:?}"))
        .iter()
        .find(|s| s.class == StallClass::NagleDelayedAck && s.direction == "client->server")
        .unwrap_or_else(|| panic!("{summary:?}"));
    let count = nagle.count as usize;
    assert!(count + 1 >= slow, "{slow} slow requests, {count} stalls named: {summary:?}");
    let fixes = nagle.fixes.join("\n");
    assert!(fixes.contains("TCP_NODELAY on the client"), "{fixes}");

    // `export --json` carries the same analysis after the messages.
    let exported = ackscope(&["export", file_arg, "--json"]);
    assert!(exported.status.success());
    let exported: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    let run: RunReport = serde_json::from_value(exported["runs"][0]["summary"].clone())
        .unwrap_or_else(|e| panic!("not a run report ({e}): {}", exported["runs"][0]));
    assert_eq!(run.rr().map(|rr| rr.requests as usize), Some(requests), "{run:?}");
    assert_eq!(run.stalls, summary.stalls, "export and the server's summary agree");
    assert_eq!(exported["runs_not_summarized"], 0);

    // The Perfetto export marks each stall with its evidence.
    let trace = dir.join("trace.json");
    let exported = ackscope(&["export", file_arg, "--perfetto", trace.to_str().unwrap()]);
    assert!(exported.status.success());
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.contains("4 bytes, then 2048 bytes"), "the evidence is in the trace");
}
