//! Network namespaces and TUN devices, by syscalls: no `ip` command, no names in /run/netns
//! for the link's own namespaces (a user's named one is only opened: [`Namespace::open_named`]).
//!
//! A namespace is made by a short-lived thread that unshares its own network namespace, keeps a
//! descriptor of it, creates the TUN device there (a TUN device belongs to the namespace of the
//! thread that creates it) and configures it with ioctls. The namespace lives as long as its
//! descriptor, the TUN descriptor or a socket in it: dropping them, or the process ending for
//! any reason, removes everything.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::thread;

/// The TUN device's name inside each namespace; namespaces are private, so it never collides.
pub const TUN_NAME: &CStr = c"ackscope0";

/// What a TUN device hands over and takes: plain IP packets, each at most the MTU, or the
/// kernel's GSO packets whole (up to 64 KB of TCP segments in one packet, with a virtio-net header
/// in front saying how to cut it), as a NIC with TSO and GRO would. Whole GSO packets cost the
/// relay one read and one write per 64 KB instead of per 1.5 KB; the link's rate, queue, loss and
/// capture act per packet on the wire, so they need plain packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    Plain,
    Gso,
}

impl Offload {
    /// The bytes before the IP packet in each read and write: `struct virtio_net_hdr` (the
    /// device's default header size, TUNSETVNETHDRSZ unset), or none.
    pub fn header_len(self) -> usize {
        match self {
            Offload::Plain => 0,
            Offload::Gso => 10,
        }
    }
}

/// An anonymous network namespace.
pub struct Namespace {
    ns: OwnedFd,
}

impl Namespace {
    /// Makes a namespace whose TUN device has address `local`, point-to-point peer `peer`, and
    /// returns it with the device (non-blocking; IP packets without a packet-information header,
    /// whole GSO packets with `Offload::Gso`).
    pub fn create(
        local: Ipv4Addr,
        peer: Ipv4Addr,
        mtu: u32,
        offload: Offload,
    ) -> io::Result<(Namespace, File)> {
        thread::Builder::new()
            .name("link-netns".into())
            .spawn(move || {
                // SAFETY: unshare(CLONE_NEWNET) changes only this thread's network namespace;
                // the thread ends right after, so nothing else runs there by accident.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    return Err(op("unshare(CLONE_NEWNET)"));
                }
                let ns = File::open("/proc/thread-self/ns/net")
                    .map_err(|e| context(e, "open /proc/thread-self/ns/net"))?;
                let tun = open_tun(offload)?;
                configure(local, peer, mtu)?;
                Ok((Namespace { ns: ns.into() }, tun))
            })?
            .join()
            .map_err(|_| io::Error::other("the thread creating a network namespace panicked"))?
    }

    /// The namespace's descriptor: another process joins it through /proc/PID/fd/N (`ackscope
    /// link`).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.ns.as_raw_fd()
    }

    /// The namespace that `ip netns add NAME` made (/run/netns/NAME), or the one at a path
    /// (`/proc/PID/ns/net`: a container's, a process's), checked by entering it on a
    /// short-lived thread: a wrong name or a missing privilege is found before a run starts,
    /// with what to do about it.
    pub fn open_named(name: &str) -> Result<Namespace, String> {
        let listed = "a name that `ip netns list` shows, or a path such as /proc/PID/ns/net";
        let by_name = !name.contains('/');
        if by_name && matches!(name, "" | "." | "..") {
            return Err(format!("`{name}` is not a network namespace's name: give {listed}"));
        }
        let path = if by_name { format!("/run/netns/{name}") } else { name.to_owned() };
        let file = File::open(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound if by_name => format!(
                "there is no network namespace `{name}` ({path}): make it with `ip netns add \
                 {name}`, or give {listed}"
            ),
            _ => format!("opening network namespace {path}: {e}: give {listed}"),
        })?;
        let namespace = Namespace { ns: file.into() };
        match namespace.run_in(|| Ok(())) {
            Ok(()) => Ok(namespace),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(format!(
                "entering network namespace `{name}` needs CAP_SYS_ADMIN, which this process does \
                 not have ({e}): run ackscope as root"
            )),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                Err(format!("{path} is not a network namespace ({e}): give {listed}"))
            }
            Err(e) => Err(format!("entering network namespace `{name}`: {e}")),
        }
    }

    /// Runs `f` on a short-lived thread in this namespace, leaving the caller's own alone:
    /// sockets `f` creates stay in this namespace wherever they are used afterwards.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        thread::scope(|scope| scope.spawn(|| self.enter().and_then(|()| f())).join())
            .map_err(|_| io::Error::other("a thread in a network namespace panicked"))?
    }

    /// Moves the calling thread into this namespace: sockets it creates from now on are there.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: the descriptor is a network namespace we opened and still own; setns() with
        // CLONE_NEWNET only changes the calling thread's network namespace.
        if unsafe { libc::setns(self.ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(op("setns(CLONE_NEWNET)"));
        }
        Ok(())
    }
}

