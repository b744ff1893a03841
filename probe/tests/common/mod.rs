//! What the CLI tests share: running the real binary and printing what it said on failure.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ackscope_shared::report::RunReport;

/// Runs `ackscope ARGS` to completion; its output is printed so a failing test shows it.
pub fn ackscope(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_ackscope")).args(args).output().unwrap();
    eprintln!(
        "$ ackscope {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

// Each test file compiles its own copy of this module and uses some of it.
#[allow(dead_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid() cannot fail and has no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// The first line of a root-only test. Such a test is marked
/// `#[ignore = "needs root (...): cargo xtask test runs it as root"]`, so that `cargo test`
/// lists it as ignored, by name, instead of passing it; `cargo xtask test` runs the ignored
/// tests as root (as in CI). Run by hand without root (`-- --ignored`), it fails here with what
/// it needs instead of failing later in a way that hides why.
#[allow(dead_code)]
pub fn require_root(what: &str) {
    assert!(is_root(), "{what} needs root: run this test as root (cargo xtask test does, as CI)");
}

/// The run report (`ackscope_shared::report::RunReport`) a `--json` command printed as the
/// whole of its stdout: `ackscope run ... --json`.
#[allow(dead_code)]
pub fn report_of(output: &Output) -> RunReport {
    report(&output.stdout)
}

/// The run report that is the whole of `stdout`.
#[allow(dead_code)]
pub fn report(stdout: &[u8]) -> RunReport {
    serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("--json prints one run report ({e}): {}", text(stdout)))
}

/// The run report on the one line of `stdout` that starts with `{`, among others:
/// `ackscope server ... --json`, which prints its address and token first.
#[allow(dead_code)]
pub fn report_line(stdout: &str) -> RunReport {
    let mut lines = stdout.lines().filter(|line| line.starts_with('{'));
    let line = lines.next().unwrap_or_else(|| panic!("no JSON summary in {stdout}"));
    assert!(lines.next().is_none(), "one JSON summary in {stdout}");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a run report ({e}): {line}"))
}

/// Every event of a session file, through `ackscope export FILE --json`.
#[allow(dead_code)]
pub fn exported_events(file: &str) -> Vec<ackscope_shared::Event> {
    let export = ackscope(&["export", file, "--json"]);
    assert!(export.status.success(), "export {file}");
    let export: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message.get("Events"))
        .flat_map(|batch| {
            serde_json::from_value::<Vec<ackscope_shared::Event>>(batch["events"].clone()).unwrap()
        })
        .collect()
}

/// A test's scratch file or folder: `name` in a folder of its own under the system's temporary
/// folder. The folder is removed when the value is dropped, at the end of the test, unless the
/// test is failing: then it is kept, and its path printed, for a look. Without this every run of
/// the tests would leave its sessions and captures behind (tens of MB a run).
pub struct Scratch {
    folder: tempfile::TempDir,
    path: PathBuf,
}

/// [`Scratch`] `name` (`tag` tells the test binaries' folders apart).
#[allow(dead_code)]
pub fn temp(tag: &str, name: &str) -> Scratch {
    let folder = new_folder(tag);
    Scratch { path: folder.path().join(name), folder }
}

/// A [`Scratch`] folder of its own, for a test that makes several files.
#[allow(dead_code)]
pub fn temp_folder(tag: &str) -> Scratch {
    let folder = new_folder(tag);
    Scratch { path: folder.path().to_path_buf(), folder }
}

/// A fresh folder `ackscope-TAG-RANDOM` under the system's temporary folder. Its mode is 0777
/// less the umask (tempfile's default for folders, as `create_dir` makes them), not 0700: with
/// the usual umask, the unprivileged user some root tests switch to can reach it.
fn new_folder(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ackscope-{tag}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("a scratch folder for {tag}: {e}"))
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The folder itself is removed by its TempDir's own drop, right after this one.
        if std::thread::panicking() {
            self.folder.disable_cleanup(true);
            eprintln!("test files kept for a look: {}", self.folder.path().display());
        }
    }
}

