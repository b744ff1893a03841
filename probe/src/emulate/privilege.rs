//! What `--link` needs: creating network namespaces and TUN devices takes CAP_SYS_ADMIN and
//! CAP_NET_ADMIN. Root has them. Anyone else gets them inside a new user namespace of their own
//! (as `unshare -rnm` does): the process maps its uid to 0 there and runs the whole experiment
//! inside, with no access to the host's network, which a link run does not need.

use std::io;

/// The system refused a user namespace: the one message a user sees, with the fix.
#[derive(Debug, thiserror::Error)]
#[error("--link needs root or a user namespace, and {reason}; {fix}, or run as root")]
pub struct PrivilegeError {
    reason: String,
    fix: String,
}

/// Makes sure this process may build the link: nothing to do as root; otherwise moves the
/// process into new user, network and mount namespaces. Must be called before the process has
/// a second thread (the kernel refuses a user namespace to a multithreaded process).
pub fn ensure_link_privileges() -> Result<(), PrivilegeError> {
    #[cfg(not(target_os = "linux"))]
    return Err(PrivilegeError {
        reason: "network namespaces and TUN devices exist only on Linux".into(),
        fix: "run link experiments on a Linux machine".into(),
    });
    #[cfg(target_os = "linux")]
    linux::ensure()
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;

    pub fn ensure() -> Result<(), PrivilegeError> {
        // SAFETY: geteuid() and getegid() cannot fail and have no side effects.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if uid == 0 {
            return Ok(());
        }
        if threads() > 1 {
            return Err(PrivilegeError {
                reason: "this process already runs several threads, so it cannot enter a user \
                         namespace"
                    .into(),
                fix: "run it through `unshare -rnm --propagation private ackscope ...`".into(),
            });
        }
        // SAFETY: the process is single-threaded (checked above), as CLONE_NEWUSER requires;
        // unshare() only changes this process's namespaces.
        let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWNS;
        if unsafe { libc::unshare(flags) } != 0 {
            return Err(refused(io::Error::last_os_error()));
        }
        // The recipe of user_namespaces(7): deny setgroups before writing gid_map unprivileged.
        let maps = [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("0 {uid} 1")),
            ("/proc/self/gid_map", format!("0 {gid} 1")),
        ];
        for (path, content) in maps {
            std::fs::write(path, content).map_err(|e| PrivilegeError {
                reason: format!("writing {path} in the new user namespace failed ({e})"),
                fix: "check that nothing (seccomp, an LSM) restricts user namespaces".into(),
            })?;
        }
        Ok(())
    }

    fn threads() -> usize {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status.lines().find_map(|line| line.strip_prefix("Threads:")?.trim().parse().ok())
            })
            .unwrap_or(1)
    }

    fn sysctl(path: &str) -> Option<i64> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// Why unshare(CLONE_NEWUSER) failed, and the setting that allows it.
    fn refused(error: io::Error) -> PrivilegeError {
        let reason = |what: &str| format!("{what} (unshare(CLONE_NEWUSER): {error})");
        if sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
            return PrivilegeError {
                reason: reason("user namespaces are disabled (user.max_user_namespaces = 0)"),
                fix: "enable them with `sudo sysctl -w user.max_user_namespaces=15000`".into(),
            };
        }
        if sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
            return PrivilegeError {
                reason: reason(
                    "unprivileged user namespaces are disabled \
                     (kernel.unprivileged_userns_clone = 0)",
                ),
                fix: "enable them with `sudo sysctl -w kernel.unprivileged_userns_clone=1`".into(),
            };
        }
        if sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
            return PrivilegeError {
                reason: reason(
                    "AppArmor restricts unprivileged user namespaces \
                     (kernel.apparmor_restrict_unprivileged_userns = 1)",
                ),
                fix: "allow them with `sudo sysctl -w \
                      kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile \
                      for ackscope with `userns,`"
                    .into(),
            };
        }
        PrivilegeError {
            reason: reason("this system refuses a user namespace"),
            fix: "check that user namespaces are enabled in the kernel (CONFIG_USER_NS) and \
                  not blocked by a container's seccomp profile"
                .into(),
        }
    }
}