fn open_tun(offload: Offload) -> io::Result<File> {
    let tun = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| context(e, "open /dev/net/tun"))?;
    let mut req = ifreq(TUN_NAME);
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
    if offload == Offload::Gso {
        flags |= libc::IFF_VNET_HDR;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads (and writes back the name into) the ifreq we own.
    if unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
        return Err(op("ioctl(TUNSETIFF)"));
    }
    if offload == Offload::Gso {
        // The device says it can checksum and segment TCP: the stack then hands it whole GSO
        // packets with partial checksums, which the other device passes on as they are (the
        // receiving stack takes them as a NIC's GRO would hand them over).
        let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        // SAFETY: TUNSETOFFLOAD takes its argument by value, not through a pointer.
        if unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETOFFLOAD, features as libc::c_ulong) }
            != 0
        {
            return Err(op("ioctl(TUNSETOFFLOAD)"));
        }
    }
    Ok(tun)
}

/// Addresses, MTU and up, for the TUN device and `lo`, in the calling thread's namespace.
fn configure(local: Ipv4Addr, peer: Ipv4Addr, mtu: u32) -> io::Result<()> {
    // SAFETY: a plain socket() call; the result is checked and owned at once.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(op("socket(AF_INET) for interface ioctls"));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let fd = sock.as_raw_fd();
    let mut req = ifreq(TUN_NAME);
    req.ifr_ifru.ifru_addr = sockaddr(local);
    ioctl(fd, libc::SIOCSIFADDR, &mut req, "SIOCSIFADDR")?;
    let mut req = ifreq(TUN_NAME);
    req.ifr_ifru.ifru_dstaddr = sockaddr(peer);
    ioctl(fd, libc::SIOCSIFDSTADDR, &mut req, "SIOCSIFDSTADDR")?;
    let mut req = ifreq(TUN_NAME);
    req.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    ioctl(fd, libc::SIOCSIFMTU, &mut req, "SIOCSIFMTU")?;
    for name in [TUN_NAME, c"lo"] {
        let mut req = ifreq(name);
        ioctl(fd, libc::SIOCGIFFLAGS, &mut req, "SIOCGIFFLAGS")?;
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        ioctl(fd, libc::SIOCSIFFLAGS, &mut req, "SIOCSIFFLAGS")?;
    }
    Ok(())
}

/// `request` is a `SIOC*` constant, whose type (`c_ulong`) is not the type `ioctl` takes on
/// every libc (musl's is `c_int`): it is converted here, once.
fn ioctl(
    fd: libc::c_int,
    request: libc::c_ulong,
    req: &mut libc::ifreq,
    name: &str,
) -> io::Result<()> {
    // SAFETY: every request passed here reads or writes one `ifreq`, which we own.
    if unsafe { libc::ioctl(fd, request as libc::Ioctl, req as *mut libc::ifreq) } != 0 {
        return Err(op(&format!("ioctl({name}) on {}", TUN_NAME.to_string_lossy())));
    }
    Ok(())
}

fn ifreq(name: &CStr) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.to_bytes()) {
        *dst = *src as libc::c_char;
    }
    req
}

fn sockaddr(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(addr).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux; the kernel reads the
    // sockaddr_in layout back out of it, as with every SIOCSIF*ADDR caller.
    unsafe { mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn op(what: &str) -> io::Error {
    context(io::Error::last_os_error(), what)
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
