//! Story 1 in miniature, for the in-browser Linux spike (docs/IN-BROWSER.md): a 4-byte length
//! then a 2048-byte body each way, each in its own write(), on the guest's loopback. Prints each
//! mode's p50, p90, max and min in ms, then every request's time. Standard library only, so it
//! builds with `rustc` alone for i686-unknown-linux-musl (a static 32-bit binary for the guest)
//! and for the host, which runs the same program for comparison.
//!
//! `story1 COUNT MODES`: COUNT requests in each of MODES (comma-separated `nagle`, `nodelay`,
//! `reconnect`), in order.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn serve(listener: TcpListener, nodelay: bool) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut s = stream.unwrap();
            s.set_nodelay(nodelay).unwrap();
            std::thread::spawn(move || loop {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    return;
                }
                let n = u32::from_le_bytes(len) as usize;
                let mut body = vec![0u8; n];
                if s.read_exact(&mut body).is_err() {
                    return;
                }
                if s.write_all(&len).is_err() {
                    return;
                }
                if s.write_all(&body).is_err() {
                    return;
                }
            });
        }
    });
}

fn exchange(s: &mut TcpStream, body: &[u8]) {
    s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut back = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut back).unwrap();
}

fn run(name: &str, count: usize, nodelay: bool, reconnect: bool) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    serve(listener, nodelay);
    let body = vec![7u8; 2048];
    let mut times = Vec::new();
    let mut conn: Option<TcpStream> = None;
    for _ in 0..count {
        let start = Instant::now();
        if reconnect || conn.is_none() {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(nodelay).unwrap();
            conn = Some(s);
        }
        exchange(conn.as_mut().unwrap(), &body);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        if reconnect {
            conn = None;
        }
    }
    let all = times.clone();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!(
        "STORY1 {name} n={count} p50={:.2} p90={:.2} max={:.2} min={:.2}",
        at(0.5),
        at(0.9),
        at(1.0),
        at(0.0)
    );
    let list: Vec<String> = all.iter().map(|t| format!("{t:.1}")).collect();
    println!("STORY1-ALL {name} {}", list.join(" "));
}

fn main() {
    let count: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50);
    let modes = std::env::args().nth(2).unwrap_or_else(|| "nagle,nodelay,reconnect".into());
    println!("STORY1-START");
    for mode in modes.split(',') {
        match mode {
            "nagle" => run("nagle", count, false, false),
            "nodelay" => run("nodelay", count, true, false),
            "reconnect" => run("reconnect", count, false, true),
            other => println!("STORY1 unknown mode {other}"),
        }
    }
    println!("STORY1-DONE");
}