/// A path as the `&str` a command line takes.
#[allow(dead_code)]
pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A program's output as text.
#[allow(dead_code)]
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends SIGINT (Ctrl-C) to `pid`.
#[allow(dead_code)]
pub fn interrupt(pid: u32) {
    let status = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -INT {pid}");
}

/// A child process stopped (and reaped) when dropped, even when the test fails.
#[allow(dead_code)]
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `python3 tests/watched/pair.py`: a client and a server ackscope did not write.
#[allow(dead_code)]
pub fn pair_py() -> Command {
    let mut command = Command::new("python3");
    command.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/watched/pair.py"));
    command
}

/// Starts `pair.py ROLE ARGS` as a server; returns it and the port it printed.
#[allow(dead_code)]
pub fn start_pair_server(role: &str, args: &[&str]) -> (Reaped, u16) {
    let mut child = pair_py().arg(role).args(args).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok());
    let port = port.unwrap_or_else(|| panic!("pair.py {role} printed {line:?}, not its port"));
    (Reaped(child), port)
}

/// ackscope run as the unprivileged user nobody, with `capabilities` of setpriv's (none: no
/// privilege at all): a copy of the binary that user can reach and run, in a folder kept while
/// the returned guard lives.
#[allow(dead_code)]
pub fn as_nobody(capabilities: &[&str]) -> (Command, Scratch) {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_folder("nobody");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.join("ackscope");
    std::fs::copy(env!("CARGO_BIN_EXE_ackscope"), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = Command::new("setpriv");
    command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).args(capabilities);
    command.arg("--").arg(&binary);
    (command, dir)
}

/// The UI server on a port of the kernel's choosing (`ackscope --port 0`: a port found free
/// beforehand may be taken by then), and its address.
#[allow(dead_code)]
pub fn ui_server() -> (std::process::Child, String) {
    ui_server_as(Command::new(env!("CARGO_BIN_EXE_ackscope")))
}

