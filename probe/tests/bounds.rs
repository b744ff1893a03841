//! The readers' bounds, through the real binary: `show`, `export --json`, `export --perfetto`
//! and `export --pcapng` of each crafted session (`ackscope_shared::crafted`), at one size and
//! at twice that size. Doubling the input may at most double the CPU time (a walk over every held
//! request per message made it quadruple), and must not grow the peak memory (samples kept with
//! no ceiling, or every connection's state, made it double). Ratios within one run, never a
//! clock: the margins are wide (linear work doubles, the defects quadrupled or doubled memory
//! that should stay flat; the pcapng export held a run's segments, 82 bytes each, until it
//! ended).

use std::io::{BufWriter, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use ackscope_shared::crafted::Crafted;

mod common;

use common::s;

/// What one command cost: CPU seconds (user + system, its own) and its peak resident set.
#[derive(Debug, Clone, Copy)]
struct Cost {
    cpu_s: f64,
    peak_mb: f64,
}

/// Runs `ackscope ARGS`; its output is thrown away (read, so a full pipe never blocks it).
/// The child is reaped by `wait4`, which also gives its own CPU time.
#[allow(clippy::zombie_processes)]
fn cost_of(args: &[&str]) -> Cost {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let drain = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stdout.read_to_end(&mut sink);
        sink.len()
    });
    // The child's own high-water mark (VmHWM starts afresh at exec; a fork's rusage would
    // count this process's memory too), read until it ends. VmHWM only grows: the last read is
    // the peak but for the last few milliseconds.
    let mut peak_kb = 0;
    while let Some(kb) = status_kb(pid, "VmHWM:") {
        peak_kb = peak_kb.max(kb);
        // A zombie has no memory left to read: it has ended.
        if status_kb(pid, "VmRSS:").is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (std reaps only through `wait`, not called);
    // both pointers are to live locals.
    let reaped = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid as i32, "wait4 of ackscope {args:?}");
    drain.join().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "ackscope {args:?} failed ({status}): {stderr}"
    );
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    assert!(peak_kb > 0, "read the peak of ackscope {args:?}");
    Cost { cpu_s, peak_mb: peak_kb as f64 / 1024.0 }
}

/// The packets of a pcapng file, read a block at a time.
fn packets_in(path: &std::path::Path) -> u64 {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = ackscope_shared::pcap::CaptureReader::new(file);
    let mut packets = 0;
    while reader.next_packet().is_some() {
        packets += 1;
    }
    assert_eq!(reader.into_error(), None, "{}", path.display());
    packets
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// The size of each crafted file: large enough that the defects it guards against showed
/// clearly (a walk of 65,536 held requests per message, megabytes of samples), small enough
/// for a debug build on a loaded 2-core machine.
fn units(crafted: Crafted) -> u64 {
    match crafted {
        Crafted::SamplesOfOneOpenRequest => 150_000,
        Crafted::UnsettledRequests => 100_000,
        Crafted::RepeatedFirstStart => 10_000,
        Crafted::ConnectionPerRequest => 20_000,
        Crafted::OpenRuns => 3_000,
        // 20 MB of segments held made the peak double.
        Crafted::CapturedSegments => 250_000,
    }
}

#[test]
fn doubling_a_crafted_file_at_most_doubles_the_readers_time_and_never_their_memory() {
    let dir = common::temp_folder("bounds");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for crafted in Crafted::ALL {
        let n = units(crafted);
        let files: Vec<_> = [n, 2 * n]
            .iter()
            .map(|&units| {
                let path = dir.join(format!("{}-{units}.ackscope", crafted.name()));
                let mut out = BufWriter::new(std::fs::File::create(&path).unwrap());
                crafted.write(units, &mut out).unwrap();
                drop(out);
                (path, units)
            })
            .collect();
        let (trace, pcapng) = (dir.join("trace.json"), dir.join("packets.pcapng"));
        let commands: [(&str, Vec<&str>); 4] = [
            ("show", vec!["show"]),
            ("export --json", vec!["export", "--json"]),
            ("export --perfetto", vec!["export", "--perfetto", s(&trace)]),
            ("export --pcapng", vec!["export", "--pcapng", s(&pcapng)]),
        ];
        for (name, args) in &commands {
            let cost = |(file, units): &(std::path::PathBuf, u64)| {
                let mut full = vec![args[0], s(file)];
                full.extend(&args[1..]);
                let cost = cost_of(&full);
                if *name == "export --pcapng" {
                    // Every captured segment is a packet of the file.
                    let packets = packets_in(&pcapng);
                    assert_eq!(packets, crafted.segments(*units), "{} ({units})", crafted.name());
                }
                cost
            };
            let (mut once, mut twice) = (cost(&files[0]), cost(&files[1]));
            // Below 50 ms a CPU time is mostly start-up and the clock's grain.
            let linear = |once: Cost, twice: Cost| twice.cpu_s <= 3.0 * once.cpu_s.max(0.05);
            if !linear(once, twice) {
                // A loaded machine slows one run now and then (cache misses, a migration):
                // measured again, the least CPU of each size is the work's own.
                let (again_once, again_twice) = (cost(&files[0]), cost(&files[1]));
                once.cpu_s = once.cpu_s.min(again_once.cpu_s);
                twice.cpu_s = twice.cpu_s.min(again_twice.cpu_s);
            }
            let line = format!(
                "{:<28} {name:<18} cpu {:.3} s -> {:.3} s, peak {:.1} MB -> {:.1} MB",
                crafted.name(),
                once.cpu_s,
                twice.cpu_s,
                once.peak_mb,
                twice.peak_mb
            );
            let time_ok = linear(once, twice);
            // Flat, with room for allocator noise and the output's buffers.
            let memory_ok = twice.peak_mb <= 1.3 * once.peak_mb + 4.0;
            if !(time_ok && memory_ok) {
                failures.push(line.clone());
            }
            report.push(line);
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "grew with the file:\n{}", failures.join("\n"));
}
