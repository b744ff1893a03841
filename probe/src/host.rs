//! Facts about this machine for the session header: what a reader needs to trust or compare the
//! numbers (kernel, buffer limits, default congestion control, whether packets can be captured).

use ackscope_shared::wire::HostFacts;

fn proc_value(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|text| text.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn facts() -> HostFacts {
    HostFacts {
        os: std::env::consts::OS.to_string(),
        kernel: proc_value("/proc/sys/kernel/osrelease"),
        tcp_rmem: proc_value("/proc/sys/net/ipv4/tcp_rmem"),
        tcp_wmem: proc_value("/proc/sys/net/ipv4/tcp_wmem"),
        rmem_max: proc_value("/proc/sys/net/core/rmem_max"),
        wmem_max: proc_value("/proc/sys/net/core/wmem_max"),
        congestion_control: proc_value("/proc/sys/net/ipv4/tcp_congestion_control"),
        capture: crate::capture::availability(),
    }
}