/// [`ui_server`], started by `command` (ackscope under `setpriv`, [`as_nobody`]).
#[allow(dead_code)]
pub fn ui_server_as(mut command: Command) -> (std::process::Child, String) {
    let mut ui =
        command.args(["--port", "0"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(ui.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect(&line);
    (ui, url.trim_start_matches("http://").trim_end_matches('/').to_string())
}

/// A connection to the probe's WebSocket, as its own page holds one.
#[allow(dead_code)]
pub type Page = tungstenite::WebSocket<TcpStream>;

/// Sends `message` to the probe's WebSocket on `addr` as its own page would (the handshake,
/// then one binary message). Returns the connection, held open like a tab.
#[allow(dead_code)]
pub fn start_from_a_page(addr: &str, message: &ackscope_shared::wire::ToProbe) -> Page {
    let mut page = open_page(addr, "/ws");
    send_frame(&mut page, message);
    page
}

/// The probe's WebSocket at `path` (its query included), opened as its own page would.
#[allow(dead_code)]
pub fn open_page(addr: &str, path: &str) -> Page {
    try_open_page(addr, path).unwrap_or_else(|e| panic!("the WebSocket at {path}: {e}"))
}

/// Asks for the probe's WebSocket at `path` as its own page would, from the probe's own origin:
/// the connection, or why not (a refusal is [`tungstenite::Error::Http`], with its status).
#[allow(dead_code)]
pub fn try_open_page(addr: &str, path: &str) -> Result<Page, tungstenite::Error> {
    use tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}{path}").into_client_request()?;
    let origin = format!("http://{addr}").parse().expect("an origin is a header value");
    request.headers_mut().insert("Origin", origin);
    match tungstenite::client(request, TcpStream::connect(addr)?) {
        Ok((page, _)) => Ok(page),
        Err(tungstenite::HandshakeError::Failure(e)) => Err(e),
        // Only a non-blocking socket is interrupted, and this one blocks.
        Err(tungstenite::HandshakeError::Interrupted(_)) => unreachable!("a blocking socket"),
    }
}

/// One binary message, as the page sends it.
#[allow(dead_code)]
pub fn send_frame(page: &mut Page, message: &ackscope_shared::wire::ToProbe) {
    let payload = ackscope_shared::wire::encode(message);
    page.send(tungstenite::Message::Binary(payload.into())).unwrap();
}

/// The next message the probe sends on `page`, skipping other kinds (pings, closes).
#[allow(dead_code)]
pub fn next_message(page: &mut Page) -> ackscope_shared::wire::ToBrowser {
    loop {
        if let tungstenite::Message::Binary(payload) = page.read().unwrap() {
            return ackscope_shared::wire::decode(&payload).unwrap();
        }
    }
}

/// The first `Rejected` the probe sends on `page` (within 10 s), skipping the session's own
/// messages.
#[allow(dead_code)]
pub fn rejected(page: &mut Page) -> String {
    page.get_ref().set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    loop {
        if let ackscope_shared::wire::ToBrowser::Rejected { reason } = next_message(page) {
            return reason;
        }
    }
}

/// `ackscope class` on a free loopback port: the process, its address, the room code and the
/// presenter's secret. The process is stopped when the value is dropped.
#[allow(dead_code)]
pub struct Class {
    pub child: std::process::Child,
    pub addr: String,
    pub code: String,
    pub secret: String,
}

impl Drop for Class {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(dead_code)]
pub fn start_class() -> Class {
    start_class_with(&[])
}

/// [`start_class`], with more of `ackscope class`'s flags.
#[allow(dead_code)]
pub fn start_class_with(flags: &[&str]) -> Class {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["class", "--listen", "127.0.0.1:0"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let presenter = loop {
        let line = lines.next().expect("ackscope class printed its links").unwrap();
        if line.starts_with("presenter:") {
            break line.split_whitespace().last().unwrap().to_string();
        }
    };
    // http://ADDR/?room=CODE#presenter=SECRET
    let rest = presenter.strip_prefix("http://").unwrap();
    let (addr, rest) = rest.split_once("/?room=").unwrap();
    let (code, secret) = rest.split_once("#presenter=").unwrap();
    Class { child, addr: addr.into(), code: code.into(), secret: secret.into() }
}

/// `ackscope server -o FILE` on a free port, and its address.
#[allow(dead_code)]
pub fn recording_server(file: &std::path::Path) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["server", "--listen", "127.0.0.1:0", "-o", s(file)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line);
    (child, addr.to_string())
}

/// `COMMAND watch ARGS` (the binary, maybe behind a change of user) started with its output
/// piped, once it said it watches ("watching port ..." on standard error, which is echoed to
/// the test's own): the process, and what it said before.
#[allow(dead_code)]
pub fn start_watch(mut command: Command, args: &[&str]) -> (std::process::Child, Vec<String>) {
    let mut child = command
        .arg("watch")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (said, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("watch: {line}");
            let _ = said.send(line);
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("watching port") => break,
            Ok(line) => before.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ackscope watch did not start watching within 30 s: {before:?}")
            }
        }
    }
    (child, before)
}

/// Ctrl-C to a watch [`start_watch`] started, then what it printed on standard output; it must
/// exit 130, as a command ended by Ctrl-C does.
#[allow(dead_code)]
pub fn stop_watch(child: &mut std::process::Child) -> String {
    use std::io::Read;
    interrupt(child.id());
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "a watch ended with Ctrl-C exits 130: {stdout}");
    stdout
}

/// Waits for `child` to end, polling every 10 ms; past `limit` it is killed and the test fails,
/// saying `what` held it. Its exit status.
#[allow(dead_code)]
pub fn ends_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let asked = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if asked.elapsed() > limit {
            let _ = child.kill();
            panic!("still running {limit:?} later: {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether a thread of `pid` sleeps in `nanosleep` (its `wchan`): a bulk server's reader in its
/// pause (`--read-pause-us`); the probe's other threads wait in `poll`, `accept`, a read or a
/// futex.
#[allow(dead_code)]
pub fn pausing(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w.contains("nanosleep"))
    })
}
